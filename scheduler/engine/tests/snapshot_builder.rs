//! `SnapshotBuilder` gives exactly the snapshot `Snapshot::build` gives for the same specs,
//! cycle after cycle, as pods, resource names and nodes change.

use std::collections::BTreeMap;

use basalt_engine::*;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn nodes() -> Vec<NodeSpec> {
    // Deliberately unsorted.
    (0..6)
        .rev()
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            labels: [("rack".to_string(), format!("r{}", i / 3))].into(),
            allocatable: list(&[("cpu", 8000), ("memory", 1 << 30), ("nvidia.com/gpu", 4)]),
            ..Default::default()
        })
        .collect()
}

fn group(name: &str, queue: &str, min_member: i64) -> GroupSpec {
    GroupSpec {
        namespace: "ns".into(),
        name: name.into(),
        queue: Some(queue.into()),
        min_member,
        min_task_member: BTreeMap::new(),
        min_resources: Some(list(&[("nvidia.com/gpu", 2 * min_member)])),
        priority: None,
        created_ms: 5,
        phase: JobPhase::Inqueue,
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    }
}

fn pod(name: &str, group: Option<&str>, node: Option<&str>, gpus: &[u32]) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        group: group.map(str::to_string),
        request: list(&[("cpu", 1000), ("nvidia.com/gpu", 2)]),
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        node: node.map(str::to_string),
        gpu_ids: gpus.to_vec(),
        ..Default::default()
    }
}

fn queues() -> Vec<QueueSpec> {
    let mut b = QueueSpec::new("b");
    b.deserved = Some(list(&[("nvidia.com/gpu", 8)]));
    vec![b, QueueSpec::new("a")]
}

/// The workload of cycle `c`: it grows, binds, nominates and adds a resource name on the way.
fn workload(c: usize) -> (Vec<PodSpec>, Vec<GroupSpec>) {
    let mut pods = Vec::new();
    let mut groups = Vec::new();
    for j in (0..=c).rev() {
        let g = format!("g{j}");
        groups.push(group(&g, if j % 2 == 0 { "a" } else { "b" }, 2));
        for k in 0..2 {
            let bound = j < c;
            let node = format!("n{}", (j + k) % 6);
            let mut p = pod(
                &format!("{g}-{k}"),
                Some(&g),
                bound.then_some(node.as_str()),
                if bound { &[0, 1] } else { &[] },
            );
            if !bound && k == 1 {
                p.nominated_node = Some("n3".into());
            }
            if c == 3 && j == 0 {
                p.request.insert("example.com/widget".into(), 1);
            }
            pods.push(p);
        }
    }
    // A pod without a group (for a while), a group without a queue (once): the default queue
    // comes and goes with them. And a pod of another scheduler.
    if c < 4 {
        pods.push(pod("solo", None, None, &[]));
    }
    if c == 4 {
        let mut lone = group("lone", "a", 1);
        lone.queue = None;
        groups.push(lone);
        pods.push(pod("lone-0", Some("lone"), None, &[]));
    }
    let mut foreign = pod("foreign", None, Some("n5"), &[]);
    foreign.ours = false;
    pods.push(foreign);
    (pods, groups)
}

fn full(now: i64, nodes: &[NodeSpec], pods: &[PodSpec], groups: &[GroupSpec]) -> String {
    let s = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: now,
        nodes: nodes.to_vec(),
        pods: pods.to_vec(),
        groups: groups.to_vec(),
        queues: queues(),
        namespaces: Vec::new(),
        dra: Default::default(),
        usage: Default::default(),
    })
    .expect("builds");
    format!("{s:?}")
}

/// Tells the builder of the changes from its current workload to `pods` and `groups`, the way
/// a watch would: removals, then additions and updates (unchanged specs are set again, a no-op).
fn sync<'b>(
    b: &'b mut SnapshotBuilder,
    now: i64,
    pods: &[PodSpec],
    groups: &[GroupSpec],
) -> Result<&'b Snapshot, SnapshotError> {
    for (ns, name) in b.pod_names() {
        if !pods.iter().any(|p| p.namespace == ns && p.name == name) {
            assert!(b.remove_pod(&ns, &name).is_some());
        }
    }
    for (ns, name) in b.group_names() {
        if !groups.iter().any(|g| g.namespace == ns && g.name == name) {
            assert!(b.remove_group(&ns, &name).is_some());
        }
    }
    for p in pods {
        b.set_pod(p.clone());
    }
    for g in groups {
        b.set_group(g.clone());
    }
    b.build(now, &queues())
}

#[test]
fn same_snapshot_as_a_full_build_every_cycle() {
    let mut specs = nodes();
    let mut b = SnapshotBuilder::new("nvidia.com/gpu", specs.clone()).expect("valid nodes");
    assert_eq!(b.nodes()[0].name, "n0");
    assert_eq!(b.node_id("n4"), Some(NodeId(4)));
    for c in 0..6 {
        if c == 2 {
            // A node changes: fewer pod slots, a new label, a new resource name.
            let mut n = specs.iter().find(|n| n.name == "n2").unwrap().clone();
            n.allocatable.insert("pods".into(), 3);
            n.allocatable.insert("example.com/nic".into(), 2);
            n.labels.insert("zone".into(), "z1".into());
            b.update_node(n.clone()).expect("valid update");
            *specs.iter_mut().find(|s| s.name == "n2").unwrap() = n;
        }
        if c == 4 {
            let mut n = specs.iter().find(|n| n.name == "n2").unwrap().clone();
            n.allocatable.remove("example.com/nic");
            n.unschedulable = true;
            b.update_node(n.clone()).expect("valid update");
            *specs.iter_mut().find(|s| s.name == "n2").unwrap() = n;
        }
        let (pods, groups) = workload(c);
        let got = format!(
            "{:?}",
            sync(&mut b, c as i64 * 1000, &pods, &groups).expect("builds")
        );
        assert_eq!(
            got,
            full(c as i64 * 1000, &specs, &pods, &groups),
            "cycle {c}"
        );
    }
}

#[test]
fn errors_match_a_full_build() {
    let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes()).unwrap();
    let (mut pods, groups) = workload(1);
    pods[0].node = Some("gone".into());
    let want = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 0,
        nodes: nodes(),
        pods: pods.clone(),
        groups: groups.clone(),
        queues: queues(),
        namespaces: Vec::new(),
        dra: Default::default(),
        usage: Default::default(),
    })
    .unwrap_err();
    assert_eq!(sync(&mut b, 0, &pods, &groups).unwrap_err(), want);
    // The builder is still usable after an error.
    let (pods, groups) = workload(1);
    assert!(sync(&mut b, 0, &pods, &groups).is_ok());

    let mut dup = nodes();
    dup.push(dup[0].clone());
    let e = SnapshotBuilder::new("nvidia.com/gpu", dup).unwrap_err();
    assert_eq!((e.kind, e.field), ("Node", "metadata.name"));

    let e = b
        .update_node(NodeSpec {
            name: "n9".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.object, "n9");
    let mut big = nodes()[0].clone();
    big.allocatable.insert("nvidia.com/gpu".into(), 65);
    let e = b.update_node(big).unwrap_err();
    assert_eq!(e.field, "status.allocatable");
    // A rejected update changes nothing.
    let (pods, groups) = workload(2);
    let got = format!("{:?}", sync(&mut b, 7, &pods, &groups).unwrap());
    assert_eq!(got, full(7, &nodes(), &pods, &groups));
}

/// A Warm builds the topology once per set of node labels, and again when a node's labels
/// change.
#[test]
fn topology_follows_label_changes() {
    let tiers = [basalt_topology::TierSpec {
        name: "rack".into(),
        node_label: "rack".into(),
        nvlink: false,
    }];
    let rack_of = |s: &Snapshot, node: &str| {
        let t = s.topology(&tiers, false).expect("nodes carry rack labels");
        let id = s.nodes.iter().position(|n| n.name == node).unwrap();
        t.domain(t.domain_of(id, basalt_topology::TierId(0)))
            .name
            .clone()
    };
    let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes()).unwrap();
    let (pods, groups) = workload(0);
    let first = sync(&mut b, 0, &pods, &groups).unwrap();
    assert_eq!(rack_of(first, "n2"), "r0");
    let mut warm = Warm::default();
    let cached = warm.topology(first, &tiers, false).unwrap();
    let again = b.build(1, &queues()).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &cached,
        &warm.topology(again, &tiers, false).unwrap()
    ));
    // Capacity alone changes no topology.
    let mut n0 = nodes().into_iter().find(|n| n.name == "n0").unwrap();
    n0.allocatable.insert("cpu".into(), 1);
    b.update_node(n0).unwrap();
    let resized = b.build(2, &queues()).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &cached,
        &warm.topology(resized, &tiers, false).unwrap()
    ));

    let mut n2 = nodes().into_iter().find(|n| n.name == "n2").unwrap();
    n2.labels.insert("rack".into(), "r1".into());
    b.update_node(n2).unwrap();
    let moved = b.build(3, &queues()).unwrap();
    assert_eq!(rack_of(moved, "n2"), "r1");
    let rack = warm.topology(moved, &tiers, false).unwrap();
    assert!(!std::sync::Arc::ptr_eq(&cached, &rack));
    assert_eq!(
        rack.domain(rack.domain_of(2, basalt_topology::TierId(0)))
            .name,
        "r1"
    );
    // No node carries a label of these tiers: no topology unless asked for regardless.
    let other = [basalt_topology::TierSpec {
        name: "spine".into(),
        node_label: "spine".into(),
        nvlink: false,
    }];
    assert!(moved.topology(&other, false).is_none());
    assert!(moved.topology(&other, true).is_some());
    assert!(warm.topology(moved, &other, false).is_none());
}

mod patched {
    //! Random changes, a few at a time, with a snapshot after each batch: the builder (which
    //! patches its last snapshot when it can) gives what a full build of the same specs gives,
    //! errors included.
    use super::*;
    use proptest::prelude::*;

    /// Two namespaces, one a prefix of the other: pods sort by (namespace, name), jobs by
    /// `namespace/name`, and the two orders differ.
    const NAMESPACES: [&str; 2] = ["a", "a-b"];

    #[derive(Clone, Debug)]
    enum Change {
        Pod {
            ns: usize,
            name: usize,
            group: Option<usize>,
            node: Option<usize>,
            gpus: i64,
            /// GPU ids it names; `None`: ids of its own, which no other pod names.
            named: Option<Vec<u32>>,
            phase: usize,
            selector: bool,
            rank: Option<u32>,
            tp: Option<usize>,
            foreign: bool,
        },
        RemovePod {
            ns: usize,
            name: usize,
        },
        /// A pinned pod: `h0`–`h2`, or `p7`, which is also a member's name.
        Pinned {
            ns: usize,
            name: usize,
            node: Option<usize>,
            gpus: i64,
            pods: Option<i64>,
            queue: usize,
        },
        Group {
            ns: usize,
            name: usize,
            min_member: i64,
            queue: usize,
            sub_group: Option<u32>,
            phase: bool,
        },
        RemoveGroup {
            ns: usize,
            name: usize,
            /// And its pods (without them, the pods name a group that does not exist).
            with_pods: bool,
        },
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            6 => (
                (0..2usize, 1..8usize, proptest::option::weighted(0.8, 0..4usize)),
                (proptest::option::weighted(0.7, 0..4usize), 0..3i64),
                proptest::option::weighted(0.1, proptest::collection::vec(0..5u32, 0..3)),
                (0..8usize, proptest::bool::weighted(0.2), proptest::option::of(0..4u32)),
                (proptest::option::of(0..2usize), proptest::bool::weighted(0.05)),
            )
                .prop_map(
                    |((ns, name, group), (node, gpus), named, (phase, selector, rank), (tp, foreign))| {
                        Change::Pod { ns, name, group, node, gpus, named, phase, selector, rank, tp, foreign }
                    }
                ),
            2 => (0..2usize, 0..8usize).prop_map(|(ns, name)| Change::RemovePod { ns, name }),
            2 => (
                (0..2usize, 0..4usize, proptest::option::weighted(0.95, 0..4usize)),
                (0..3i64, proptest::option::of(1..4i64), prop_oneof![20 => 0..2usize, 1 => Just(2)]),
            )
                .prop_map(|((ns, name, node), (gpus, pods, queue))| Change::Pinned {
                    ns, name, node, gpus, pods, queue
                }),
            1 => (0..2usize, 0..3usize).prop_map(|(ns, name)| Change::RemovePod { ns, name: 8 + name }),
            3 => (0..2usize, 0..4usize, prop_oneof![80 => 1..4i64, 1 => Just(0)], prop_oneof![80 => 0..6usize, 1 => 6..8usize], proptest::option::weighted(0.3, prop_oneof![40 => 1..3u32, 1 => Just(0)]), any::<bool>())
                .prop_map(|(ns, name, min_member, queue, sub_group, phase)| Change::Group {
                    ns, name, min_member, queue, sub_group, phase
                }),
            2 => (0..2usize, 0..4usize, proptest::bool::weighted(0.9))
                .prop_map(|(ns, name, with_pods)| Change::RemoveGroup { ns, name, with_pods }),
            // Pod 0 is named like group 3: without a group it collides with it.
            1 => (0..2usize, proptest::option::weighted(0.8, 0..4usize)).prop_map(|(ns, group)| Change::Pod {
                ns, name: 0, group, node: None, gpus: 0, named: None, phase: 3, selector: false,
                rank: None, tp: None, foreign: false,
            }),
        ]
    }

    /// Pod 0 is named like group 3 (without a group of its own it collides with it).
    fn pod_name(name: usize) -> String {
        match name {
            0 => "g3".into(),
            8.. => format!("h{}", name - 8),
            _ => format!("p{name}"),
        }
    }

    fn apply(
        c: &Change,
        b: &mut SnapshotBuilder,
        pods: &mut BTreeMap<(String, String), PodSpec>,
        groups: &mut BTreeMap<(String, String), GroupSpec>,
    ) {
        match c.clone() {
            Change::Pod {
                ns,
                name,
                group,
                node,
                gpus,
                named,
                phase,
                selector,
                rank,
                tp,
                foreign,
            } => {
                let own: Vec<u32> = (0..gpus as u32)
                    .map(|i| (ns * 8 + name) as u32 * 3 + i)
                    .collect();
                let ns = NAMESPACES[ns];
                let mut p = pod(
                    &pod_name(name),
                    group.map(|g| format!("g{g}")).as_deref(),
                    None,
                    named.as_deref().unwrap_or(&own),
                );
                p.namespace = ns.into();
                p.ours = !foreign;
                p.request = list(&[("cpu", 500), ("nvidia.com/gpu", gpus)]);
                // Mostly running on a node (a node that does not exist, now and then).
                p.phase = [
                    PodPhase::Running,
                    PodPhase::Running,
                    PodPhase::Running,
                    PodPhase::Pending,
                    PodPhase::Pending,
                    PodPhase::Succeeded,
                    PodPhase::Failed,
                    PodPhase::Running,
                ][phase];
                p.node = node.map(|n| {
                    if n == 3 && phase == 7 && rank == Some(3) {
                        "n9".into()
                    } else {
                        format!("n{n}")
                    }
                });
                if p.phase == PodPhase::Pending && rank == Some(1) {
                    p.nominated_node = Some("n1".into());
                }
                if selector {
                    p.rules.node_selector.insert("rack".into(), "r0".into());
                }
                // Now and then gated (nominated too, on phase 4) or waiting for a DRA claim
                // (bound or not): a held pod's task must match a full build's too.
                if phase >= 3 && rank == Some(phase as u32 - 3) {
                    p.scheduling_gates = vec!["example.com/gate".into()];
                }
                if rank == Some(2) && phase != 3 {
                    p.waits = vec![basalt_engine::Wait::Claim(
                        "claim ns/c is not made yet".into(),
                    )];
                    p.claims = vec!["ns/c".into()];
                }
                p.rank = rank;
                if let Some(tp) = tp {
                    p.labels.insert("tp".into(), tp.to_string());
                    p.role = Some(format!("role{tp}"));
                }
                pods.insert((ns.into(), p.name.clone()), p.clone());
                b.set_pod(p);
            }
            Change::Pinned {
                ns,
                name,
                node,
                gpus,
                pods: slots,
                queue,
            } => {
                let name = if name == 3 { 7 } else { 8 + name };
                let own: Vec<u32> = (0..gpus as u32)
                    .map(|i| 48 + (ns * 4 + name % 4) as u32 + i * 8)
                    .collect();
                let ns = NAMESPACES[ns];
                let mut p = pod(
                    &pod_name(name),
                    None,
                    node.map(|n| format!("n{n}")).as_deref(),
                    &own,
                );
                p.namespace = ns.into();
                p.request = list(&[("cpu", 300), ("nvidia.com/gpu", gpus)]);
                if let Some(slots) = slots {
                    p.request.insert("pods".into(), slots);
                }
                p.pinned_queue = Some(["a", "b", "missing"][queue].into());
                pods.insert((ns.into(), p.name.clone()), p.clone());
                b.set_pod(p);
            }
            Change::RemovePod { ns, name } => {
                let (ns, name) = (NAMESPACES[ns], pod_name(name));
                let had = pods.remove(&(ns.to_string(), name.clone())).is_some();
                assert_eq!(b.remove_pod(ns, &name).is_some(), had);
            }
            Change::Group {
                ns,
                name,
                min_member,
                queue,
                sub_group,
                phase,
            } => {
                let ns = NAMESPACES[ns];
                let queue = ["a", "b", "a", "b", "a", "b", "missing", "none"][queue];
                let mut g = group(&format!("g{name}"), queue, min_member);
                g.namespace = ns.into();
                if queue == "none" {
                    g.queue = None;
                }
                if phase {
                    g.phase = JobPhase::Running;
                }
                if let Some(size) = sub_group {
                    g.sub_groups.push(SubGroupSpec {
                        name: "tp".into(),
                        size,
                        match_label_keys: if size == 2 { vec!["tp".into()] } else { vec![] },
                        topology: Default::default(),
                        ..Default::default()
                    });
                    g.min_task_member.insert("role1".into(), 1);
                }
                groups.insert((ns.into(), g.name.clone()), g.clone());
                b.set_group(g);
            }
            Change::RemoveGroup {
                ns,
                name,
                with_pods,
            } => {
                let (ns, name) = (NAMESPACES[ns], format!("g{name}"));
                let had = groups.remove(&(ns.to_string(), name.clone())).is_some();
                assert_eq!(b.remove_group(ns, &name).is_some(), had);
                let members: Vec<String> = (pods.values())
                    .filter(|p| with_pods && p.namespace == ns && p.group.as_ref() == Some(&name))
                    .map(|p| p.name.clone())
                    .collect();
                for pod in members {
                    pods.remove(&(ns.to_string(), pod.clone()));
                    assert!(b.remove_pod(ns, &pod).is_some());
                }
            }
        }
    }

    /// Nodes with room for every pod's own GPU ids.
    fn big_nodes() -> Vec<NodeSpec> {
        let mut nodes = nodes();
        for n in &mut nodes {
            n.allocatable.insert("nvidia.com/gpu".into(), 64);
        }
        nodes
    }

    fn check(
        b: &mut SnapshotBuilder,
        now: i64,
        pods: &BTreeMap<(String, String), PodSpec>,
        groups: &BTreeMap<(String, String), GroupSpec>,
    ) -> Result<(), TestCaseError> {
        let want = Snapshot::build(ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            now_ms: now,
            nodes: b.nodes().to_vec(),
            pods: pods.values().cloned().collect(),
            groups: groups.values().cloned().collect(),
            queues: queues(),
            namespaces: Vec::new(),
            dra: Default::default(),
            usage: Default::default(),
        });
        let got = b.build(now, &queues());
        match (got, want) {
            (Ok(got), Ok(want)) => prop_assert_eq!(format!("{got:?}"), format!("{want:?}")),
            (Err(got), Err(want)) => prop_assert_eq!(got, want),
            (got, want) => prop_assert!(
                false,
                "builder {:?}\nfull build {:?}",
                got.map(|_| ()),
                want.map(|_| ())
            ),
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn a_patched_snapshot_is_the_full_build(
            batches in proptest::collection::vec(proptest::collection::vec(change(), 1..4), 1..24)
        ) {
            run_batches(big_nodes(), &batches, false)?;
        }
    }

    /// Applies `batches` of changes to a builder of `nodes` (pods on shared devices naming them
    /// when `shared`), checking its snapshot against a full build after each batch.
    fn run_batches(
        nodes: Vec<NodeSpec>,
        batches: &[Vec<Change>],
        shared: bool,
    ) -> Result<(), TestCaseError> {
        let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes).unwrap();
        let mut pods = BTreeMap::new();
        let mut groups = BTreeMap::new();
        // Every group exists at first, so that most states are valid.
        for ns in 0..2 {
            for name in 0..4 {
                let g = Change::Group {
                    ns,
                    name,
                    min_member: 1,
                    queue: name % 2,
                    sub_group: None,
                    phase: false,
                };
                apply(&g, &mut b, &mut pods, &mut groups);
            }
        }
        for (i, batch) in batches.iter().enumerate() {
            for c in batch {
                apply(c, &mut b, &mut pods, &mut groups);
                if shared {
                    on_shared_devices(c, &mut b, &mut pods);
                }
            }
            check(&mut b, i as i64, &pods, &groups)?;
        }
        Ok(())
    }

    /// HAMi's compute and memory-percentage requests.
    const GPU_CORES: &str = "nvidia.com/gpucores";
    const GPU_MEMORY_PERCENT: &str = "nvidia.com/gpumem-percentage";

    /// HAMi's and Volcano vGPU's share names, as `crds` gives them.
    fn hami_shares() -> std::sync::Arc<devices::ShareVocabulary> {
        let names = |m: &str, p: &str, c: &str| devices::ShareResources {
            memory: m.into(),
            percent: p.into(),
            cores: c.into(),
        };
        std::sync::Arc::new(devices::ShareVocabulary {
            hami: names("nvidia.com/gpumem", GPU_MEMORY_PERCENT, GPU_CORES),
            vgpu: names(
                "volcano.sh/vgpu-memory",
                "volcano.sh/vgpu-memory-percentage",
                "volcano.sh/vgpu-cores",
            ),
            vgpu_number: "volcano.sh/vgpu-number".into(),
        })
    }

    /// Nodes `n3`–`n5` share their 8 devices as HAMi does (4 slots, 1,000 MiB, 100 cores each).
    fn shared_nodes() -> Vec<NodeSpec> {
        let mut nodes = big_nodes();
        for n in nodes.iter_mut().filter(|n| n.name.as_str() >= "n3") {
            n.sharing = devices::Sharing::Hami;
            n.shares = Some(hami_shares());
            n.allocatable.insert("nvidia.com/gpu".into(), 32);
            n.gpus = Some(
                (0..8)
                    .map(|g| Gpu {
                        uuid: Some(format!("{}-gpu{g}", n.name)),
                        memory_mib: Some(1000),
                        slots: 4,
                        ..Gpu::new(g)
                    })
                    .collect(),
            );
        }
        nodes
    }

    /// A pod bound to a shared node takes a share of its devices and names them: by HAMi's
    /// UUIDs mostly, by index now and then, and now and then not at all (its devices then
    /// depend on the pods before it, and the builder assembles anew).
    fn on_shared_devices(
        c: &Change,
        b: &mut SnapshotBuilder,
        pods: &mut BTreeMap<(String, String), PodSpec>,
    ) {
        let (ns, name) = match *c {
            Change::Pod { ns, name, .. } => (ns, pod_name(name)),
            Change::Pinned { ns, name, .. } => (ns, pod_name(if name == 3 { 7 } else { 8 + name })),
            _ => return,
        };
        let key = (NAMESPACES[ns].to_string(), name);
        let Some(p) = pods.get_mut(&key) else { return };
        let node = p.node.clone().unwrap_or_default();
        if node.as_str() < "n3" || node.len() != 2 {
            return;
        }
        let want = p.request.get("nvidia.com/gpu").copied().unwrap_or(0);
        if want <= 0 {
            return;
        }
        let percent = 10 * (1 + (p.gpu_ids.first().copied().unwrap_or(0) % 4) as i64);
        p.request.insert(GPU_CORES.into(), percent);
        p.request.insert(GPU_MEMORY_PERCENT.into(), percent);
        let picked: Vec<u32> = (0..want as u32)
            .map(|i| (p.gpu_ids.first().copied().unwrap_or(0) + i) % 8)
            .collect();
        match p.gpu_ids.first().map(|g| g % 5) {
            Some(0) => {
                p.gpu_ids = picked;
                p.held_devices.clear();
            }
            Some(1) => p.gpu_ids = vec![9, 9],
            _ => {
                p.held_devices = (picked.iter())
                    .map(|g| devices::HeldDevice {
                        uuid: format!("{node}-gpu{g}"),
                        memory_mib: 10 * percent as u32,
                        cores: percent as u32,
                    })
                    .collect();
            }
        }
        b.set_pod(p.clone());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The same with half the nodes sharing their devices: usage per device is patched
        /// while every holder names its devices.
        #[test]
        fn a_patched_snapshot_with_shared_devices_is_the_full_build(
            batches in proptest::collection::vec(proptest::collection::vec(change(), 1..4), 1..24)
        ) {
            run_batches(shared_nodes(), &batches, true)?;
        }
    }

    /// Shared devices named by their holders do not stop the builder patching: pods arrive
    /// bound to shares of HAMi nodes and leave, as in the FGD experiment.
    #[test]
    fn a_builder_patches_shared_devices_named_by_their_holders() {
        let mut b = SnapshotBuilder::new("nvidia.com/gpu", shared_nodes()).unwrap();
        let mut pods = BTreeMap::new();
        let groups = BTreeMap::new();
        for c in 0..40u32 {
            let node = format!("n{}", 3 + c % 3);
            let mut p = pod(&format!("s{c:03}"), None, Some(&node), &[]);
            p.namespace = "a".into();
            p.request = list(&[
                ("cpu", 100),
                ("nvidia.com/gpu", 1),
                (GPU_CORES, 20),
                (GPU_MEMORY_PERCENT, 20),
            ]);
            p.held_devices = vec![devices::HeldDevice {
                uuid: format!("{node}-gpu{}", c % 8),
                memory_mib: 200,
                cores: 20,
            }];
            pods.insert(("a".to_string(), p.name.clone()), p.clone());
            b.set_pod(p);
            if c >= 8 {
                let done = format!("s{:03}", c - 8);
                pods.remove(&("a".to_string(), done.clone()));
                b.remove_pod("a", &done);
            }
            check(&mut b, c as i64, &pods, &groups).unwrap();
        }
        assert!(b.patched() >= 30, "patched {} of 40", b.patched());
    }

    /// The property above would hold if the builder never patched: make sure it does, on a
    /// replay-like run (jobs arrive, bind, finish).
    #[test]
    fn a_builder_patches_when_few_jobs_change() {
        let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes()).unwrap();
        let mut pods = BTreeMap::new();
        let mut groups = BTreeMap::new();
        for c in 0..40usize {
            let job = format!("j{c:03}");
            let mut g = group(&job, if c % 2 == 0 { "a" } else { "b" }, 1);
            g.namespace = "a".into();
            groups.insert(("a".to_string(), job.clone()), g.clone());
            b.set_group(g);
            let mut p = pod(
                &format!("{job}-0"),
                Some(&job),
                Some(&format!("n{}", c % 6)),
                &[(c as u32 / 6) % 4],
            );
            p.namespace = "a".into();
            p.request = list(&[("cpu", 100), ("nvidia.com/gpu", 1)]);
            pods.insert(("a".to_string(), p.name.clone()), p.clone());
            b.set_pod(p);
            if c >= 8 {
                let done = format!("j{:03}", c - 8);
                groups.remove(&("a".to_string(), done.clone()));
                b.remove_group("a", &done);
                pods.remove(&("a".to_string(), format!("{done}-0")));
                b.remove_pod("a", &format!("{done}-0"));
            }
            check(&mut b, c as i64, &pods, &groups).unwrap();
        }
        assert!(b.patched() >= 30, "patched {} of 40", b.patched());
    }

    /// Usage patched by adding and taking back requests is exact only while no sum saturates:
    /// two bound pods of 2^62 bytes each on one node, then one of them gone, must give the
    /// full build's usage (the builder assembles anew instead of patching past `i64::MAX`).
    #[test]
    fn saturated_usage_is_assembled_anew_not_patched() {
        let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes()).unwrap();
        let mut pods = BTreeMap::new();
        let mut groups = BTreeMap::new();
        let mut patched = Vec::new();
        for (c, job) in ["j0", "j1", "j2", "j3"].into_iter().enumerate() {
            let g = group(job, "a", 1);
            groups.insert(("ns".to_string(), job.to_string()), g.clone());
            b.set_group(g);
            let mut p = pod(&format!("{job}-0"), Some(job), Some("n0"), &[]);
            let memory = if c < 2 { 1i64 << 62 } else { 1 << 20 };
            p.request = list(&[("cpu", 100), ("memory", memory)]);
            pods.insert(("ns".to_string(), p.name.clone()), p.clone());
            b.set_pod(p);
            if c == 2 {
                groups.remove(&("ns".to_string(), "j0".to_string()));
                b.remove_group("ns", "j0");
                pods.remove(&("ns".to_string(), "j0-0".to_string()));
                b.remove_pod("ns", "j0-0");
            }
            check(&mut b, c as i64, &pods, &groups).unwrap();
            patched.push(b.patched());
        }
        // Assembled: the first build, the one whose sum would pass i64::MAX and the one after
        // it (its sum is saturated); the last one is patched again.
        assert_eq!(patched, vec![0, 0, 0, 1]);
    }
}

/// Labels, constraints, pods of other schedulers and namespaces reach the snapshot the same
/// way through the builder (assembled and patched) as through a full build.
#[test]
fn constraints_and_namespaces_match_a_full_build() {
    use std::sync::Arc;
    let anti = Arc::new(PodConstraints {
        anti_affinity: PodAffinityRules {
            required: vec![PodAffinityTerm {
                selector: Some(LabelSelector::from_labels([("app", "x")])),
                topology_key: "kubernetes.io/hostname".into(),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    });
    let namespaces = vec![NamespaceSpec {
        name: "ns".into(),
        labels: [("team".to_string(), "t".to_string())].into(),
    }];
    let mut b = SnapshotBuilder::new("nvidia.com/gpu", nodes()).unwrap();
    b.set_namespaces(namespaces.clone());
    let (mut pods, mut groups) = workload(1);
    for p in &mut pods {
        p.labels = [("app".to_string(), "x".to_string())].into();
        p.constraints = Some(anti.clone());
    }
    let mut other = pod("other", None, Some("n1"), &[]);
    other.ours = false;
    other.labels = [("app".to_string(), "y".to_string())].into();
    other.constraints = Some(anti);
    pods.push(other);
    for cycle in 0..3 {
        if cycle == 2 {
            // One job changes: the builder may patch, foreign pods and namespaces carried over.
            groups.push(group("late", "a", 1));
            pods.push(pod("late-0", Some("late"), None, &[]));
        }
        let got = format!("{:?}", sync(&mut b, cycle, &pods, &groups).unwrap());
        let want = Snapshot::build(ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            now_ms: cycle,
            nodes: nodes(),
            pods: pods.clone(),
            groups: groups.clone(),
            queues: queues(),
            namespaces: namespaces.clone(),
            dra: Default::default(),
            usage: Default::default(),
        })
        .unwrap();
        assert_eq!(got, format!("{want:?}"), "cycle {cycle}");
        assert!(got.contains("team") && got.contains("ForeignPod"));
    }
}

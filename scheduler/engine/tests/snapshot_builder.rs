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
        now_ms: now,
        nodes: nodes.to_vec(),
        pods: pods.to_vec(),
        groups: groups.to_vec(),
        queues: queues(),
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
    let mut b = SnapshotBuilder::new(specs.clone()).expect("valid nodes");
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
    let mut b = SnapshotBuilder::new(nodes()).unwrap();
    let (mut pods, groups) = workload(1);
    pods[0].node = Some("gone".into());
    let want = Snapshot::build(ClusterSpec {
        now_ms: 0,
        nodes: nodes(),
        pods: pods.clone(),
        groups: groups.clone(),
        queues: queues(),
    })
    .unwrap_err();
    assert_eq!(sync(&mut b, 0, &pods, &groups).unwrap_err(), want);
    // The builder is still usable after an error.
    let (pods, groups) = workload(1);
    assert!(sync(&mut b, 0, &pods, &groups).is_ok());

    let mut dup = nodes();
    dup.push(dup[0].clone());
    let e = SnapshotBuilder::new(dup).unwrap_err();
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
    assert_eq!(e.field, "status.allocatable[nvidia.com/gpu]");
    // A rejected update changes nothing.
    let (pods, groups) = workload(2);
    let got = format!("{:?}", sync(&mut b, 7, &pods, &groups).unwrap());
    assert_eq!(got, full(7, &nodes(), &pods, &groups));
}

/// The topology is built once per set of nodes, and rebuilt when a node's labels change.
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
    let mut b = SnapshotBuilder::new(nodes()).unwrap();
    let (pods, groups) = workload(0);
    let first = sync(&mut b, 0, &pods, &groups).unwrap();
    assert_eq!(rack_of(first, "n2"), "r0");
    let cached = first.topology(&tiers, false).unwrap();
    let again = b.build(1, &queues()).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &cached,
        &again.topology(&tiers, false).unwrap()
    ));

    let mut n2 = nodes().into_iter().find(|n| n.name == "n2").unwrap();
    n2.labels.insert("rack".into(), "r1".into());
    b.update_node(n2).unwrap();
    let moved = b.build(2, &queues()).unwrap();
    assert_eq!(rack_of(moved, "n2"), "r1");
    // No node carries a label of these tiers: no topology unless asked for regardless.
    let other = [basalt_topology::TierSpec {
        name: "spine".into(),
        node_label: "spine".into(),
        nvlink: false,
    }];
    assert!(moved.topology(&other, false).is_none());
    assert!(moved.topology(&other, true).is_some());
}

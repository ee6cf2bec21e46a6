//! Invariants of a whole cycle on random clusters and gangs, under the default policy set.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, PlacementRules, PodPhase, PodSpec, ResourceList,
    Snapshot, Taint, TaintEffect,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

fn list(cpu: i64, mem: i64, gpu: i64) -> ResourceList {
    let mut l = ResourceList::new();
    l.insert("cpu".into(), cpu);
    l.insert("memory".into(), mem);
    if gpu > 0 {
        l.insert("nvidia.com/gpu".into(), gpu);
    }
    l
}

#[derive(Debug, Clone)]
struct Gang {
    pods: Vec<(i64, i64, i64)>,
    min: i64,
    bound: usize,
    pool: Option<bool>,
    priority: i32,
}

fn gang() -> impl Strategy<Value = Gang> {
    (
        prop::collection::vec((1..=8i64, 1..=16i64, 0..=4i64), 1..=6),
        1..=6i64,
        0..=2usize,
        prop::option::of(any::<bool>()),
        -2..=2i32,
    )
        .prop_map(|(pods, min, bound, pool, priority)| Gang {
            min: min.min(pods.len() as i64),
            bound: bound.min(pods.len()),
            pods,
            pool,
            priority,
        })
}

fn cluster() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec(
            (4..=32i64, 8..=64i64, 0..=8i64, any::<bool>(), 0..=5u8),
            1..=10,
        ),
        prop::collection::vec(gang(), 1..=8),
    )
        .prop_map(|(nodes, gangs)| {
            let nodes: Vec<NodeSpec> = nodes
                .into_iter()
                .enumerate()
                .map(|(i, (cpu, mem, gpu, pool, flags))| NodeSpec {
                    name: format!("n{i}"),
                    labels: BTreeMap::from([("pool".into(), if pool { "a" } else { "b" }.into())]),
                    taints: if flags == 0 {
                        vec![Taint {
                            key: "dedicated".into(),
                            value: "x".into(),
                            effect: TaintEffect::NoSchedule,
                        }]
                    } else {
                        vec![]
                    },
                    unschedulable: flags == 1,
                    allocatable: list(cpu * 1000, mem << 30, gpu),
                    ..Default::default()
                })
                .collect();
            let mut spec = ClusterSpec {
                device_resource: "nvidia.com/gpu".into(),
                nodes,
                ..Default::default()
            };
            // Pre-bound members are placed first-fit so that the starting state is valid.
            let mut free: Vec<(i64, i64, i64)> = spec
                .nodes
                .iter()
                .map(|n| {
                    (
                        n.allocatable["cpu"],
                        n.allocatable["memory"],
                        *n.allocatable.get("nvidia.com/gpu").unwrap_or(&0),
                    )
                })
                .collect();
            for (g, gang) in gangs.iter().enumerate() {
                let name = format!("g{g}");
                spec.groups.push(GroupSpec {
                    namespace: "ns".into(),
                    name: name.clone(),
                    queue: None,
                    min_member: gang.min,
                    min_task_member: BTreeMap::new(),
                    min_resources: None,
                    priority: Some(gang.priority),
                    created_ms: g as i64,
                    phase: JobPhase::Inqueue,
                    topology: Default::default(),
                    sub_groups: Vec::new(),
                    schedule_timeout_ms: None,
                });
                for (p, &(cpu, mem, gpu)) in gang.pods.iter().enumerate() {
                    let req = (cpu * 1000, mem << 30, gpu);
                    let mut node = None;
                    if p < gang.bound {
                        if let Some(i) = free
                            .iter()
                            .position(|f| f.0 >= req.0 && f.1 >= req.1 && f.2 >= req.2)
                        {
                            free[i].0 -= req.0;
                            free[i].1 -= req.1;
                            free[i].2 -= req.2;
                            node = Some(format!("n{i}"));
                        }
                    }
                    spec.pods.push(PodSpec {
                        namespace: "ns".into(),
                        name: format!("{name}-{p}"),
                        ours: true,
                        group: Some(name.clone()),
                        request: list(req.0, req.1, req.2),
                        rules: PlacementRules {
                            node_selector: gang
                                .pool
                                .map(|a| {
                                    BTreeMap::from([(
                                        "pool".into(),
                                        if a { "a" } else { "b" }.into(),
                                    )])
                                })
                                .unwrap_or_default(),
                            ..Default::default()
                        },
                        phase: if node.is_some() {
                            PodPhase::Running
                        } else {
                            PodPhase::Pending
                        },
                        // Now and then a pending member is gated or waits for its DRA claim.
                        scheduling_gates: match (cpu + p as i64) % 7 {
                            0 => vec!["example.com/gate".into()],
                            _ => Vec::new(),
                        },
                        waits: match (mem + p as i64) % 11 {
                            0 => vec![basalt_engine::Wait::Claim(
                                "claim ns/c is not made yet".into(),
                            )],
                            _ => Vec::new(),
                        },
                        node,
                        ..Default::default()
                    });
                }
            }
            spec
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cycle_invariants(spec in cluster(), seed in any::<u64>()) {
        let config = Config::default();
        let snapshot = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snapshot, &config);

        // No node over any allocatable resource, and no GPU handed out twice.
        let pods: HashMap<String, &PodSpec> = spec.pods.iter().map(|p| (format!("{}/{}", p.namespace, p.name), p)).collect();
        let mut used: HashMap<&str, ResourceList> = HashMap::new();
        for p in &spec.pods {
            if let Some(n) = &p.node {
                let u = used.entry(n.as_str()).or_default();
                for (k, v) in &p.request { *u.entry(k.clone()).or_default() += v; }
            }
        }
        let mut gpus_taken: BTreeSet<(String, u32)> = BTreeSet::new();
        for (i, t) in snapshot.tasks.iter().enumerate() {
            if let basalt_engine::TaskState::Bound(n) = t.state {
                let mask = snapshot.tasks[i].gpus;
                for g in (0..64u32).filter(|g| mask & (1u64 << g) != 0) { gpus_taken.insert((snapshot.node(n).name.clone(), g)); }
            }
        }
        for b in &plan.bindings {
            let p = pods[&b.pod];
            prop_assert!(p.node.is_none(), "bound pod {} bound again", b.pod);
            let u = used.entry(b.node.as_str()).or_default();
            for (k, v) in &p.request { *u.entry(k.clone()).or_default() += v; }
            prop_assert_eq!(b.gpus.len() as i64, *p.request.get("nvidia.com/gpu").unwrap_or(&0));
            for &g in &b.gpus {
                prop_assert!(gpus_taken.insert((b.node.clone(), g)), "GPU {} of {} handed out twice", g, b.node);
            }
        }
        for n in &spec.nodes {
            if let Some(u) = used.get(n.name.as_str()) {
                for (k, v) in u {
                    prop_assert!(v <= n.allocatable.get(k).unwrap_or(&0), "{} over {}: {} > {:?}", n.name, k, v, n.allocatable.get(k));
                }
                let pods_on = spec.pods.iter().filter(|p| p.node.as_deref() == Some(&n.name)).count()
                    + plan.bindings.iter().filter(|b| b.node == n.name).count();
                prop_assert!(pods_on as i64 <= 110);
            }
        }

        // Gangs: either nothing newly bound, or at least minMember members hold a node.
        for g in &spec.groups {
            let prefix = format!("ns/{}-", g.name);
            let new = plan.bindings.iter().filter(|b| b.pod.starts_with(&prefix)).count() as i64;
            let old = spec.pods.iter().filter(|p| p.group.as_deref() == Some(&g.name) && p.node.is_some()).count() as i64;
            prop_assert!(new == 0 || new + old >= g.min_member, "gang {} half placed: {} new + {} old < {}", g.name, new, old, g.min_member);
        }

        // Held pods (gated, waiting for a claim) are never bound nor nominated; a gang whose minimum
        // needs them places nothing and says why.
        let held = |p: &PodSpec| p.node.is_none() && (!p.scheduling_gates.is_empty() || !p.waits.is_empty());
        for pod in plan.bindings.iter().map(|b| &b.pod).chain(plan.nominations.iter().map(|n| &n.pod)) {
            prop_assert!(!held(pods[pod]), "held pod {} bound or nominated", pod);
        }
        for g in &spec.groups {
            let members: Vec<&PodSpec> = spec.pods.iter().filter(|p| p.group.as_deref() == Some(&g.name)).collect();
            let placeable = members.iter().filter(|p| !held(p)).count() as i64;
            if placeable < g.min_member {
                let prefix = format!("ns/{}-", g.name);
                prop_assert!(!plan.bindings.iter().any(|b| b.pod.starts_with(&prefix)), "gang {} needs held pods", g.name);
                let status = plan.pod_groups.iter().find(|s| *s.name == format!("ns/{}", g.name)).unwrap();
                prop_assert!(
                    status.conditions.iter().any(|c| c.reason == "SchedulingGated" || c.reason == "ResourceClaimNotReady"),
                    "gang {} waits for held pods without saying so: {:?}", g.name, status.conditions
                );
            }
        }

        // Determinism: same input, same bytes; shuffled input, same bytes.
        let json = serde_json::to_string(&plan).unwrap();
        prop_assert_eq!(&json, &serde_json::to_string(&schedule(&snapshot, &config)).unwrap());
        let mut shuffled = spec.clone();
        let mut s = seed;
        let mut next = move |n: usize| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; (s % n as u64) as usize };
        for i in (1..shuffled.pods.len()).rev() { let j = next(i + 1); shuffled.pods.swap(i, j); }
        for i in (1..shuffled.nodes.len()).rev() { let j = next(i + 1); shuffled.nodes.swap(i, j); }
        for i in (1..shuffled.groups.len()).rev() { let j = next(i + 1); shuffled.groups.swap(i, j); }
        let again = schedule(&Snapshot::build(shuffled).unwrap(), &config);
        prop_assert_eq!(json, serde_json::to_string(&again).unwrap());
    }
}

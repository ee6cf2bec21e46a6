//! Sub-group placement against a brute-force search on small clusters: a gang whose sub-groups
//! must each sit on one node (GPUs and CPU counted) is placed whenever some assignment of its
//! pods to nodes exists, whatever the order of its sub-groups, and every placement it makes
//! keeps each sub-group on one node within every node's capacity.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodSpec, ResourceList, Snapshot, SubGroupSpec,
    TopologySpec,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const SUB_GROUP: &str = "example.com/sub-group";

#[derive(Clone, Copy, Debug)]
struct Node {
    gpus: i64,
    cpu: i64,
}

/// One sub-group: its pods' GPUs and CPU each (all its pods alike).
#[derive(Clone, Copy, Debug)]
struct Sub {
    pods: usize,
    gpu: i64,
    cpu: i64,
}

fn nodes() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(
        (1..=8i64, prop::sample::select(vec![2i64, 4, 8, 16]))
            .prop_map(|(gpus, cpu)| Node { gpus, cpu }),
        1..=4,
    )
}

fn subs() -> impl Strategy<Value = Vec<Sub>> {
    prop::collection::vec(
        (1..=3usize, 0..=3i64, 1..=4i64).prop_map(|(pods, gpu, cpu)| Sub { pods, gpu, cpu }),
        1..=4,
    )
}

fn spec(ns: &[Node], subs: &[Sub]) -> ClusterSpec {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 1_000_000,
        ..Default::default()
    };
    for (i, n) in ns.iter().enumerate() {
        spec.nodes.push(NodeSpec {
            name: format!("n{i}"),
            allocatable: ResourceList::from([
                ("cpu".to_string(), n.cpu * 1000),
                ("memory".to_string(), 1 << 40),
                ("nvidia.com/gpu".to_string(), n.gpus),
            ]),
            ..Default::default()
        });
    }
    let total: usize = subs.iter().map(|s| s.pods).sum();
    spec.groups.push(GroupSpec {
        namespace: "ns".into(),
        name: "g".into(),
        queue: None,
        min_member: total as i64,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: None,
        created_ms: 1,
        phase: JobPhase::Inqueue,
        topology: TopologySpec::default(),
        sub_groups: vec![SubGroupSpec {
            name: "tp".into(),
            size: 1,
            match_label_keys: vec![SUB_GROUP.into()],
            topology: TopologySpec {
                required: Some("node".into()),
                preferred: None,
            },
            ..SubGroupSpec::default()
        }],
        schedule_timeout_ms: None,
    });
    for (s, sub) in subs.iter().enumerate() {
        for p in 0..sub.pods {
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("g-{s}-{p}"),
                ours: true,
                group: Some("g".into()),
                labels: BTreeMap::from([(SUB_GROUP.to_string(), format!("s{s}"))]),
                request: ResourceList::from([
                    ("cpu".to_string(), sub.cpu * 1000),
                    ("nvidia.com/gpu".to_string(), sub.gpu),
                ]),
                created_ms: 1,
                ..Default::default()
            });
        }
    }
    spec
}

/// Whether the sub-groups fit, each whole on one node: every assignment of sub-groups to nodes.
fn brute_force(ns: &[Node], subs: &[Sub], free: &mut [(i64, i64)]) -> bool {
    let Some((first, rest)) = subs.split_first() else {
        return true;
    };
    let (gpus, cpu) = (first.gpu * first.pods as i64, first.cpu * first.pods as i64);
    for n in 0..ns.len() {
        if free[n].0 >= gpus && free[n].1 >= cpu {
            free[n].0 -= gpus;
            free[n].1 -= cpu;
            let fits = brute_force(ns, rest, free);
            free[n].0 += gpus;
            free[n].1 += cpu;
            if fits {
                return true;
            }
        }
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sub_groups_are_placed_whenever_a_placement_exists(ns in nodes(), subs in subs()) {
        let snapshot = Snapshot::build(spec(&ns, &subs)).unwrap();
        let plan = schedule(&snapshot, &Config::default());
        let mut free: Vec<(i64, i64)> = ns.iter().map(|n| (n.gpus, n.cpu)).collect();
        let exists = brute_force(&ns, &subs, &mut free);
        let total: usize = subs.iter().map(|s| s.pods).sum();
        let node_of: HashMap<&str, &str> =
            plan.bindings.iter().map(|b| (b.pod.as_str(), b.node.as_str())).collect();
        if exists {
            prop_assert_eq!(node_of.len(), total, "a placement exists; plan {:?}", plan);
        } else {
            prop_assert!(node_of.is_empty(), "no placement exists, yet the plan binds {:?}", node_of);
        }
        // Each sub-group on one node, every node within its GPUs and CPU.
        let mut used: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for (s, sub) in subs.iter().enumerate() {
            let on: BTreeSet<&str> = (0..sub.pods)
                .filter_map(|p| node_of.get(format!("ns/g-{s}-{p}").as_str()).copied())
                .collect();
            prop_assert!(on.len() <= 1, "sub-group s{} spans {:?}", s, on);
            for n in on {
                let u = used.entry(n).or_default();
                u.0 += sub.gpu * sub.pods as i64;
                u.1 += sub.cpu * sub.pods as i64;
            }
        }
        for (n, (gpus, cpu)) in used {
            let i: usize = n[1..].parse().unwrap();
            prop_assert!(gpus <= ns[i].gpus && cpu <= ns[i].cpu, "{} over capacity", n);
        }
    }
}

//! A cycle over quantities anywhere up to `i64::MAX`: small realistic values mixed with huge
//! ones, exactly `i64::MAX`, and pairs that sum to it. Whatever reaches the engine, the cycle
//! ends, never panics (overflow included, in debug), never puts a node over its allocatable,
//! never hands a GPU out twice, and never reports a negative allocation or a share that is not
//! a finite number.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec, QueueSpec, ResourceList,
    Snapshot, TaskState,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const MAX: i64 = i64::MAX;
const EXTRA: &str = "example.com/widget";

/// Realistic sizes most of the time, then the whole range and its edges.
fn quantity(small: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0..=small,
        1 => 0..=MAX,
        1 => Just(MAX),
        1 => Just(MAX - 1),
        // Two of these sum to exactly 2^63 - 1.
        1 => Just(MAX / 2),
        1 => Just(MAX / 2 + 1),
    ]
}

/// cpu (milli), memory (bytes), GPUs, the extended resource: an ordinary pod or node most of
/// the time, otherwise every dimension drawn over the whole range.
fn request() -> impl Strategy<Value = [i64; 4]> {
    let ordinary = (0..=16_000i64, 0..=64i64 << 30, 0..=4i64, 0..=10i64);
    let wild = (
        quantity(16_000),
        quantity(64 << 30),
        prop_oneof![3 => 0..=4i64, 1 => quantity(8)],
        quantity(10),
    );
    prop_oneof![3 => ordinary, 2 => wild].prop_map(|(c, m, g, x)| [c, m, g, x])
}

/// A node's allocatable (its GPU count is drawn apart): room for a few ordinary pods most of
/// the time, otherwise anything up to `i64::MAX`.
fn allocatable() -> impl Strategy<Value = [i64; 4]> {
    let ordinary = (8_000..=64_000i64, (16i64 << 30)..=(512 << 30), 0..=40i64);
    let wild = (quantity(64_000), quantity(512 << 30), quantity(40));
    prop_oneof![3 => ordinary, 2 => wild].prop_map(|(c, m, x)| [c, m, 0, x])
}

fn list(r: [i64; 4]) -> ResourceList {
    let names = ["cpu", "memory", "nvidia.com/gpu", EXTRA];
    (names.iter().zip(r))
        .filter(|&(_, v)| v != 0)
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

#[derive(Clone, Debug)]
struct Gang {
    pods: Vec<[i64; 4]>,
    min: i64,
    bound: usize,
    queue: usize,
    min_resources: Option<[i64; 4]>,
    deadline_s: Option<i64>,
}

fn gang() -> impl Strategy<Value = Gang> {
    (
        prop::collection::vec(request(), 1..=4),
        1..=4i64,
        0..=3usize,
        0..3usize,
        prop::option::weighted(0.3, request()),
        prop::option::weighted(0.3, quantity(3_600)),
    )
        .prop_map(
            |(pods, min, bound, queue, min_resources, deadline_s)| Gang {
                min: min.min(pods.len() as i64),
                bound: bound.min(pods.len()),
                pods,
                queue,
                min_resources,
                deadline_s,
            },
        )
}

/// A queue's capability, guarantee and entitlement in one resource each, any of them absent.
type QueueLimits = [Option<(usize, i64)>; 3];

fn queue_limits() -> impl Strategy<Value = QueueLimits> {
    let scale = [64_000, 256 << 30, 16, 40];
    let limit = move || {
        let one = (0..4usize).prop_flat_map(move |r| (Just(r), quantity(scale[r])));
        prop::option::weighted(0.4, one)
    };
    [limit(), limit(), limit()]
}

fn cluster() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec((allocatable(), 0..=8i64), 1..=5),
        prop::collection::vec(gang(), 1..=6),
        prop::collection::vec(request(), 0..=2),
        prop::collection::vec(queue_limits(), 3),
    )
        .prop_map(|(nodes, gangs, foreign, queues)| build(nodes, gangs, foreign, queues))
}

fn build(
    nodes: Vec<([i64; 4], i64)>,
    gangs: Vec<Gang>,
    foreign: Vec<[i64; 4]>,
    queues: Vec<QueueLimits>,
) -> ClusterSpec {
    let names = ["cpu", "memory", "nvidia.com/gpu", EXTRA];
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 1_000_000,
        nodes: (nodes.iter().enumerate())
            .map(|(i, &(mut a, gpus))| {
                // At most 64 GPUs per node are supported: the builder refuses more.
                a[2] = gpus;
                NodeSpec {
                    name: format!("n{i}"),
                    allocatable: list(a),
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    };
    for (i, limits) in queues.iter().enumerate() {
        let one = |l: Option<(usize, i64)>| {
            l.map(|(r, v)| ResourceList::from([(names[r].to_string(), v)]))
        };
        spec.queues.push(QueueSpec {
            parent: (i == 2).then(|| "q0".to_string()),
            capability: one(limits[0]),
            guarantee: one(limits[1]),
            deserved: one(limits[2]),
            ..QueueSpec::new(format!("q{i}"))
        });
    }
    // Leaf queues: q1 and q2 (q0 is q2's parent).
    let leaves = ["q1", "q2"];
    // Pods bound before the cycle are placed first-fit (exactly, in i128), so that the cluster
    // starts within its allocatable.
    let mut free: Vec<[i128; 4]> = (nodes.iter())
        .map(|&(a, gpus)| [a[0] as i128, a[1] as i128, gpus as i128, a[3] as i128])
        .collect();
    let mut place = |r: [i64; 4]| -> Option<String> {
        let i = free
            .iter()
            .position(|f| (0..4).all(|d| r[d] as i128 <= f[d]))?;
        (0..4).for_each(|d| free[i][d] -= r[d] as i128);
        Some(format!("n{i}"))
    };
    for (f, &r) in foreign.iter().enumerate() {
        let node = place(r);
        spec.pods.push(PodSpec {
            namespace: "other".into(),
            name: format!("f{f}"),
            request: list(r),
            phase: PodPhase::Running,
            node,
            ..Default::default()
        });
    }
    for (g, gang) in gangs.iter().enumerate() {
        let name = format!("g{g}");
        spec.groups.push(GroupSpec {
            namespace: "ns".into(),
            name: name.clone(),
            queue: Some(leaves[gang.queue % 2].to_string()),
            min_member: gang.min,
            min_task_member: BTreeMap::new(),
            min_resources: gang.min_resources.map(list),
            priority: Some(g as i32 % 3),
            created_ms: g as i64,
            phase: if gang.queue == 2 {
                JobPhase::Pending
            } else {
                JobPhase::Inqueue
            },
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        });
        for (p, &r) in gang.pods.iter().enumerate() {
            let node = if p < gang.bound { place(r) } else { None };
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("{name}-{p}"),
                ours: true,
                group: Some(name.clone()),
                request: list(r),
                priority: g as i32 % 3,
                phase: if node.is_some() {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                started_ms: node.as_ref().map(|_| 0),
                active_deadline_s: gang.deadline_s,
                node,
                ..Default::default()
            });
        }
    }
    spec
}

/// Checks one plan of `spec`, with every sum taken exactly.
fn check(
    spec: &ClusterSpec,
    snapshot: &Snapshot,
    plan: &basalt_engine::Plan,
) -> Result<(), String> {
    let pods: HashMap<String, &PodSpec> = (spec.pods.iter())
        .map(|p| (format!("{}/{}", p.namespace, p.name), p))
        .collect();
    let mut used: HashMap<String, BTreeMap<String, i128>> = HashMap::new();
    let mut slots: HashMap<String, i64> = HashMap::new();
    let mut charge = |node: &str, p: &PodSpec| {
        let u = used.entry(node.to_string()).or_default();
        for (k, &v) in &p.request {
            *u.entry(k.clone()).or_default() += v as i128;
        }
        *slots.entry(node.to_string()).or_default() += 1;
    };
    for p in &spec.pods {
        if let Some(n) = &p.node {
            charge(n, p);
        }
    }
    let mut gpus: BTreeSet<(String, u32)> = BTreeSet::new();
    for t in &snapshot.tasks {
        if let TaskState::Bound(n) = t.state {
            for g in (0..64u32).filter(|g| t.gpus & (1u64 << g) != 0) {
                gpus.insert((snapshot.node(n).name.clone(), g));
            }
        }
    }
    let mut targets = BTreeSet::new();
    for b in &plan.bindings {
        let p = pods[&b.pod];
        if p.node.is_some() {
            return Err(format!("bound pod {} bound again", b.pod));
        }
        charge(&b.node, p);
        targets.insert(b.node.as_str());
        let want = p.request.get("nvidia.com/gpu").copied().unwrap_or(0);
        if b.gpus.len() as i64 != want {
            return Err(format!(
                "{} asks {want} GPUs, was given {:?}",
                b.pod, b.gpus
            ));
        }
        for &g in &b.gpus {
            if !gpus.insert((b.node.clone(), g)) {
                return Err(format!("GPU {g} of {} handed out twice", b.node));
            }
        }
    }
    for node in targets {
        let n = spec.nodes.iter().find(|n| n.name == node).unwrap();
        for (k, v) in &used[node] {
            let alloc = n.allocatable.get(k).copied().unwrap_or(0) as i128;
            if *v > alloc {
                return Err(format!("{node} over its {k}: {v} > {alloc}"));
            }
        }
        if slots[node] > 110 {
            return Err(format!("{node} holds {} pods", slots[node]));
        }
    }
    for q in &plan.queues {
        if !(q.share.is_finite() && q.share >= 0.0) {
            return Err(format!("queue {} has share {}", q.name, q.share));
        }
        for (k, v) in q.allocated.iter().chain(&q.deserved) {
            if v.starts_with('-') {
                return Err(format!("queue {} reports {k} = {v}", q.name));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_cycle_over_any_quantities_is_safe(spec in cluster(), backfill in any::<bool>()) {
        let mut config = Config::default();
        if backfill {
            config.backfill.reserve_after_seconds = Some(0);
        }
        let snapshot = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snapshot, &config);
        let checked = check(&spec, &snapshot, &plan);
        prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
    }
}

/// A pod asking 2^63 - 1 bytes of memory among ordinary pods: the cycle ends, that pod stays
/// pending with a reason, and the others are placed.
#[test]
fn a_pod_asking_for_everything_is_not_placed_and_the_rest_are() {
    let node = |i: usize| NodeSpec {
        name: format!("n{i}"),
        allocatable: list([8_000, 32 << 30, 4, 0]),
        ..Default::default()
    };
    let pod = |name: &str, r: [i64; 4]| PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        request: list(r),
        phase: PodPhase::Pending,
        ..Default::default()
    };
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: (0..2).map(node).collect(),
        ..Default::default()
    };
    spec.pods.push(pod("greedy", [1_000, MAX, 0, 0]));
    // Two halves that sum to exactly 2^63 - 1.
    spec.pods.push(pod("half-a", [1_000, MAX / 2, 0, 0]));
    spec.pods.push(pod("half-b", [1_000, MAX / 2 + 1, 0, 0]));
    for i in 0..4 {
        spec.pods
            .push(pod(&format!("ok-{i}"), [2_000, 8 << 30, 1, 0]));
    }
    let snapshot = Snapshot::build(spec.clone()).unwrap();
    let plan = schedule(&snapshot, &Config::default());
    let bound: BTreeSet<&str> = plan.bindings.iter().map(|b| b.pod.as_str()).collect();
    assert_eq!(
        bound,
        BTreeSet::from(["ns/ok-0", "ns/ok-1", "ns/ok-2", "ns/ok-3"]),
        "{plan:#?}"
    );
    check(&spec, &snapshot, &plan).unwrap();
    let greedy = (plan.pod_groups.iter())
        .find(|g| &*g.name == "ns/greedy")
        .expect("the pending pod is reported");
    assert_eq!(greedy.pending, 1);
    let message = &greedy.conditions.first().expect("with a reason").message;
    assert!(message.contains("memory"), "{message}");
}

/// A minMember beyond `u32` once wrapped (2^32 + 1 read as 1), so a gang of two started
/// with either member alone. Such a count can never be met: nothing of the gang starts.
#[test]
fn a_min_member_beyond_u32_is_never_met() {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![NodeSpec {
            name: "n0".into(),
            allocatable: list([8_000, 32 << 30, 0, 0]),
            ..Default::default()
        }],
        ..Default::default()
    };
    spec.groups.push(GroupSpec {
        namespace: "ns".into(),
        name: "g".into(),
        queue: None,
        min_member: (1 << 32) + 1,
        min_task_member: BTreeMap::from([("worker".to_string(), (1 << 32) + 1)]),
        min_resources: None,
        priority: None,
        created_ms: 1,
        phase: JobPhase::Inqueue,
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    });
    for i in 0..2 {
        spec.pods.push(PodSpec {
            namespace: "ns".into(),
            name: format!("g-{i}"),
            ours: true,
            group: Some("g".into()),
            role: Some("worker".into()),
            request: list([1_000, 1 << 30, 0, 0]),
            phase: PodPhase::Pending,
            ..Default::default()
        });
    }
    let plan = schedule(&Snapshot::build(spec).unwrap(), &Config::default());
    assert!(plan.bindings.is_empty(), "{:?}", plan.bindings);
}

/// A queue holding GPUs it deserves none of (its capability is zero) had an infinite share,
/// which the plan printed as `inf` (and JSON as `null`). The plan reports the finite share of
/// what it deserves and names the GPUs apart.
#[test]
fn a_queue_holding_what_it_deserves_none_of_reports_a_finite_share() {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![NodeSpec {
            name: "n0".into(),
            allocatable: list([8_000, 32 << 30, 4, 0]),
            ..Default::default()
        }],
        ..Default::default()
    };
    spec.queues.push(QueueSpec {
        capability: Some(ResourceList::from([("nvidia.com/gpu".to_string(), 0)])),
        ..QueueSpec::new("capped")
    });
    spec.groups.push(GroupSpec {
        namespace: "ns".into(),
        name: "running".into(),
        queue: Some("capped".into()),
        min_member: 1,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: None,
        created_ms: 1,
        phase: JobPhase::Running,
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    });
    spec.pods.push(PodSpec {
        namespace: "ns".into(),
        name: "running-0".into(),
        ours: true,
        group: Some("running".into()),
        request: list([1_000, 1 << 30, 2, 0]),
        phase: PodPhase::Running,
        node: Some("n0".into()),
        ..Default::default()
    });
    let plan = schedule(&Snapshot::build(spec).unwrap(), &Config::default());
    let q = plan.queues.iter().find(|q| q.name == "capped").unwrap();
    assert!(q.share.is_finite(), "share {}", q.share);
    assert_eq!(q.undeserved, vec!["nvidia.com/gpu".to_string()]);
    let json = serde_json::to_string(&plan).unwrap();
    assert!(!json.contains("null"), "{json}");
}

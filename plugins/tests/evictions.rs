//! Reclaim and preempt over several cycles in a row on random clusters: each plan's evictions,
//! bindings and nominations are applied to the next cycle's cluster (an evicted pod comes back
//! pending, as its controller recreates it). Two properties:
//! - reclaim never ping-pongs: where GPUs are contended, no pod is evicted from queue B for
//!   queue A after one was evicted from A for B, unless allocate has since lent B GPUs beyond
//!   its share (reclaim taking back a loan is what it is for);
//! - evictions never break a running gang: a gang that loses members either loses all it holds
//!   or keeps minMember and every role's minTaskMember, and no group below a minimum is
//!   reported Running.

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, Plan, PodPhase, PodSpec, QueueSpec, ResourceList,
    Snapshot,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const GPU: &str = "nvidia.com/gpu";

fn list(cpu: i64, mem_gi: i64, gpu: i64) -> ResourceList {
    let mut l = ResourceList::from([("cpu".to_string(), cpu), ("memory".into(), mem_gi << 30)]);
    if gpu > 0 {
        l.insert(GPU.into(), gpu);
    }
    l
}

#[derive(Clone, Debug)]
struct G {
    queue: usize,
    /// Per pod: cpu (milli), memory (GiB), GPUs, role (0: none, i.e. role "").
    pods: Vec<(i64, i64, i64, u8)>,
    min: usize,
    /// minTaskMember per role index.
    role_min: BTreeMap<u8, u32>,
    priority: i32,
    running: bool,
}

fn gangs() -> impl Strategy<Value = Vec<G>> {
    let pod = (1..=8i64, 1..=16i64, 0..=4i64, 0..=2u8);
    prop::collection::vec(
        (
            0..3usize,
            prop::collection::vec(pod, 1..=4),
            1..=4usize,
            prop::collection::btree_map(0..=2u8, 1..=2u32, 0..=2),
            -2..=2i32,
            prop::bool::weighted(0.6),
        ),
        2..=9,
    )
    .prop_map(|gs| {
        gs.into_iter()
            .map(|(queue, pods, min, role_min, priority, running)| G {
                queue,
                min: min.min(pods.len()),
                pods,
                role_min,
                priority,
                running,
            })
            .collect()
    })
}

fn role_name(role: u8) -> Option<String> {
    (role > 0).then(|| ["", "a", "b"][role as usize].to_string())
}

/// Nodes of random size; queues q0..q2 of random weight; running gangs placed first-fit.
fn cluster(nodes: &[(i64, i64, i64)], weights: &[u32], gs: &[G]) -> ClusterSpec {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 10_000_000,
        nodes: (nodes.iter().enumerate())
            .map(|(i, &(cpu, mem, gpu))| NodeSpec {
                name: format!("n{i}"),
                allocatable: list(cpu * 1000, mem, gpu),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    for (i, &w) in weights.iter().enumerate() {
        spec.queues.push(QueueSpec {
            weight: w,
            reclaimable: true,
            ..QueueSpec::new(format!("q{i}"))
        });
    }
    let mut free: Vec<(i64, i64, i64)> = nodes.iter().map(|&(c, m, g)| (c * 1000, m, g)).collect();
    for (g, gang) in gs.iter().enumerate() {
        let name = format!("g{g}");
        spec.groups.push(GroupSpec {
            namespace: "ns".into(),
            name: name.clone(),
            queue: Some(format!("q{}", gang.queue % weights.len())),
            min_member: gang.min as i64,
            min_task_member: (gang.role_min.iter())
                .map(|(&r, &m)| (role_name(r).unwrap_or_default(), m as i64))
                .collect(),
            min_resources: None,
            priority: Some(gang.priority),
            created_ms: 1 + g as i64,
            phase: if gang.running {
                JobPhase::Running
            } else {
                JobPhase::Inqueue
            },
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        });
        for (p, &(cpu, mem, gpu, role)) in gang.pods.iter().enumerate() {
            let req = (cpu * 1000, mem, gpu);
            let node = gang.running.then(|| {
                let n = free
                    .iter()
                    .position(|f| f.0 >= req.0 && f.1 >= req.1 && f.2 >= req.2)?;
                free[n] = (free[n].0 - req.0, free[n].1 - req.1, free[n].2 - req.2);
                Some(format!("n{n}"))
            });
            let node = node.flatten();
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("{name}-{p}"),
                ours: true,
                group: Some(name.clone()),
                role: role_name(role),
                request: list(req.0, req.1, req.2),
                priority: gang.priority,
                created_ms: 1 + g as i64 + p as i64,
                phase: if node.is_some() {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                node,
                ..Default::default()
            });
        }
    }
    spec
}

/// The next cycle's cluster: evicted pods pending again, bound pods on their nodes, nominated
/// pods holding their nomination, group phases as the plan reported them.
fn apply(spec: &mut ClusterSpec, plan: &Plan) {
    let index: HashMap<String, usize> = (spec.pods.iter().enumerate())
        .map(|(i, p)| (format!("{}/{}", p.namespace, p.name), i))
        .collect();
    for e in &plan.evictions {
        let p = &mut spec.pods[index[&e.pod]];
        p.node = None;
        p.gpu_ids.clear();
        p.nominated_node = None;
        p.phase = PodPhase::Pending;
    }
    for b in &plan.bindings {
        let p = &mut spec.pods[index[&b.pod]];
        p.node = Some(b.node.clone());
        p.gpu_ids = b.gpus.clone();
        p.nominated_node = None;
        p.phase = PodPhase::Running;
    }
    for n in &plan.nominations {
        spec.pods[index[&n.pod]].nominated_node = Some(n.node.clone());
    }
    for s in &plan.pod_groups {
        if let Some(g) =
            (spec.groups.iter_mut()).find(|g| format!("{}/{}", g.namespace, g.name) == *s.name)
        {
            g.phase = s.phase;
        }
    }
}

/// Whether a group's bound members meet its minimums (role minimums gate only when minMember
/// covers their sum: Volcano's elastic rule).
fn meets_minimums(spec: &ClusterSpec, group: &GroupSpec) -> bool {
    let members: Vec<&PodSpec> = (spec.pods.iter())
        .filter(|p| p.group.as_deref() == Some(group.name.as_str()) && p.node.is_some())
        .collect();
    let role_sum: i64 = group.min_task_member.values().sum();
    members.len() as i64 >= group.min_member
        && (group.min_member < role_sum
            || group.min_task_member.iter().all(|(role, &min)| {
                let have = members
                    .iter()
                    .filter(|p| p.role.as_deref().unwrap_or("") == role)
                    .count();
                have as i64 >= min
            }))
}

fn bound_members(spec: &ClusterSpec, group: &str) -> usize {
    (spec.pods.iter())
        .filter(|p| p.group.as_deref() == Some(group) && p.node.is_some())
        .count()
}

const CYCLES: usize = 5;

/// The GPUs of a queue status entry (whole GPUs, as the plan prints them).
fn quantity(list: &BTreeMap<String, String>) -> i64 {
    list.get(GPU).map_or(0, |v| v.parse().unwrap())
}

/// Runs [`CYCLES`] cycles from `spec`, applying each plan, and checks the gang minimums after
/// each. With `ping_pong`, reclaims are checked too: none goes back the way an earlier one came
/// (from B for A after one from A for B) unless allocate has since lent the queue GPUs beyond
/// its share.
fn run_cycles(mut spec: ClusterSpec, ping_pong: bool) -> Result<(), TestCaseError> {
    // Backfill reservations off: a reservation lets a starving gang start above its queue's
    // share on nodes a queue below its share may not use, which reclaim then rightly takes
    // back; that is a loan, not reclaim going back and forth.
    let mut config = Config::default();
    config.backfill.reserve_after_seconds = None;
    let queue_of: HashMap<String, String> = (spec.groups.iter())
        .map(|g| {
            (
                format!("{}/{}", g.namespace, g.name),
                g.queue.clone().unwrap(),
            )
        })
        .collect();
    let group_of_pod: HashMap<String, String> = (spec.pods.iter())
        .map(|p| {
            (
                format!("{}/{}", p.namespace, p.name),
                format!("ns/{}", p.group.clone().unwrap()),
            )
        })
        .collect();
    let gpus_of: HashMap<String, i64> = (spec.pods.iter())
        .map(|p| {
            (
                format!("{}/{}", p.namespace, p.name),
                p.request.get(GPU).copied().unwrap_or(0),
            )
        })
        .collect();
    // (victim queue, for queue) of every reclaim so far.
    let mut moves: Vec<(String, String)> = Vec::new();
    // GPUs each queue held when the cycle began: what the last plan left it.
    let mut held_gpus: HashMap<String, i64> = HashMap::new();
    let mut log = String::new();
    for cycle in 0..CYCLES {
        let snapshot = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snapshot, &config);
        log += &format!(
            "cycle {cycle}: evictions {:?}\nbindings {:?}\nnominations {:?}\nqueues {:?}\n",
            (plan.evictions.iter())
                .map(|e| (&e.pod, &e.reason, &e.for_group))
                .collect::<Vec<_>>(),
            (plan.bindings.iter())
                .map(|b| (&b.pod, &b.node))
                .collect::<Vec<_>>(),
            (plan.nominations.iter())
                .map(|b| (&b.pod, &b.node))
                .collect::<Vec<_>>(),
            (plan.queues.iter())
                .map(|q| (&q.name, &q.allocated, &q.deserved))
                .collect::<Vec<_>>()
        );
        // What each queue holds once this cycle's allocate has run (reclaim and preempt only
        // nominate, they never bind).
        let mut after_allocate = held_gpus.clone();
        for b in &plan.bindings {
            *after_allocate
                .entry(queue_of[&group_of_pod[&b.pod]].clone())
                .or_default() += gpus_of[&b.pod];
        }
        let deserved_gpus: HashMap<String, i64> = (plan.queues.iter())
            .map(|q| (q.name.clone(), quantity(&q.deserved)))
            .collect();
        let before = spec.clone();
        for e in plan.evictions.iter().filter(|e| e.reason == "reclaim") {
            let from = queue_of[&group_of_pod[&e.pod]].clone();
            let to = queue_of[&e.for_group].clone();
            prop_assert!(from != to, "cycle {}: reclaim inside queue {}", cycle, from);
            // Allocate lends idle GPUs beyond a queue's share when no queue below its share can
            // use them, and reclaim may take those back. Reclaim itself never leaves a queue
            // above its share in what it reclaimed, so going back needs such a loan.
            let lent = after_allocate.get(&from).copied().unwrap_or(0) > deserved_gpus[&from];
            let back = moves.iter().any(|m| m.0 == to && m.1 == from);
            prop_assert!(
                !ping_pong || !back || lent,
                "cycle {}: {} evicted from {} for {}, after a reclaim from {} for {}\n{}",
                cycle,
                e.pod,
                from,
                to,
                to,
                from,
                log
            );
            moves.push((from, to));
        }
        apply(&mut spec, &plan);
        held_gpus = (plan.queues.iter())
            .map(|q| (q.name.clone(), quantity(&q.allocated)))
            .collect();
        for g in &spec.groups {
            let name = format!("{}/{}", g.namespace, g.name);
            let lost = (plan.evictions.iter())
                .filter(|e| group_of_pod[&e.pod] == name)
                .count();
            if lost > 0 && bound_members(&spec, &g.name) > 0 {
                prop_assert!(
                    meets_minimums(&spec, g),
                    "cycle {}: {} lost {} of {} members and runs below a minimum\n{}",
                    cycle,
                    name,
                    lost,
                    bound_members(&before, &g.name),
                    log
                );
            }
        }
        for s in plan
            .pod_groups
            .iter()
            .filter(|s| s.phase == JobPhase::Running)
        {
            let g = (spec.groups.iter())
                .find(|g| format!("{}/{}", g.namespace, g.name) == *s.name)
                .unwrap();
            prop_assert!(
                meets_minimums(&spec, g),
                "cycle {}: {} reported Running below a minimum\n{}",
                cycle,
                s.name,
                log
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// GPUs are the contended resource (nodes have CPU and memory to spare): no reclaim goes
    /// back the way an earlier one came without a loan since.
    #[test]
    fn reclaim_never_ping_pongs(
        nodes in prop::collection::vec((0..=8i64).prop_map(|g| (256, 1024, g)), 1..=4),
        weights in prop::collection::vec(1..=3u32, 2..=3),
        gs in gangs(),
    ) {
        run_cycles(cluster(&nodes, &weights, &gs), true)?;
    }

    /// Every resource may be contended: no gang ever runs below a minimum. (Reclaim may go back
    /// here: a queue that took GPUs beside CPU that was idle is above its CPU share, and gives
    /// CPU back once another queue lacks it on a node.)
    #[test]
    fn evictions_keep_gang_minimums(
        nodes in prop::collection::vec((4..=32i64, 16..=64i64, 0..=8i64), 1..=4),
        weights in prop::collection::vec(1..=3u32, 2..=3),
        gs in gangs(),
    ) {
        run_cycles(cluster(&nodes, &weights, &gs), false)?;
    }
}

/// Preempt searches only for a preemptor above the lowest priority its queue runs: at that
/// priority or below no victim exists, and the search over every node is skipped.
#[test]
fn preempt_looks_for_victims_only_above_the_lowest_running_priority() {
    let gang = |priority: i32, running: bool| G {
        queue: 0,
        pods: vec![(1, 1, 4, 0)],
        min: 1,
        role_min: BTreeMap::new(),
        priority,
        running,
    };
    let decide = |waiting: i32| {
        let spec = cluster(&[(8, 64, 4)], &[1], &[gang(1, true), gang(waiting, false)]);
        let snapshot = Snapshot::build(spec).unwrap();
        let fw = basalt_plugins::framework(&Config::default(), &snapshot.resources);
        let session = basalt_engine::Session::new(&snapshot, &fw);
        let session = session.view();
        let job = (snapshot.jobs.iter())
            .find(|j| j.name.ends_with("g1"))
            .unwrap()
            .id;
        fw.preempt_victims.may_evict_for(&session, job)
    };
    assert!(!decide(0), "below the running job");
    assert!(
        !decide(1),
        "level with it: two jobs of one priority never evict each other"
    );
    assert!(decide(2), "above it");
}

/// `preempt` and `reclaim` each ask their own victims policy: with none for preempt, a
/// higher-priority gang of the same queue evicts nothing, whatever reclaim's policy says.
#[test]
fn each_eviction_action_asks_its_own_victims_policy() {
    let gang = |priority: i32, running: bool| G {
        queue: 0,
        pods: vec![(1, 1, 4, 0)],
        min: 1,
        role_min: BTreeMap::new(),
        priority,
        running,
    };
    let spec = cluster(&[(8, 64, 4)], &[1], &[gang(1, true), gang(2, false)]);
    let snapshot = Snapshot::build(spec).unwrap();
    let evictions = |no_preempt: bool, no_reclaim: bool| {
        let mut fw = basalt_plugins::framework(&Config::default(), &snapshot.resources);
        if no_preempt {
            fw.preempt_victims = Box::new(basalt_engine::NoVictims);
        }
        if no_reclaim {
            fw.reclaim_victims = Box::new(basalt_engine::NoVictims);
        }
        let plan = basalt_engine::schedule(&snapshot, &fw, &mut Default::default());
        (plan.evictions.iter())
            .map(|e| e.pod.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(evictions(false, false), ["ns/g0-0"]);
    assert_eq!(
        evictions(false, true),
        ["ns/g0-0"],
        "reclaim's policy plays no part"
    );
    assert!(
        evictions(true, false).is_empty(),
        "preempt's own policy evicts none"
    );
}

/// Reclaim looks for victims only in queues that can give them up at every level it takes
/// from: a leaf above its share under an organisation at or below its own gives nothing (every
/// unit would be refused), so its nodes are not searched. Leaf `a1` holds 6 of 16 GPUs where
/// it deserves 4, under `pa` (with `a2`, both waiting for more), which deserves 8: `b`, below
/// its share under `pb`, may take from `a1` only once `pa` holds more than 8.
#[test]
fn reclaim_searches_only_queues_whose_ancestors_are_above_their_share() {
    let victim_queues = |a1_holds: i64| {
        let node = |i: usize| NodeSpec {
            name: format!("n{i}"),
            allocatable: list(64_000, 256, 4),
            ..Default::default()
        };
        let queue = |name: &str, parent: Option<&str>| QueueSpec {
            parent: parent.map(str::to_string),
            ..QueueSpec::new(name)
        };
        let mut spec = ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            now_ms: 10_000_000,
            nodes: (0..4).map(node).collect(),
            queues: vec![
                queue("pa", None),
                queue("pb", None),
                queue("a1", Some("pa")),
                queue("a2", Some("pa")),
                queue("b", Some("pb")),
            ],
            ..Default::default()
        };
        // Jobs of 2-GPU pods: (queue, pods, running).
        let jobs = [("a1", a1_holds / 2, true), ("a2", 4, false)];
        let jobs = jobs.into_iter().chain([("b", 2, true), ("b", 4, false)]);
        for (j, (queue, pods, running)) in jobs.enumerate() {
            let name = format!("j{j}");
            spec.groups.push(GroupSpec {
                namespace: "ns".into(),
                name: name.clone(),
                queue: Some(queue.into()),
                min_member: pods,
                min_task_member: BTreeMap::new(),
                min_resources: None,
                priority: Some(0),
                created_ms: 1 + j as i64,
                phase: if running {
                    JobPhase::Running
                } else {
                    JobPhase::Inqueue
                },
                topology: Default::default(),
                sub_groups: Vec::new(),
                schedule_timeout_ms: None,
            });
            for p in 0..pods {
                spec.pods.push(PodSpec {
                    namespace: "ns".into(),
                    name: format!("{name}-{p}"),
                    ours: true,
                    group: Some(name.clone()),
                    request: list(1000, 1, 2),
                    node: running.then(|| format!("n{}", (p / 2) + (queue == "b") as i64 * 3)),
                    phase: if running {
                        PodPhase::Running
                    } else {
                        PodPhase::Pending
                    },
                    ..Default::default()
                });
            }
        }
        let snapshot = Snapshot::build(spec).unwrap();
        let fw = basalt_plugins::framework(&Config::default(), &snapshot.resources);
        let session = basalt_engine::Session::new(&snapshot, &fw);
        let session = session.view();
        let waiting = (snapshot.jobs.iter())
            .find(|j| j.name.ends_with("j3"))
            .unwrap();
        let request = &snapshot.task(waiting.tasks[0]).request;
        assert!(fw.reclaim_victims.may_evict_for(&session, waiting.id));
        let queues = fw.reclaim_victims.queues(&session, waiting.id, request);
        (queues.iter())
            .map(|&q| snapshot.queue(q).name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        victim_queues(6),
        Vec::<String>::new(),
        "pa holds 6 of the 8 it deserves"
    );
    assert_eq!(victim_queues(10), ["a1"], "pa holds 10 of 8");
}

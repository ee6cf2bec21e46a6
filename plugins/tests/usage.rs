//! Fairness over time (issue 36): queues remember what they used. Usage comes with the
//! snapshot and the plan returns its update; the fair share divides capacity by weights adjusted
//! by usage, `max(0, w + k·(w − u))` with `w` and `u` each queue's part of its siblings' weight
//! and usage (k = 1 here), and equal shares go to the queue that used less. Numbers worked by
//! hand in each test.

use std::collections::BTreeMap;

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, Plan, PodPhase, PodSpec, QueueSpec, QueueUsage,
    ResourceList, Snapshot,
};
use basalt_plugins::{schedule, Config};

const GPU: &str = "nvidia.com/gpu";
const MINUTE: i64 = 60_000;
const NOW: i64 = 1_000 * MINUTE;

fn gpus(n: i64) -> ResourceList {
    ResourceList::from([("cpu".to_string(), 1000), (GPU.to_string(), n)])
}

/// Two nodes of 8 GPUs: 16 in all.
fn nodes() -> Vec<NodeSpec> {
    (0..2)
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            allocatable: ResourceList::from([
                ("cpu".to_string(), 64_000),
                ("memory".to_string(), 1 << 40),
                (GPU.to_string(), 8),
            ]),
            ..Default::default()
        })
        .collect()
}

/// A gang of `pods` members of `gpu` GPUs each in `queue`, pending since `created_ms`.
fn gang(
    name: &str,
    queue: &str,
    pods: usize,
    gpu: i64,
    created_ms: i64,
) -> (GroupSpec, Vec<PodSpec>) {
    let group = GroupSpec {
        queue: Some(queue.into()),
        created_ms,
        ..GroupSpec::new("ns", name, pods as i64)
    };
    let pods = (0..pods)
        .map(|i| PodSpec {
            namespace: "ns".into(),
            name: format!("{name}-{i}"),
            ours: true,
            group: Some(name.into()),
            request: gpus(gpu),
            created_ms,
            phase: PodPhase::Pending,
            ..Default::default()
        })
        .collect();
    (group, pods)
}

fn usage(queue: &str, gpus_held: f64, at_ms: i64) -> QueueUsage {
    QueueUsage {
        queue: queue.into(),
        at_ms,
        used: BTreeMap::from([(GPU.to_string(), gpus_held)]),
        held: None,
    }
}

fn config(half_life: &str) -> Config {
    let yaml =
        format!("actions: [enqueue, allocate]\nfairness: {{usage: {{halfLife: {half_life}}}}}");
    Config::from_yaml("test", &yaml).unwrap()
}

fn cluster(gangs: Vec<(GroupSpec, Vec<PodSpec>)>, usage: Vec<QueueUsage>) -> Snapshot {
    let (groups, pods): (Vec<_>, Vec<_>) = gangs.into_iter().unzip();
    Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: NOW,
        nodes: nodes(),
        pods: pods.into_iter().flatten().collect(),
        groups,
        queues: vec![QueueSpec::new("a"), QueueSpec::new("b")],
        usage,
        ..Default::default()
    })
    .unwrap()
}

/// How many pods the plan binds whose names start with `prefix`.
fn bound(plan: &Plan, prefix: &str) -> usize {
    plan.bindings
        .iter()
        .filter(|b| b.pod.starts_with(&format!("ns/{prefix}")))
        .count()
}

/// 16 GPUs, `a` and `b` of equal weight; over the last hour `a` averaged 8 GPUs and `b` 4.
/// Usage as parts of the cluster: a 0.5, b 0.25, so `u` = 2/3 and 1/3, `w` = 1/2 each:
/// a's weight 1/2 + (1/2 − 2/3) = 1/3, b's 1/2 + (1/2 − 1/3) = 2/3. Both hold nothing (share
/// 0), so the equal shares go to b, which used less: b's 16-GPU gang starts, a's waits. Off,
/// today's tie-break: by name, a.
#[test]
fn the_queue_that_used_less_starts_first() {
    let gangs = || vec![gang("a-job", "a", 2, 8, 0), gang("b-job", "b", 2, 8, 0)];
    let used = vec![usage("a", 8.0, NOW), usage("b", 4.0, NOW)];
    let on = schedule(&cluster(gangs(), used.clone()), &config("1h"));
    assert_eq!((bound(&on, "a-job"), bound(&on, "b-job")), (0, 2));
    let a = on.queues.iter().find(|q| q.name == "a").unwrap();
    let b = on.queues.iter().find(|q| q.name == "b").unwrap();
    // Held nothing since the usage was taken: it stands as it was.
    assert_eq!(a.usage.get(GPU), Some(&8.0));
    assert!((a.usage_weight.unwrap() - 1.0 / 3.0).abs() < 1e-6);
    assert!((b.usage_weight.unwrap() - 2.0 / 3.0).abs() < 1e-6);
    // The adjusted weights split 16 as 5.33 : 10.67, the leftover unit to the heavier.
    assert_eq!(a.deserved.get(GPU).map(String::as_str), Some("5"));
    assert_eq!(b.deserved.get(GPU).map(String::as_str), Some("11"));

    let off = schedule(&cluster(gangs(), used), &config("0"));
    assert_eq!((bound(&off, "a-job"), bound(&off, "b-job")), (2, 0));
    assert!(off.usage.is_empty());
    assert!(off
        .queues
        .iter()
        .all(|q| q.usage.is_empty() && q.usage_weight.is_none()));
}

/// Half-life 10 minutes. `a` averaged 8 GPUs as of an hour ago: 8 · 2^−6 = 0.125 now; `b` 4 as
/// of 5 minutes ago: 4 · 2^−0.5 = 2.83. Now `a` used less, and starts first. The other way
/// round (a's 8 five minutes old: 5.66; b's 4 an hour old: 0.0625), `b` does, against name
/// order.
#[test]
fn decay_flips_the_order() {
    let gangs = || vec![gang("a-job", "a", 2, 8, 0), gang("b-job", "b", 2, 8, 0)];
    let used = vec![
        usage("a", 8.0, NOW - 5 * MINUTE),
        usage("b", 4.0, NOW - 60 * MINUTE),
    ];
    let plan = schedule(&cluster(gangs(), used), &config("10m"));
    assert_eq!((bound(&plan, "a-job"), bound(&plan, "b-job")), (0, 2));
    let used = vec![
        usage("a", 8.0, NOW - 60 * MINUTE),
        usage("b", 4.0, NOW - 5 * MINUTE),
    ];
    let plan = schedule(&cluster(gangs(), used), &config("10m"));
    assert_eq!((bound(&plan, "a-job"), bound(&plan, "b-job")), (2, 0));
    let used: BTreeMap<&str, f64> = (plan.usage.iter())
        .map(|u| (u.queue.as_str(), u.used[GPU]))
        .collect();
    assert_eq!(used["a"], 0.125);
    assert!((used["b"] - 4.0 / 2f64.sqrt()).abs() < 1e-12);
    assert!(plan.usage.iter().all(|u| u.at_ms == NOW));
}

/// `b`, which used less (usage a 8, b 4: weights 1/3 and 2/3, deserved 5 and 11 of 16),
/// submits 50 one-GPU jobs at once; `a` has 8. Were the queues ordered by usage alone, b's 50
/// would take all 16 GPUs. Each admission is charged to b's share at once (allocated over
/// deserved, the first key of queue order), so after b's first job a's share (0) is the lower
/// and a is served: a gets its 5, b its 11.
#[test]
fn a_burst_does_not_jump_ahead() {
    let mut gangs: Vec<_> = (0..50)
        .map(|i| gang(&format!("b-{i:02}"), "b", 1, 1, 0))
        .collect();
    gangs.extend((0..8).map(|i| gang(&format!("a-{i}"), "a", 1, 1, 0)));
    let used = vec![usage("a", 8.0, NOW), usage("b", 4.0, NOW)];
    let plan = schedule(&cluster(gangs.clone(), used.clone()), &config("1h"));
    assert_eq!((bound(&plan, "a-"), bound(&plan, "b-")), (5, 11));
    // Off: equal weights, 8 each.
    let plan = schedule(&cluster(gangs, used), &config("0"));
    assert_eq!((bound(&plan, "a-"), bound(&plan, "b-")), (8, 8));
}

/// A parent's usage is its children's sum, and what a queue holds moves its usage towards it:
/// `b` holds 8 GPUs for one half-life from 2: 2 · 1/2 + 8 · 1/2 = 5; org = a + b.
#[test]
fn usage_follows_what_is_held_and_sums_up_the_tree() {
    let (group, mut pods) = gang("b-run", "b", 1, 8, 0);
    pods[0].phase = PodPhase::Running;
    pods[0].node = Some("n0".into());
    let group = GroupSpec {
        phase: JobPhase::Running,
        ..group
    };
    let queue = |name: &str| QueueSpec {
        parent: Some("org".into()),
        ..QueueSpec::new(name)
    };
    let snap = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: NOW,
        nodes: nodes(),
        pods,
        groups: vec![group],
        queues: vec![QueueSpec::new("org"), queue("a"), queue("b")],
        usage: vec![
            usage("a", 1.0, NOW - 10 * MINUTE),
            usage("b", 2.0, NOW - 10 * MINUTE),
            // An inner queue's own record is not read: its usage is its children's.
            usage("org", 100.0, NOW - 10 * MINUTE),
        ],
        ..Default::default()
    })
    .unwrap();
    let plan = schedule(&snap, &config("10m"));
    let used: BTreeMap<&str, f64> = (plan.usage.iter())
        .map(|u| (u.queue.as_str(), u.used[GPU]))
        .collect();
    assert_eq!(used["a"], 0.5);
    assert_eq!(used["b"], 5.0);
    assert_eq!(used["org"], 5.5);
}

/// A queue holds the whole cluster from `t0` (the plan at t0 records its holding), the job
/// ends, nothing is pending, so no cycle runs until one an hour later that sees nothing held.
/// Half-life 1h: the hour of 16 GPUs is charged, 16·(1 − 2^−1) = 8, not 0 (what the snapshot
/// holds at t0 + 1h). The record of t0 says it: `held` is the post-plan holding.
#[test]
fn what_was_held_between_cycles_is_charged() {
    let (group, mut pods) = gang("a-run", "a", 2, 8, 0);
    for (pod, node) in pods.iter_mut().zip(["n0", "n1"]) {
        pod.phase = PodPhase::Running;
        pod.node = Some(node.into());
    }
    let group = GroupSpec {
        phase: JobPhase::Running,
        ..group
    };
    let t0 = NOW - 60 * MINUTE;
    let at_t0 = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: t0,
        nodes: nodes(),
        pods,
        groups: vec![group],
        queues: vec![QueueSpec::new("a"), QueueSpec::new("b")],
        ..Default::default()
    })
    .unwrap();
    let first = schedule(&at_t0, &config("1h"));
    let a = first.usage.iter().find(|u| u.queue == "a").unwrap();
    assert_eq!(a.at_ms, t0);
    assert_eq!(a.held.as_ref().unwrap().get(GPU), Some(&16));
    // An hour on, the job gone: the record's holding is charged for the hour.
    let later = schedule(&cluster(vec![], first.usage.clone()), &config("1h"));
    let used: BTreeMap<&str, f64> = (later.usage.iter())
        .map(|u| (u.queue.as_str(), u.used.get(GPU).copied().unwrap_or(0.0)))
        .collect();
    assert_eq!(used["a"], 8.0);
    assert_eq!(used["b"], 0.0);
    let a = later.usage.iter().find(|u| u.queue == "a").unwrap();
    assert_eq!(a.held.as_ref().map(|h| h.get(GPU)), Some(None));
    // A record from before `held` was kept falls back to the snapshot's holding: nothing.
    let old: Vec<QueueUsage> = (first.usage.iter())
        .map(|u| QueueUsage {
            held: None,
            ..u.clone()
        })
        .collect();
    let later = schedule(&cluster(vec![], old), &config("1h"));
    assert!(later.usage.iter().all(|u| !u.used.contains_key(GPU)));
}

/// Two equal queues whose jobs each need all 16 GPUs, 5 minutes each, with work always waiting
/// in both; a cycle a minute, usage carried from plan to snapshot. Off, every tie goes to `a` by
/// name and `b` never runs. On (half-life 10 minutes), the queue that just ran has used more
/// when its job ends, so they alternate: a period of two jobs, 10 minutes, the half-life.
#[test]
fn whole_cluster_jobs_alternate() {
    assert_eq!(run_alternating(&config("0"), 5).0, "aaaaaa");
    assert_eq!(run_alternating(&config("10m"), 5).0, "ababab");
}

/// The same with reclaim on and jobs of an hour, so a queue gets the cluster only by taking it
/// back. At minute 0 `a` starts (name order). At minute 1 a has held 16 for a minute: usage
/// 16·(1 − 2^(−1/10)) = 1.07, b's 0, so u = 1 and 0: a's weight max(0, 1/2 + (1/2 − 1)) = 0,
/// b's 1. b deserves all 16 and a is above its share: without a minimum run time b reclaims
/// a's gang after one minute. With `reclaimMinRuntime: 8m` a's gang is no victim until it has
/// run 8 minutes, and b takes the cluster then, not sooner. (Taking it back needs the other's
/// weight near 0 again, its usage nearly all of the two: a, without a minimum, after 11
/// minutes of b; with 8m b's usage is not yet that by minute 30.)
#[test]
fn reclaim_waits_for_min_runtime() {
    let with = |min_runtime: &str| {
        let yaml = format!(
            "actions: [enqueue, allocate, reclaim]\nfairness: {{usage: {{halfLife: 10m}}}}\n\
             eviction: {{reclaimMinRuntime: {min_runtime}}}"
        );
        run_alternating(&Config::from_yaml("test", &yaml).unwrap(), 60)
    };
    assert_eq!(with("0"), ("aba".to_string(), vec![1, 11]));
    assert_eq!(with("8m"), ("ab".to_string(), vec![8]));
}

/// Starts of jobs, by queue, over 30 minutes, and how long each evicted job had run (minutes):
/// jobs of `job_minutes`, a cycle a minute, two waiting in each queue at all times.
fn run_alternating(config: &Config, job_minutes: i64) -> (String, Vec<i64>) {
    // Per job: (name, queue, start).
    let mut jobs: Vec<(String, &str, Option<i64>)> = Vec::new();
    let mut usage: Vec<QueueUsage> = Vec::new();
    let mut starts = String::new();
    let mut evicted_after = Vec::new();
    for minute in 0..30 {
        let now = NOW + minute * MINUTE;
        jobs.retain(|(_, _, start)| start.is_none_or(|s| now - s < job_minutes * MINUTE));
        for queue in ["a", "b"] {
            let waiting = jobs
                .iter()
                .filter(|j| j.1 == queue && j.2.is_none())
                .count();
            for i in waiting..2 {
                jobs.push((format!("{queue}-{minute:02}-{i}"), queue, None));
            }
        }
        let mut groups = Vec::new();
        let mut pods = Vec::new();
        for (name, queue, start) in &jobs {
            let (mut group, mut members) = gang(name, queue, 2, 8, 0);
            if let Some(start) = start {
                group.phase = JobPhase::Running;
                for (pod, node) in members.iter_mut().zip(["n0", "n1"]) {
                    pod.phase = PodPhase::Running;
                    pod.node = Some(node.into());
                    pod.started_ms = Some(*start);
                }
            }
            groups.push(group);
            pods.extend(members);
        }
        let snap = Snapshot::build(ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            now_ms: now,
            nodes: nodes(),
            pods,
            groups,
            queues: vec![QueueSpec::new("a"), QueueSpec::new("b")],
            usage: usage.clone(),
            ..Default::default()
        })
        .unwrap();
        let plan = schedule(&snap, config);
        usage = plan.usage.clone();
        let of = |job: &str, pod: &str| pod.starts_with(&format!("ns/{job}-"));
        // An evicted job waits again (its pods come back pending).
        for job in jobs.iter_mut().filter(|j| j.2.is_some()) {
            if plan.evictions.iter().any(|e| of(&job.0, &e.pod)) {
                evicted_after.push((now - job.2.unwrap()) / MINUTE);
                job.2 = None;
            }
        }
        for job in jobs.iter_mut().filter(|j| j.2.is_none()) {
            let placed = (plan.bindings.iter()).any(|b| of(&job.0, &b.pod))
                || (plan.nominations.iter()).any(|n| of(&job.0, &n.pod));
            if placed {
                job.2 = Some(now);
                starts.push_str(job.1);
            }
        }
    }
    (starts, evicted_after)
}

/// The effect, typed in the plan: the same 16 GPUs, `a` averaged 8 (0.5 of the cluster), `b`
/// 4 (0.25). b's adjusted weight (2/3) is the larger: b is ordered before a, a after b, each
/// against the other's part. Off: no effect.
#[test]
fn the_plan_says_what_usage_did_to_the_order() {
    use basalt_engine::{UsageEffect, UsageOrder};
    let used = vec![usage("a", 8.0, NOW), usage("b", 4.0, NOW)];
    let on = schedule(&cluster(vec![], used.clone()), &config("1h"));
    let effect = |plan: &Plan, q: &str| {
        (plan.queues.iter().find(|s| s.name == q))
            .unwrap()
            .usage_effect
            .clone()
    };
    assert_eq!(
        effect(&on, "b"),
        Some(UsageEffect {
            order: UsageOrder::Before,
            queue: "a".into(),
            used: 0.25,
            against: 0.5
        })
    );
    assert_eq!(
        effect(&on, "a"),
        Some(UsageEffect {
            order: UsageOrder::After,
            queue: "b".into(),
            used: 0.5,
            against: 0.25
        })
    );
    let off = schedule(&cluster(vec![], used), &config("0"));
    assert!(off.queues.iter().all(|q| q.usage_effect.is_none()));
}

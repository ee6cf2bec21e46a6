//! Session and statement behaviour without any policy plugin.

use std::collections::BTreeMap;

use basalt_engine::*;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn spec(nodes: usize, gpus: i64, pods: usize) -> ClusterSpec {
    ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 0,
        nodes: (0..nodes)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                allocatable: list(&[("cpu", 8000), ("nvidia.com/gpu", gpus)]),
                ..Default::default()
            })
            .collect(),
        pods: (0..pods)
            .map(|i| PodSpec {
                namespace: "ns".into(),
                name: format!("p{i}"),
                ours: true,
                group: Some("g".into()),
                request: list(&[("cpu", 1000), ("nvidia.com/gpu", 2)]),
                ..Default::default()
            })
            .collect(),
        groups: vec![GroupSpec {
            namespace: "ns".into(),
            name: "g".into(),
            queue: None,
            min_member: pods as i64,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: None,
            created_ms: 0,
            phase: JobPhase::Inqueue,
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        }],
        queues: vec![],
        namespaces: vec![],
        dra: Default::default(),
        usage: Default::default(),
    }
}

#[test]
fn discard_restores_capacity_and_gpus() {
    let snap = Snapshot::build(spec(1, 4, 3)).unwrap();
    let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    let mut s = Session::new(&snap, &fw);
    let mut stmt = s.statement();
    let n0 = s.find_node(TaskId(0)).unwrap();
    s.allocate(&mut stmt, TaskId(0), n0);
    let n1 = s.find_node(TaskId(1)).unwrap();
    s.allocate(&mut stmt, TaskId(1), n1);
    assert!(
        s.find_node(TaskId(2)).is_none(),
        "4 GPUs hold two 2-GPU pods"
    );
    assert_eq!(s.used(NodeId(0)).get(GPU), 4);
    s.discard(stmt);
    assert_eq!(s.used(NodeId(0)).get(GPU), 0);
    assert_eq!(*s.task_status(TaskId(0)), TaskStatus::Pending);
    // Capacity came back, so the shape that failed may be tried again.
    assert!(s.find_node(TaskId(2)).is_some());
    assert!(s.into_plan().bindings.is_empty());
}

#[test]
fn committed_gpus_are_distinct_and_reported() {
    let snap = Snapshot::build(spec(1, 4, 2)).unwrap();
    let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert_eq!(plan.bindings.len(), 2);
    assert_eq!(plan.bindings[0].gpus, vec![0, 1]);
    assert_eq!(plan.bindings[1].gpus, vec![2, 3]);
    assert_eq!(plan.pod_groups[0].phase, JobPhase::Running);
}

#[test]
fn failure_message_aggregates_reasons() {
    let snap = Snapshot::build(spec(3, 1, 1)).unwrap();
    let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert!(plan.bindings.is_empty());
    let c = &plan.pod_groups[0].conditions[0];
    assert_eq!(c.reason, "NotEnoughResources");
    assert!(
        c.message
            .ends_with("0/3 nodes are available: 3 insufficient nvidia.com/gpu."),
        "{}",
        c.message
    );
}

#[test]
fn snapshot_errors_name_object_and_field() {
    let mut s = spec(1, 4, 1);
    s.groups[0].min_member = -1;
    let e = Snapshot::build(s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "PodGroup ns/g: spec.minMember: must not be negative, got -1"
    );

    let mut s = spec(1, 4, 1);
    s.pods[0].group = Some("missing".into());
    let e = Snapshot::build(s).unwrap_err();
    assert!(e.to_string().starts_with("Pod ns/p0: "), "{e}");
    assert!(e.to_string().contains("ns/missing"), "{e}");

    let mut s = spec(1, 4, 1);
    s.queues.push(QueueSpec {
        parent: Some("nowhere".into()),
        ..QueueSpec::new("team")
    });
    let e = Snapshot::build(s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Queue team: spec.parent: names queue nowhere, which does not exist"
    );

    let mut s = spec(1, 4, 1);
    s.queues.push(QueueSpec {
        parent: Some("b".into()),
        ..QueueSpec::new("a")
    });
    s.queues.push(QueueSpec {
        parent: Some("a".into()),
        ..QueueSpec::new("b")
    });
    let e = Snapshot::build(s).unwrap_err();
    assert!(e.to_string().contains("cycle"), "{e}");

    let mut s = spec(1, 4, 1);
    s.queues.push(QueueSpec::new("org"));
    s.queues.push(QueueSpec {
        parent: Some("org".into()),
        ..QueueSpec::new("team")
    });
    s.groups[0].queue = Some("org".into());
    let e = Snapshot::build(s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "PodGroup ns/g: spec.queue: queue org has child queues; only leaf queues hold jobs"
    );
}

/// Two queues, each with a one-pod gang asking the node's two GPUs: whichever queue is served
/// first takes the node.
fn two_queues_one_node() -> Snapshot {
    let mut s = spec(1, 2, 0);
    s.groups.clear();
    for q in ["qa", "qb"] {
        s.queues.push(QueueSpec::new(q));
        s.pods.push(PodSpec {
            namespace: "ns".into(),
            name: format!("{q}-0"),
            ours: true,
            group: Some(q.into()),
            request: list(&[("cpu", 1000), ("nvidia.com/gpu", 2)]),
            ..Default::default()
        });
        s.groups.push(GroupSpec {
            name: q.into(),
            queue: Some(q.into()),
            min_member: 1,
            ..spec(0, 0, 0).groups.remove(0)
        });
    }
    Snapshot::build(s).unwrap()
}

/// Serves the queue of the later name first.
struct ReverseNames;

impl QueueOrder for ReverseNames {
    fn name(&self) -> &str {
        "reverse-names"
    }
    fn compare(&self, _: &SessionView, a: QueueId, b: QueueId) -> std::cmp::Ordering {
        b.cmp(&a)
    }
}

#[test]
fn queues_are_served_in_the_frameworks_queue_order() {
    let snap = two_queues_one_node();
    let bound = |fw: &Framework| {
        let plan = schedule(&snap, fw, &mut basalt_engine::Warm::default());
        assert_eq!(plan.bindings.len(), 1);
        plan.bindings[0].pod.clone()
    };
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    // The engine's neutral order: by name.
    assert!(bound(&fw).ends_with("qa-0"), "{}", bound(&fw));
    fw.queue_order = Box::new(ReverseNames);
    assert!(bound(&fw).ends_with("qb-0"), "{}", bound(&fw));
}

/// Gang readiness by `minMember` alone, for tests of the engine's mechanism without plugins.
struct MinMember;

impl JobReady for MinMember {
    fn name(&self) -> &str {
        "min-member"
    }
    fn ready(&self, session: &SessionView, job: JobId) -> bool {
        let c = session.counts(job);
        c.running + c.pipelined + c.succeeded >= session.snapshot.job(job).min_member
    }
}

/// A job's members by their own priority, higher first.
struct ByPriority;

impl TaskOrder for ByPriority {
    fn name(&self) -> &str {
        "by-priority"
    }
    fn compare(&self, a: &Task, b: &Task) -> std::cmp::Ordering {
        b.priority.cmp(&a.priority)
    }
}

/// One node with `gpus` GPUs; groups `(name, minMember, pod priorities)`, each pod asking one
/// GPU each, or `per_pod` GPUs.
fn elastic(gpus: i64, per_pod: i64, groups: &[(&str, i64, &[i32])]) -> Snapshot {
    let mut spec = spec(1, gpus, 0);
    spec.groups.clear();
    for &(name, min, priorities) in groups {
        spec.groups.push(GroupSpec {
            name: name.into(),
            min_member: min,
            ..spec_group()
        });
        for (i, &priority) in priorities.iter().enumerate() {
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("{name}-{i}"),
                ours: true,
                group: Some(name.into()),
                request: list(&[("cpu", 100), ("nvidia.com/gpu", per_pod)]),
                priority,
                ..Default::default()
            });
        }
    }
    Snapshot::build(spec).unwrap()
}

fn spec_group() -> GroupSpec {
    spec(1, 1, 1).groups.remove(0)
}

fn bound(plan: &Plan) -> Vec<String> {
    let mut pods: Vec<String> = plan.bindings.iter().map(|b| b.pod.clone()).collect();
    pods.sort();
    pods
}

#[test]
fn a_jobs_members_are_placed_in_the_task_order_then_rank() {
    // Room for one of two 4-GPU members: rank order takes e-0, the task order the
    // higher-priority e-1.
    let snap = elastic(4, 4, &[("e", 1, &[100, 1000])]);
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    fw.job_ready.push(Box::new(MinMember));
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert_eq!(bound(&plan), ["ns/e-0"]);
    fw.task_order.push(Box::new(ByPriority));
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert_eq!(bound(&plan), ["ns/e-1"]);
}

#[test]
fn every_jobs_minimum_is_served_before_any_jobs_extras() {
    // 5 GPUs, two elastic jobs of four 1-GPU members, minimum 2 each: 2 + 2, then the first
    // job in order takes the last GPU.
    let snap = elastic(5, 1, &[("a", 2, &[0; 4]), ("b", 2, &[0; 4])]);
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    fw.job_ready.push(Box::new(MinMember));
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert_eq!(
        bound(&plan),
        ["ns/a-0", "ns/a-1", "ns/a-2", "ns/b-0", "ns/b-1"]
    );
}

#[test]
fn schedule_each_hands_every_action_over_once_in_order_and_plans_the_same() {
    let snap = Snapshot::build(spec(2, 8, 3)).unwrap();
    let actions = vec![Action::Enqueue, Action::Allocate, Action::Preempt];
    let fw = Framework::new(actions.clone(), Box::new(LeastAllocated));
    let mut seen = Vec::new();
    let plan = schedule_each(&snap, &fw, &mut Warm::default(), |action, run| {
        seen.push(action.name());
        run();
    });
    assert_eq!(seen, ["enqueue", "allocate", "preempt"]);
    assert_eq!(plan, schedule(&snap, &fw, &mut Warm::default()));
    assert!(!plan.bindings.is_empty(), "{plan:?}");
}

//! Job order by PriorityClass value (higher first), then creation time (older first); the
//! framework breaks remaining ties by name. Inside a job, members by their own pod priority
//! (higher first), as Volcano's and KAI's task order; the engine breaks remaining ties by role
//! minimums, then rank.

use std::cmp::Ordering;

use basalt_engine::{Job, JobOrder, Task, TaskOrder};

pub struct Priority;

impl JobOrder for Priority {
    fn name(&self) -> &str {
        "priority"
    }
    fn compare(&self, a: &Job, b: &Job) -> Ordering {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.created_ms.cmp(&b.created_ms))
    }
}

impl TaskOrder for Priority {
    fn name(&self) -> &str {
        "priority"
    }
    fn compare(&self, a: &Task, b: &Task) -> Ordering {
        b.priority.cmp(&a.priority)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use basalt_engine::{ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec, Snapshot};

    fn group(name: &str, priority: i32) -> GroupSpec {
        GroupSpec {
            namespace: "ns".into(),
            name: name.into(),
            queue: None,
            min_member: 1,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: Some(priority),
            created_ms: 0,
            phase: JobPhase::Inqueue,
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        }
    }

    fn pod(name: &str, group: &str, priority: i32) -> PodSpec {
        PodSpec {
            namespace: "ns".into(),
            name: name.into(),
            ours: true,
            group: Some(group.into()),
            request: BTreeMap::from([("cpu".into(), 1000), ("nvidia.com/gpu".into(), 4)]),
            priority,
            ..Default::default()
        }
    }

    /// One 4-GPU node; elastic job `e` (minMember 1) of two 4-GPU pods, e-0 of priority 100
    /// (first by rank and name) and e-1 of 1000; with `busy`, a lower-priority job holds the node.
    fn cluster(busy: bool) -> Snapshot {
        let mut spec = ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            nodes: vec![NodeSpec {
                name: "n".into(),
                allocatable: BTreeMap::from([("cpu".into(), 64_000), ("nvidia.com/gpu".into(), 4)]),
                ..Default::default()
            }],
            groups: vec![group("e", 1000)],
            pods: vec![pod("e-0", "e", 100), pod("e-1", "e", 1000)],
            ..Default::default()
        };
        if busy {
            spec.groups.push(group("low", 0));
            spec.pods.push(PodSpec {
                node: Some("n".into()),
                phase: PodPhase::Running,
                ..pod("low-0", "low", 0)
            });
        }
        Snapshot::build(spec).unwrap()
    }

    #[test]
    fn a_jobs_higher_priority_pod_is_placed_first() {
        let plan = crate::schedule(&cluster(false), &Default::default());
        let bound: Vec<&str> = plan.bindings.iter().map(|b| b.pod.as_str()).collect();
        assert_eq!(bound, ["ns/e-1"]);
    }

    #[test]
    fn a_jobs_higher_priority_pod_is_the_one_evictions_make_room_for() {
        let plan = crate::schedule(&cluster(true), &Default::default());
        let evicted: Vec<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
        assert_eq!(evicted, ["ns/low-0"]);
        let nominated: Vec<&str> = plan.nominations.iter().map(|n| n.pod.as_str()).collect();
        assert_eq!(nominated, ["ns/e-1"]);
    }
}

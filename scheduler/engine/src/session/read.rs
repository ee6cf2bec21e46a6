//! What the session reads: task and job state, node and queue usage, shares, member counts.

use super::*;

impl<'a> Session<'a> {
    /// The topology and its free capacity, when the cluster has one.
    pub fn topology(&self) -> Option<&TopoState> {
        self.topo.as_ref()
    }

    /// Free whole GPUs of one NVLink island of a node.
    pub fn island_free(&self, node: NodeId, island: u32) -> u32 {
        let used = self.gpus_used[node.index()];
        self.snapshot.nodes[node.index()]
            .gpus
            .iter()
            .enumerate()
            .filter(|(p, g)| g.nvlink_domain == island && used & (1u64 << p) == 0)
            .count() as u32
    }

    pub fn framework(&self) -> &'a Framework {
        self.fw
    }

    pub fn task_status(&self, task: TaskId) -> &TaskStatus {
        &self.status[task.index()]
    }

    pub fn phase(&self, job: JobId) -> JobPhase {
        self.phase[job.index()]
    }

    pub fn used(&self, node: NodeId) -> &Resources {
        &self.used[node.index()]
    }

    /// What a node has left.
    pub fn free(&self, node: NodeId) -> Resources {
        let mut free = self.snapshot.node(node).allocatable.clone();
        free.sub(&self.used[node.index()]);
        free
    }

    /// The node's devices no pod can take or join now, as a mask of positions: the used whole
    /// devices of an unshared node; on a shared one, devices no pod can join any more.
    pub fn closed_devices(&self, node: NodeId) -> u64 {
        self.gpus_used[node.index()]
    }

    pub fn free_gpus(&self, node: NodeId) -> u32 {
        let count = self.snapshot.node(node).gpus.len() as u32;
        count - self.gpus_used[node.index()].count_ones().min(count)
    }

    pub fn cluster_allocatable(&self) -> &Resources {
        &self.cluster_allocatable
    }

    /// Everything in use now, across all nodes.
    pub fn cluster_used(&self) -> &Resources {
        &self.cluster_used
    }

    pub fn inqueue_reserved(&self) -> &Resources {
        &self.inqueue_reserved
    }

    /// minResources reserved by admitted jobs of the queue's subtree that hold nothing yet.
    pub fn queue_reserved(&self, queue: QueueId) -> &Resources {
        &self.queue_reserved[queue.index()]
    }

    /// What the queue's subtree holds (bound before the cycle, placed or pipelined by it).
    pub fn queue_allocated(&self, queue: QueueId) -> &Resources {
        &self.queue_allocated[queue.index()]
    }

    /// What the queue's subtree asks for: what it holds plus what its pending pods asked for
    /// when the session opened.
    pub fn queue_demand(&self, queue: QueueId) -> Resources {
        let mut demand = self.queue_pending[queue.index()].clone();
        demand.add(&self.queue_allocated[queue.index()]);
        demand
    }

    /// The queue's fair share.
    pub fn deserved(&self, queue: QueueId) -> &Resources {
        &self.deserved[queue.index()]
    }

    /// Whether some queue states a guarantee.
    pub fn any_guarantee(&self) -> bool {
        self.guaranteed
    }

    /// What the queues share: the cluster's allocatable less what pods of other schedulers use.
    pub fn queue_capacity(&self) -> Resources {
        self.queue_capacity.clone()
    }

    /// Dominant share: the largest allocated / deserved over the resources the queue holds.
    pub fn share(&self, queue: QueueId) -> Share {
        Share::dominant(
            &self.queue_allocated[queue.index()],
            &self.deserved[queue.index()],
        )
    }

    /// Bound tasks on a node when the session opened, in name order.
    pub fn node_tasks(&self, node: NodeId) -> &[TaskId] {
        let (i, start) = (node.index(), &self.node_task_start);
        &self.node_tasks[start[i] as usize..start[i + 1] as usize]
    }

    /// The job and shape of each of [`Session::node_tasks`], in the same order.
    pub(crate) fn node_task_kinds(&self, node: NodeId) -> &[(JobId, ShapeId)] {
        let (i, start) = (node.index(), &self.node_task_start);
        &self.node_task_kinds[start[i] as usize..start[i + 1] as usize]
    }

    /// Nodes where the queue's jobs had bound pods when the session opened, in name order.
    pub fn queue_nodes(&self, queue: QueueId) -> &[NodeId] {
        &self.queue_nodes[queue.index()]
    }

    /// Jobs whose PodGroup was Pending in the snapshot, by id.
    pub fn unadmitted(&self) -> &[JobId] {
        &self.unadmitted
    }

    /// Jobs that had pending members when the session opened, by id: a superset of the jobs
    /// with pending members at any later point of the cycle.
    pub fn with_pending(&self) -> &[JobId] {
        &self.with_pending
    }

    /// Whether this cycle placed (or nominated) members of the job: such a job is being
    /// started, and is no victim for anyone.
    /// `Some(ms left)` while the job backs off after its schedule timeout (no member was
    /// bound when the session opened; see [`Framework::timed_out`]).
    pub fn timed_out(&self, job: JobId) -> Option<i64> {
        let snap = self.snapshot;
        let j = snap.job(job);
        j.schedule_timeout_ms?;
        let started = (j.tasks.iter()).any(|&t| matches!(snap.task(t).state, TaskState::Bound(_)));
        self.fw.timed_out(j, started, snap.now_ms)
    }

    pub fn placed_now(&self, job: JobId) -> bool {
        self.placed[job.index()] > 0
    }

    pub fn holding(&self, job: JobId) -> u32 {
        self.holding[job.index()]
    }

    /// The lowest priority of the queue's jobs with members bound before this cycle (`None`:
    /// none): a preemptor of that priority or below finds no lower-priority victim there.
    pub fn lowest_bound_priority(&self, queue: QueueId) -> Option<i32> {
        self.lowest_bound_priority[queue.index()]
    }

    pub fn counts(&self, job: JobId) -> MemberCounts {
        let mut c = MemberCounts::default();
        let minimums = &self.snapshot.job(job).min_task_member;
        for &t in &self.snapshot.job(job).tasks {
            let holds = match self.status[t.index()] {
                TaskStatus::Pending | TaskStatus::Evicted(_) => {
                    c.pending += 1;
                    false
                }
                TaskStatus::Bound(_) | TaskStatus::Allocated { .. } => {
                    c.running += 1;
                    true
                }
                TaskStatus::Pipelined { .. } => {
                    c.pipelined += 1;
                    true
                }
                TaskStatus::Succeeded => {
                    c.succeeded += 1;
                    true
                }
                TaskStatus::Failed => {
                    c.failed += 1;
                    false
                }
            };
            // Only roles with a minimum are counted: nothing else reads them.
            if holds && !minimums.is_empty() {
                let role = self.snapshot.task(t).role();
                if !minimums.contains_key(role) {
                    continue;
                }
                match c.by_role.get_mut(role) {
                    Some(n) => *n += 1,
                    None => {
                        c.by_role.insert(role.to_string(), 1);
                    }
                }
            }
        }
        c
    }

    /// Whether the job still meets every gang minimum ([`Job::meets_minimums`]) without the
    /// members in `gone` (each holding a node now), counting members that hold a node (bound,
    /// placed or pipelined) or succeeded. Without role minimums this is a count, not a scan.
    pub fn meets_minimums(&self, job: JobId, gone: &[TaskId]) -> bool {
        let j = self.snapshot.job(job);
        let succeeded = self.start_counts[job.index()].succeeded;
        let members = (self.holding[job.index()] + succeeded).saturating_sub(gone.len() as u32);
        if j.min_task_member.is_empty() {
            return members >= j.min_member;
        }
        let counts = |t: &TaskId| {
            !gone.contains(t)
                && matches!(
                    self.status[t.index()],
                    TaskStatus::Bound(_)
                        | TaskStatus::Allocated { .. }
                        | TaskStatus::Pipelined { .. }
                        | TaskStatus::Succeeded
                )
        };
        j.meets_minimums(members, |role| {
            (j.tasks.iter())
                .filter(|t| counts(t) && self.snapshot.task(**t).role() == role)
                .count() as u32
        })
    }
}

//! What the session reads: task and job state, node and queue usage, shares, member counts.

use super::*;

impl<'a> Session<'a> {
    /// The topology and its free capacity, when the cluster has one.
    pub fn topology(&self) -> Option<&TopoState> {
        self.topo.as_ref()
    }

    /// Free whole GPUs of one NVLink island of a node.
    pub fn island_free(&self, node: NodeId, island: u32) -> u32 {
        let used = self.capacity.closed(node);
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
        self.jobs.status(task)
    }

    pub fn phase(&self, job: JobId) -> JobPhase {
        self.jobs.phase(job)
    }

    pub fn used(&self, node: NodeId) -> &Resources {
        self.capacity.used(node)
    }

    /// What a node has left.
    pub fn free(&self, node: NodeId) -> Resources {
        let mut free = self.snapshot.node(node).allocatable.clone();
        free.sub(self.capacity.used(node));
        free
    }

    /// The node's devices no pod can take or join now, as a mask of positions: the used whole
    /// devices of an unshared node; on a shared one, devices no pod can join any more.
    pub fn closed_devices(&self, node: NodeId) -> u64 {
        self.capacity.closed(node)
    }

    pub fn free_gpus(&self, node: NodeId) -> u32 {
        let count = self.snapshot.node(node).gpus.len() as u32;
        count - self.capacity.closed(node).count_ones().min(count)
    }

    pub fn cluster_allocatable(&self) -> &Resources {
        self.queues.cluster_allocatable()
    }

    /// Everything in use now, across all nodes.
    pub fn cluster_used(&self) -> &Resources {
        self.capacity.cluster_used()
    }

    pub fn inqueue_reserved(&self) -> &Resources {
        self.queues.inqueue_reserved()
    }

    /// minResources reserved by admitted jobs of the queue's subtree that hold nothing yet.
    pub fn queue_reserved(&self, queue: QueueId) -> &Resources {
        self.queues.queue_reserved(queue)
    }

    /// What the queue's subtree holds (bound before the cycle, placed or pipelined by it).
    pub fn queue_allocated(&self, queue: QueueId) -> &Resources {
        self.queues.allocated(queue)
    }

    /// What the queue's subtree asks for: what it holds plus what its pending pods asked for
    /// when the session opened.
    pub fn queue_demand(&self, queue: QueueId) -> Resources {
        let mut demand = self.queues.pending(queue).clone();
        demand.add(self.queues.allocated(queue));
        demand
    }

    /// The queue's fair share.
    pub fn deserved(&self, queue: QueueId) -> &Resources {
        self.queues.deserved(queue)
    }

    /// Whether some queue states a guarantee.
    pub fn any_guarantee(&self) -> bool {
        self.queues.guaranteed()
    }

    /// What the queues share: the cluster's allocatable less what pods of other schedulers use.
    pub fn queue_capacity(&self) -> Resources {
        self.queues.queue_capacity().clone()
    }

    /// Dominant share: the largest allocated / deserved over the resources the queue holds.
    pub fn share(&self, queue: QueueId) -> Share {
        self.queues.share(queue)
    }

    /// Bound tasks on a node when the session opened, in name order.
    pub fn node_tasks(&self, node: NodeId) -> &[TaskId] {
        self.bound.node_tasks(node)
    }

    /// The job and shape of each of [`Session::node_tasks`], in the same order.
    pub(crate) fn node_task_kinds(&self, node: NodeId) -> &[(JobId, ShapeId)] {
        self.bound.node_task_kinds(node)
    }

    /// Nodes where the queue's jobs had bound pods when the session opened, in name order.
    pub fn queue_nodes(&self, queue: QueueId) -> &[NodeId] {
        self.bound.queue_nodes(queue)
    }

    /// Jobs whose PodGroup was Pending in the snapshot, by id.
    pub fn unadmitted(&self) -> &[JobId] {
        self.jobs.unadmitted()
    }

    /// Jobs that had pending members when the session opened, by id: a superset of the jobs
    /// with pending members at any later point of the cycle.
    pub fn with_pending(&self) -> &[JobId] {
        self.jobs.with_pending()
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
        self.jobs.placed_now(job)
    }

    pub fn holding(&self, job: JobId) -> u32 {
        self.jobs.holding(job)
    }

    /// The lowest priority of the queue's jobs with members bound before this cycle (`None`:
    /// none): a preemptor of that priority or below finds no lower-priority victim there.
    pub fn lowest_bound_priority(&self, queue: QueueId) -> Option<i32> {
        self.bound.lowest_bound_priority(queue)
    }

    pub fn counts(&self, job: JobId) -> MemberCounts {
        self.jobs.counts(self.snapshot, job)
    }

    /// Whether the job still meets every gang minimum ([`Job::meets_minimums`]) without the
    /// members in `gone` (each holding a node now), counting members that hold a node (bound,
    /// placed or pipelined) or succeeded. Without role minimums this is a count, not a scan.
    pub fn meets_minimums(&self, job: JobId, gone: &[TaskId]) -> bool {
        self.jobs.meets_minimums(self.snapshot, job, gone)
    }
}

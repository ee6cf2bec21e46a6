//! What a plugin sees of a session: the snapshot and what the cycle has done so far, read
//! only. The extension points take a [`SessionView`], never the [`Session`], so a plugin
//! cannot reach the session's statements, indexes or any of its other workings; a method is
//! here because a policy reads it.

use super::*;
use crate::devices::{DeviceFilters, DeviceUse};

/// A read-only window on a [`Session`] for the framework's plugins (see [`Session::view`]).
#[derive(Clone, Copy)]
pub struct SessionView<'v, 'a> {
    pub snapshot: &'a Snapshot,
    session: &'v Session<'a>,
}

impl<'a> Session<'a> {
    /// The session as the framework's plugins see it.
    pub fn view(&self) -> SessionView<'_, 'a> {
        SessionView {
            snapshot: self.snapshot,
            session: self,
        }
    }
}

/// Each reads what the [`Session`] method of the same name does.
impl<'v, 'a> SessionView<'v, 'a> {
    pub fn framework(&self) -> &'a Framework {
        self.session.framework()
    }

    pub fn topology(&self) -> Option<&'v TopoState> {
        self.session.topology()
    }

    // Tasks and jobs.

    pub fn task_status(&self, task: TaskId) -> &'v TaskStatus {
        self.session.task_status(task)
    }

    pub fn counts(&self, job: JobId) -> MemberCounts {
        self.session.counts(job)
    }

    pub fn holding(&self, job: JobId) -> u32 {
        self.session.holding(job)
    }

    // Nodes and their devices.

    pub fn used(&self, node: NodeId) -> &'v Resources {
        self.session.used(node)
    }

    pub fn cluster_allocatable(&self) -> &'v Resources {
        self.session.cluster_allocatable()
    }

    pub fn cluster_used(&self) -> &'v Resources {
        self.session.cluster_used()
    }

    pub fn node_tasks(&self, node: NodeId) -> &'v [TaskId] {
        self.session.node_tasks(node)
    }

    pub fn fits(&self, node: NodeId, request: &Resources) -> bool {
        self.session.fits(node, request)
    }

    pub fn reserved_for(&self, node: NodeId) -> Option<JobId> {
        self.session.reserved_for(node)
    }

    pub fn free_gpus(&self, node: NodeId) -> u32 {
        self.session.free_gpus(node)
    }

    pub fn closed_devices(&self, node: NodeId) -> u64 {
        self.session.closed_devices(node)
    }

    pub fn device_use(&self, node: NodeId) -> &'v [DeviceUse] {
        self.session.device_use(node)
    }

    pub fn device_filters(&self, task: TaskId) -> Option<&'v DeviceFilters> {
        self.session.device_filters(task)
    }

    pub fn slices_used(&self, node: NodeId) -> u64 {
        self.session.slices_used(node)
    }

    pub fn gpu_relayable(&self, node: NodeId, position: usize) -> bool {
        self.session.gpu_relayable(node, position)
    }

    // Queues.

    pub fn queue_allocated(&self, queue: QueueId) -> &'v Resources {
        self.session.queue_allocated(queue)
    }

    pub fn queue_reserved(&self, queue: QueueId) -> &'v Resources {
        self.session.queue_reserved(queue)
    }

    pub fn queue_demand(&self, queue: QueueId) -> Resources {
        self.session.queue_demand(queue)
    }

    pub fn queue_capacity(&self) -> Resources {
        self.session.queue_capacity()
    }

    pub fn any_guarantee(&self) -> bool {
        self.session.any_guarantee()
    }

    pub fn inqueue_reserved(&self) -> &'v Resources {
        self.session.inqueue_reserved()
    }

    pub fn deserved(&self, queue: QueueId) -> &'v Resources {
        self.session.deserved(queue)
    }

    pub fn share(&self, queue: QueueId) -> Share {
        self.session.share(queue)
    }

    pub fn lowest_bound_priority(&self, queue: QueueId) -> Option<i32> {
        self.session.lowest_bound_priority(queue)
    }

    pub fn queue_nodes(&self, queue: QueueId) -> &'v [NodeId] {
        self.session.queue_nodes(queue)
    }

    pub fn weight(&self, queue: QueueId) -> i64 {
        self.session.weight(queue)
    }

    pub fn usage_weight(&self, queue: QueueId) -> Option<i64> {
        self.session.usage_weight(queue)
    }

    pub fn queue_usage(&self, queue: QueueId) -> &'v [f64] {
        self.session.queue_usage(queue)
    }
}

//! Capacity kept for particular jobs: nodes reserved for a starving gang, the nominations of
//! its members, and holds for nominated pods (freed by an earlier cycle's evictions). Only
//! `holds.rs` changes them, through the methods here; what a hold takes of a node is charged
//! to the session's capacity there too.

use crate::hash::Map;
use crate::model::{JobId, NodeId, TaskId};
use crate::snapshot::Snapshot;

/// Which pods hold or wait for which nodes.
type Holds = Vec<(TaskId, NodeId)>;

/// The session's reservations, nominations and holds.
pub(super) struct Reservations {
    /// Per node: the starving job that reserved it.
    reserved_for: Vec<Option<JobId>>,
    /// Whether some node is reserved.
    any: bool,
    /// Members of reserving jobs and the nodes kept for them.
    nominations: Holds,
    /// Capacity held for nominated pending pods, per job, until the job's own turn releases
    /// it.
    holds: Map<JobId, Holds>,
    /// Holds released for the job's turn, to be restored after it.
    released: Map<JobId, Holds>,
}

impl Reservations {
    pub(super) fn new(nodes: usize) -> Reservations {
        Reservations {
            reserved_for: vec![None; nodes],
            any: false,
            nominations: Vec::new(),
            holds: Map::default(),
            released: Map::default(),
        }
    }

    pub(super) fn reserved_for(&self, node: NodeId) -> Option<JobId> {
        self.reserved_for[node.index()]
    }

    pub(super) fn any(&self) -> bool {
        self.any
    }

    /// The job of each reserved node (a job once per node it reserved).
    pub(super) fn owners(&self) -> impl Iterator<Item = JobId> + '_ {
        self.reserved_for.iter().flatten().copied()
    }

    pub(super) fn reserve(&mut self, node: NodeId, job: JobId) {
        self.reserved_for[node.index()] = Some(job);
        self.any = true;
    }

    /// Members of reserving jobs and the nodes kept for them, in the order nominated.
    pub(super) fn nominations(&self) -> &[(TaskId, NodeId)] {
        &self.nominations
    }

    pub(super) fn nominate(&mut self, task: TaskId, node: NodeId) {
        self.nominations.push((task, node));
    }

    /// Forgets the nominations of a job's members.
    pub(super) fn drop_nominations(&mut self, snap: &Snapshot, job: JobId) {
        self.nominations.retain(|&(t, _)| snap.task(t).job != job);
    }

    /// Notes a hold of a nominated pod of `job` on `node`.
    pub(super) fn hold(&mut self, job: JobId, task: TaskId, node: NodeId) {
        self.holds.entry(job).or_default().push((task, node));
    }

    /// Takes the job's holds out, to release them for its turn.
    pub(super) fn take_holds(&mut self, job: JobId) -> Option<Holds> {
        self.holds.remove(&job)
    }

    /// Keeps the holds released for the job's turn, to restore after it.
    pub(super) fn keep_released(&mut self, job: JobId, holds: Holds) {
        self.released.insert(job, holds);
    }

    /// Takes out the holds released for the job's turn.
    pub(super) fn take_released(&mut self, job: JobId) -> Option<Holds> {
        self.released.remove(&job)
    }

    /// The job's pods that hold their nodes again after its turn.
    pub(super) fn keep_holds(&mut self, job: JobId, holds: Holds) {
        if !holds.is_empty() {
            self.holds.insert(job, holds);
        }
    }
}

//! A job's admission, its conditions, and the capacity held for it: admission reservations,
//! nominations, nodes reserved for a starving gang.

use super::*;

impl<'a> Session<'a> {
    /// Moves a job into the schedulable set, reserving its minResources until it holds members.
    pub fn admit(&mut self, job: JobId) {
        if self.jobs.admit(job) {
            self.reserve_admission(job, true);
        }
    }

    /// Adds (or gives back) an admitted job's minResources to the admission reservations.
    pub(super) fn reserve_admission(&mut self, job: JobId, add: bool) {
        let snap = self.snapshot;
        if self.jobs.phase(job) != JobPhase::Inqueue {
            return;
        }
        let Some(min) = &snap.job(job).min_resources else {
            return;
        };
        (self.queues).reserve(snap, snap.job(job).queue, min, add);
    }

    /// Notes `condition` for `job` (once), worded when the plan is written.
    pub fn add_condition(&mut self, job: JobId, condition: JobCondition) {
        self.jobs.add_condition(job, condition);
    }

    /// Gives the job back the capacity held for its nominated pods, so that they (or other
    /// members) can be placed; other jobs never see it.
    pub fn release_holds(&mut self, job: JobId) {
        let Some(holds) = self.reservations.take_holds(job) else {
            return;
        };
        for &(task, node) in &holds {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.capacity.give_back(node, request);
            self.changes.note(node);
            self.index_insert(node);
        }
        self.refusals.note_released();
        self.reservations.keep_released(job, holds);
    }

    /// After a job's turn: its nominated pods still pending hold their nodes again, for the
    /// rest of the cycle.
    pub fn restore_holds(&mut self, job: JobId) {
        let Some(holds) = self.reservations.take_released(job) else {
            return;
        };
        let keep: Vec<(TaskId, NodeId)> = holds
            .into_iter()
            .filter(|&(t, _)| self.jobs.is_pending(t))
            .collect();
        for &(task, node) in &keep {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.capacity.take(node, request);
            self.changes.note(node);
            self.index_insert(node);
        }
        self.reservations.keep_holds(job, keep);
    }

    pub fn reserved_for(&self, node: NodeId) -> Option<JobId> {
        self.reservations.reserved_for(node)
    }

    /// Keeps a node for a starving job: other work may use it only with `ReservedNodes::Use`.
    pub fn reserve_node(&mut self, node: NodeId, job: JobId) {
        self.reservations.reserve(node, job);
        // Cached failures assumed no reservations; they are stale now.
        self.refusals.note_released();
    }

    pub fn has_reservations(&self) -> bool {
        self.reservations.any()
    }

    /// Records that a member of a reserving job waits for this node; reported as a nomination
    /// unless the member is placed in the same cycle.
    pub fn nominate(&mut self, task: TaskId, node: NodeId) {
        debug_assert!(
            self.snapshot.task(task).hold.is_none(),
            "a held task is nominated"
        );
        self.reservations.nominate(task, node);
    }

    /// Forgets the nominations of a job's reservation.
    pub fn drop_nominations(&mut self, job: JobId) {
        self.reservations.drop_nominations(self.snapshot, job);
    }

    /// Holds capacity for nominated pending pods (see `holds`), noting their nodes.
    pub(super) fn hold_nominated(&mut self, nodes: &mut Vec<NodeId>) {
        for t in &self.snapshot.tasks {
            let (TaskState::Pending, Some(node)) = (t.state, t.nominated) else {
                continue;
            };
            // A gang backing off after its schedule timeout holds nothing.
            if self.timed_out(t.job).is_some() {
                continue;
            }
            self.capacity.take(node, &t.request);
            self.changes.note(node);
            self.reservations.hold(t.job, t.id, node);
            nodes.push(node);
        }
    }
}

//! A job's admission, its conditions, and the capacity held for it: admission reservations,
//! nominations, nodes reserved for a starving gang.

use super::*;

impl<'a> Session<'a> {
    /// Moves a job into the schedulable set, reserving its minResources until it holds members.
    pub fn admit(&mut self, job: JobId) {
        if self.phase[job.index()] != JobPhase::Pending {
            return;
        }
        self.phase[job.index()] = JobPhase::Inqueue;
        self.reserve_admission(job, true);
    }

    /// Adds (or gives back) an admitted job's minResources to the admission reservations.
    pub(super) fn reserve_admission(&mut self, job: JobId, add: bool) {
        let snap = self.snapshot;
        if self.phase[job.index()] != JobPhase::Inqueue {
            return;
        }
        let Some(min) = &snap.job(job).min_resources else {
            return;
        };
        for q in ancestors(snap, snap.job(job).queue) {
            if add {
                self.queue_reserved[q.index()].add(min);
            } else {
                self.queue_reserved[q.index()].take_back(min);
            }
        }
        if add {
            self.inqueue_reserved.add(min);
        } else {
            self.inqueue_reserved.take_back(min);
        }
    }

    /// Notes `condition` for `job` (once), worded when the plan is written.
    pub fn add_condition(&mut self, job: JobId, condition: JobCondition) {
        let list = &mut self.conditions[job.index()];
        if !list.contains(&condition) {
            list.push(condition);
        }
    }

    /// Gives the job back the capacity held for its nominated pods, so that they (or other
    /// members) can be placed; other jobs never see it.
    pub fn release_holds(&mut self, job: JobId) {
        let Some(holds) = self.holds.remove(&job) else {
            return;
        };
        for &(task, node) in &holds {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.used[node.index()].take_back(request);
            self.changes.note(node);
            self.cluster_used.take_back(request);
            self.index_insert(node);
        }
        self.released += 1;
        self.released_holds.insert(job, holds);
    }

    /// After a job's turn: its nominated pods still pending hold their nodes again, for the
    /// rest of the cycle.
    pub fn restore_holds(&mut self, job: JobId) {
        let Some(holds) = self.released_holds.remove(&job) else {
            return;
        };
        let keep: Vec<(TaskId, NodeId)> = holds
            .into_iter()
            .filter(|&(t, _)| self.status[t.index()] == TaskStatus::Pending)
            .collect();
        for &(task, node) in &keep {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.used[node.index()].add(request);
            self.changes.note(node);
            self.cluster_used.add(request);
            self.index_insert(node);
        }
        if !keep.is_empty() {
            self.holds.insert(job, keep);
        }
    }

    pub fn reserved_for(&self, node: NodeId) -> Option<JobId> {
        self.reserved_for[node.index()]
    }

    /// Keeps a node for a starving job: other work may use it only with `ReservedNodes::Use`.
    pub fn reserve_node(&mut self, node: NodeId, job: JobId) {
        self.reserved_for[node.index()] = Some(job);
        self.any_reserved = true;
        // Cached failures assumed no reservations; they are stale now.
        self.released += 1;
    }

    pub fn has_reservations(&self) -> bool {
        self.any_reserved
    }

    /// Records that a member of a reserving job waits for this node; reported as a nomination
    /// unless the member is placed in the same cycle.
    pub fn nominate(&mut self, task: TaskId, node: NodeId) {
        debug_assert!(
            self.snapshot.task(task).hold.is_none(),
            "a held task is nominated"
        );
        self.reservations.push((task, node));
    }

    /// Forgets the nominations of a job's reservation.
    pub fn drop_nominations(&mut self, job: JobId) {
        let snap = self.snapshot;
        self.reservations.retain(|&(t, _)| snap.task(t).job != job);
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
            self.used[node.index()].add(&t.request);
            self.cluster_used.add(&t.request);
            self.changes.note(node);
            self.holds.entry(t.job).or_default().push((t.id, node));
            nodes.push(node);
        }
    }
}

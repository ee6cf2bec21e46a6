//! `preempt`'s victims: [`LowerPriority`].

use std::cmp::Ordering;

use basalt_engine::{
    JobId, QueueId, ResourceId, Resources, SessionView, TaskId, VictimCost, VictimUnit, Victims,
};

use super::{cost, evicts_for, takes_unit, victim_order, worth_evicting};

/// Pods of jobs of strictly lower priority in the preemptor's own queue (the action's scope):
/// two jobs of one priority never evict each other, so no ping-pong between them.
pub struct LowerPriority {
    /// An eviction that stops a job must be used to at least this many thousandths of what it
    /// frees (see [`Victims::worth_evicting`]).
    pub min_used_milli: u32,
}

impl Default for LowerPriority {
    fn default() -> Self {
        LowerPriority {
            min_used_milli: super::MIN_USED_MILLI,
        }
    }
}

impl Victims for LowerPriority {
    fn name(&self) -> &str {
        "lower-priority"
    }

    fn may_evict_for(&self, session: &SessionView, job: JobId) -> bool {
        let job = session.snapshot.job(job);
        // Victims are of strictly lower priority: none runs, no search (exact, and it spares a
        // failed search over every node for each waiting job of a busy queue).
        evicts_for(session, job)
            && session
                .lowest_bound_priority(job.queue)
                .is_some_and(|p| p < job.priority)
    }

    fn queues(&self, session: &SessionView, job: JobId, _: &Resources) -> Vec<QueueId> {
        vec![session.snapshot.job(job).queue]
    }

    /// The preemptor's queue ends holding what it held: nothing to keep it from.
    fn may_keep(&self, _: &SessionView, _: JobId, _: &Resources, _: &[ResourceId]) -> bool {
        true
    }

    fn may_take(&self, session: &SessionView, job: JobId, unit: &VictimUnit) -> bool {
        let snap = session.snapshot;
        takes_unit(snap, unit)
            && snap.job(snap.task(unit.tasks[0]).job).priority < snap.job(job).priority
    }

    fn compare_victims(&self, session: &SessionView, a: TaskId, b: TaskId) -> Ordering {
        let key = |v| victim_order(session.snapshot, v, false);
        key(a).cmp(&key(b))
    }

    fn cost(&self, session: &SessionView, job: JobId, victims: &[TaskId]) -> VictimCost {
        cost(session, session.snapshot.job(job).queue, victims)
    }

    fn worth_evicting(
        &self,
        session: &SessionView,
        _: JobId,
        victims: &[TaskId],
        placed: &[TaskId],
        resources: &[ResourceId],
    ) -> bool {
        worth_evicting(self.min_used_milli, session, victims, placed, resources)
    }
}

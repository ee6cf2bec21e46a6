//! `reclaim`'s victims: [`OverShare`].

use std::cmp::Ordering;

use basalt_engine::snapshot::ancestors;
use basalt_engine::{
    JobId, QueueId, ResourceId, Resources, SessionView, Snapshot, TaskId, VictimCost, VictimUnit,
    Victims,
};

use super::{cost, evicts_for, takes_unit, victim_order, worth_evicting};

/// Pods of reclaimable queues above their deserved share, for a queue below its own; see the
/// rules at the top of [`super`].
pub struct OverShare {
    /// An eviction that stops a job must be used to at least this many thousandths of what it
    /// frees (see [`Victims::worth_evicting`]).
    pub min_used_milli: u32,
    /// A unit whose pods started less than this long ago is no reclaim victim
    /// (`eviction.reclaimMinRuntime`; 0: any).
    pub min_runtime_ms: i64,
}

impl Default for OverShare {
    fn default() -> Self {
        OverShare {
            min_used_milli: super::MIN_USED_MILLI,
            min_runtime_ms: 0,
        }
    }
}

impl OverShare {
    /// Whether the unit has run `min_runtime_ms` since its pods began (its latest start: a
    /// member started later has run only that long).
    fn has_run_enough(&self, snap: &Snapshot, unit: &VictimUnit) -> bool {
        let started = (unit.tasks.iter())
            .map(|&t| snap.task(t))
            .map(|t| t.started_ms.unwrap_or(t.created_ms))
            .max()
            .unwrap_or(i64::MIN);
        snap.now_ms.saturating_sub(started) >= self.min_runtime_ms
    }
}

impl Victims for OverShare {
    fn name(&self) -> &str {
        "over-share"
    }

    fn may_evict_for(&self, session: &SessionView, job: JobId) -> bool {
        let snap = session.snapshot;
        let job = snap.job(job);
        if !evicts_for(session, job) {
            return false;
        }
        let deserved = session.deserved(job.queue);
        let allocated = session.queue_allocated(job.queue);
        // Below its share in some resource its pods ask for.
        job.tasks.iter().any(|&t| {
            (snap.task(t).request.iter()).any(|(r, _)| allocated.get(r) < deserved.get(r))
        })
    }

    fn queues(&self, session: &SessionView, job: JobId, request: &Resources) -> Vec<QueueId> {
        let snap = session.snapshot;
        let own = snap.job(job).queue;
        // Reclaimable queues holding more than they deserve in something the member asks, under
        // ancestors that can give too: the search skips the nodes of a queue whose every unit
        // `queues_give` would refuse.
        (snap.queues.iter())
            .filter(|q| q.id != own && q.reclaimable && !session.queue_nodes(q.id).is_empty())
            .filter(|q| {
                let allocated = session.queue_allocated(q.id);
                let deserved = session.deserved(q.id);
                (request.iter()).any(|(r, _)| allocated.get(r) > deserved.get(r))
            })
            .filter(|q| {
                reclaimed_from(snap, q.id, own)
                    .skip(1)
                    .all(|a| may_give(session, a))
            })
            .map(|q| q.id)
            .collect()
    }

    fn may_keep(
        &self,
        session: &SessionView,
        job: JobId,
        more: &Resources,
        resources: &[ResourceId],
    ) -> bool {
        let queue = session.snapshot.job(job).queue;
        let (allocated, deserved) = (session.queue_allocated(queue), session.deserved(queue));
        (resources.iter()).all(|&r| allocated.get(r).saturating_add(more.get(r)) <= deserved.get(r))
    }

    fn may_take(&self, session: &SessionView, job: JobId, unit: &VictimUnit) -> bool {
        let snap = session.snapshot;
        if !takes_unit(snap, unit) {
            return false;
        }
        let victim = snap.job(snap.task(unit.tasks[0]).job);
        self.has_run_enough(snap, unit)
            && queues_give(session, snap.job(job).queue, victim.queue, unit)
    }

    fn compare_victims(&self, session: &SessionView, a: TaskId, b: TaskId) -> Ordering {
        let key = |v| victim_order(session.snapshot, v, true);
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

/// Whether the queues of a reclaim victim unit (of `queue`) may give it up, after what the units
/// chosen before it take. Judged at every level the reclaim crosses, from the victim's leaf up
/// to (not including) the ancestor shared with the preemptor's queue: each queue must be
/// reclaimable, keep its guarantee, and be above its deserved share before this eviction in a
/// resource the member lacks and the unit frees. Pods are indivisible, so a queue over by less
/// than one pod still gives one up; the reclaimer, which never ends above its own share in
/// those resources, is then no victim for the queue it took from (no ping-pong).
fn queues_give(
    session: &SessionView,
    preemptor: QueueId,
    queue: QueueId,
    unit: &VictimUnit,
) -> bool {
    let snap = session.snapshot;
    let request = unit.request;
    reclaimed_from(snap, queue, preemptor).all(|q| {
        let spec = snap.queue(q);
        let allocated = session.queue_allocated(q);
        let taken = unit.taken_from(q);
        // What the queue holds of `r` before this unit goes.
        let held = |r: ResourceId| {
            allocated
                .get(r)
                .saturating_sub(taken.map_or(0, |t| t.get(r)))
        };
        let deserved = session.deserved(q);
        spec.reclaimable
            && (spec.guarantee.iter())
                .all(|(r, g)| request.get(r) == 0 || held(r).saturating_sub(request.get(r)) >= g)
            && (unit.short.iter()).any(|&r| request.get(r) > 0 && held(r) > deserved.get(r))
    })
}

/// Whether the queue may give anything up to a reclaim at all: it is reclaimable and above its
/// deserved share in some resource. Every unit [`queues_give`] lets go needs this of each queue
/// the reclaim crosses (what earlier units take only lowers what a queue holds).
fn may_give(session: &SessionView, queue: QueueId) -> bool {
    let deserved = session.deserved(queue);
    session.snapshot.queue(queue).reclaimable
        && (session.queue_allocated(queue).iter()).any(|(r, held)| held > deserved.get(r))
}

/// The queues a reclaim from `victim` to `preemptor` moves resources out of: the victim's leaf
/// and its ancestors below the lowest one the two share. Above that, the move is internal.
fn reclaimed_from<'s>(
    snap: &'s Snapshot,
    victim: QueueId,
    preemptor: QueueId,
) -> impl Iterator<Item = QueueId> + 's {
    ancestors(snap, victim).take_while(move |&q| !ancestors(snap, preemptor).any(|p| p == q))
}

//! Who `reclaim` and `preempt` may evict, and who goes first: [`LowerPriorityOverShare`].
//!
//! - Never a pod annotated `preemptable: "false"`, and nothing for a gang with a member of
//!   `preemptionPolicy: Never`.
//! - preempt: pods of lower-priority jobs (of the preemptor's queue, the action's scope).
//! - reclaim: only by a queue below its deserved share in a resource its pods ask for, from
//!   reclaimable queues above theirs in a resource the member lacks, never below a guarantee;
//!   the reclaimer never ends above its own share in the resources it took victims for (its gain
//!   would be taken back: a ping-pong), and the others it asks for (idle ones) never block it.
//! - Order on a node: for reclaim the lowest queue priority first; then the lowest pod
//!   priority, the lowest job priority, the youngest. Sets: the fewest victims, then the lowest
//!   highest (pod, job) priority among them, then the youngest oldest victim (the least work
//!   lost).

use std::cmp::{Ordering, Reverse};

use basalt_engine::snapshot::ancestors;
use basalt_engine::{
    EvictionKind, JobId, QueueId, ResourceId, Resources, Session, Snapshot, TaskId, VictimUnit,
    Victims,
};

pub struct LowerPriorityOverShare;

impl Victims for LowerPriorityOverShare {
    fn name(&self) -> &str {
        "lower-priority-over-share"
    }

    fn may_evict_for(&self, session: &Session, job: JobId, kind: EvictionKind) -> bool {
        let snap = session.snapshot;
        let job = snap.job(job);
        if job.tasks.iter().any(|&t| snap.task(t).preemption_never) {
            return false;
        }
        match kind {
            EvictionKind::Preempt => true,
            EvictionKind::Reclaim => {
                let deserved = session.deserved(job.queue);
                let allocated = session.queue_allocated(job.queue);
                // Below its share in some resource its pods ask for.
                job.tasks.iter().any(|&t| {
                    (snap.task(t).request.iter()).any(|(r, _)| allocated.get(r) < deserved.get(r))
                })
            }
        }
    }

    fn queues(
        &self,
        session: &Session,
        job: JobId,
        request: &Resources,
        kind: EvictionKind,
    ) -> Vec<QueueId> {
        let snap = session.snapshot;
        let own = snap.job(job).queue;
        match kind {
            EvictionKind::Preempt => vec![own],
            // Reclaimable queues holding more than they deserve in something the member asks.
            EvictionKind::Reclaim => (snap.queues.iter())
                .filter(|q| q.id != own && q.reclaimable && !session.queue_nodes(q.id).is_empty())
                .filter(|q| {
                    let allocated = session.queue_allocated(q.id);
                    let deserved = session.deserved(q.id);
                    (request.iter()).any(|(r, _)| allocated.get(r) > deserved.get(r))
                })
                .map(|q| q.id)
                .collect(),
        }
    }

    fn may_keep(
        &self,
        session: &Session,
        job: JobId,
        more: &Resources,
        resources: &[ResourceId],
        kind: EvictionKind,
    ) -> bool {
        let queue = session.snapshot.job(job).queue;
        let (allocated, deserved) = (session.queue_allocated(queue), session.deserved(queue));
        kind == EvictionKind::Preempt
            || (resources.iter())
                .all(|&r| allocated.get(r).saturating_add(more.get(r)) <= deserved.get(r))
    }

    fn may_take(
        &self,
        session: &Session,
        job: JobId,
        unit: &VictimUnit,
        kind: EvictionKind,
    ) -> bool {
        let snap = session.snapshot;
        if unit.tasks.iter().any(|&t| snap.task(t).non_preemptable) {
            return false;
        }
        let victim = snap.job(snap.task(unit.tasks[0]).job);
        let preemptor = snap.job(job);
        match kind {
            EvictionKind::Preempt => victim.priority < preemptor.priority,
            EvictionKind::Reclaim => queues_give(session, preemptor.queue, victim.queue, unit),
        }
    }

    fn compare_victims(
        &self,
        session: &Session,
        a: TaskId,
        b: TaskId,
        kind: EvictionKind,
    ) -> Ordering {
        let snap = session.snapshot;
        let key = |v: TaskId| {
            let t = snap.task(v);
            let job = snap.job(t.job);
            let queue_priority = match kind {
                EvictionKind::Reclaim => snap.queue(job.queue).priority,
                EvictionKind::Preempt => 0,
            };
            (
                queue_priority,
                t.priority,
                job.priority,
                Reverse(t.created_ms),
            )
        };
        key(a).cmp(&key(b))
    }

    fn compare_costs(&self, session: &Session, a: &[TaskId], b: &[TaskId]) -> Ordering {
        cost(session.snapshot, a).cmp(&cost(session.snapshot, b))
    }
}

/// Fewest victims, then the lowest highest (pod, job) priority among them, then the youngest
/// oldest victim (the least work lost).
fn cost(snap: &Snapshot, victims: &[TaskId]) -> (usize, (i32, i32), Reverse<i64>) {
    let priority = (victims.iter())
        .map(|&v| (snap.task(v).priority, snap.job(snap.task(v).job).priority))
        .max()
        .unwrap_or((i32::MIN, i32::MIN));
    let oldest = (victims.iter())
        .map(|&v| snap.task(v).created_ms)
        .min()
        .unwrap_or(0);
    (victims.len(), priority, Reverse(oldest))
}

/// Whether the queues of a reclaim victim unit (of `queue`) may give it up, after what the units
/// chosen before it take. Judged at every level the reclaim crosses, from the victim's leaf up
/// to (not including) the ancestor shared with the preemptor's queue: each queue must be
/// reclaimable, keep its guarantee, and be above its deserved share before this eviction in a
/// resource the member lacks and the unit frees. Pods are indivisible, so a queue over by less
/// than one pod still gives one up; the reclaimer, which never ends above its own share in
/// those resources, is then no victim for the queue it took from (no ping-pong).
fn queues_give(session: &Session, preemptor: QueueId, queue: QueueId, unit: &VictimUnit) -> bool {
    let snap = session.snapshot;
    let request = unit.request;
    reclaimed_from(snap, queue, preemptor).into_iter().all(|q| {
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

/// The queues a reclaim from `victim` to `preemptor` moves resources out of: the victim's leaf
/// and its ancestors below the lowest one the two share. Above that, the move is internal.
fn reclaimed_from(snap: &Snapshot, victim: QueueId, preemptor: QueueId) -> Vec<QueueId> {
    ancestors(snap, victim)
        .take_while(|&q| !ancestors(snap, preemptor).any(|p| p == q))
        .collect()
}

//! Who `reclaim` and `preempt` may evict, and who goes first: [`LowerPriorityOverShare`].
//!
//! - Never a pod annotated `preemptable: "false"`, and nothing for a gang with a member of
//!   `preemptionPolicy: Never`.
//! - preempt: pods of jobs of strictly lower priority (of the preemptor's queue, the action's
//!   scope): two jobs of one priority never evict each other, so no ping-pong between them.
//! - reclaim: only by a queue below its deserved share in a resource its pods ask for, from
//!   reclaimable queues above theirs in a resource the member lacks, never below a guarantee;
//!   the reclaimer never ends above its own share in the resources it took victims for (its gain
//!   would be taken back: a ping-pong), and the others it asks for (idle ones) never block it.
//! - The same rules for a gang's minimum and for an elastic job's extra members (whose victims
//!   the engine limits to pods whose gang keeps its minimums: an extra never stops a job).
//! - reclaim takes no unit whose pods started less than `eviction.reclaimMinRuntime` ago
//!   (KAI-Scheduler's `reclaimMinRuntime`; 0 by default: any), so a queue that got the
//!   cluster back keeps it that long.
//! - Order on a node: for reclaim the lowest queue priority first; then the lowest pod
//!   priority, the lowest job priority, the youngest.
//! - Sets, cheapest first: one that takes no victim's queue from above its deserved share to
//!   below it; then the fewest jobs stopped (a shrink before a stop); then the fewest victims;
//!   then the lowest highest (pod, job) priority among them; then the least work lost (the
//!   victims' run times summed: a stopped job counts all its pods).
//! - An eviction that stops a job is worth it only when the preemptor's members placed on the
//!   nodes it frees use at least [`LowerPriorityOverShare::min_used_milli`] / 1000 of what it
//!   frees, in every resource it was for (`eviction.minUsedFraction`, default 0.5): a 1-GPU pod
//!   never ends a gang of 8 GPUs. The engine asks again counting the preemptor's other pending
//!   members that the room left lets start (an elastic job's extras take it next).

use std::cmp::{Ordering, Reverse};

use basalt_engine::snapshot::ancestors;
use basalt_engine::{
    EvictionKind, JobId, NodeId, QueueId, ResourceId, Resources, Session, Snapshot, TaskId,
    TaskStatus, VictimCost, VictimUnit, Victims,
};

pub struct LowerPriorityOverShare {
    /// An eviction that stops a job must be used to at least this many thousandths of what it
    /// frees (see [`Victims::worth_evicting`]).
    pub min_used_milli: u32,
    /// A unit whose pods started less than this long ago is no reclaim victim
    /// (`eviction.reclaimMinRuntime`; 0: any).
    pub reclaim_min_runtime_ms: i64,
}

impl Default for LowerPriorityOverShare {
    fn default() -> Self {
        LowerPriorityOverShare {
            min_used_milli: 500,
            reclaim_min_runtime_ms: 0,
        }
    }
}

impl LowerPriorityOverShare {
    /// Whether the unit has run `reclaim_min_runtime_ms` since its pods began (its latest
    /// start: a member started later has run only that long).
    fn has_run_enough(&self, snap: &Snapshot, unit: &VictimUnit) -> bool {
        let started = (unit.tasks.iter())
            .map(|&t| snap.task(t))
            .map(|t| t.started_ms.unwrap_or(t.created_ms))
            .max()
            .unwrap_or(i64::MIN);
        snap.now_ms.saturating_sub(started) >= self.reclaim_min_runtime_ms
    }
}

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
            // Victims are of strictly lower priority: none runs, no search (exact, and it
            // spares a failed search over every node for each waiting job of a busy queue).
            EvictionKind::Preempt => session
                .lowest_bound_priority(job.queue)
                .is_some_and(|p| p < job.priority),
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
            // Reclaimable queues holding more than they deserve in something the member asks,
            // under ancestors that can give too: the search skips the nodes of a queue whose
            // every unit `queues_give` would refuse.
            EvictionKind::Reclaim => (snap.queues.iter())
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
            EvictionKind::Reclaim => {
                self.has_run_enough(snap, unit)
                    && queues_give(session, preemptor.queue, victim.queue, unit)
            }
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

    fn cost(&self, session: &Session, job: JobId, victims: &[TaskId]) -> VictimCost {
        cost(session, session.snapshot.job(job).queue, victims)
    }

    fn worth_evicting(
        &self,
        session: &Session,
        _: JobId,
        victims: &[TaskId],
        placed: &[TaskId],
        resources: &[ResourceId],
    ) -> bool {
        let snap = session.snapshot;
        // Evicted now: a job stopped holds no node.
        let stops = (victims.iter()).any(|&v| session.holding(snap.task(v).job) == 0);
        if !stops || self.min_used_milli == 0 {
            return true;
        }
        let freed_nodes: Vec<NodeId> = (victims.iter())
            .filter_map(|&v| match session.task_status(v) {
                TaskStatus::Evicted(n) => Some(*n),
                _ => None,
            })
            .collect();
        let used: Vec<TaskId> = (placed.iter().copied())
            .filter(|&t| (session.task_status(t).node()).is_some_and(|n| freed_nodes.contains(&n)))
            .collect();
        let sum = |tasks: &[TaskId], r: ResourceId| -> i128 {
            (tasks.iter())
                .map(|&t| snap.task(t).request.get(r) as i128)
                .sum()
        };
        (resources.iter())
            .all(|&r| sum(&used, r) * 1000 >= sum(victims, r) * self.min_used_milli as i128)
    }
}

/// A set's cost, cheapest first: the victims' queues it takes from above their deserved share
/// to below it, the jobs it stops, its victims, their highest (pod, job) priority, and the work
/// it loses (the victims' run times summed, in milliseconds). Asked with the victims holding
/// their nodes, for every node a search looks at: each job and queue is summed once, at its
/// first victim, and nothing is allocated.
fn cost(session: &Session, preemptor: QueueId, victims: &[TaskId]) -> VictimCost {
    let snap = session.snapshot;
    let queue_of = |v: TaskId| snap.job(snap.task(v).job).queue;
    let mut top = (i32::MIN, i32::MIN);
    let (mut work, mut stops, mut below) = (0i64, 0i64, 0i64);
    for (i, &v) in victims.iter().enumerate() {
        let t = snap.task(v);
        let job = snap.job(t.job);
        top = top.max((t.priority, job.priority));
        let since = t.started_ms.unwrap_or(t.created_ms);
        work = work.saturating_add(snap.now_ms.saturating_sub(since).max(0));
        let (before, from_here) = victims.split_at(i);
        if before.iter().any(|&w| snap.task(w).job == t.job) {
            continue;
        }
        // The job's first victim: the set stops it when it takes every member it holds.
        let taken = (from_here.iter())
            .filter(|&&w| snap.task(w).job == t.job)
            .count();
        stops += (taken as u32 >= session.holding(t.job)) as i64;
        // The queue's first victim (preempt's victims are of the preemptor's queue).
        if job.queue != preemptor && !before.iter().any(|&w| queue_of(w) == job.queue) {
            let (held, deserved) = (
                session.queue_allocated(job.queue),
                session.deserved(job.queue),
            );
            // Only what it holds above its share can be crossed.
            let crosses = |(r, over): (ResourceId, i64)| {
                let taken = (from_here.iter())
                    .filter(|&&w| queue_of(w) == job.queue)
                    .fold(0i64, |n, &w| n.saturating_add(snap.task(w).request.get(r)));
                taken > over
            };
            let mut over = held.iter().filter_map(|(r, h)| {
                let d = deserved.get(r);
                (h > d).then(|| (r, h.saturating_sub(d)))
            });
            below += over.any(crosses) as i64;
        }
    }
    VictimCost([
        below,
        stops,
        victims.len() as i64,
        top.0 as i64,
        top.1 as i64,
        work,
    ])
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
fn may_give(session: &Session, queue: QueueId) -> bool {
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

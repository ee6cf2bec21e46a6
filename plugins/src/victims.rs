//! Who `preempt` and `reclaim` may evict, and who goes first: [`LowerPriority`] for preempt,
//! [`OverShare`] for reclaim. Both price sets of victims and judge a stop alike.
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
//!   nodes it frees use at least `min_used_milli` / 1000 of what it frees, in every resource it
//!   was for (`eviction.minUsedFraction`, default 0.5): a 1-GPU pod never ends a gang of 8
//!   GPUs. The engine asks again counting the preemptor's other pending members that the room
//!   left lets start (an elastic job's extras take it next).

use std::cmp::Reverse;

use basalt_engine::{
    Job, NodeId, QueueId, ResourceId, SessionView, Snapshot, TaskId, TaskStatus, VictimCost,
    VictimUnit,
};

mod preempt;
mod reclaim;

pub use preempt::LowerPriority;
pub use reclaim::OverShare;

/// The default `min_used_milli` (`eviction.minUsedFraction` 0.5).
const MIN_USED_MILLI: u32 = 500;

/// Whether `job` may evict at all: none of its members says `preemptionPolicy: Never`.
fn evicts_for(session: &SessionView, job: &Job) -> bool {
    let snap = session.snapshot;
    !job.tasks.iter().any(|&t| snap.task(t).preemption_never)
}

/// Whether the unit may go at all: none of its pods is annotated `preemptable: "false"`.
fn takes_unit(snap: &Snapshot, unit: &VictimUnit) -> bool {
    !unit.tasks.iter().any(|&t| snap.task(t).non_preemptable)
}

/// The order victims are taken in on a node, lowest first: the queue's priority (when
/// `by_queue`: reclaim), the pod's, the job's, then the youngest.
fn victim_order(snap: &Snapshot, v: TaskId, by_queue: bool) -> (i32, i32, i32, Reverse<i64>) {
    let t = snap.task(v);
    let job = snap.job(t.job);
    let queue_priority = if by_queue {
        snap.queue(job.queue).priority
    } else {
        0
    };
    (
        queue_priority,
        t.priority,
        job.priority,
        Reverse(t.created_ms),
    )
}

/// Whether a simulated eviction is worth committing (see [`basalt_engine::Victims::worth_evicting`]):
/// one that stops no job always is; one that does, when the members `placed` on the nodes it
/// frees use at least `min_used_milli` / 1000 of what it frees in each of `resources`.
fn worth_evicting(
    min_used_milli: u32,
    session: &SessionView,
    victims: &[TaskId],
    placed: &[TaskId],
    resources: &[ResourceId],
) -> bool {
    let snap = session.snapshot;
    // Evicted now: a job stopped holds no node.
    let stops = (victims.iter()).any(|&v| session.holding(snap.task(v).job) == 0);
    if !stops || min_used_milli == 0 {
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
    (resources.iter()).all(|&r| sum(&used, r) * 1000 >= sum(victims, r) * min_used_milli as i128)
}

/// A set's cost, cheapest first: the victims' queues it takes from above their deserved share
/// to below it, the jobs it stops, its victims, their highest (pod, job) priority, and the work
/// it loses (the victims' run times summed, in milliseconds). Asked with the victims holding
/// their nodes, for every node a search looks at: each job and queue is summed once, at its
/// first victim, and nothing is allocated.
fn cost(session: &SessionView, preemptor: QueueId, victims: &[TaskId]) -> VictimCost {
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

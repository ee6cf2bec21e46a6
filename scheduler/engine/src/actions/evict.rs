//! `reclaim` (across queues, back to fair share) and `preempt` (inside a queue, by priority).
//!
//! Both simulate the starving gang's whole placement inside one statement before anything is
//! evicted, and commit only when the gang then fits: its members are nominated to the freed
//! nodes and the victims evicted. Victims are the fewest, lowest-priority, youngest pods on the
//! chosen node; a victim whose gang would fall below its minMember takes its whole gang with
//! it (or is not taken at all, when some member may not be evicted). Pods annotated
//! `preemptable: "false"`, and everything for a preemptor with `preemptionPolicy: Never`, are
//! left alone.

use crate::hash::Set;
use std::cmp::Reverse;

use super::{placement_order, schedulable_jobs};
use crate::model::{Job, JobId, NodeId, QueueId, ShapeId, TaskId};
use crate::resources::{ResourceId, Resources, GPU};
use crate::session::{ReservedNodes, Session, Statement, TaskStatus};
use crate::snapshot::{ancestors, Snapshot};

pub const PREEMPT: &str = "preempt";
pub const RECLAIM: &str = "reclaim";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Reclaim,
    Preempt,
}

/// A queue below its deserved share takes back what other queues borrowed, only in the
/// resources it is short of, never below a victim queue's deserved share or guarantee, and never
/// from a queue that is not reclaimable.
pub fn reclaim(session: &mut Session) {
    run(session, Mode::Reclaim);
}

/// A higher-priority gang displaces lower-priority ones of its own queue.
pub fn preempt(session: &mut Session) {
    run(session, Mode::Preempt);
}

/// Searches that found no victims. Evictions committed later only shrink the pool (their
/// capacity goes to their preemptor), so a failed search stays failed for the action's run.
type Failed = Set<(ShapeId, QueueId, i32)>;

fn run(session: &mut Session, mode: Mode) {
    let fw = session.framework();
    let starving: Vec<&Job> = schedulable_jobs(session)
        .into_iter()
        .filter(|j| !fw.job_ready(session, j.id))
        .collect();
    let mut failed = Failed::default();
    for job in starving {
        if fw.validate_job(session, job.id).is_err() || !may_evict_for(session, job, mode) {
            continue;
        }
        session.release_holds(job.id);
        make_room(session, job, mode, &mut failed);
        session.restore_holds(job.id);
    }
}

/// Cheap checks before any search: the preemptor may evict at all, and (for reclaim) its queue
/// is below its deserved share.
fn may_evict_for(session: &Session, job: &Job, mode: Mode) -> bool {
    let snap = session.snapshot;
    if job.tasks.iter().any(|&t| snap.task(t).preemption_never) {
        return false;
    }
    match mode {
        Mode::Preempt => !session.queue_nodes(job.queue).is_empty(),
        Mode::Reclaim => {
            let q = job.queue;
            let deserved = session.deserved(q);
            let allocated = session.queue_allocated(q);
            // Below its share in some resource its pods ask for.
            job.tasks.iter().any(|&t| {
                snap.task(t)
                    .request
                    .iter()
                    .any(|(r, _)| allocated.get(r) < deserved.get(r))
            })
        }
    }
}

/// Makes room for the job. A gang with a required topology tier picks the domain first: each
/// candidate domain of that tier is tried in a statement, and the one needing the fewest,
/// lowest-priority victims wins; victims are only ever taken inside it.
fn make_room(session: &mut Session, job: &Job, mode: Mode, failed: &mut Failed) {
    let Some(domains) = super::topology::eviction_domains(session, job) else {
        if let Some(stmt) = attempt(session, job, mode, failed, None) {
            session.commit(stmt);
        }
        return;
    };
    let mut best: Option<((usize, i32), Vec<NodeId>)> = None;
    for nodes in domains {
        // A search inside one domain says nothing about the others: its failures stay local.
        let mut local = Failed::default();
        if let Some(stmt) = attempt(session, job, mode, &mut local, Some(&nodes)) {
            let snap = session.snapshot;
            let victims: Vec<TaskId> = stmt.evictions().collect();
            let cost = (
                victims.len(),
                victims
                    .iter()
                    .map(|&v| snap.job(snap.task(v).job).priority)
                    .max()
                    .unwrap_or(i32::MIN),
            );
            session.discard(stmt);
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, nodes));
            }
        }
    }
    if let Some((_, nodes)) = best {
        let mut local = Failed::default();
        if let Some(stmt) = attempt(session, job, mode, &mut local, Some(&nodes)) {
            session.commit(stmt);
        }
    }
}

/// Simulates the job's placement with evictions (inside `within` when given). Returns the
/// statement when it makes the gang ready; otherwise undoes it.
fn attempt(
    session: &mut Session,
    job: &Job,
    mode: Mode,
    failed: &mut Failed,
    within: Option<&[NodeId]>,
) -> Option<Statement> {
    let fw = session.framework();
    let snap = session.snapshot;
    let reason = match mode {
        Mode::Reclaim => RECLAIM,
        Mode::Preempt => PREEMPT,
    };
    let order = placement_order(session, job);
    let mut stmt = session.statement();
    let mut evicted_any = false;
    let mut holding = {
        let c = session.counts(job.id);
        c.running + c.pipelined + c.succeeded
    };
    for (i, &task) in order.iter().enumerate() {
        if fw.job_ready(session, job.id) {
            break;
        }
        // Give up once the members left cannot reach the minimum.
        if holding + ((order.len() - i) as u32) < job.min_member {
            break;
        }
        let t = snap.task(task);
        if fw.admit_task(session, task, &t.request).is_err()
            || (mode == Mode::Reclaim && !within_deserved(session, job, &t.request))
        {
            continue;
        }
        let free = match within {
            None => session.find_node(task),
            Some(nodes) => find_in(session, task, nodes),
        };
        if let Some(node) = free {
            session.pipeline(&mut stmt, task, node);
            holding += 1;
            continue;
        }
        let key = (t.shape, job.queue, job.priority);
        if failed.contains(&key) {
            continue;
        }
        let Some((node, victims)) = best_victims(session, job, task, mode, within) else {
            failed.insert(key);
            continue;
        };
        for v in victims {
            session.evict(&mut stmt, v, reason, job.id);
            evicted_any = true;
        }
        if session.fits(node, &t.request) {
            session.pipeline(&mut stmt, task, node);
            holding += 1;
        }
    }
    if evicted_any && fw.job_ready(session, job.id) {
        Some(stmt)
    } else {
        session.discard(stmt);
        None
    }
}

/// The best node among `nodes` with room for the task now.
fn find_in(session: &mut Session, task: TaskId, nodes: &[NodeId]) -> Option<NodeId> {
    let access = ReservedNodes::Avoid(session.snapshot.task(task).job);
    let request = &session.snapshot.task(task).request;
    let mut best: Option<(u64, NodeId)> = None;
    for &n in nodes {
        if session.can_take(task, n, access, None) {
            let cand = (session.key_with(n, request), n);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
    }
    best.map(|(_, n)| n)
}

/// Reclaim brings a queue back up to its deserved share, not beyond.
fn within_deserved(session: &Session, job: &Job, request: &Resources) -> bool {
    let deserved = session.deserved(job.queue);
    let allocated = session.queue_allocated(job.queue);
    request.fits_on(allocated, deserved)
}

/// Queues the job may take pods from: its own (preempt), or the reclaimable queues holding more
/// than they deserve in some resource the task asks for (reclaim).
fn victim_queues(session: &Session, job: &Job, request: &Resources, mode: Mode) -> Vec<QueueId> {
    let snap = session.snapshot;
    match mode {
        Mode::Preempt => vec![job.queue],
        Mode::Reclaim => snap
            .queues
            .iter()
            .filter(|q| q.id != job.queue && q.reclaimable && !session.queue_nodes(q.id).is_empty())
            .filter(|q| {
                let allocated = session.queue_allocated(q.id);
                let deserved = session.deserved(q.id);
                request
                    .iter()
                    .any(|(r, _)| allocated.get(r) > deserved.get(r))
            })
            .map(|q| q.id)
            .collect(),
    }
}

/// Fewest victims, then the lowest highest priority among them, then the youngest.
type Cost = (usize, i32, Reverse<i64>);

/// The node needing the fewest, lowest-priority, youngest victims for `task`, and the victims
/// (whole gangs where a single eviction would break one). Only nodes hosting pods of the
/// victim queues are searched, not the whole cluster.
fn best_victims(
    session: &mut Session,
    job: &Job,
    task: TaskId,
    mode: Mode,
    within: Option<&[NodeId]>,
) -> Option<(NodeId, Vec<TaskId>)> {
    let snap = session.snapshot;
    let request = snap.task(task).request.clone();
    let queues = victim_queues(session, job, &request, mode);
    let mut nodes: Vec<NodeId> = queues
        .iter()
        .flat_map(|&q| session.queue_nodes(q).iter().copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    if let Some(within) = within {
        nodes.retain(|n| within.binary_search(n).is_ok());
    }
    let mut best: Option<(Cost, NodeId, Vec<TaskId>)> = None;
    for node in nodes {
        if !session.may_use(node, ReservedNodes::Avoid(job.id))
            || !session.passes_filters(task, node)
            || !request.fits_in(&snap.node(node).allocatable)
        {
            continue;
        }
        let Some(victims) = victims_on(session, job, node, &request, mode) else {
            continue;
        };
        let max_priority = victims
            .iter()
            .map(|&v| snap.job(snap.task(v).job).priority)
            .max()
            .unwrap_or(i32::MIN);
        // Prefer the set whose oldest victim is youngest: the least work lost.
        let oldest = victims
            .iter()
            .map(|&v| snap.task(v).created_ms)
            .min()
            .unwrap_or(0);
        let cost = (victims.len(), max_priority, Reverse(oldest));
        if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
            best = Some((cost, node, victims));
        }
    }
    best.map(|(_, node, victims)| (node, victims))
}

/// Victims on `node`, taken in order until the request fits (whole GPUs counted per device),
/// each with the gang mates it drags along. Every check counts what the victims already chosen
/// take from their queues. `None` when the node cannot be freed enough; a node with room
/// already needs no victims, and `find_node` has turned it down, so it is skipped too.
fn victims_on(
    session: &Session,
    job: &Job,
    node: NodeId,
    request: &Resources,
    mode: Mode,
) -> Option<Vec<TaskId>> {
    let snap = session.snapshot;
    let mut free = session.free(node);
    let mut free_gpus = session.free_gpus(node) as i64;
    let want_gpus = request.get(GPU);
    let fits = |free: &Resources, free_gpus: i64| request.fits_in(free) && free_gpus >= want_gpus;
    if fits(&free, free_gpus) {
        return None;
    }
    let short: Vec<ResourceId> = request.shortfall(&free).collect();
    let mut candidates: Vec<TaskId> = session
        .node_tasks(node)
        .iter()
        .copied()
        // Only pods that free something the node is short of.
        .filter(|&v| {
            matches!(session.task_status(v), TaskStatus::Bound(_))
                && short.iter().any(|&r| snap.task(v).request.get(r) > 0)
        })
        .collect();
    // Lowest priority (their queue's first, for reclaim), then youngest, then name.
    candidates.sort_by_key(|&v| {
        let t = snap.task(v);
        let vjob = snap.job(t.job);
        (
            snap.queue(vjob.queue).priority,
            vjob.priority,
            Reverse(t.created_ms),
            v,
        )
    });
    let mut tally = Tally::default();
    let mut chosen: Vec<TaskId> = Vec::new();
    for v in candidates {
        if fits(&free, free_gpus) {
            break;
        }
        if tally.has(v) {
            continue;
        }
        let Some(unit) = unit_of(session, job, v, &short, mode, &tally) else {
            continue;
        };
        for m in unit {
            let t = snap.task(m);
            if session.task_status(m).node() == Some(node) {
                free.add(&t.request);
                free_gpus += t.gpus.count_ones() as i64;
            }
            tally.take(session, m);
            chosen.push(m);
        }
    }
    (fits(&free, free_gpus) && !chosen.is_empty()).then_some(chosen)
}

/// What the victims chosen so far on one node take: from their queues (each leaf and every
/// ancestor) and their gangs.
/// A handful of entries: plain vectors beat hashing here.
#[derive(Default)]
struct Tally {
    taken: Vec<TaskId>,
    from_queue: Vec<(QueueId, Resources)>,
    from_job: Vec<(JobId, u32)>,
}

impl Tally {
    fn take(&mut self, session: &Session, task: TaskId) {
        let snap = session.snapshot;
        let t = snap.task(task);
        self.taken.push(task);
        match self.from_job.iter_mut().find(|(j, _)| *j == t.job) {
            Some((_, n)) => *n += 1,
            None => self.from_job.push((t.job, 1)),
        }
        add_to_queues(snap, &mut self.from_queue, t.job, &t.request);
    }

    fn has(&self, task: TaskId) -> bool {
        self.taken.contains(&task)
    }

    fn taken_from_job(&self, job: JobId) -> u32 {
        self.from_job
            .iter()
            .find(|(j, _)| *j == job)
            .map_or(0, |(_, n)| *n)
    }

    fn taken_from_queue(&self, queue: QueueId) -> Option<&Resources> {
        self.from_queue
            .iter()
            .find(|(q, _)| *q == queue)
            .map(|(_, r)| r)
    }
}

/// The victim alone while its gang keeps minMember, else its whole gang (every bound member
/// not yet taken); `None` when any of them may not be evicted.
fn unit_of(
    session: &Session,
    job: &Job,
    victim: TaskId,
    short: &[ResourceId],
    mode: Mode,
    tally: &Tally,
) -> Option<Vec<TaskId>> {
    let snap = session.snapshot;
    let vjob = snap.job(snap.task(victim).job);
    let already = tally.taken_from_job(vjob.id);
    let unit: Vec<TaskId> = if session.holding(vjob.id).saturating_sub(already + 1)
        >= vjob.min_member
    {
        vec![victim]
    } else {
        vjob.tasks
            .iter()
            .copied()
            .filter(|&m| matches!(session.task_status(m), TaskStatus::Bound(_)) && !tally.has(m))
            .collect()
    };
    // Judge the unit as a whole against its queues: what was taken plus what the unit takes.
    let mut unit_takes: Vec<(QueueId, Resources)> = Vec::new();
    for &m in &unit {
        let taken = |q: QueueId| {
            let before = unit_takes.iter().find(|(x, _)| *x == q).map(|(_, r)| r);
            [tally.taken_from_queue(q), before]
        };
        if !eligible(session, job, m, short, mode, taken) {
            return None;
        }
        let t = snap.task(m);
        add_to_queues(snap, &mut unit_takes, t.job, &t.request);
    }
    Some(unit)
}

/// Adds `request` to the entries of `job`'s queue and every ancestor of it.
fn add_to_queues(
    snap: &Snapshot,
    taken: &mut Vec<(QueueId, Resources)>,
    job: JobId,
    request: &Resources,
) {
    for q in ancestors(snap, snap.job(job).queue) {
        match taken.iter_mut().find(|(x, _)| *x == q) {
            Some((_, r)) => r.add(request),
            None => taken.push((q, request.clone())),
        }
    }
}

/// The queues a reclaim from `victim` to `preemptor` moves resources out of: the victim's leaf
/// and its ancestors below the lowest one the two share. Above that, the move is internal.
fn reclaimed_from(snap: &Snapshot, victim: QueueId, preemptor: QueueId) -> Vec<QueueId> {
    ancestors(snap, victim)
        .take_while(|&q| !ancestors(snap, preemptor).any(|p| p == q))
        .collect()
}

/// Whether `victim` may be evicted for `job`, given what the victims chosen before it take
/// from each queue (`taken`). `short` names the resources the node lacks for the preemptor's
/// task. A reclaim is judged at every level it crosses: each queue it takes from, from the
/// victim's leaf up to (not including) the ancestor shared with the preemptor, must be
/// reclaimable and keep its guarantee and its deserved share.
fn eligible<'a>(
    session: &'a Session,
    job: &Job,
    victim: TaskId,
    short: &[ResourceId],
    mode: Mode,
    taken: impl Fn(QueueId) -> [Option<&'a Resources>; 2],
) -> bool {
    let snap = session.snapshot;
    let v = snap.task(victim);
    // A gang this cycle is starting is no victim: evicting part of it would leave it broken.
    if v.non_preemptable || v.job == job.id || session.placed_now(v.job) {
        return false;
    }
    let vjob = snap.job(v.job);
    match mode {
        Mode::Preempt => vjob.queue == job.queue && vjob.priority < job.priority,
        Mode::Reclaim => {
            if vjob.queue == job.queue {
                return false;
            }
            reclaimed_from(snap, vjob.queue, job.queue)
                .into_iter()
                .all(|q| {
                    let queue = snap.queue(q);
                    let allocated = session.queue_allocated(q);
                    let before = taken(q);
                    // What the queue keeps of `r` once this victim and those before it are gone.
                    let left = |r: ResourceId| {
                        let gone = (before.iter().flatten())
                            .fold(v.request.get(r), |sum, t| sum.saturating_add(t.get(r)));
                        allocated.get(r).saturating_sub(gone)
                    };
                    // Never below a guarantee, in any resource the victim holds; and only what
                    // the queue borrowed, in the resources the node is short of.
                    let deserved = session.deserved(q);
                    queue.reclaimable
                        && queue
                            .guarantee
                            .iter()
                            .all(|(r, g)| v.request.get(r) == 0 || left(r) >= g)
                        && short
                            .iter()
                            .filter(|&&r| v.request.get(r) > 0)
                            .all(|&r| left(r) >= deserved.get(r))
                })
        }
    }
}

//! `reclaim` (across queues, back to fair share) and `preempt` (inside a queue, by priority).
//!
//! Both simulate the starving gang's whole placement inside one statement before anything is
//! evicted, and commit only when the gang then fits: its members are nominated to the freed
//! nodes and the victims evicted. Each member that finds no room takes its victims on one node
//! (the search is in [`super::victims`]). A victim whose gang would fall below any minimum
//! (minMember, a role's minTaskMember) takes its whole gang with it, or is not taken at all
//! when some member may not be evicted. Pods annotated `preemptable: "false"`, and everything
//! for a preemptor with `preemptionPolicy: Never`, are left alone.
//!
//! - preempt: victims are lower-priority jobs of the preemptor's queue; in a queue at its
//!   capability they are taken until the node fits and the queue's capability holds.
//! - reclaim: victims are of reclaimable queues above their deserved share (before the
//!   eviction) in a resource the member lacks; the reclaimer never ends above its own deserved
//!   share in those resources, and the others it asks for (idle ones) never block it.

use super::victims::{best_victims, cost_of, Cost, Goal, Victims};
use super::{placement_order, schedulable_jobs};
use crate::hash::Set;
use crate::model::{Job, NodeId, QueueId, ShapeId, TaskId};
use crate::resources::ResourceId;
use crate::session::{ReservedNodes, Session, Statement};

pub const PREEMPT: &str = "preempt";
pub const RECLAIM: &str = "reclaim";

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Reclaim,
    Preempt,
}

/// A queue below its deserved share takes back what other queues borrowed: only from
/// reclaimable queues above their deserved share in a resource it lacks, never below a
/// guarantee, and never ending above its own share in the resources it lacks.
pub fn reclaim(session: &mut Session) {
    run(session, Mode::Reclaim);
}

/// A higher-priority gang displaces lower-priority ones of its own queue (also when the queue
/// is at its capability).
pub fn preempt(session: &mut Session) {
    run(session, Mode::Preempt);
}

/// Searches that found no victims. Evictions committed later only shrink the pool (their
/// capacity goes to their preemptor), so a failed search stays failed for the action's run.
/// Keyed by shape, queue, job priority and whether the task was admitted without victims.
type Failed = Set<(ShapeId, QueueId, i32, bool)>;

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
    let mut best: Option<(Cost, Vec<NodeId>)> = None;
    for nodes in domains {
        // A search inside one domain says nothing about the others: its failures stay local.
        let mut local = Failed::default();
        if let Some(stmt) = attempt(session, job, mode, &mut local, Some(&nodes)) {
            let snap = session.snapshot;
            let victims: Vec<TaskId> = stmt.evictions().collect();
            let cost = cost_of(snap, &victims);
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
    // The resources victims were taken for.
    let mut reclaimed: Vec<ResourceId> = Vec::new();
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
        // A queue at its capability may still preempt inside itself: the victims it evicts give
        // back what the preemptor adds. Reclaim takes from other queues, which never helps.
        let admitted = fw.admit_task(session, task, &t.request).is_ok();
        if !admitted && mode == Mode::Reclaim {
            continue;
        }
        if admitted {
            let free = match within {
                None => session.find_node(task),
                Some(nodes) => find_in(session, task, nodes),
            };
            if let Some(node) = free {
                session.pipeline(&mut stmt, task, node);
                holding += 1;
                continue;
            }
        }
        let key = (t.shape, job.queue, job.priority, admitted);
        if failed.contains(&key) {
            continue;
        }
        let goal = Goal {
            task,
            request: &t.request,
            needs_admission: !admitted,
        };
        let Some(Victims { node, tasks, short }) = best_victims(session, job, &goal, mode, within)
        else {
            failed.insert(key);
            continue;
        };
        reclaimed.extend(short);
        for v in tasks {
            session.evict(&mut stmt, v, reason, job.id);
            evicted_any = true;
        }
        // Its inter-pod rules are checked after the evictions: a victim may have been what
        // repelled it, or what it needed nearby.
        if session.fits(node, &t.request)
            && session.has_devices(task, node, None)
            && session.pod_rules_allow(task, node)
            && fw.admit_task(session, task, &t.request).is_ok()
        {
            session.pipeline(&mut stmt, task, node);
            holding += 1;
        }
    }
    if evicted_any
        && fw.job_ready(session, job.id)
        && !ends_above_share(session, job, mode, &reclaimed)
    {
        Some(stmt)
    } else {
        session.discard(stmt);
        None
    }
}

/// Whether a reclaimer ends above its deserved share in a resource it took victims for, counting
/// its members placed on free capacity too (capacity the victims freed is not idle); such a
/// reclaim would be taken back, a ping-pong.
fn ends_above_share(session: &Session, job: &Job, mode: Mode, reclaimed: &[ResourceId]) -> bool {
    let (allocated, deserved) = (
        session.queue_allocated(job.queue),
        session.deserved(job.queue),
    );
    mode == Mode::Reclaim
        && reclaimed
            .iter()
            .any(|&r| allocated.get(r) > deserved.get(r))
}

/// The best node among `nodes` with room for the task now (node order and preferences).
fn find_in(session: &mut Session, task: TaskId, nodes: &[NodeId]) -> Option<NodeId> {
    let access = ReservedNodes::Avoid(session.snapshot.task(task).job);
    let request = &session.snapshot.task(task).request;
    let preferences = session.preferences(task);
    let mut best: Option<(i128, NodeId)> = None;
    for &n in nodes {
        if session.can_take(task, n, access, None) {
            let cand = (
                session.placement_score(task, n, request, preferences.as_ref()),
                n,
            );
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
    }
    best.map(|(_, n)| n)
}

//! `reclaim` (across queues, back to fair share) and `preempt` (inside a queue, by priority).
//!
//! Both simulate the starving gang's whole placement inside one statement before anything is
//! evicted, and commit only when the gang then fits: its members are nominated to the freed
//! nodes and the victims evicted. Victims are the fewest, lowest-priority, youngest pods on the
//! chosen node; a victim whose gang would fall below its minMember takes its whole gang with
//! it (or is not taken at all, when some member may not be evicted). Pods annotated
//! `preemptable: "false"`, and everything for a preemptor with `preemptionPolicy: Never`, are
//! left alone.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};

use super::{placement_order, schedulable_jobs};
use crate::model::{Job, JobId, NodeId, TaskId};
use crate::resources::{ResourceId, Resources, GPU};
use crate::session::{ReservedNodes, Session, TaskStatus};

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

fn run(session: &mut Session, mode: Mode) {
    let fw = session.framework();
    let starving: Vec<&Job> = schedulable_jobs(session)
        .into_iter()
        .filter(|j| !fw.job_ready(session, j.id))
        .collect();
    for job in starving {
        if fw.validate_job(session, job.id).is_err() || !may_evict_for(session, job, mode) {
            continue;
        }
        make_room(session, job, mode);
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
        Mode::Preempt => true,
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

fn make_room(session: &mut Session, job: &Job, mode: Mode) {
    let fw = session.framework();
    let snap = session.snapshot;
    let reason = match mode {
        Mode::Reclaim => RECLAIM,
        Mode::Preempt => PREEMPT,
    };
    let mut stmt = session.statement();
    let mut evicted_any = false;
    for task in placement_order(session, job) {
        if fw.job_ready(session, job.id) {
            break;
        }
        let request = &snap.task(task).request;
        if fw.admit_task(session, task, request).is_err() {
            continue;
        }
        if mode == Mode::Reclaim && !within_deserved(session, job, request) {
            continue;
        }
        if let Ok(node) = session.find_node(task) {
            session.pipeline(&mut stmt, task, node);
            continue;
        }
        let Some((node, victims)) = best_victims(session, job, task, mode) else {
            continue;
        };
        for v in victims {
            session.evict(&mut stmt, v, reason, job.id);
            evicted_any = true;
        }
        if session.fits(node, request) {
            session.pipeline(&mut stmt, task, node);
        }
    }
    if evicted_any && fw.job_ready(session, job.id) {
        session.commit(stmt);
    } else {
        session.discard(stmt);
    }
}

/// Reclaim brings a queue back up to its deserved share, not beyond.
fn within_deserved(session: &Session, job: &Job, request: &Resources) -> bool {
    let deserved = session.deserved(job.queue);
    let allocated = session.queue_allocated(job.queue);
    request
        .iter()
        .all(|(r, v)| allocated.get(r) + v <= deserved.get(r))
}

/// Fewest victims, then the lowest highest priority among them, then the youngest.
type Cost = (usize, i32, Reverse<i64>);

/// The node needing the fewest, lowest-priority, youngest victims for `task`, and the victims
/// (whole gangs where a single eviction would break one).
fn best_victims(
    session: &mut Session,
    job: &Job,
    task: TaskId,
    mode: Mode,
) -> Option<(NodeId, Vec<TaskId>)> {
    let snap = session.snapshot;
    let request = snap.task(task).request.clone();
    let mut best: Option<(Cost, NodeId, Vec<TaskId>)> = None;
    for node in session.feasible_nodes(task) {
        let usable = session.may_use(node, ReservedNodes::Avoid(job.id));
        if !usable || !request.fits_in(&snap.node(node).allocatable) {
            continue;
        }
        let free = session.free(node);
        let short: Vec<ResourceId> = request.shortfall(&free).collect();
        let mut candidates: Vec<TaskId> = session
            .node_tasks(node)
            .iter()
            .copied()
            .filter(|&v| eligible(session, job, v, &short, mode))
            .collect();
        // Lowest priority (their queue's first, for reclaim), then youngest, then name.
        candidates.sort_by_key(|&v| {
            let t = snap.task(v);
            let queue_priority = snap.queue(snap.job(t.job).queue).priority;
            (
                queue_priority,
                snap.job(t.job).priority,
                Reverse(t.created_ms),
                v,
            )
        });
        // A node with room needs no victims; `find_node` already turned it down.
        let Some(victims) = enough(session, node, &request, &candidates).filter(|v| !v.is_empty())
        else {
            continue;
        };
        let Some(victims) = with_gangs(session, job, victims, mode) else {
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

/// Victims taken in order until the request fits on the node (whole GPUs counted per device).
fn enough(
    session: &Session,
    node: NodeId,
    request: &Resources,
    candidates: &[TaskId],
) -> Option<Vec<TaskId>> {
    let snap = session.snapshot;
    let mut free = session.free(node);
    let mut free_gpus = session.free_gpus(node) as i64;
    let want_gpus = request.get(GPU);
    let mut taken = Vec::new();
    for &v in candidates {
        if request.fits_in(&free) && free_gpus >= want_gpus {
            break;
        }
        let t = snap.task(v);
        free.add(&t.request);
        free_gpus += t.gpu_ids.len() as i64;
        taken.push(v);
    }
    (request.fits_in(&free) && free_gpus >= want_gpus).then_some(taken)
}

/// A victim may go alone while its gang keeps its minMember; otherwise its whole gang goes,
/// which every member must allow.
fn with_gangs(
    session: &Session,
    job: &Job,
    victims: Vec<TaskId>,
    mode: Mode,
) -> Option<Vec<TaskId>> {
    let snap = session.snapshot;
    let mut taken: BTreeMap<JobId, u32> = BTreeMap::new();
    for &v in &victims {
        *taken.entry(snap.task(v).job).or_default() += 1;
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for v in victims {
        if seen.insert(v) {
            out.push(v);
        }
        let vjob = snap.job(snap.task(v).job);
        if session.holding(vjob.id).saturating_sub(taken[&vjob.id]) >= vjob.min_member {
            continue;
        }
        for &m in &vjob.tasks {
            if !matches!(session.task_status(m), TaskStatus::Bound(_)) || seen.contains(&m) {
                continue;
            }
            if !eligible(session, job, m, &[], mode) {
                return None;
            }
            seen.insert(m);
            out.push(m);
        }
    }
    Some(out)
}

/// Whether `victim` may be evicted for `job`. `short` names the resources the node lacks for
/// the task; empty means "any" (a gang member dragged along with its gang).
fn eligible(
    session: &Session,
    job: &Job,
    victim: TaskId,
    short: &[ResourceId],
    mode: Mode,
) -> bool {
    let snap = session.snapshot;
    let v = snap.task(victim);
    if !matches!(session.task_status(victim), TaskStatus::Bound(_))
        || v.non_preemptable
        || v.job == job.id
    {
        return false;
    }
    let vjob = snap.job(v.job);
    match mode {
        Mode::Preempt => vjob.queue == job.queue && vjob.priority < job.priority,
        Mode::Reclaim => {
            let vq = snap.queue(vjob.queue);
            if vjob.queue == job.queue || !vq.reclaimable {
                return false;
            }
            let allocated = session.queue_allocated(vjob.queue);
            let deserved = session.deserved(vjob.queue);
            // Never below a guarantee, in any resource.
            if vq
                .guarantee
                .iter()
                .any(|(r, g)| v.request.get(r) > 0 && allocated.get(r) - v.request.get(r) < g)
            {
                return false;
            }
            // Only what the victim's queue borrowed, in the resources that are short.
            let relevant: Vec<ResourceId> = if short.is_empty() {
                v.request.iter().map(|(r, _)| r).collect()
            } else {
                short.to_vec()
            };
            relevant.iter().any(|&r| v.request.get(r) > 0)
                && relevant
                    .iter()
                    .filter(|&&r| v.request.get(r) > 0)
                    .all(|&r| allocated.get(r) - v.request.get(r) >= deserved.get(r))
        }
    }
}

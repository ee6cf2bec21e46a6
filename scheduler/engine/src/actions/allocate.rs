//! `allocate`: gangs placed queue by queue, in fair-share order, each in its own statement; and
//! the reservations that keep big gangs from starving behind a stream of small jobs.

use std::collections::{BTreeMap, VecDeque};

use crate::hash::Map;

use super::unplaced::{GangFailure, MemberFailure, ShortWhy};
use super::{placement_order, queue_refuses, schedulable_jobs, JobCondition};
use crate::model::{Job, JobId, NodeId, QueueId, TaskId};
use crate::queue_order::ServiceOrder;
use crate::resources::Resources;
use crate::session::{ReservedNodes, Session};

/// Which pass of `allocate` is running.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Every queue up to its deserved share first, so one queue's long backlog cannot take
    /// capacity that another queue deserves in the same cycle.
    WithinDeserved,
    /// Then idle capacity is lent to whoever still has work (work-conserving), up to
    /// capability. Only this pass reports why pods stay pending.
    Lend,
}

/// How much of a job one visit places.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extent {
    /// Only what the gang needs to be ready (its minimums): every job's minimum is served
    /// before any job's extras, as KAI does for elastic jobs.
    Minimum,
    /// The members beyond it (an elastic job's extras), once every minimum had its turn.
    Extras,
}

/// Places jobs gang by gang: gangs left partly bound first, then two passes (see [`Pass`]),
/// each in two rounds: first every job's minimum, then every ready job's extra members (see
/// [`Extent`]). Sibling queues are served in the framework's queue order (`QueueOrder`, down
/// the tree; the default plugin's is priority, then lowest dominant share); jobs inside a
/// queue by the configured job order. Each job is tried in its own statement, committed only
/// when the job is ready (its minimum is met) and discarded otherwise.
pub fn allocate(session: &mut Session) {
    super::note_timed_out(session);
    let jobs = schedulable_jobs(session);
    let starts = reserve_for_starving(session, &jobs);
    // Gangs left partly bound (some binds failed, or members were lost) hold capacity that does
    // nothing until they are whole again: they are completed first, before any queue order.
    let partial: Vec<&Job> = jobs
        .iter()
        .copied()
        .filter(|j| {
            let holding = session.holding(j.id);
            holding > 0 && holding < j.min_member
        })
        .collect();
    // Why a gang's minimum waits is its explanation's to say, once the cycle is done (see
    // `Session::explain_waiting`): with explanations on, no member's search words it.
    let explains = session.explains();
    session.set_quiet(explains);
    for job in partial {
        if session.framework().validate_job(session, job.id).is_ok() {
            let access = backfill_access(session, job, &starts);
            session.note_served(job.id);
            session.release_holds(job.id);
            allocate_job(session, job.id, access, Pass::Lend, Extent::Minimum);
            session.restore_holds(job.id);
        }
    }
    for pass in [Pass::WithinDeserved, Pass::Lend] {
        for extent in [Extent::Minimum, Extent::Extras] {
            // Only the second pass reports why pods wait: the first need not word it.
            let quiet = pass != Pass::Lend || (explains && extent == Extent::Minimum);
            session.set_quiet(quiet);
            let fw = session.framework();
            // A job short of its minimum takes part in the first round, a ready one with
            // members left in the second.
            let round: Vec<&Job> = (jobs.iter().copied())
                .filter(|j| {
                    super::has_pending(session, j)
                        && fw.job_ready(session, j.id) == (extent == Extent::Extras)
                })
                .collect();
            serve(session, &round, &starts, pass, extent);
        }
    }
    // A reservation whose gang the quota no longer admits (work ahead of it in its queue took
    // the room) nominates nothing: its members would not start there.
    for &job in starts.keys() {
        if !quota_admits(session, snap_job(session, job)) {
            session.drop_nominations(job);
        }
    }
}

fn serve(session: &mut Session, jobs: &[&Job], starts: &Starts, pass: Pass, extent: Extent) {
    let fw = session.framework();
    let mut per_queue: BTreeMap<QueueId, VecDeque<&Job>> = BTreeMap::new();
    for &job in jobs {
        per_queue.entry(job.queue).or_default().push_back(job);
    }
    let mut order = ServiceOrder::new(session, &*fw.queue_order, per_queue.keys().copied());
    while let Some(queue) = order.next() {
        let jobs = per_queue.get_mut(&queue).expect("ordered queues have jobs");
        let job = jobs.pop_front().expect("ordered queues have jobs");
        if jobs.is_empty() {
            order.remove(session, queue);
        }
        session.note_served(job.id);
        let refused = if session.holding(job.id) == 0 {
            queue_refuses(session, job)
        } else {
            None
        };
        let invalid = || {
            fw.validate_job(session, job.id)
                .err()
                .map(JobCondition::Refused)
        };
        if let Some(c) = refused.or_else(invalid) {
            if pass == Pass::Lend {
                session.add_condition(job.id, c);
            }
            continue;
        }
        let access = backfill_access(session, job, starts);
        session.release_holds(job.id);
        allocate_job(session, job.id, access, pass, extent);
        session.restore_holds(job.id);
        order.refresh(session, queue);
    }
}

/// Whether a queue and its ancestors stay within their deserved shares with `request` added.
fn within_deserved(session: &Session, job: &Job, request: &Resources) -> bool {
    crate::snapshot::ancestors(session.snapshot, job.queue).all(|q| {
        let allocated = session.queue_allocated(q);
        let deserved = session.deserved(q);
        request.fits_on(allocated, deserved)
    })
}

fn snap_job<'s>(session: &Session<'s>, job: JobId) -> &'s Job {
    session.snapshot.job(job)
}

/// Whether the job's queue (and its ancestors) would take the members it still needs.
fn quota_admits(session: &Session, job: &Job) -> bool {
    let snap = session.snapshot;
    let need = job.min_member.saturating_sub(session.holding(job.id)) as usize;
    let order = placement_order(session, job);
    let mut total = Resources::zero(snap.resources.len());
    for &t in order.iter().take(need) {
        total.add(&snap.task(t).request);
    }
    order.first().is_some_and(|&first| {
        session
            .framework()
            .admit_task(session, first, &total)
            .is_ok()
    })
}

fn allocate_job(
    session: &mut Session,
    job_id: JobId,
    access: ReservedNodes,
    pass: Pass,
    extent: Extent,
) {
    let snap = session.snapshot;
    let fw = session.framework();
    let job = snap.job(job_id);
    let order = placement_order(session, job);
    // Members that may not be placed wait, and say why, whatever happens to the others.
    if pass == Pass::Lend && super::has_held(snap, job_id) {
        session.add_condition(job_id, JobCondition::Held);
    }
    // The one check of the job's side: its queue's say, and in the first pass its share.
    let admissible = |session: &Session, task: TaskId| -> Result<(), MemberFailure> {
        let request = &session.snapshot.task(task).request;
        fw.admit_task(session, task, request)
            .map_err(MemberFailure::Queue)?;
        if pass == Pass::WithinDeserved && !within_deserved(session, job, request) {
            return Err(MemberFailure::AtDeservedShare);
        }
        Ok(())
    };
    if let Some(outcome) = super::topology::place(session, job, access, &admissible) {
        match outcome {
            Ok(stmt) => session.commit(stmt),
            Err(GangFailure::Short { .. }) if pass == Pass::Lend && session.explains() => {
                session.note_short(job_id)
            }
            Err(failure) if pass == Pass::Lend => {
                session.add_condition(job_id, JobCondition::Unplaced(failure))
            }
            Err(_) => {}
        }
        return;
    }
    let before = session.counts(job_id);
    let mut holding = before.running + before.pipelined + before.succeeded;
    let mut failure: Option<MemberFailure> = None;
    let mut stmt = session.statement();
    for (i, &task) in order.iter().enumerate() {
        let placed = admissible(session, task).and_then(|()| {
            (session.find_node_with(task, access))
                .ok_or_else(|| MemberFailure::NoNode(session.why_no_node(task, access)))
        });
        match placed {
            Ok(node) => {
                session.allocate(&mut stmt, task, node);
                holding += 1;
                // Its minimum met, the job's extras wait for every other job's minimum.
                if extent == Extent::Minimum
                    && holding >= job.min_member
                    && fw.job_ready(session, job_id)
                {
                    break;
                }
            }
            Err(message) => {
                failure.get_or_insert(message);
                // Give up early once the members left cannot reach the minimum.
                let left = (order.len() - i - 1) as u32;
                if holding + left < job.min_member {
                    break;
                }
            }
        }
    }
    let placed = stmt.len() as u32;
    let ready = fw.job_ready(session, job_id);
    if ready && placed > 0 {
        session.commit(stmt);
    } else {
        session.discard(stmt);
    }
    let unplaced = if ready {
        // The gang runs; only extra members are left waiting, and say why in their own round.
        failure
            .filter(|_| extent == Extent::Extras)
            .map(GangFailure::Extras)
    } else if session.explains() {
        if pass == Pass::Lend {
            session.note_short(job_id);
        }
        None
    } else {
        Some(GangFailure::Short {
            placed: holding,
            min: job.min_member,
            why: failure.map_or(ShortWhy::RoleMinimums, ShortWhy::Member),
        })
    };
    if let Some(failure) = unplaced.filter(|_| pass == Pass::Lend) {
        session.add_condition(job_id, JobCondition::Unplaced(failure));
    }
}

/// When each reserving job expects to start (milliseconds; `i64::MAX` when the running pods on
/// its nodes state no deadline).
type Starts = Map<JobId, i64>;

/// Work may use nodes reserved for a starving gang when it is sure to be gone before that gang
/// could start: every pending member states an `activeDeadlineSeconds` that ends in time.
fn backfill_access(session: &Session, job: &Job, starts: &Starts) -> ReservedNodes {
    if starts.is_empty() {
        return ReservedNodes::Avoid(job.id);
    }
    let snap = session.snapshot;
    let earliest = starts
        .iter()
        .filter(|(&j, _)| j != job.id)
        .map(|(_, &s)| s)
        .min()
        .unwrap_or(i64::MAX);
    let ends = placement_order(session, job)
        .iter()
        .map(|&t| {
            snap.task(t)
                .active_deadline_s
                .map(|d| snap.now_ms.saturating_add(d.saturating_mul(1000)))
        })
        .try_fold(i64::MIN, |acc, end| end.map(|e| acc.max(e)));
    match ends {
        Some(end) if end <= earliest => ReservedNodes::Use,
        _ => ReservedNodes::Avoid(job.id),
    }
}

/// Starvation-free backfill: every job that has waited longer than the configured threshold
/// and cannot start now reserves the nodes it will start on, the ones whose running pods free
/// enough room soonest. Reservations are disjoint; the reserving jobs' members are nominated
/// to those nodes.
fn reserve_for_starving(session: &mut Session, jobs: &[&Job]) -> Starts {
    let mut starts = Starts::default();
    let fw = session.framework();
    let now = session.snapshot.now_ms;
    for job in jobs {
        if !fw.waited_to_reserve(job, now)
            || session.holding(job.id) >= job.min_member
            || queue_refuses(session, job).is_some()
            || session.framework().validate_job(session, job.id).is_err()
        {
            continue;
        }
        if let Some((nodes, start)) = plan_reservation(session, job) {
            for (task, node) in nodes {
                session.reserve_node(node, job.id);
                session.nominate(task, node);
            }
            starts.insert(job.id, start);
        }
    }
    starts
}

/// Picks, for each member the gang still needs, the node where it could run soonest once the
/// pods there end (by their deadlines; never, without one). Returns the assignments and the
/// time the last of them frees up, or `None` when some member has no node at all.
fn plan_reservation(
    session: &mut Session,
    job: &Job,
) -> Option<(Vec<(crate::model::TaskId, NodeId)>, i64)> {
    let snap = session.snapshot;
    let need = job.min_member.saturating_sub(session.holding(job.id)) as usize;
    let order = placement_order(session, job);
    // A gang held back by its quota, not by node capacity, has nothing to reserve.
    if !quota_admits(session, job) {
        return None;
    }
    // Room each node will have once its pods end, minus what this reservation already took.
    let mut claimed: Map<NodeId, Resources> = Map::default();
    let mut picks = Vec::new();
    let mut start = snap.now_ms;
    for &task in order.iter().take(need) {
        let request = &snap.task(task).request;
        let mut best: Option<(i64, u64, NodeId)> = None;
        for node in session.feasible_nodes(task) {
            if session.reserved_for(node).is_some_and(|o| o != job.id) {
                continue;
            }
            let alloc = &snap.node(node).allocatable;
            let mut extra = request.clone();
            if let Some(c) = claimed.get(&node) {
                extra.add(c);
            }
            if !extra.fits_in(alloc) {
                continue;
            }
            let Some(at) = free_at(session, node, &extra, job.id) else {
                continue;
            };
            // Among equal times, the node the node order prefers.
            let tie = session
                .framework()
                .node_order()
                .key(alloc, session.used(node));
            let cand = (at, tie, node);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
        let (at, _, node) = best?;
        start = start.max(at);
        claimed.entry(node).or_default().add(request);
        picks.push((task, node));
    }
    // A gang that can start now needs no reservation: allocate places it.
    (start > snap.now_ms).then_some((picks, start))
}

/// When `request` fits on the node if the other jobs' bound pods leave at their deadlines
/// (`i64::MAX` when one that must leave has none), or `None` when they never free enough.
fn free_at(session: &Session, node: NodeId, request: &Resources, job: JobId) -> Option<i64> {
    let snap = session.snapshot;
    let mut free = session.free(node);
    if request.fits_in(&free) {
        return Some(snap.now_ms);
    }
    let mut leaving: Vec<(i64, &Resources)> = session
        .node_tasks(node)
        .iter()
        .filter(|&&t| snap.task(t).job != job && session.task_status(t).node() == Some(node))
        .map(|&t| {
            let task = snap.task(t);
            (task.ends_by_ms().unwrap_or(i64::MAX), &task.request)
        })
        .collect();
    leaving.sort_by_key(|&(at, _)| at);
    for (at, r) in leaving {
        free.add(r);
        if request.fits_in(&free) {
            return Some(at);
        }
    }
    None
}

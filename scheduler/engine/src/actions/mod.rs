//! The actions of a cycle, each a plain function over the session, and [`schedule`], the one
//! function the daemon, the simulator and the `plan` command all call.

mod allocate;
mod enqueue;
mod evict;
mod reason;
mod topology;
mod unplaced;
mod victims;

pub use allocate::allocate;
pub use enqueue::enqueue;
pub use evict::{preempt, reclaim};
pub use reason::JobCondition;
pub use unplaced::{GangFailure, MemberFailure, ShortWhy, TierError};

// The condition vocabulary lives below the actions (refusals word with it too); its old
// paths stay.
pub(crate) use crate::conditions::unschedulable;
pub use crate::conditions::*;

use crate::framework::{Action, Framework};
use crate::model::{Job, JobId, JobPhase, QueueState, TaskId};
use crate::plan::Plan;
use crate::session::{Session, TaskStatus};
use crate::snapshot::Snapshot;
use crate::warm::Warm;

/// One scheduling cycle: `(Snapshot, Framework) -> Plan`, carrying node state from the last
/// cycle to the next in `warm` (see [`Warm`]: one per framework). The plan depends on the
/// snapshot and the framework alone: `&mut Warm::default()` gives the same.
pub fn schedule(snapshot: &Snapshot, fw: &Framework, warm: &mut Warm) -> Plan {
    schedule_each(snapshot, fw, warm, |_, run| run())
}

/// [`schedule`], each action run by `around`, which is handed the action and a closure that
/// runs it and must call that closure once: the daemon times each action this way, while the
/// engine reads no clock.
pub fn schedule_each(
    snapshot: &Snapshot,
    fw: &Framework,
    warm: &mut Warm,
    mut around: impl FnMut(Action, &mut dyn FnMut()),
) -> Plan {
    let mut session = Session::with_warm(snapshot, fw, warm);
    for &action in &fw.actions {
        around(action, &mut || match action {
            Action::Enqueue => enqueue(&mut session),
            Action::Allocate => allocate(&mut session),
            Action::Reclaim => reclaim(&mut session),
            Action::Preempt => preempt(&mut session),
        });
    }
    if fw.explain_failures {
        session.explain_waiting();
    }
    session.into_plan()
}

pub(crate) fn has_pending(session: &Session, job: &Job) -> bool {
    job.tasks
        .iter()
        .any(|&t| *session.task_status(t) == TaskStatus::Pending)
}

/// Jobs of `candidates` that pass `keep`, in the configured job order.
pub(crate) fn ordered_jobs<'s>(
    session: &Session<'s>,
    candidates: &[JobId],
    keep: impl Fn(&Job) -> bool,
) -> Vec<&'s Job> {
    let snap = session.snapshot;
    let fw = session.framework();
    let mut jobs: Vec<&Job> = (candidates.iter())
        .map(|&j| snap.job(j))
        .filter(|j| keep(j))
        .collect();
    jobs.sort_by(|a, b| fw.compare_jobs(a, b));
    jobs
}

/// Jobs that may be scheduled now: admitted (or any, when `enqueue` is not configured), with
/// pending members.
pub(crate) fn schedulable_jobs<'s>(session: &Session<'s>) -> Vec<&'s Job> {
    let gated = session.framework().actions.contains(&Action::Enqueue);
    ordered_jobs(session, session.with_pending(), |j| {
        (!gated || session.phase(j.id) != JobPhase::Pending)
            && has_pending(session, j)
            && session.timed_out(j.id).is_none()
    })
}

/// Why a gang that timed out waits (see [`crate::Framework::timed_out`]).
pub const SCHEDULE_TIMEOUT: &str = "ScheduleTimeout";

/// The condition of every gang with pending members that backs off after its schedule
/// timeout: it takes part in nothing this cycle and holds nothing.
pub(crate) fn note_timed_out(session: &mut Session) {
    let timed_out: Vec<(JobId, i64)> = (session.with_pending().iter())
        .filter_map(|&j| Some((j, session.timed_out(j)?)))
        .collect();
    for (job, left_ms) in timed_out {
        session.add_condition(job, JobCondition::TimedOut { left_ms });
    }
}

/// A job whose queue is Closed or Closing may not start; work already running is untouched.
pub(crate) fn queue_refuses(session: &Session, job: &Job) -> Option<JobCondition> {
    let queue = session.snapshot.queue(job.queue);
    (queue.state != QueueState::Open).then_some(JobCondition::QueueNotOpen)
}

/// Pending members in placement order: by the configured task order ([`crate::TaskOrder`],
/// e.g. the pod's own priority, higher first), then members that a role still needs for its
/// minimum before the others (so optional pods never take the capacity a required role needs),
/// then rank (the job's member order: rank, then name). Role slots go to members in that same
/// order. Held members ([`crate::model::Hold`]) are never candidates.
pub(crate) fn placement_order(session: &Session, job: &Job) -> Vec<TaskId> {
    let snap = session.snapshot;
    let fw = session.framework();
    let mut pending: Vec<TaskId> = (job.tasks.iter().copied())
        .filter(|&t| *session.task_status(t) == TaskStatus::Pending && snap.task(t).hold.is_none())
        .collect();
    let ordered = !fw.task_order.is_empty();
    if ordered {
        // Stable: members the policy does not tell apart keep their rank order.
        pending.sort_by(|&a, &b| fw.compare_tasks(snap.task(a), snap.task(b)));
    }
    // Without role minimums no member is required: that order is the placement order.
    if job.min_task_member.is_empty() {
        return pending;
    }
    let mut need = job.min_task_member.clone();
    for (role, have) in session.counts(job.id).by_role {
        if let Some(n) = need.get_mut(&role) {
            *n = n.saturating_sub(have);
        }
    }
    let mut members: Vec<(TaskId, bool)> = Vec::with_capacity(pending.len());
    for t in pending {
        let slot = need.get_mut(snap.task(t).role()).filter(|n| **n > 0);
        let required = slot.map(|n| *n -= 1).is_some();
        members.push((t, required));
    }
    // Required members first among members the policy ranks equal (all of them, without one).
    // When all are required or none is, the order stands already (the sort is stable).
    let mixed = members.iter().any(|m| m.1) && members.iter().any(|m| !m.1);
    if !mixed {
        return members.into_iter().map(|(t, _)| t).collect();
    }
    members.sort_by(|&(a, ra), &(b, rb)| {
        let by_policy = if ordered {
            fw.compare_tasks(snap.task(a), snap.task(b))
        } else {
            std::cmp::Ordering::Equal
        };
        by_policy.then(rb.cmp(&ra))
    });
    members.into_iter().map(|(t, _)| t).collect()
}

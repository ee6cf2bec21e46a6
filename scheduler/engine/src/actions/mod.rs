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

use crate::framework::{Action, Framework};
use crate::model::{Hold, Job, JobId, JobPhase, QueueState, TaskId};
use crate::plan::{Condition, Plan};
use crate::session::{Session, TaskStatus};
use crate::snapshot::Snapshot;
use crate::warm::Warm;

pub const UNSCHEDULABLE: &str = "Unschedulable";
pub const NOT_ENOUGH_RESOURCES: &str = "NotEnoughResources";
/// A gang that can never start as the cluster and its quota stand (see
/// [`crate::plan::NeverFits`]).
pub const NEVER_FITS: &str = "NeverFits";
pub const QUEUE_NOT_OPEN: &str = "QueueNotOpen";
/// A gang with fewer pods than its minimums (see [`crate::JobRefusal`]).
pub const NOT_ENOUGH_PODS: &str = "NotEnoughPods";
/// Some members are not ready for scheduling (`spec.schedulingGates`).
pub const SCHEDULING_GATED: &str = "SchedulingGated";
/// Some members' DRA ResourceClaims are not ready (a template's claim not made yet, a claim
/// missing or being deleted).
pub const CLAIM_NOT_READY: &str = "ResourceClaimNotReady";
/// Some members state a scheduling-relevant field Basalt does not understand.
pub const UNSUPPORTED_FIELD: &str = "UnsupportedField";
/// Some members' volumes are not ready (a missing claim or volume, a claim in use).
pub const VOLUME_NOT_READY: &str = "VolumeNotReady";

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

pub(crate) fn unschedulable(reason: &str, message: String) -> Condition {
    Condition {
        kind: UNSCHEDULABLE.to_string(),
        reason: reason.to_string(),
        message,
    }
}

/// How many pod names a condition lists before it says how many more there are.
const NAMES_LISTED: usize = 10;

/// Why the job's held pending members ([`Hold`]) are not placed, or `None` when it has none.
/// The reason is that of the first kind of hold present, in this order: `SchedulingGated`
/// (kube-scheduler's reason for a gated pod), `UnsupportedField`, `VolumeNotReady`,
/// `ResourceClaimNotReady`; the message names the pods of every kind, up to [`NAMES_LISTED`] each.
pub fn held_condition(snap: &Snapshot, job: JobId) -> Option<Condition> {
    let mut gated = Vec::new();
    let mut unsupported = Vec::new();
    let mut volumes = Vec::new();
    let mut claims = Vec::new();
    for &t in &snap.job(job).tasks {
        let task = snap.task(t);
        let with = |what: &[String], sep| format!("{} ({})", task.name, what.join(sep));
        match &task.hold {
            Some(Hold::Gated(gates)) => gated.push(with(gates, ", ")),
            Some(Hold::Unsupported(fields)) => unsupported.push(with(fields, "; ")),
            Some(Hold::Volumes(problems)) => volumes.push(with(problems, "; ")),
            Some(Hold::Claims(problems)) => claims.push(with(problems, "; ")),
            None => {}
        }
    }
    let mut parts = Vec::new();
    if !gated.is_empty() {
        parts.push(format!("{} pod(s) gated: {}", gated.len(), listed(&gated)));
    }
    if !unsupported.is_empty() {
        parts.push(format!(
            "{} pod(s) state what Basalt does not support: {}",
            unsupported.len(),
            listed(&unsupported)
        ));
    }
    if !volumes.is_empty() {
        parts.push(format!(
            "{} pod(s) wait for volumes: {}",
            volumes.len(),
            listed(&volumes)
        ));
    }
    if !claims.is_empty() {
        parts.push(format!(
            "{} pod(s) wait for ResourceClaims: {}",
            claims.len(),
            listed(&claims)
        ));
    }
    let reason = if !gated.is_empty() {
        SCHEDULING_GATED
    } else if !unsupported.is_empty() {
        UNSUPPORTED_FIELD
    } else if !volumes.is_empty() {
        VOLUME_NOT_READY
    } else if !claims.is_empty() {
        CLAIM_NOT_READY
    } else {
        return None;
    };
    Some(unschedulable(reason, parts.join("; ")))
}

/// Whether the job has held pending members ([`Hold`]): [`held_condition`] says why they wait.
pub fn has_held(snap: &Snapshot, job: JobId) -> bool {
    (snap.job(job).tasks.iter()).any(|&t| snap.task(t).hold.is_some())
}

fn listed(names: &[String]) -> String {
    let mut out = names[..names.len().min(NAMES_LISTED)].join(", ");
    if names.len() > NAMES_LISTED {
        out.push_str(&format!(" and {} more", names.len() - NAMES_LISTED));
    }
    out
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

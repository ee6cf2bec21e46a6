//! The actions of a cycle, each a plain function over the session, and [`schedule`], the one
//! function the daemon, the simulator and the `plan` command all call.

use crate::framework::{Action, Framework};
use crate::model::{Job, JobId, JobPhase, QueueState, TaskId};
use crate::plan::{Condition, Plan};
use crate::session::{Session, TaskStatus};
use crate::snapshot::Snapshot;

pub const UNSCHEDULABLE: &str = "Unschedulable";
pub const NOT_ENOUGH_RESOURCES: &str = "NotEnoughResources";
pub const QUEUE_NOT_OPEN: &str = "QueueNotOpen";

/// One scheduling cycle: `(Snapshot, Framework) -> Plan`.
pub fn schedule(snapshot: &Snapshot, fw: &Framework) -> Plan {
    let mut session = Session::new(snapshot, fw);
    for action in &fw.actions {
        match action {
            Action::Enqueue => enqueue(&mut session),
            Action::Allocate => allocate(&mut session),
        }
    }
    session.into_plan()
}

fn unschedulable(reason: &str, message: String) -> Condition {
    Condition {
        kind: UNSCHEDULABLE.to_string(),
        reason: reason.to_string(),
        message,
    }
}

fn has_pending(session: &Session, job: &Job) -> bool {
    job.tasks
        .iter()
        .any(|&t| *session.task_status(t) == TaskStatus::Pending)
}

/// Jobs that pass `keep`, in the configured job order.
fn ordered_jobs<'s>(session: &Session<'s>, keep: impl Fn(&Job) -> bool) -> Vec<&'s Job> {
    let snap = session.snapshot;
    let fw = session.framework();
    let mut jobs: Vec<&Job> = snap.jobs.iter().filter(|j| keep(j)).collect();
    jobs.sort_by(|a, b| fw.compare_jobs(a, b));
    jobs
}

/// A job whose queue is Closed or Closing may not start; work already running is untouched.
fn queue_refuses(session: &Session, job: &Job) -> Option<Condition> {
    let queue = session.snapshot.queue(job.queue);
    (queue.state != QueueState::Open).then(|| {
        unschedulable(
            QUEUE_NOT_OPEN,
            format!(
                "queue {} is {:?} and admits no new jobs",
                queue.name, queue.state
            ),
        )
    })
}

/// Moves pending jobs to Inqueue when every admission plugin agrees. A PodGroup may be admitted
/// before its pods exist: job controllers that wait for Inqueue before creating pods rely on it.
pub fn enqueue(session: &mut Session) {
    let fw = session.framework();
    for job in ordered_jobs(session, |j| j.phase == JobPhase::Pending) {
        if let Some(c) = queue_refuses(session, job) {
            session.add_condition(job.id, c);
            continue;
        }
        match fw.admit_job(session, job.id) {
            Ok(()) => session.admit(job.id),
            Err(c) => session.add_condition(job.id, c),
        }
    }
}

/// Pending members in placement order: members that a role still needs for its minimum first
/// (so optional pods never take the capacity a required role needs), then by name.
fn placement_order(session: &Session, job: &Job) -> Vec<TaskId> {
    let snap = session.snapshot;
    let mut need = job.min_task_member.clone();
    for (role, have) in session.counts(job.id).by_role {
        if let Some(n) = need.get_mut(&role) {
            *n = n.saturating_sub(have);
        }
    }
    let mut required = Vec::new();
    let mut optional = Vec::new();
    for &t in &job.tasks {
        if *session.task_status(t) != TaskStatus::Pending {
            continue;
        }
        let slot = snap
            .task(t)
            .role
            .as_ref()
            .and_then(|r| need.get_mut(r))
            .filter(|n| **n > 0);
        match slot {
            Some(n) => {
                *n -= 1;
                required.push(t);
            }
            None => optional.push(t),
        }
    }
    required.extend(optional);
    required
}

/// Places jobs gang by gang. Each job is tried in its own statement, committed only when the
/// job is ready (its minimum is met) and discarded otherwise; once the minimum is met, extra
/// members are placed too.
pub fn allocate(session: &mut Session) {
    let fw = session.framework();
    let gated = fw.actions.contains(&Action::Enqueue);
    let jobs = ordered_jobs(session, |j| {
        (!gated || session.phase(j.id) != JobPhase::Pending) && has_pending(session, j)
    });
    for job in jobs {
        if session.counts(job.id).running == 0 {
            if let Some(c) = queue_refuses(session, job) {
                session.add_condition(job.id, c);
                continue;
            }
        }
        if let Err(c) = fw.validate_job(session, job.id) {
            session.add_condition(job.id, c);
            continue;
        }
        allocate_job(session, job.id);
    }
}

fn allocate_job(session: &mut Session, job_id: JobId) {
    let snap = session.snapshot;
    let fw = session.framework();
    let job = snap.job(job_id);
    let order = placement_order(session, job);
    let before = session.counts(job_id);
    let mut holding = before.running + before.succeeded;
    let mut failure: Option<String> = None;
    let mut stmt = session.statement();
    for (i, &task) in order.iter().enumerate() {
        let placed = match fw.admit_task(session, task, &snap.task(task).request) {
            Err(reason) => Err(reason.into_owned()),
            Ok(()) => session.find_node(task).map_err(|f| f.message),
        };
        match placed {
            Ok(node) => {
                session.allocate(&mut stmt, task, node);
                holding += 1;
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
    let message = if ready {
        // The gang runs; only extra members are left waiting.
        failure
    } else {
        let why = failure.unwrap_or_else(|| "per-role minimums (minTaskMember) are not met".into());
        Some(format!(
            "{holding}/{} members of the gang could be placed: {why}",
            job.min_member
        ))
    };
    if let Some(message) = message {
        session.add_condition(job_id, unschedulable(NOT_ENOUGH_RESOURCES, message));
    }
}

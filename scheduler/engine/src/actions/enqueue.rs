//! `enqueue`: admission of pending PodGroups.

use super::{ordered_jobs, queue_refuses, JobCondition};
use crate::model::JobPhase;
use crate::session::Session;

/// Moves pending jobs to Inqueue when every admission plugin agrees. A PodGroup may be admitted
/// before its pods exist: job controllers that wait for Inqueue before creating pods rely on it.
pub fn enqueue(session: &mut Session) {
    let fw = session.framework();
    // A gang backing off after its schedule timeout is not admitted meanwhile.
    for job in ordered_jobs(session, session.unadmitted(), |j| {
        j.phase == JobPhase::Pending && session.timed_out(j.id).is_none()
    }) {
        if let Some(c) = queue_refuses(session, job) {
            session.add_condition(job.id, c);
            continue;
        }
        match fw.admit_job(session, job.id) {
            Ok(()) => session.admit(job.id),
            Err(refusal) => session.add_condition(job.id, JobCondition::Refused(refusal)),
        }
    }
}

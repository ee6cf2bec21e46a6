//! `enqueue`: admission of pending PodGroups.

use super::{ordered_jobs, queue_refuses};
use crate::model::JobPhase;
use crate::session::Session;

/// Moves pending jobs to Inqueue when every admission plugin agrees. A PodGroup may be admitted
/// before its pods exist: job controllers that wait for Inqueue before creating pods rely on it.
pub fn enqueue(session: &mut Session) {
    let fw = session.framework();
    for job in ordered_jobs(session, session.unadmitted(), |j| {
        j.phase == JobPhase::Pending
    }) {
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

//! A job's condition as the actions find it: a [`JobCondition`], typed data the session keeps
//! for the cycle and words into a PodGroup [`Condition`] only when the plan is written.

use super::topology::{TOPOLOGY_WARNING, UNKNOWN_PREFERRED_TIER};
use super::unplaced::{GangFailure, TierError};
use super::{held_condition, unschedulable, QUEUE_NOT_OPEN, SCHEDULE_TIMEOUT};
use crate::model::JobId;
use crate::plan::Condition;
use crate::refusal::JobRefusal;
use crate::snapshot::Snapshot;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobCondition {
    /// A [`crate::JobValid`] or [`crate::Admit`] said no.
    Refused(JobRefusal),
    /// The job's queue is Closed or Closing and admits no new jobs.
    QueueNotOpen,
    /// The gang did not start within its schedule timeout; it sits out `left_ms` more.
    TimedOut { left_ms: i64 },
    /// Some pending members are held ([`crate::Hold`]) and wait, named.
    Held,
    /// The gang, or its extra members, found no place.
    Unplaced(GangFailure),
    /// A warning: the preferred topology tier is one the topology does not know, so the
    /// preference does not apply (the job is scheduled without it).
    UnknownPreferredTier(TierError),
}

impl JobCondition {
    /// The PodGroup condition it is worded as, for `job` in `snapshot`.
    pub fn condition(&self, snapshot: &Snapshot, job: JobId) -> Condition {
        match self {
            JobCondition::Refused(refusal) => refusal.condition(snapshot, job),
            JobCondition::QueueNotOpen => {
                let queue = snapshot.queue(snapshot.job(job).queue);
                unschedulable(
                    QUEUE_NOT_OPEN,
                    format!(
                        "queue {} is {:?} and admits no new jobs",
                        queue.name, queue.state
                    ),
                )
            }
            JobCondition::TimedOut { left_ms } => {
                let timeout = snapshot.job(job).schedule_timeout_ms.unwrap_or(0);
                let message = format!(
                    "the gang did not start within its schedule timeout ({}s); it backs off and \
                     is tried again in {}s",
                    timeout / 1000,
                    (left_ms + 999) / 1000
                );
                unschedulable(SCHEDULE_TIMEOUT, message)
            }
            JobCondition::Held => {
                held_condition(snapshot, job).expect("a held condition has held members")
            }
            JobCondition::Unplaced(failure) => failure.condition(snapshot, job),
            JobCondition::UnknownPreferredTier(e) => Condition {
                kind: TOPOLOGY_WARNING.to_string(),
                reason: UNKNOWN_PREFERRED_TIER.to_string(),
                message: format!("{}; the preference does not apply", e.describe()),
            },
        }
    }
}

//! Why a job may not be scheduled ([`crate::JobValid`]) or admitted ([`crate::Admit`]) this
//! cycle: a [`JobRefusal`], typed data that names what failed; worded (in Volcano's reasons)
//! only when the plan is written.

use crate::conditions::{held_condition, unschedulable, NOT_ENOUGH_PODS, NOT_ENOUGH_RESOURCES};
use crate::model::JobId;
use crate::plan::Condition;
use crate::refusal::Refusal;
use crate::resources::ResourceId;
use crate::snapshot::Snapshot;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobRefusal {
    /// Fewer live pods than the gang's `minMember`.
    TooFewPods { have: u32, min: u32 },
    /// Fewer live pods of `role` than its `minTaskMember`.
    TooFewRolePods { role: String, have: u32, min: u32 },
    /// Fewer sub-groups of `spec` with enough pods than its `minSubGroups`.
    TooFewSubGroups { spec: String, have: u32, min: u32 },
    /// The gang's minimums need members Basalt may not place yet (a [`crate::Hold`]): it
    /// waits whole, naming them.
    Held,
    /// The job's `minResources` exceed the room the cluster has left: allocatable ×
    /// `factor_milli` / 1000, less usage and earlier admissions. Per resource short: what the
    /// job needs and what is left (never below zero).
    OverRoom {
        short: Vec<(ResourceId, i64, i64)>,
        factor_milli: i64,
    },
    /// The job's `minResources` would take a queue over its capability
    /// ([`Refusal::OverCapability`]).
    OverCapability(Refusal),
}

impl JobRefusal {
    /// The PodGroup condition it is worded as; ids are resolved in `snapshot`, the one the
    /// refusal was made in, for `job`, the job refused.
    pub fn condition(&self, snapshot: &Snapshot, job: JobId) -> Condition {
        let names = &snapshot.resources;
        let (reason, message) = match self {
            JobRefusal::TooFewPods { have, min } => (
                NOT_ENOUGH_PODS,
                format!("{have}/{min} pods of the gang exist; waiting for minMember"),
            ),
            JobRefusal::TooFewRolePods { role, have, min } => (
                NOT_ENOUGH_PODS,
                format!("role {role:?}: {have}/{min} pods exist; waiting for minTaskMember"),
            ),
            JobRefusal::TooFewSubGroups { spec, have, min } => (
                NOT_ENOUGH_PODS,
                format!(
                    "sub-group spec {spec}: {have}/{min} sub-groups have enough pods; waiting \
                     for minSubGroups"
                ),
            ),
            JobRefusal::Held => {
                return held_condition(snapshot, job).expect("a held refusal has held members")
            }
            JobRefusal::OverRoom {
                short,
                factor_milli,
            } => {
                let short: Vec<String> = (short.iter())
                    .map(|&(id, need, left)| {
                        format!(
                            "{} needs {}, {} left",
                            names.name(id),
                            names.format(id, need),
                            names.format(id, left)
                        )
                    })
                    .collect();
                (
                    NOT_ENOUGH_RESOURCES,
                    format!(
                        "minResources cannot be admitted ({}; room is allocatable × {:.2} less \
                         usage and earlier admissions)",
                        short.join(", "),
                        *factor_milli as f64 / 1000.0
                    ),
                )
            }
            JobRefusal::OverCapability(refusal) => (
                NOT_ENOUGH_RESOURCES,
                format!("minResources: {}", refusal.describe(snapshot)),
            ),
        };
        unschedulable(reason, message)
    }
}

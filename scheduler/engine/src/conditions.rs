//! The words of a job's `Unschedulable` condition: its reasons (the same as Volcano's and
//! kube-scheduler's where they have one) and the message of held members. Below the actions
//! and the refusals, which both word conditions with it.

use crate::model::{Hold, JobId};
use crate::plan::Condition;
use crate::snapshot::Snapshot;

pub const UNSCHEDULABLE: &str = "Unschedulable";
/// Why a member was not placed when the framework does not explain failures.
pub const NO_NODE_FITS: &str = "no node fits";
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

/// A job whose topology requirement names a tier the topology does not know, or tiers of two
/// ladders.
pub const INVALID_TOPOLOGY: &str = "InvalidTopology";

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

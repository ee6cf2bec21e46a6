//! The result of one scheduling cycle. Its JSON form is a stable interface: later work adds
//! fields, never renames these.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::model::{JobPhase, QueueState};

mod explanation;
pub use explanation::*;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub bindings: Vec<Binding>,
    pub evictions: Vec<Eviction>,
    pub pod_groups: Vec<PodGroupStatus>,
    /// Pods placed on capacity that this plan's evictions free, or on nodes reserved for them:
    /// they bind in a later cycle.
    pub nominations: Vec<Nomination>,
    pub queues: Vec<QueueStatus>,
    /// DRA ResourceClaims this plan allocates, each to be written before the binding of the
    /// pod it is allocated for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_allocations: Vec<ClaimAllocation>,
    /// Every queue's usage at the snapshot's instant, for the next cycle's snapshot (see
    /// [`crate::usage`]); empty without a usage half-life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<crate::QueueUsage>,
    /// New MIG layouts for idle GPUs, chosen from pending MIG demand (see
    /// [`crate::MigRelayout`]); the node agent applies them once the GPU is still idle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_layouts: Vec<MigLayout>,
}

/// A GPU's wanted MIG layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigLayout {
    pub node: String,
    /// The GPU's index on the node.
    pub gpu: u32,
    /// Its instances, by first memory slice.
    pub layout: Vec<MigPlacement>,
    /// `namespace/name` of the pending pods waiting for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
}

/// One GPU instance of a [`MigLayout`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPlacement {
    pub profile: String,
    /// First memory slice.
    pub start: u32,
}

/// A ResourceClaim's allocation (`status.allocation`), made for a pod placed by this plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimAllocation {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// `namespace/name` of the pod it is allocated for (the claim's first `reservedFor`).
    pub pod: String,
    pub node: String,
    /// The node the allocation's `nodeSelector` names: set when any device is the node's own
    /// (a `nodeName` or `nodeSelector` slice), absent when every device is `allNodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<String>,
    pub results: Vec<ClaimResult>,
}

/// One device of an allocation (`status.allocation.devices.results[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResult {
    /// The request, or `request/subrequest` for a `firstAvailable` alternative.
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nomination {
    pub pod: String,
    pub node: String,
    /// `evictions`: the node's capacity is being freed by this plan's evictions (it holds the
    /// pod's request); `reservation`: a starving gang waits for the node to drain.
    pub reason: NominationReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NominationReason {
    Evictions,
    Reservation,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Quantities as Kubernetes writes them ("8", "64Gi").
    pub deserved: BTreeMap<String, String>,
    pub allocated: BTreeMap<String, String>,
    /// What its subtree's pending pods ask for (held pods aside), as the cycle opened.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demand: BTreeMap<String, String>,
    /// Dominant share: allocated / deserved in the resource where it is largest, over the
    /// resources the queue deserves some of. Always finite.
    pub share: f64,
    /// Resources the queue holds but deserves none of (nothing left to share, or a capability
    /// of zero): in queue order its share counts as infinite, whatever `share` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undeserved: Vec<String>,
    pub state: QueueState,
    /// Its usage at the snapshot's instant, per resource (see [`crate::usage`]); empty without
    /// a usage half-life.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, f64>,
    /// The part of its siblings' weight it divides their capacity by once adjusted by usage,
    /// when the fair share adjusts weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_weight: Option<f64>,
    /// What usage does to its place among its siblings, when the fair share adjusts weights
    /// and a sibling's adjusted weight differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_effect: Option<UsageEffect>,
}

/// Usage's effect on a queue's order against one sibling: "ordered before `b`: used 0.25 of
/// the cluster over the half-life against 0.5" (the words are the reports').
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageEffect {
    pub order: UsageOrder,
    /// The sibling.
    pub queue: String,
    /// The part of the cluster the queue used over the half-life, as the policy weighs
    /// resources.
    pub used: f64,
    /// The sibling's.
    pub against: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageOrder {
    /// Its usage left it a larger weight: ordered before the sibling.
    Before,
    /// A smaller one: after.
    After,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub node: String,
    /// GPU indices on the node, when the pod asks for GPUs (physical devices; on a node that
    /// shares them, the devices it holds a share of).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// The same devices with what the pod takes of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<BoundDevice>,
}

/// One device a binding takes, and how much of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundDevice {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Memory it may use on the device: its share on a HAMi node, all of it for a whole
    /// device; absent for a time-sliced replica (not divided) or a device of unknown memory.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// Compute it may use, in percent of the device; absent for a time-sliced replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// The MIG instance it takes on GPU `index` (NVIDIA's mixed strategy); `memoryMiB` is the
    /// instance's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<BoundMig>,
}

/// A MIG instance of a binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundMig {
    pub profile: String,
    pub gpu_instance_id: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    pub pod: String,
    /// The node the pod leaves.
    #[serde(default)]
    pub node: String,
    pub reason: String,
    /// The PodGroup the capacity is freed for.
    #[serde(rename = "for")]
    pub for_group: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `namespace/name` (shared with the snapshot's job).
    pub name: std::sync::Arc<str>,
    pub phase: JobPhase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Members bound or running after this cycle (bindings of the plan included).
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// Members still waiting for a node.
    pub pending: u32,
    pub min_member: u32,
    /// Why it has not started, while it waits (see [`Explanation`]); absent when
    /// [`crate::Framework::explain_failures`] is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Box<Explanation>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub reason: String,
    pub message: String,
}

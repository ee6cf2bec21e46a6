//! The result of one scheduling cycle. Its JSON form is a stable interface: later work adds
//! fields, never renames these.

use serde::{Deserialize, Serialize};

use crate::model::JobPhase;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub bindings: Vec<Binding>,
    pub evictions: Vec<Eviction>,
    pub pod_groups: Vec<PodGroupStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub node: String,
    /// GPU indices on the node, when the pod asks for whole GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    pub pod: String,
    pub reason: String,
    /// The PodGroup the capacity is freed for.
    #[serde(rename = "for")]
    pub for_group: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `namespace/name`.
    pub name: String,
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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub reason: String,
    pub message: String,
}

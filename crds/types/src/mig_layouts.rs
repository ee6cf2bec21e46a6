//! The MIG layouts the scheduler wants on a node's GPUs (NodeTopology `spec.migLayouts`) and
//! the node agent's report on each (`status.migLayouts`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The MIG layout the scheduler wants on one GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WantedMigLayout {
    /// Device index of the GPU.
    #[schemars(with = "i32", range(min = 0))]
    pub gpu: u32,
    /// Raised by the scheduler each time it asks for a different layout on this GPU; the node
    /// agent reports the one it acted on.
    #[schemars(range(min = 1))]
    pub generation: i64,
    /// The GPU instances wanted, by first memory slice.
    pub layout: Vec<MigLayoutPlacement>,
}

/// One GPU instance of a wanted MIG layout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigLayoutPlacement {
    /// Profile name (`3g.40gb`).
    pub profile: String,
    /// First memory slice.
    #[schemars(with = "i32", range(min = 0))]
    pub start: u32,
}

/// Where the node agent stands with one GPU's wanted MIG layout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MigLayoutPhase {
    /// Asked, not acted on yet (or waiting for `minInterval` since the last re-layout).
    #[default]
    Pending,
    /// Instances are being destroyed and created now.
    Applying,
    /// The GPU's instances are the wanted layout.
    Applied,
    /// Not applied because the GPU is busy (`reason`); tried again each round.
    Refused,
    /// A step failed; the previous layout was restored (`reason` says what failed and whether
    /// the restore did).
    Failed,
}

/// The node agent's report on one GPU's wanted MIG layout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigLayoutStatus {
    /// Device index of the GPU.
    #[schemars(with = "i32", range(min = 0))]
    pub gpu: u32,
    pub phase: MigLayoutPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The `generation` of the wanted layout this phase is about.
    #[serde(default)]
    pub observed_generation: i64,
    /// The `generation` last applied on this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_generation: Option<i64>,
    /// When a layout was last applied on this GPU (RFC 3339): `minInterval` counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<String>,
}

//! What a queue used, as its status keeps it (`status.usage`): the scheduler writes the usage
//! with the instant it was taken and what the queue held from then on (rewritten when that
//! holding changes), and reads it back on start, so fairness over time outlives a restart or a
//! failover with no database (see the engine's `usage`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// A queue's decayed average holding, per resource, as of `takenAt`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueUsageStatus {
    /// The instant the usage is of (RFC 3339).
    #[serde(default)]
    #[schemars(schema_with = "date_time_schema")]
    pub taken_at: String,
    /// Per resource, what the queue held on average over the half-life, in the resource's
    /// units (cores for `cpu`, bytes for memory, devices for GPUs): `nvidia.com/gpu: "7.5"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::resource_list_schema")]
    pub resources: BTreeMap<String, Quantity>,
    /// What the queue held from `takenAt` on, per resource, in the same units: what the next
    /// usage charges for the time since (so a job that ends between two cycles is charged for
    /// its run). Absent in a status written before it was kept: then what the queue holds at
    /// the next cycle is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::resource_list_schema")]
    pub held: Option<BTreeMap<String, Quantity>>,
}

fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

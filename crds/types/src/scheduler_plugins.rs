//! The PodGroup of kubernetes-sigs/scheduler-plugins (`scheduling.x-k8s.io/v1alpha1`), the
//! coscheduling plugin's gang, read unchanged: pods name it with the label
//! `scheduling.x-k8s.io/pod-group`.
//!
//! - `minMember` is the gang's minimum. It defaults to 0 (no gang minimum), as the
//!   plugin's `omitempty` field does; Basalt's own PodGroup defaults to 1.
//! - `minResources` gates admission as Basalt's does.
//! - `scheduleTimeoutSeconds` bounds how long the coscheduling plugin lets a gang wait (in
//!   Permit, holding capacity) before it gives up and retries later. Basalt's own PodGroup
//!   field of the same name does the same: a gang that has not started within it backs off,
//!   holding no reservation or nomination (0, the plugin's "none", is none).
//! - The group has no queue (the `default` queue) and no priority (its pods' highest counts).
//!   Its status belongs to scheduler-plugins' PodGroup controller.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Issue;

pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// Written by scheduler-plugins' controller; not Basalt's to read or write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    #[serde(default)]
    pub min_member: i32,
    #[serde(default)]
    pub min_resources: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub schedule_timeout_seconds: Option<i32>,
}

impl PodGroup {
    /// Basalt's PodGroup for it with the fields Basalt does not honour, or the field that
    /// cannot be read.
    pub fn into_basalt(self) -> Result<(super::PodGroup, Vec<Issue>), Issue> {
        let s = self.spec;
        if s.min_member < 0 {
            return Err((
                "spec.minMember".into(),
                format!("must not be negative, got {}", s.min_member),
            ));
        }
        if let Some(t) = s.schedule_timeout_seconds.filter(|&t| t < 0) {
            return Err((
                "spec.scheduleTimeoutSeconds".into(),
                format!("must not be negative, got {t}"),
            ));
        }
        let issues = Vec::new();
        let group = super::PodGroup {
            metadata: self.metadata,
            spec: super::PodGroupSpec {
                min_member: s.min_member,
                min_resources: s.min_resources,
                // 0 is scheduler-plugins' "no timeout of its own".
                schedule_timeout_seconds: s.schedule_timeout_seconds.filter(|&t| t > 0),
                ..Default::default()
            },
            status: None,
        };
        Ok((group, issues))
    }
}

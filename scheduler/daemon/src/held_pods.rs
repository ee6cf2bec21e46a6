//! This cycle's pending pods held for what they state or their volumes, from the snapshot:
//! the apply phase tells each one why (`apply/report.rs`) and leaves them out of their group's
//! FailedScheduling (`apply/status.rs`).

use std::collections::HashMap;

use basalt_engine::actions::{UNSUPPORTED_FIELD, VOLUME_NOT_READY};
use basalt_engine::{Hold, Snapshot, TaskState};

/// This cycle's pending pods held for what they state or their volumes (pod key → Event reason
/// and message), from the snapshot.
#[derive(Default)]
pub struct HeldPods(HashMap<String, (&'static str, String)>);

impl HeldPods {
    pub fn of(snapshot: &Snapshot) -> Self {
        HeldPods(held(snapshot))
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Pod key, Event reason and message of each, in key order.
    pub fn sorted(&self) -> Vec<(String, &'static str, String)> {
        let mut held: Vec<_> = (self.0.iter())
            .map(|(k, (r, m))| (k.clone(), *r, m.clone()))
            .collect();
        held.sort();
        held
    }
}

/// The snapshot's pending pods held for what they state or for their volumes: pod key → Event
/// reason and message (gated pods and DRA claims are told by their group's FailedScheduling).
fn held(snapshot: &Snapshot) -> HashMap<String, (&'static str, String)> {
    snapshot
        .tasks
        .iter()
        .filter(|t| t.state == TaskState::Pending)
        .filter_map(|t| {
            let (reason, message) = match t.hold.as_ref()? {
                Hold::Unsupported(fields) => (
                    UNSUPPORTED_FIELD,
                    format!(
                        "pod {} states what Basalt does not support: {}",
                        t.name,
                        fields.join("; ")
                    ),
                ),
                Hold::Volumes(problems) => (
                    VOLUME_NOT_READY,
                    format!("pod {} waits for volumes: {}", t.name, problems.join("; ")),
                ),
                Hold::Claims(problems) => (
                    basalt_engine::actions::CLAIM_NOT_READY,
                    format!(
                        "pod {} waits for ResourceClaims: {}",
                        t.name,
                        problems.join("; ")
                    ),
                ),
                Hold::Gated(_) => return None,
            };
            Some((t.name.to_string(), (reason, message)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::SOURCE;
    use basalt_crds::{build_snapshot_tolerant, ConvertOptions, Object};
    use serde_json::json;

    #[test]
    fn held_pods_are_told_by_their_hold_and_gated_or_bound_ones_are_not() {
        let node = json!({"metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "10"}}});
        let pod = |name: &str, node: Option<&str>| {
            let mut p = json!({"metadata": {"name": name, "namespace": "ml"},
                "spec": {"schedulerName": "basalt", "containers": [{"name": "main"}]}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
                p["status"] = json!({"phase": "Running"});
            }
            Object::Pod(std::sync::Arc::new(serde_json::from_value(p).unwrap()))
        };
        let objects: Vec<(String, Object)> = vec![
            (
                SOURCE.into(),
                Object::Node(std::sync::Arc::new(serde_json::from_value(node).unwrap())),
            ),
            (SOURCE.into(), pod("odd", None)),
            (SOURCE.into(), pod("waiting", None)),
            (SOURCE.into(), pod("gated", None)),
            (SOURCE.into(), pod("running", Some("n1"))),
        ];
        let mut snapshot = build_snapshot_tolerant(&objects, &ConvertOptions::default())
            .snapshot
            .expect("a snapshot");
        for t in &mut snapshot.tasks {
            t.hold = match &*t.name {
                "ml/odd" => Some(Hold::Unsupported(vec![
                    "spec.a: not understood".into(),
                    "spec.b: not understood".into(),
                ])),
                "ml/waiting" => Some(Hold::Volumes(vec![
                    "persistentvolumeclaim \"data\" not found".into(),
                ])),
                "ml/gated" => Some(Hold::Gated(vec!["example.com/g".into()])),
                // A hold on a bound pod means nothing.
                _ => Some(Hold::Volumes(vec!["ignored".into()])),
            };
        }
        let told = held(&snapshot);
        assert_eq!(told.len(), 2, "{told:?}");
        assert_eq!(
            told["ml/odd"],
            (
                UNSUPPORTED_FIELD,
                "pod ml/odd states what Basalt does not support: spec.a: not understood; spec.b: not understood".to_string()
            )
        );
        assert_eq!(
            told["ml/waiting"],
            (
                VOLUME_NOT_READY,
                "pod ml/waiting waits for volumes: persistentvolumeclaim \"data\" not found"
                    .to_string()
            )
        );
    }
}

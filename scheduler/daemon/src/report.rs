//! What the daemon says about objects it cannot use as they are: objects left out of the
//! snapshot (an `InvalidObject` Event, and a condition on a PodGroup's status) and conversion
//! warnings (a log line; an Event too when they are about a PodGroup, such as a PriorityClass
//! that does not exist). Each is said once while it lasts; one that goes away and comes back
//! is said again.

use std::collections::HashSet;

use basalt_crds::types::PodGroupCondition;
use basalt_crds::ConvertError;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Patch;
use serde_json::json;

use crate::apply::Scheduler;
use crate::cycle::{Origin, SOURCE};
use crate::volcano;

/// Condition (and Event reason) of a PodGroup left out of scheduling.
pub const INVALID_OBJECT: &str = "InvalidObject";
/// Event reason of a conversion warning about a PodGroup.
const CONVERSION_WARNING: &str = "ConversionWarning";

impl Scheduler {
    /// Logs objects left out of the snapshot; a pod or PodGroup also gets a Warning Event, and a
    /// PodGroup an `InvalidObject` condition in its status (cleared by the next status the
    /// scheduler writes once it is valid again).
    pub async fn report_convert_errors(&mut self, errors: &[ConvertError]) {
        let now: HashSet<String> = errors.iter().map(|e| e.to_string()).collect();
        for e in errors {
            let text = e.to_string();
            if self.reported_convert_errors.contains(&text) {
                continue;
            }
            tracing::error!(error = %text, "object left out of scheduling");
            let origin = if e.origin.as_deref() == Some(volcano::ORIGIN) {
                Origin::Volcano
            } else {
                Origin::Basalt
            };
            let Some(reference) = reference(&e.kind, &e.object, origin) else {
                continue;
            };
            self.event(reference, "Warning", INVALID_OBJECT, &text)
                .await;
            if e.kind == "PodGroup" {
                self.mark_invalid(&e.object, origin, &text).await;
            }
        }
        self.reported_convert_errors = now;
    }

    /// Logs each conversion warning (a node in two HyperNodes of one tier, a Volcano field not
    /// honoured, a missing PriorityClass, ...); one about a PodGroup is also a Warning Event on
    /// it. Other schedulers' pods' warnings stay log lines: those pods are not ours to annotate.
    pub async fn report_warnings(&mut self, warnings: Vec<String>) {
        let now: HashSet<String> = warnings.into_iter().collect();
        let mut new: Vec<String> = now
            .iter()
            .filter(|w| !self.reported_warnings.contains(*w))
            .cloned()
            .collect();
        new.sort();
        for w in new {
            tracing::warn!(warning = %w, "conversion warning");
            if let Some((origin, object)) = about_group(&w) {
                if let Some(reference) = reference("PodGroup", object, origin) {
                    self.event(reference, "Warning", CONVERSION_WARNING, &w)
                        .await;
                }
            }
        }
        self.reported_warnings = now;
    }

    async fn mark_invalid(&self, key: &str, origin: Origin, message: &str) {
        if !self.leadership.leading() {
            return;
        }
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        let condition = PodGroupCondition {
            type_: INVALID_OBJECT.into(),
            status: "True".into(),
            reason: Some(INVALID_OBJECT.into()),
            message: Some(message.into()),
            last_transition_time: Some(jiff::Timestamp::now().to_string()),
        };
        let patch = Patch::Merge(json!({"status": {"conditions": [condition]}}));
        let result = self.patch_group_status(ns, name, origin, &patch).await;
        if let Err(e) = result {
            tracing::warn!(group = %key, error = %e, "cannot mark the PodGroup invalid");
        }
    }
}

/// The object an Event about `kind` `ns/name` goes on, for the kinds users look at.
fn reference(kind: &str, key: &str, origin: Origin) -> Option<ObjectReference> {
    let api_version = match kind {
        "Pod" => "v1",
        "PodGroup" => origin.api_version(),
        _ => return None,
    };
    let (ns, name) = key.split_once('/').unwrap_or(("default", key));
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        ..Default::default()
    })
}

/// The PodGroup a conversion warning is about (`ORIGIN: PodGroup ns/name: field: message`).
fn about_group(warning: &str) -> Option<(Origin, &str)> {
    [(volcano::ORIGIN, Origin::Volcano), (SOURCE, Origin::Basalt)]
        .into_iter()
        .find_map(|(label, origin)| {
            let rest = warning.strip_prefix(label)?.strip_prefix(": PodGroup ")?;
            let (object, _) = rest.split_once(": ")?;
            Some((origin, object))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_about_podgroups_are_told_from_the_rest() {
        let w = "cluster (scheduling.volcano.sh/v1beta1): PodGroup ml/g: spec.priorityClassName: \
                 names PriorityClass gold, which does not exist; the default priority 0 is used";
        assert_eq!(about_group(w), Some((Origin::Volcano, "ml/g")));
        let w = "cluster: PodGroup ml/h: spec.topology.preferred: unknown tier";
        assert_eq!(about_group(w), Some((Origin::Basalt, "ml/h")));
        assert_eq!(
            about_group("cluster: Pod ml/p: metadata.labels[x]: ignored"),
            None
        );
        assert_eq!(
            about_group("cluster: Node n1: status.allocatable: clamped"),
            None
        );
    }
}

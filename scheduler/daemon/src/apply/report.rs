//! What the daemon says about objects it cannot use as they are: objects left out of the
//! snapshot (an `InvalidObject` Event, and a condition on a PodGroup's status) and conversion
//! warnings (a log line; an Event too when they are about a PodGroup, such as a PriorityClass
//! that does not exist), pods held for what they state, nodes over capacity (`overfull.rs`)
//! and PodGroups shared by several schedulers (`ownership.rs`). Each is said once while it
//! lasts; one that goes away and comes back is said again.

use std::collections::HashSet;

use basalt_crds::types::PodGroupCondition;
use basalt_crds::ConvertError;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Patch;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::keys::split_key;
use crate::overfull::OVER_CAPACITY;
use crate::ownership::SCHEDULER_CONFLICT;
use crate::scheduler::{pod_ref, Scheduler};
use crate::stores::{Stores, SOURCE};
use crate::view::Origin;
use crate::volcano;

/// Condition (and Event reason) of a PodGroup left out of scheduling.
pub const INVALID_OBJECT: &str = "InvalidObject";
/// Event reason of a conversion warning about a PodGroup.
const CONVERSION_WARNING: &str = "ConversionWarning";
/// Event reason of an expected-runtime annotation the forecast cannot read.
const BAD_EXPECTED_RUNTIME: &str = "InvalidExpectedRuntime";

impl Scheduler {
    /// Logs objects left out of the snapshot; a pod or PodGroup also gets a Warning Event, and a
    /// PodGroup an `InvalidObject` condition in its status (cleared by the next status the
    /// scheduler writes once it is valid again).
    pub async fn report_convert_errors(&mut self, errors: &[ConvertError]) {
        let now: HashSet<String> = errors.iter().map(|e| e.to_string()).collect();
        let new = self.reported.new_convert_errors(now);
        for e in errors {
            let text = e.to_string();
            if !new.contains(&text) {
                continue;
            }
            tracing::error!(error = %text, "object left out of scheduling");
            let origin = match e.origin.as_deref() {
                Some(volcano::ORIGIN) => Origin::Volcano,
                Some(crate::scheduler_plugins::ORIGIN) => Origin::SchedulerPlugins,
                _ => Origin::Basalt,
            };
            let Some(reference) = reference(&e.kind, &e.object, origin) else {
                continue;
            };
            self.event(reference, "Warning", INVALID_OBJECT, &text);
            if e.kind == "PodGroup" {
                self.mark_invalid(&e.object, origin, &text).await;
            }
        }
    }

    /// Logs each conversion warning (a node in two HyperNodes of one tier, a Volcano field not
    /// honoured, a missing PriorityClass, ...); one about a PodGroup is also a Warning Event on
    /// it. Other schedulers' pods' warnings stay log lines: those pods are not ours to annotate.
    pub async fn report_warnings(&mut self, warnings: Vec<String>) {
        let now: HashSet<String> = warnings.into_iter().collect();
        let mut new: Vec<String> = self.reported.new_warnings(now).into_iter().collect();
        new.sort();
        for w in new {
            tracing::warn!(warning = %w, "conversion warning");
            if let Some((origin, object)) = about_group(&w) {
                if let Some(reference) = reference("PodGroup", object, origin) {
                    self.event(reference, "Warning", CONVERSION_WARNING, &w);
                }
            } else if let Some(node) = about_node(&w) {
                // What the node's own objects disagree on (its NodeTopology and allocatable).
                let reference = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(node.into()),
                    ..Default::default()
                };
                self.event(reference, "Warning", CONVERSION_WARNING, &w);
            }
        }
    }

    /// A Warning Event on each pod or PodGroup whose expected-runtime annotation the last
    /// forecast could not read (taken as absent there); said once while it lasts.
    pub fn report_bad_runtimes(&mut self) {
        let Some(results) = self.forecaster.as_ref().and_then(|f| f.latest()) else {
            return;
        };
        let text = |b: &crate::forecast::BadRuntime| {
            format!("{} {}/{}: {}", b.kind, b.namespace, b.name, b.message)
        };
        let now = results.bad.iter().map(text).collect();
        let new = self.reported.new_bad_runtimes(now);
        for b in &results.bad {
            let said = text(b);
            if !new.contains(&said) {
                continue;
            }
            tracing::warn!(warning = %said, "expected run time not read; the forecast takes it as absent");
            let key = format!("{}/{}", b.namespace, b.name);
            let origin = match b.kind {
                "PodGroup" => self.view.group(&key).map_or(Origin::Basalt, |g| g.origin),
                _ => Origin::Basalt,
            };
            if let Some(reference) = reference(b.kind, &key, origin) {
                self.event(reference, "Warning", BAD_EXPECTED_RUNTIME, &said);
            }
        }
    }

    /// An Event on each pod held for what it states or for its volumes, its reason that of its
    /// PodGroup's condition (`UnsupportedField`, `VolumeNotReady`); said once while it lasts,
    /// like FailedScheduling (which such a pod gets instead).
    pub async fn report_held(&mut self, stores: &Stores) {
        for (key, reason, message) in self.held.sorted() {
            let (ns, name) = split_key(&key);
            let Some(pod) = stores.pods.get(&ObjectRef::new(name).within(ns)) else {
                continue;
            };
            let reference = pod_ref(ns, name, pod.metadata.uid.clone());
            self.event_once(format!("Pod/{key}"), reference, "Warning", reason, &message);
        }
    }

    async fn mark_invalid(&self, key: &str, origin: Origin, message: &str) {
        if !self.leadership.leading() {
            return;
        }
        let (ns, name) = split_key(key);
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

    /// The gauge, and per node over capacity one Warning Event and log line while it lasts
    /// (said again should it come back).
    pub fn report_overfull(&mut self) {
        self.metrics
            .nodes_over_capacity
            .set(self.overfull.len() as i64);
        let now: HashSet<String> = self.overfull.nodes().map(|(n, _)| n.to_string()).collect();
        let mut fresh: Vec<String> = self.reported.new_overfull(now).into_iter().collect();
        fresh.sort();
        for node in fresh {
            let what = (self.overfull.nodes())
                .find(|(n, _)| *n == node)
                .map_or("", |(_, w)| w);
            let message = format!(
                "bound pods request more than the node has ({what}); nothing more is bound here until it is back under capacity"
            );
            tracing::warn!(node = %node, over = %what, "node over capacity; holding binds there");
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.clone()),
                ..Default::default()
            };
            self.event(reference, "Warning", OVER_CAPACITY, &message);
        }
    }

    /// One Warning Event on each PodGroup whose pods name several schedulers, while it lasts.
    pub fn report_shared_groups(&mut self) {
        let shared: Vec<(String, String)> = (self.ownership.mixed())
            .map(|(k, by)| {
                (
                    k.to_string(),
                    by.iter().cloned().collect::<Vec<_>>().join(", "),
                )
            })
            .collect();
        for (key, by) in shared {
            let message = format!(
                "its pods name several schedulers ({by}); Basalt writes nothing to this PodGroup until they name one"
            );
            if !self
                .reported
                .is_news(format!("SharedGroup/{key}"), message.clone())
            {
                continue;
            }
            let Some(entry) = self.view.group(&key) else {
                continue;
            };
            let (ns, name) = split_key(&key);
            let reference = ObjectReference {
                api_version: Some(entry.origin.api_version().into()),
                kind: Some("PodGroup".into()),
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            };
            tracing::warn!(group = %key, schedulers = %by, "PodGroup shared by several schedulers; left alone");
            self.send_event(reference, "Warning", SCHEDULER_CONFLICT, &message);
        }
    }
}

/// The object an Event about `kind` `ns/name` goes on, for the kinds users look at.
fn reference(kind: &str, key: &str, origin: Origin) -> Option<ObjectReference> {
    let (api_version, namespaced) = match kind {
        "Pod" => ("v1", true),
        "PodGroup" => (origin.api_version(), true),
        "Queue" => (origin.api_version(), false),
        "NodeTopology" => (basalt_crds::types::API_VERSION, false),
        _ => return None,
    };
    // A cluster-scoped object's Events go to `default`, as kubectl looks for them.
    let (ns, name) = match key.split_once('/') {
        Some((ns, name)) if namespaced => (Some(ns), name),
        _ if namespaced => (Some("default"), key),
        _ => (None, key),
    };
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: ns.map(Into::into),
        name: Some(name.into()),
        ..Default::default()
    })
}

/// The PodGroup a conversion warning is about (`ORIGIN: PodGroup ns/name: field: message`).
fn about_group(warning: &str) -> Option<(Origin, &str)> {
    [
        (volcano::ORIGIN, Origin::Volcano),
        (crate::scheduler_plugins::ORIGIN, Origin::SchedulerPlugins),
        (SOURCE, Origin::Basalt),
    ]
    .into_iter()
    .find_map(|(label, origin)| {
        let rest = warning.strip_prefix(label)?.strip_prefix(": PodGroup ")?;
        let (object, _) = rest.split_once(": ")?;
        Some((origin, object))
    })
}

/// The Node a conversion warning from the cluster is about (`cluster: Node name: ...`).
fn about_node(warning: &str) -> Option<&str> {
    let rest = warning.strip_prefix(SOURCE)?.strip_prefix(": Node ")?;
    rest.split_once(": ").map(|(node, _)| node)
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
        assert_eq!(
            about_node("cluster: Node n1: status.allocatable: clamped"),
            Some("n1")
        );
        assert_eq!(
            about_node("cluster: Pod ml/p: metadata.labels[x]: ignored"),
            None
        );
    }
}

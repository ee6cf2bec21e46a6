//! Which PodGroups Basalt may write to, beside Volcano and other schedulers.
//!
//! Rules:
//! - Basalt writes status, conditions and Events to a PodGroup (Basalt's kind, Volcano's or
//!   scheduler-plugins') only when at least one of its pods names one of Basalt's scheduler
//!   names and none names another scheduler. A group whose pods all name another scheduler
//!   is that scheduler's: Volcano sets it `Running`, and Basalt must not write it back.
//! - A group whose pods name several schedulers gets one Warning Event (`SchedulerConflict`)
//!   while it lasts, and nothing else: which scheduler owns it is its users' call.
//! - A group with no pods is Basalt's when it is of Basalt's own kind (no other scheduler
//!   reads `scheduling.basalt.dev`; an invalid one must still be told so), and nobody's
//!   otherwise until its pods come.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};

use crate::apply::member_of;
use crate::view::Origin;

/// The Event reason on a PodGroup whose pods name several schedulers.
pub const SCHEDULER_CONFLICT: &str = "SchedulerConflict";

#[derive(Default)]
pub struct Ownership {
    /// `ns/name` of the groups whose pods name Basalt alone, and of those whose pods name
    /// other schedulers alone.
    ours: BTreeSet<String>,
    theirs: BTreeSet<String>,
    /// Groups whose pods name several schedulers, with the names.
    mixed: BTreeMap<String, BTreeSet<String>>,
    /// Basalt's scheduler names it was read with.
    names: Vec<String>,
}

impl Ownership {
    /// From every pod's group and scheduler name; `names` are Basalt's.
    pub fn of(pods: &[Arc<Pod>], names: &[String]) -> Ownership {
        let mut schedulers: HashMap<(&str, &str), BTreeSet<&str>> = HashMap::new();
        for p in pods {
            let Some(group) = member_of(p) else { continue };
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let name = (p.spec.as_ref())
                .and_then(|s| s.scheduler_name.as_deref())
                .unwrap_or("default-scheduler");
            schedulers.entry((ns, group)).or_default().insert(name);
        }
        let ours_name = |n: &str| names.iter().any(|s| s == n);
        let mut out = Ownership {
            names: names.to_vec(),
            ..Ownership::default()
        };
        for ((ns, group), by) in schedulers {
            let key = format!("{ns}/{group}");
            match (
                by.iter().any(|n| ours_name(n)),
                by.iter().all(|n| ours_name(n)),
            ) {
                (true, true) => {
                    out.ours.insert(key);
                }
                (true, false) => {
                    out.mixed
                        .insert(key, by.into_iter().map(str::to_string).collect());
                }
                _ => {
                    out.theirs.insert(key);
                }
            }
        }
        out
    }

    /// Whether Basalt may write to the PodGroup `ns/name` read from `origin`.
    pub fn allows(&self, key: &str, origin: Origin) -> bool {
        self.ours.contains(key)
            || (origin == Origin::Basalt
                && !self.theirs.contains(key)
                && !self.mixed.contains_key(key))
    }

    /// Basalt's scheduler names it was read with.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The groups whose pods name several schedulers, with the names.
    pub fn mixed(&self) -> impl Iterator<Item = (&str, &BTreeSet<String>)> {
        self.mixed.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl crate::apply::Scheduler {
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
            let (ns, name) = key.split_once('/').unwrap_or(("default", &key));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, group: &str, scheduler: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml",
                             "annotations": {"scheduling.k8s.io/group-name": group}},
                "spec": {"schedulerName": scheduler, "containers": []},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_group_is_basalt_s_only_when_its_pods_name_basalt_alone() {
        let pods = [
            pod("a", "ours", "basalt"),
            pod("b", "theirs", "volcano"),
            pod("c", "both", "basalt"),
            pod("d", "both", "volcano"),
        ];
        let o = Ownership::of(&pods, &["basalt".to_string()]);
        for origin in [Origin::Basalt, Origin::Volcano] {
            assert!(o.allows("ml/ours", origin));
            assert!(!o.allows("ml/theirs", origin));
            assert!(!o.allows("ml/both", origin));
        }
        // No pods: Basalt's own kind only.
        assert!(o.allows("ml/empty", Origin::Basalt));
        assert!(!o.allows("ml/empty", Origin::Volcano));
        let mixed: Vec<_> = o.mixed().collect();
        assert_eq!(mixed.len(), 1);
        assert_eq!(mixed[0].0, "ml/both");
        assert_eq!(
            mixed[0].1.iter().map(String::as_str).collect::<Vec<_>>(),
            ["basalt", "volcano"]
        );
    }
}

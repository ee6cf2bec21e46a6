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

use k8s_openapi::api::core::v1::Pod;

use crate::changes::Key;
use crate::keys::group_key;
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
    /// Each pod's group (`ns/name`) and scheduler name, by the pod's key: what to take back
    /// when the pod changes.
    members: HashMap<Key, (String, String)>,
    /// Per group, how many of its pods name each scheduler.
    counts: HashMap<String, BTreeMap<String, usize>>,
}

impl Ownership {
    /// From every pod's group and scheduler name; `names` are Basalt's.
    pub fn of(pods: &[Arc<Pod>], names: &[String]) -> Ownership {
        let mut out = Ownership {
            names: names.to_vec(),
            ..Ownership::default()
        };
        for p in pods {
            out.add(p);
        }
        let groups: Vec<String> = out.counts.keys().cloned().collect();
        for g in groups {
            out.classify(&g);
        }
        out
    }

    /// Brings it up to date with the pods at `changed` (added, modified or deleted), `get`
    /// giving each as the store has it now: work for those pods only.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a Key>,
        get: impl Fn(&Key) -> Option<Arc<Pod>>,
    ) {
        let mut touched = BTreeSet::new();
        for key in changed {
            if let Some((group, scheduler)) = self.members.remove(key) {
                if let Some(by) = self.counts.get_mut(&group) {
                    if let Some(n) = by.get_mut(&scheduler) {
                        *n -= 1;
                        if *n == 0 {
                            by.remove(&scheduler);
                        }
                    }
                    if by.is_empty() {
                        self.counts.remove(&group);
                    }
                }
                touched.insert(group);
            }
            if let Some(group) = get(key).and_then(|p| self.add(&p)) {
                touched.insert(group);
            }
        }
        for g in touched {
            self.classify(&g);
        }
    }

    /// Counts `p` in its group; the group's key, when it names one.
    fn add(&mut self, p: &Pod) -> Option<String> {
        let group = group_key(p)?;
        let scheduler = (p.spec.as_ref())
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        *(self.counts.entry(group.clone()).or_default())
            .entry(scheduler.to_string())
            .or_default() += 1;
        let key = (
            p.metadata.namespace.clone(),
            p.metadata.name.clone().unwrap_or_default(),
        );
        self.members
            .insert(key, (group.clone(), scheduler.to_string()));
        Some(group)
    }

    /// Files `group` under ours, theirs or mixed by the schedulers its pods name now.
    fn classify(&mut self, group: &str) {
        self.ours.remove(group);
        self.theirs.remove(group);
        self.mixed.remove(group);
        let Some(by) = self.counts.get(group) else {
            return;
        };
        let ours_name = |n: &str| self.names.iter().any(|s| s == n);
        match (
            by.keys().any(|n| ours_name(n)),
            by.keys().all(|n| ours_name(n)),
        ) {
            (true, true) => {
                self.ours.insert(group.to_string());
            }
            (true, false) => {
                let names = by.keys().cloned().collect();
                self.mixed.insert(group.to_string(), names);
            }
            _ => {
                self.theirs.insert(group.to_string());
            }
        }
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

    /// Ours, theirs and mixed (with the names).
    type Said = (
        BTreeSet<String>,
        BTreeSet<String>,
        Vec<(String, Vec<String>)>,
    );

    /// What it says of each group, to compare two.
    fn said(o: &Ownership) -> Said {
        let mixed = (o.mixed())
            .map(|(k, v)| (k.to_string(), v.iter().cloned().collect()))
            .collect();
        (o.ours.clone(), o.theirs.clone(), mixed)
    }

    #[test]
    fn updated_with_the_pods_that_changed_it_says_what_reading_every_pod_says() {
        let names = ["basalt".to_string()];
        let schedulers = ["basalt", "volcano", "default-scheduler"];
        let mut store: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
        let mut o = Ownership::of(&[], &names);
        // A fixed pseudo-random walk of adds, changes and deletes over few pods and groups.
        let mut x: u64 = 7;
        for step in 0..400u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let name = format!("p{}", (x >> 33) % 12);
            let mut changed = vec![(Some("ml".to_string()), name.clone())];
            if (x >> 20).is_multiple_of(5) {
                store.remove(&name);
            } else {
                let group = format!("g{}", (x >> 40) % 4);
                let scheduler = schedulers[((x >> 50) % 3) as usize];
                store.insert(name.clone(), pod(&name, &group, scheduler));
            }
            if step.is_multiple_of(7) {
                // A key logged twice, and one of a pod never seen.
                changed.push(changed[0].clone());
                changed.push((Some("ml".to_string()), "absent".to_string()));
            }
            o.update(&changed, |(_, n)| store.get(n).cloned());
            let all: Vec<_> = store.values().cloned().collect();
            assert_eq!(said(&o), said(&Ownership::of(&all, &names)), "step {step}");
        }
    }
}

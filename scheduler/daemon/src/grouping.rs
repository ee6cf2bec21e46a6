//! Pods on their way into a PodGroup (`apply/auto_groups.rs` makes the groups): auto groups
//! made for groupless pods, pods joined to their owner's group and pods held because their
//! owner could not be read. Two watches (the group's, the pod's) need not deliver in the order
//! the writes were made, so until both show the result the cycle sees each such pod as it was,
//! or not at all: a pod never names a group the cache lacks, and a gang member is never
//! scheduled alone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::keys::{group_key, split_key};
use k8s_openapi::api::core::v1::Pod;

#[derive(Default)]
pub struct Grouping {
    /// Auto PodGroups made for groupless pods (pod key → group name) whose group the watch
    /// may not show yet.
    auto: HashMap<String, String>,
    /// Pods joined to their owner's PodGroup (pod key → `ns/group`): kept out of the snapshot
    /// until the watches show both the group and the pod naming it, so a gang member is never
    /// scheduled alone in the meantime.
    joining: HashMap<String, String>,
    /// Pods whose owner could not be read this cycle (transient error): not scheduled yet.
    held: HashSet<String>,
}

impl Grouping {
    /// A new cycle's groups are about to be made: last cycle's holds end (their owners are
    /// read again).
    pub fn start(&mut self) {
        self.held.clear();
    }

    /// Whether the pod already has its auto group made, or is joining its owner's: nothing to
    /// make for it.
    pub fn in_flight(&self, key: &str) -> bool {
        self.auto.contains_key(key) || self.joining.contains_key(key)
    }

    /// The pod's owner could not be read (a transient error): held out of this cycle.
    pub fn hold(&mut self, key: String) {
        self.held.insert(key);
    }

    /// The pod joins its owner's PodGroup `ns/group`: held out of the snapshot from now until
    /// the group and the pod's annotation are both watched.
    pub fn join(&mut self, key: String, group: String) {
        self.joining.insert(key, group);
    }

    pub fn is_joining(&self, key: &str) -> bool {
        self.joining.contains_key(key)
    }

    /// Making or naming the group failed: the pod is left for the next cycle, held if it was
    /// joining its owner's gang.
    pub fn give_up(&mut self, key: String) {
        if self.joining.remove(&key).is_some() {
            self.held.insert(key);
        }
    }

    /// The group was made before and is no longer right to join: the pod waits for the next
    /// cycle.
    pub fn retry(&mut self, key: String) {
        self.joining.remove(&key);
        self.held.insert(key);
    }

    /// The pod now names its auto PodGroup `group`, which the watch may not show yet.
    pub fn made_auto_group(&mut self, key: String, group: String) {
        self.auto.insert(key, group);
    }

    /// Starts a walk over the pod store with the PodGroups the watch shows (`ns/name`): the
    /// auto groups among them need no bridging any more. Each pod the cycle takes goes through
    /// [`GroupingWalk::view_of`], then [`GroupingWalk::finish`] forgets the joins of pods not
    /// met.
    pub fn walk<'a>(&'a mut self, watched_groups: &'a HashSet<String>) -> GroupingWalk<'a> {
        // An auto PodGroup the watch shows: nothing left to bridge.
        self.auto.retain(|pod, group| {
            let (ns, _) = split_key(pod);
            !watched_groups.contains(&format!("{ns}/{group}"))
        });
        GroupingWalk {
            grouping: self,
            watched_groups,
            live: HashSet::new(),
        }
    }
}

/// One cycle's walk over the pod store (see [`Grouping::walk`]).
pub struct GroupingWalk<'a> {
    grouping: &'a mut Grouping,
    watched_groups: &'a HashSet<String>,
    /// Pods still joining their owner's group, met in the store.
    live: HashSet<String>,
}

impl GroupingWalk<'_> {
    /// No pod is held, joining or waiting for its auto group to be watched.
    pub fn is_idle(&self) -> bool {
        let g = &self.grouping;
        g.held.is_empty() && g.joining.is_empty() && g.auto.is_empty()
    }

    /// The pods this walk may see otherwise than as stored (`ns/name`).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        let g = &self.grouping;
        (g.auto.keys().chain(g.joining.keys()).chain(g.held.iter())).map(String::as_str)
    }

    /// Whether this cycle's auto groups dealt with the pod: its group is made or being
    /// joined, or it is held.
    pub fn knows(&self, key: &str) -> bool {
        let g = &self.grouping;
        g.auto.contains_key(key) || g.joining.contains_key(key) || g.held.contains(key)
    }

    /// Whether the pod named its auto PodGroup and the watch does not show the group yet.
    pub fn has_auto_group(&self, key: &str) -> bool {
        self.grouping.auto.contains_key(key)
    }

    /// The pod as this cycle must see it, or `None` when it is kept out: held (its owner could
    /// not be read), or joining its owner's group while the watches do not show both the group
    /// and the pod naming it. A pod naming an auto group not watched yet stays in its implicit
    /// group of one.
    pub fn view_of(&mut self, key: &str, mut pod: Arc<Pod>) -> Option<Arc<Pod>> {
        let g = &mut *self.grouping;
        if g.held.contains(key) {
            return None;
        }
        if let Some(group) = g.joining.get(key) {
            let named = group_key(&pod);
            if named.as_ref() == Some(group) && self.watched_groups.contains(group) {
                // Both watched: an ordinary member from now on.
                g.joining.remove(key);
            } else {
                self.live.insert(key.to_string());
                return None;
            }
        }
        // The pod may name its new auto PodGroup before the group's watch shows it: until
        // then it stays in its implicit group of one.
        let names_group = (pod.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(basalt_crds::convert::POD_GROUP));
        if names_group && g.auto.contains_key(key) {
            if let Some(a) = Arc::make_mut(&mut pod).metadata.annotations.as_mut() {
                a.remove(basalt_crds::convert::POD_GROUP);
            }
        }
        Some(pod)
    }

    /// Ends the walk: a joining pod not met (deleted, or left out before) is forgotten.
    pub fn finish(self) {
        let live = self.live;
        self.grouping.joining.retain(|k, _| live.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value) -> Arc<Pod> {
        let p = json!({"metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
            "spec": {"containers": [{"name": "main"}]}});
        Arc::new(serde_json::from_value(p).unwrap())
    }

    #[test]
    fn a_joining_pod_is_kept_out_until_the_group_and_its_annotation_are_watched() {
        let mut g = Grouping::default();
        g.join("ml/p".into(), "ml/train-pg".into());
        let none = HashSet::new();
        let mut walk = g.walk(&none);
        assert!(!walk.is_idle());
        assert!(walk.view_of("ml/p", pod(json!({}))).is_none());
        walk.finish();
        assert!(g.is_joining("ml/p"));

        // The pod names it, but the group is not watched yet.
        let named = pod(json!({"scheduling.basalt.dev/pod-group": "train-pg"}));
        let mut walk = g.walk(&none);
        assert!(walk.view_of("ml/p", named.clone()).is_none());
        walk.finish();

        let watched: HashSet<String> = ["ml/train-pg".to_string()].into();
        let mut walk = g.walk(&watched);
        let seen = walk
            .view_of("ml/p", named.clone())
            .expect("an ordinary member");
        walk.finish();
        assert!(Arc::ptr_eq(&seen, &named));
        assert!(!g.in_flight("ml/p"));

        // Joining, then not in the store: forgotten.
        g.join("ml/q".into(), "ml/train-pg".into());
        g.walk(&none).finish();
        assert!(!g.is_joining("ml/q"));
    }

    #[test]
    fn a_pod_naming_an_auto_group_not_watched_yet_stays_in_its_group_of_one() {
        let mut g = Grouping::default();
        g.made_auto_group("ml/p".into(), "p-pg".into());
        let named = pod(json!({"scheduling.basalt.dev/pod-group": "p-pg"}));
        let none = HashSet::new();
        let mut walk = g.walk(&none);
        assert!(walk.has_auto_group("ml/p"));
        let seen = walk.view_of("ml/p", named.clone()).unwrap();
        walk.finish();
        assert!(group_key(&seen).is_none());

        let watched: HashSet<String> = ["ml/p-pg".to_string()].into();
        let mut walk = g.walk(&watched);
        assert!(walk.is_idle());
        let seen = walk.view_of("ml/p", named.clone()).unwrap();
        assert!(Arc::ptr_eq(&seen, &named));
    }

    #[test]
    fn held_pods_are_kept_out_for_one_cycle() {
        let mut g = Grouping::default();
        g.hold("ml/p".into());
        let none = HashSet::new();
        assert!(g.walk(&none).view_of("ml/p", pod(json!({}))).is_none());
        g.start();
        assert!(g.walk(&none).view_of("ml/p", pod(json!({}))).is_some());

        // A failed join holds the pod; a failed auto group (no join) does not.
        g.join("ml/p".into(), "ml/train-pg".into());
        g.give_up("ml/p".into());
        g.give_up("ml/q".into());
        let mut walk = g.walk(&none);
        assert!(walk.view_of("ml/p", pod(json!({}))).is_none());
        assert!(walk.view_of("ml/q", pod(json!({}))).is_some());
    }
}

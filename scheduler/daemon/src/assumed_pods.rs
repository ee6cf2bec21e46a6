//! The assume cache of pods: every pod this scheduler bound, where and with which GPU ids,
//! until the watch shows it bound. Until then each cycle sees the pod where it was bound, not
//! pending as the store still has it, so its capacity is never handed out twice and it is not
//! bound again. An entry is released exactly once: when the watch shows the pod bound, when
//! the pod is replaced (another uid) or when it leaves the store (deleted).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A pod this scheduler bound whose binding the watch has not shown yet.
struct Assumed {
    node: String,
    /// The GPU ids annotation value (`0,1`), empty when none.
    gpus: String,
    uid: Option<String>,
    /// The store's object and the copy made of it: the same copy while the store holds the
    /// same object, so a cycle's conversion of it is kept (`basalt_crds::incremental`).
    view: Option<(Arc<Pod>, Arc<Pod>)>,
}

/// The pods bound and not yet watched bound, by `ns/name`.
#[derive(Default)]
pub struct AssumedPods {
    bound: HashMap<String, Assumed>,
}

impl AssumedPods {
    /// Records a bind the API server accepted: `key` is on `node` with the GPU ids `gpus`.
    pub fn assume(&mut self, key: String, node: String, gpus: String, uid: Option<String>) {
        let view = None;
        self.bound.insert(
            key,
            Assumed {
                node,
                gpus,
                uid,
                view,
            },
        );
    }

    /// Whether `key` was bound by this scheduler and the watch does not show it yet.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.bound.contains_key(key)
    }

    pub fn is_empty(&self) -> bool {
        self.bound.is_empty()
    }

    /// Forgets every bind (another replica led in between).
    pub fn clear(&mut self) {
        self.bound.clear();
    }

    /// Starts a walk over the pod store: each pod the cycle takes goes through
    /// [`AssumedWalk::view_of`], then [`AssumedWalk::finish`] releases the pods not met.
    pub fn walk(&mut self) -> AssumedWalk<'_> {
        AssumedWalk {
            cache: self,
            seen: HashSet::new(),
        }
    }
}

/// One cycle's walk over the pod store (see [`AssumedPods::walk`]).
pub struct AssumedWalk<'a> {
    cache: &'a mut AssumedPods,
    /// The assumed pods met in the store and still not watched bound.
    seen: HashSet<String>,
}

impl AssumedWalk<'_> {
    /// The pod as this cycle must see it: where it was bound (with its GPU ids) while the
    /// watch has not caught up, else the store's own object (not copied). A pod the watch shows
    /// bound, or another pod of the same name, releases its entry: the store is the truth now.
    pub fn view_of(&mut self, key: &str, mut pod: Arc<Pod>) -> Arc<Pod> {
        let Some(assumed) = self.cache.bound.get_mut(key) else {
            return pod;
        };
        let watched = pod.spec.as_ref().and_then(|sp| sp.node_name.clone());
        let same_pod = pod.metadata.uid == assumed.uid;
        if watched.is_some() || !same_pod {
            // The watch caught up (or the pod was replaced): the store is the truth now.
            self.cache.bound.remove(key);
            return pod;
        }
        self.seen.insert(key.to_string());
        if let Some((source, copy)) = &assumed.view {
            if Arc::ptr_eq(source, &pod) {
                return copy.clone();
            }
        }
        let source = pod.clone();
        let copy = Arc::make_mut(&mut pod);
        if let Some(spec) = copy.spec.as_mut() {
            spec.node_name = Some(assumed.node.clone());
        }
        if !assumed.gpus.is_empty() {
            copy.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(
                    basalt_crds::convert::GPU_IDS.to_string(),
                    assumed.gpus.clone(),
                );
        }
        assumed.view = Some((source, pod.clone()));
        pod
    }

    /// Ends the walk: a pod not met left the store (deleted) or was not brought to the walk
    /// because the store shows it bound: nothing to assume any more either way.
    pub fn finish(self) {
        let seen = self.seen;
        self.cache.bound.retain(|k, _| seen.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, node: Option<&str>) -> Arc<Pod> {
        let mut p = json!({"metadata": {"name": "p", "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"name": "main"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        Arc::new(serde_json::from_value(p).unwrap())
    }

    fn node_of(p: &Pod) -> Option<&str> {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref())
    }

    #[test]
    fn a_bound_pod_is_seen_where_it_was_bound_until_the_watch_shows_it() {
        let mut a = AssumedPods::default();
        a.assume("ml/p".into(), "n1".into(), "0,1".into(), Some("u1".into()));
        let mut walk = a.walk();
        let seen = walk.view_of("ml/p", pod("u1", None));
        walk.finish();
        assert_eq!(node_of(&seen), Some("n1"));
        let gpus = seen.metadata.annotations.as_ref().unwrap();
        assert_eq!(gpus[basalt_crds::convert::GPU_IDS], "0,1");
        assert!(a.is_assumed("ml/p"));

        // The watch caught up: released, and the store's object is used as it is.
        let watched = pod("u1", Some("n2"));
        let mut walk = a.walk();
        let seen = walk.view_of("ml/p", watched.clone());
        walk.finish();
        assert!(Arc::ptr_eq(&seen, &watched));
        assert!(a.is_empty());
    }

    #[test]
    fn a_replaced_or_deleted_pod_releases_its_entry() {
        let mut a = AssumedPods::default();
        a.assume("ml/p".into(), "n1".into(), String::new(), Some("u1".into()));
        let mut walk = a.walk();
        let seen = walk.view_of("ml/p", pod("u2", None));
        walk.finish();
        assert_eq!(node_of(&seen), None, "another pod of the same name");
        assert!(a.is_empty());

        a.assume("ml/p".into(), "n1".into(), String::new(), Some("u1".into()));
        a.walk().finish();
        assert!(!a.is_assumed("ml/p"), "not in the store: deleted");
    }

    #[test]
    fn the_same_store_object_is_seen_as_the_same_copy() {
        let mut a = AssumedPods::default();
        a.assume("ml/p".into(), "n1".into(), "0".into(), Some("u1".into()));
        let stored = pod("u1", None);
        let views: Vec<Arc<Pod>> = (0..2)
            .map(|_| {
                let mut walk = a.walk();
                let seen = walk.view_of("ml/p", stored.clone());
                walk.finish();
                seen
            })
            .collect();
        assert!(
            Arc::ptr_eq(&views[0], &views[1]),
            "a conversion of it is kept"
        );
        assert!(
            !Arc::ptr_eq(&views[0], &stored),
            "the store's object is not changed"
        );
        assert_eq!(node_of(&stored), None);

        // The store's object changed (still unbound): a new copy of it.
        let mut walk = a.walk();
        let seen = walk.view_of("ml/p", pod("u1", None));
        walk.finish();
        assert!(!Arc::ptr_eq(&seen, &views[0]));
        assert_eq!(node_of(&seen), Some("n1"));
    }
}

//! The pods no node is bound to yet, kept from cycle to cycle and brought up to date from the
//! pods the change log names: what auto grouping, the FailedScheduling Events and the pending
//! gauges look at, so that none of them walks every pod of the cluster each cycle (at 100,000
//! pods nearly all are bound, and a cycle after one new gang changes a handful).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::changes::{Changed, Key};

#[derive(Default)]
pub struct UnboundPods {
    /// By namespace and name: an order that does not depend on the watch cache's.
    pods: BTreeMap<Key, Arc<Pod>>,
    /// Whether every pod was read once: until then, any update reads them all.
    listed: bool,
}

fn unbound(p: &Pod) -> bool {
    (p.spec.as_ref()).is_none_or(|s| s.node_name.is_none())
}

fn key_of(p: &Pod) -> Key {
    (
        p.metadata.namespace.clone(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

impl UnboundPods {
    /// From every pod (after a list).
    pub fn of(pods: &[Arc<Pod>]) -> Self {
        let pods = (pods.iter())
            .filter(|p| unbound(p))
            .map(|p| (key_of(p), p.clone()))
            .collect();
        UnboundPods { pods, listed: true }
    }

    /// Brings it up to date with what changed of the pods (`None`: nothing), `all` giving every
    /// pod after a list and `get` the pod at a key as the store has it now.
    pub fn update(
        &mut self,
        changed: Option<&Changed>,
        all: impl FnOnce() -> Vec<Arc<Pod>>,
        get: impl Fn(&Key) -> Option<Arc<Pod>>,
    ) {
        match changed {
            _ if !self.listed => *self = Self::of(&all()),
            None => {}
            Some(Changed::Everything) => *self = Self::of(&all()),
            Some(Changed::Objects(keys)) => {
                for key in keys {
                    match get(key).filter(|p| unbound(p)) {
                        Some(p) => self.pods.insert(key.clone(), p),
                        None => self.pods.remove(key),
                    };
                }
            }
        }
    }

    /// The pods without a node, in namespace and name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
        let mut p = serde_json::json!({"metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "main"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = n.into();
        }
        Arc::new(serde_json::from_value(p).unwrap())
    }

    fn names(u: &UnboundPods) -> Vec<String> {
        u.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn kept_from_the_pods_that_changed_it_holds_what_reading_every_pod_holds() {
        let mut store: HashMap<Key, Arc<Pod>> = HashMap::new();
        let put = |store: &mut HashMap<Key, Arc<Pod>>, p: Arc<Pod>| {
            store.insert(key_of(&p), p);
        };
        for (name, node) in [("a", None), ("b", Some("n1")), ("c", None)] {
            put(&mut store, pod(name, node));
        }
        let all = |s: &HashMap<Key, Arc<Pod>>| s.values().cloned().collect::<Vec<_>>();
        let mut kept = UnboundPods::default();
        kept.update(Some(&Changed::Everything), || all(&store), |_| None);
        assert_eq!(names(&kept), ["a", "c"]);
        // a is bound, b deleted, d arrives unbound; c did not change and is not looked at.
        put(&mut store, pod("a", Some("n2")));
        store.remove(&(Some("ml".into()), "b".into()));
        put(&mut store, pod("d", None));
        let keys: BTreeSet<Key> = ["a", "b", "d"]
            .iter()
            .map(|n| (Some("ml".to_string()), n.to_string()))
            .collect();
        let asked = std::cell::RefCell::new(Vec::new());
        kept.update(
            Some(&Changed::Objects(keys)),
            || panic!("not a list"),
            |k| {
                asked.borrow_mut().push(k.1.clone());
                store.get(k).cloned()
            },
        );
        assert_eq!(names(&kept), ["c", "d"]);
        assert_eq!(names(&kept), names(&UnboundPods::of(&all(&store))));
        assert_eq!(
            *asked.borrow(),
            ["a", "b", "d"],
            "only the changed pods read"
        );
        kept.update(
            None,
            || panic!("nothing changed"),
            |_| panic!("nothing changed"),
        );
        assert_eq!(kept.iter().count(), 2);
        // Never listed: every pod is read, whatever the log says.
        let mut fresh = UnboundPods::default();
        fresh.update(None, || all(&store), |_| None);
        assert_eq!(names(&fresh), ["c", "d"]);
    }
}

//! Values shared between pods that state the same: the pods of a ReplicaSet or of a gang carry
//! equal labels and, mostly, equal affinity and spread terms, but each pod's are converted on
//! their own. Interned, they hold one [`PodMeta`] and one [`PodConstraints`], so the scheduler
//! derives what selects them and what their terms become once per value (see `interpod`),
//! comparing pointers, not label maps.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

use crate::constraints::PodConstraints;
use crate::hash::Set;
use crate::model::PodMeta;

#[derive(Debug)]
struct Interner<T>(Set<Arc<T>>);

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner(Set::default())
    }
}

impl<T: Hash + Eq> Interner<T> {
    fn intern(&mut self, value: T) -> Arc<T> {
        if let Some(shared) = self.0.get(&value) {
            return shared.clone();
        }
        let value = Arc::new(value);
        self.0.insert(value.clone());
        value
    }

    fn intern_arc(&mut self, value: &Arc<T>) -> Arc<T> {
        match self.0.get(&**value) {
            Some(shared) => shared.clone(),
            None => {
                self.0.insert(value.clone());
                value.clone()
            }
        }
    }

    fn prune(&mut self, live: usize) {
        if self.0.len() > 2 * live + 1024 {
            self.0.retain(|m| Arc::strong_count(m) > 1);
        }
    }
}

/// The interned metadata and constraints of a builder's pods.
#[derive(Debug, Default)]
pub(crate) struct PodValues {
    metas: Interner<PodMeta>,
    constraints: Interner<PodConstraints>,
}

impl PodValues {
    pub(crate) fn meta(
        &mut self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Arc<PodMeta> {
        self.metas.intern(PodMeta {
            namespace: namespace.to_string(),
            labels: labels.clone(),
        })
    }

    pub(crate) fn constraints(&mut self, c: &Arc<PodConstraints>) -> Arc<PodConstraints> {
        self.constraints.intern_arc(c)
    }

    /// Forgets the values no pod holds any more, once they outnumber the live pods: a
    /// long-running builder sees pods come and go.
    pub(crate) fn prune(&mut self, live_pods: usize) {
        self.metas.prune(live_pods);
        self.constraints.prune(live_pods);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_are_shared_and_dropped_ones_forgotten() {
        let mut values = PodValues::default();
        let labels = BTreeMap::from([("app".to_string(), "a".to_string())]);
        let a = values.meta("ns", &labels);
        assert!(Arc::ptr_eq(&a, &values.meta("ns", &labels)));
        assert!(!Arc::ptr_eq(&a, &values.meta("other", &labels)));
        let c = Arc::new(PodConstraints::default());
        let shared = values.constraints(&c);
        let again = values.constraints(&Arc::new(PodConstraints::default()));
        assert!(Arc::ptr_eq(&shared, &again) && Arc::ptr_eq(&shared, &c));
        for i in 0..2048 {
            values.meta(&format!("ns-{i}"), &labels);
        }
        values.prune(1);
        assert_eq!(
            values.metas.0.len(),
            1,
            "only the value pods still hold is kept"
        );
        assert!(Arc::ptr_eq(&values.meta("ns", &labels), &a));
    }
}

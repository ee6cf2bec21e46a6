//! Pod metadata shared between pods that carry the same: the pods of a ReplicaSet or of a
//! non-indexed Job have equal labels, so they hold one [`PodMeta`], and the scheduler derives
//! what selects them once per value (see `interpod`), comparing pointers, not label maps.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hash::Set;
use crate::model::PodMeta;

#[derive(Debug, Default)]
pub(crate) struct MetaInterner(Set<Arc<PodMeta>>);

impl MetaInterner {
    pub(crate) fn intern(
        &mut self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        terminating: bool,
    ) -> Arc<PodMeta> {
        let meta = PodMeta {
            namespace: namespace.to_string(),
            labels: labels.clone(),
            terminating,
        };
        if let Some(shared) = self.0.get(&meta) {
            return shared.clone();
        }
        let meta = Arc::new(meta);
        self.0.insert(meta.clone());
        meta
    }

    /// Forgets the values no pod holds any more, once they outnumber the live pods: a
    /// long-running builder sees pods come and go.
    pub(crate) fn prune(&mut self, live_pods: usize) {
        if self.0.len() > 2 * live_pods + 1024 {
            self.0.retain(|m| Arc::strong_count(m) > 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_metadata_is_shared_and_dropped_values_are_forgotten() {
        let mut metas = MetaInterner::default();
        let labels = BTreeMap::from([("app".to_string(), "a".to_string())]);
        let a = metas.intern("ns", &labels, false);
        let b = metas.intern("ns", &labels, false);
        let other = metas.intern("other", &labels, false);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
        drop(other);
        for i in 0..2048 {
            metas.intern(&format!("ns-{i}"), &labels, false);
        }
        metas.prune(1);
        assert_eq!(metas.0.len(), 1, "only the value pods still hold is kept");
        assert!(Arc::ptr_eq(&metas.intern("ns", &labels, false), &a));
    }
}

//! Free nodes per domain of the coarse topology keys (zones, racks) that inter-pod rules
//! restrict on: the session's bucket index split once more by domain. A pod whose hard rules
//! allow only some domains (a zone spread at its skew, affinity to the zone of a gang mate,
//! anti-affinity on the zone) searches those domains' buckets instead of stepping over every
//! node of the others in the shared buckets, which made a spread gang cost a scan of the
//! cluster per member.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::hash::Map;
use crate::interpod::InterPod;
use crate::model::NodeId;

/// Buckets as the session's `FreeIndex` keys them: (capacity class, free whole GPUs), each
/// sorted by node-order key.
pub(super) type Buckets = BTreeMap<(u32, u32), BTreeSet<(u64, NodeId)>>;

/// Built per key when a search first narrows on it (a spread that allows most zones walks the
/// shared buckets and never needs it), kept up to date from then on.
#[derive(Default)]
pub(super) struct DomainIndex {
    /// Per indexed key: per domain slot (see `InterPod::domain_slot`), its buckets.
    keys: Vec<(u32, OnceCell<Map<u32, Buckets>>)>,
}

impl DomainIndex {
    pub(super) fn new(keys: Vec<u32>) -> Self {
        DomainIndex {
            keys: keys.into_iter().map(|k| (k, OnceCell::new())).collect(),
        }
    }

    pub(super) fn insert(&mut self, pods: &InterPod, bucket: (u32, u32), entry: (u64, NodeId)) {
        for (key, slots) in &mut self.keys {
            let Some(slots) = slots.get_mut() else {
                continue;
            };
            let slot = slots.entry(pods.domain_slot(*key, entry.1)).or_default();
            slot.entry(bucket).or_default().insert(entry);
        }
    }

    pub(super) fn remove(&mut self, pods: &InterPod, bucket: (u32, u32), entry: (u64, NodeId)) {
        for (key, slots) in &mut self.keys {
            let Some(slots) = slots.get_mut() else {
                continue;
            };
            if let Some(slot) = slots.get_mut(&pods.domain_slot(*key, entry.1)) {
                if let Some(set) = slot.get_mut(&bucket) {
                    set.remove(&entry);
                    if set.is_empty() {
                        slot.remove(&bucket);
                    }
                }
            }
        }
    }

    /// The indexed keys.
    pub(super) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.keys.iter().map(|(k, _)| *k)
    }

    /// The buckets of one domain slot of an indexed key, the key's index built from `all`
    /// (the session's buckets now) on first use.
    pub(super) fn buckets<'s>(
        &'s self,
        key: u32,
        slot: u32,
        pods: &InterPod,
        all: &Buckets,
    ) -> Option<&'s Buckets> {
        let (_, slots) = self.keys.iter().find(|(k, _)| *k == key)?;
        let slots = slots.get_or_init(|| {
            let mut slots: Map<u32, Buckets> = Map::default();
            for (&bucket, set) in all {
                for &(k, node) in set {
                    let slot = slots.entry(pods.domain_slot(key, node)).or_default();
                    slot.entry(bucket).or_default().insert((k, node));
                }
            }
            slots
        });
        slots.get(&slot)
    }
}

//! The free-node index ([`FreeIndex`]): nodes bucketed by capacity class and free devices,
//! kept up to date as the session places and evicts.

use super::*;

impl<'a> Session<'a> {
    /// Indexes every node at once: one sort and bulk-built sets.
    pub(super) fn index_all(&mut self) {
        let snapshot = self.snapshot;
        // Capacity classes: nodes with equal allocatable, numbered in node order.
        let mut classes: Map<&Resources, u32> = Map::default();
        let mut last: Option<(&Resources, u32)> = None;
        self.index.class = (snapshot.nodes.iter())
            .map(|node| {
                // Neighbours by name are often alike: compare before hashing.
                let c = match last {
                    Some((a, c)) if *a == node.allocatable => c,
                    _ => {
                        let next = classes.len() as u32;
                        *classes.entry(&node.allocatable).or_insert(next)
                    }
                };
                last = Some((&node.allocatable, c));
                c
            })
            .collect();
        let mut entries: Vec<((u32, u32), (u64, NodeId))> = (snapshot.nodes.iter())
            .map(|node| {
                let i = node.id.index();
                let free_gpus = self.bucket_devices(node.id);
                let key =
                    (self.fw.node_order()).key(&node.allocatable, self.capacity.used(node.id));
                ((self.index.class[i], free_gpus), (key, node.id))
            })
            .collect();
        self.index.key = entries.iter().map(|&((_, f), (k, _))| (f, k)).collect();
        entries.sort_unstable();
        let mut rest = entries.as_slice();
        while let Some(&(bucket, _)) = rest.first() {
            let len = rest.partition_point(|e| e.0 == bucket);
            let (run, tail) = rest.split_at(len);
            (self.index.buckets).insert(bucket, run.iter().map(|e| e.1).collect());
            rest = tail;
        }
    }

    pub(super) fn index_insert(&mut self, node: NodeId) {
        let i = node.index();
        let snap_node = &self.snapshot.nodes[i];
        let free_gpus = self.bucket_devices(node);
        let key = (self.fw.node_order()).key(&snap_node.allocatable, self.capacity.used(node));
        self.index.key[i] = (free_gpus, key);
        let bucket = (self.index.class[i], free_gpus);
        self.index
            .buckets
            .entry(bucket)
            .or_default()
            .insert((key, node));
        self.domain_index.insert(&self.pods, bucket, (key, node));
    }

    pub(super) fn index_remove(&mut self, node: NodeId) {
        let i = node.index();
        let (free_gpus, key) = self.index.key[i];
        let bucket = (self.index.class[i], free_gpus);
        if let Some(set) = self.index.buckets.get_mut(&bucket) {
            set.remove(&(key, node));
            if set.is_empty() {
                self.index.buckets.remove(&bucket);
            }
        }
        self.domain_index.remove(&self.pods, bucket, (key, node));
    }
}

//! What a scheduler carries from one cycle to the next ([`Warm`]).

use std::sync::Arc;

use basalt_topology::{TierSpec, Topology};

use crate::session::NodeState;
use crate::snapshot::{Snapshot, Version};

/// What one scheduler carries from a cycle to the next, so that a cycle redoes only what
/// changed: the topologies built from node labels, and the node state the last session ended
/// with (usage, the free-capacity index, free GPUs per domain, static filter results), which
/// the next session brings up to date by re-indexing only the nodes whose usage differs (from
/// one cycle to the next few do) instead of indexing every node again.
///
/// The caller owns it and hands it to each [`schedule`](crate::schedule) call. It never
/// changes a plan: a fresh `Warm::default()` gives exactly the plan a carried one does. What
/// it carries is used only for snapshots of the same nodes (a [`crate::SnapshotBuilder`]'s
/// until a node changes, and their clones) and resource names; any other snapshot starts
/// afresh and leaves its own state for the next. So keep one Warm per snapshot source: two
/// builders taking turns with one Warm start every session afresh.
///
/// It cannot tell frameworks apart (the node index is keyed by the framework's node order,
/// the filter results come from its filters): **keep one Warm per [`crate::Framework`]**, and
/// start a fresh one whenever the framework is built anew (a config reload). Debug builds
/// check the carried index against the framework's node order.
#[derive(Default)]
pub struct Warm {
    topologies: Topologies,
    node_state: Option<NodeState>,
}

/// Topologies per tier list, for the node labels of one [`Version`].
#[derive(Default)]
struct Topologies {
    labels: Option<Version>,
    cached: Vec<CachedTopology>,
}

struct CachedTopology {
    tiers: Vec<TierSpec>,
    /// Some node carries a label of these tiers (or a Volcano tier label).
    labelled: bool,
    topology: Option<Arc<Topology>>,
}

impl Warm {
    /// [`Snapshot::topology`], built once per tier list and set of node labels.
    pub fn topology(
        &mut self,
        snapshot: &Snapshot,
        tiers: &[TierSpec],
        always: bool,
    ) -> Option<Arc<Topology>> {
        let cache = &mut self.topologies;
        let labels = &snapshot.lineage.labels;
        if !cache.labels.as_ref().is_some_and(|l| l.is(labels)) {
            *cache = Topologies {
                labels: Some(labels.clone()),
                cached: Vec::new(),
            };
        }
        let pos = match cache.cached.iter().position(|c| c.tiers == tiers) {
            Some(pos) => pos,
            None => {
                cache.cached.push(CachedTopology {
                    tiers: tiers.to_vec(),
                    labelled: snapshot.has_tier_labels(tiers),
                    topology: None,
                });
                cache.cached.len() - 1
            }
        };
        let entry = &mut cache.cached[pos];
        if !entry.labelled && !always {
            return None;
        }
        let topology =
            (entry.topology).get_or_insert_with(|| Arc::new(snapshot.build_topology(tiers)));
        Some(topology.clone())
    }

    /// The node state the last session ended with, when it was of the same nodes and resource
    /// names as `snapshot` (taken either way: it is the session's to hand back).
    pub(crate) fn take_node_state(&mut self, snapshot: &Snapshot) -> Option<NodeState> {
        let state = self.node_state.take()?;
        state.fits(snapshot).then_some(state)
    }

    pub(crate) fn keep_node_state(&mut self, state: NodeState) {
        self.node_state = Some(state);
    }
}

impl std::fmt::Debug for Warm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm")
            .field("topologies", &self.topologies.cached.len())
            .field("node_state", &self.node_state.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{schedule, Action, Framework, LeastAllocated, NodeSpec, SnapshotBuilder};

    fn node(name: &str, cpu: i64) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            allocatable: [("cpu".to_string(), cpu)].into(),
            ..Default::default()
        }
    }

    /// The next snapshot of a builder takes over what the last session left, until a node
    /// changes; a snapshot built on its own never does.
    #[test]
    fn node_state_is_handed_on_within_a_node_version() {
        let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
        let mut b = SnapshotBuilder::new("", vec![node("n0", 8000), node("n1", 8000)]).unwrap();
        let mut warm = Warm::default();
        schedule(b.build(0, &[]).unwrap(), &fw, &mut warm);
        assert!(warm.take_node_state(b.build(1, &[]).unwrap()).is_some());

        schedule(b.build(2, &[]).unwrap(), &fw, &mut warm);
        b.update_node(node("n1", 4000)).unwrap();
        assert!(warm.take_node_state(b.build(3, &[]).unwrap()).is_none());

        let alone = crate::Snapshot::build(crate::ClusterSpec {
            nodes: vec![node("n0", 8000), node("n1", 4000)],
            ..Default::default()
        })
        .unwrap();
        schedule(b.build(4, &[]).unwrap(), &fw, &mut warm);
        assert!(warm.take_node_state(&alone).is_none());
    }
}

//! The node state a session takes from a [`crate::Warm`] and hands back to it: its final
//! usage, the free-capacity index, free GPUs per topology domain and static filter results,
//! which the next session of the same nodes brings up to date instead of building anew.

use std::sync::Arc;

use basalt_topology::{DomainId, Topology};

use super::{FreeIndex, Session, Statics, TopoState};
use crate::hash::Map;
use crate::model::{NodeId, PlacementRules};
use crate::resources::Resources;
use crate::snapshot::Snapshot;

/// Filter results kept for rules the last session did not use, at most (a node-sized vector
/// each; a cluster with more distinct rules in use recomputes some).
const MAX_KEPT_STATICS: usize = 256;

/// What a session hands on to the next session of the same nodes through a [`crate::Warm`]
/// (see [`Session::with_warm`]): its final usage and the index and domain counts built from it.
pub(crate) struct NodeState {
    /// The nodes and resource names of the snapshot the session ran on: the state fits only
    /// those.
    nodes: crate::snapshot::Version,
    resources: crate::resources::ResourceNames,
    /// The generation of that snapshot, and the nodes whose usage the session changed
    /// (sorted): elsewhere its usage is that snapshot's (see `Lineage`).
    generation: Option<u64>,
    moved: Vec<NodeId>,
    used: Vec<Resources>,
    gpus_used: Vec<u64>,
    /// The shared devices' usage it ended with (the index's levels follow it).
    device_use: Vec<crate::devices::DeviceUse>,
    index: FreeIndex,
    topo: Option<TopoState>,
    /// Static filter results by placement rules (their ids differ from snapshot to snapshot).
    statics: Map<PlacementRules, Statics>,
}

impl NodeState {
    /// Whether the state is of `snapshot`'s nodes and resource names.
    pub(crate) fn fits(&self, snapshot: &Snapshot) -> bool {
        let fits = self.nodes.is(&snapshot.lineage.nodes) && self.resources == snapshot.resources;
        debug_assert!(!fits || self.used.len() == snapshot.nodes.len());
        fits
    }
}

impl Session<'_> {
    /// Node usage at the start (the snapshot's, plus capacity held for nominated pods) and the
    /// free-capacity index over it: from the last session's state (`kept`), copying and
    /// re-indexing only the nodes whose usage differs from where that session ended, or from
    /// scratch with one sort and bulk-built sets. Either way the index is the same set of
    /// entries. Returns the kept domain counts with the nodes whose GPUs changed (and their
    /// GPUs before), for [`Self::topo_state`].
    pub(super) fn start_nodes(
        &mut self,
        kept: Option<NodeState>,
    ) -> Option<(TopoState, Vec<(NodeId, u64)>)> {
        let snap = self.snapshot;
        let Some(state) = kept else {
            (self.capacity).start(snap.node_used.clone(), snap.node_gpus_used.clone());
            self.hold_nominated(&mut Vec::new());
            self.index_all();
            return None;
        };
        self.capacity.start(state.used, state.gpus_used);
        self.index = state.index;
        self.kept_statics = state.statics;
        let mut stale = Vec::new();
        let mut gpus_moved = Vec::new();
        // Only the nodes that snapshot or that session changed can differ, when known.
        let nodes: Vec<NodeId> = match (&snap.lineage.changed, state.generation) {
            (Some((before, changed)), Some(kept)) if *before == kept => {
                let mut nodes: Vec<NodeId> = changed.iter().chain(&state.moved).copied().collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes
            }
            _ => (0..snap.nodes.len()).map(|i| NodeId(i as u32)).collect(),
        };
        for node in nodes {
            let (was, usage_moved) = self.capacity.follow_snapshot(snap, node);
            let gpus = snap.node_gpus_used[node.index()];
            if was != gpus {
                gpus_moved.push((node, was));
            }
            // A shared node's level follows its devices, which its usage may not show.
            let n = &snap.nodes[node.index()];
            let devices_moved =
                n.sharing.shares() && self.capacity.shared_use_differs(&state.device_use, n);
            if usage_moved || was != gpus || devices_moved {
                stale.push(node);
            }
        }
        self.hold_nominated(&mut stale);
        stale.sort_unstable();
        stale.dedup();
        for node in stale {
            self.index_remove(node);
            self.index_insert(node);
        }
        debug_assert!(
            self.index_follows_node_order(),
            "node state carried from another framework: a Warm is for one framework only"
        );
        state.topo.map(|t| (t, gpus_moved))
    }

    /// Whether every node's indexed key is the framework's node order's.
    fn index_follows_node_order(&self) -> bool {
        let order = self.fw.node_order();
        (self.snapshot.nodes.iter()).all(|n| {
            let i = n.id.index();
            self.index.key[i].1 == order.key(&n.allocatable, self.capacity.used(n.id))
        })
    }

    /// Free GPUs per domain of `topology`, taken when tiers are configured (or Volcano tiers
    /// are labelled) and some node carries a tier label: on a flat cluster every gang is placed
    /// as before. They come from `kept` (the last session's, for the same topology) brought up
    /// to date, or are counted afresh.
    pub(super) fn topo_state(
        &self,
        topology: Arc<Topology>,
        kept: Option<(TopoState, Vec<(NodeId, u64)>)>,
    ) -> TopoState {
        let snap = self.snapshot;
        if let Some((mut topo, moved)) = kept {
            if Arc::ptr_eq(&topo.topology, &topology) {
                for (node, was) in moved {
                    let count = snap.nodes[node.index()].gpus.len() as u32;
                    let free = |mask: u64| (count - mask.count_ones().min(count)) as i64;
                    topo.change(node, free(self.capacity.closed(node)) - free(was));
                }
                return topo;
            }
        }
        let mut free = vec![0i64; topology.domains.len()];
        for node in &snap.nodes {
            let f = self.free_gpus(node.id) as i64;
            for &d in topology.domains_of(node.id.index()) {
                free[d.index()] += f;
            }
        }
        let mut by_tier = vec![Vec::new(); topology.tiers.len()];
        for (i, d) in topology.domains.iter().enumerate() {
            by_tier[d.tier.0 as usize].push((free[i], DomainId(i as u32)));
        }
        let by_tier = (by_tier.into_iter())
            .map(|mut v| {
                v.sort_unstable();
                v.into_iter().collect()
            })
            .collect();
        TopoState {
            topology,
            free,
            by_tier,
        }
    }

    /// Leaves the session's node state in its [`crate::Warm`], if it has one (at the end of
    /// [`Session::into_plan`]).
    pub(super) fn hand_on(self) {
        let snap = self.snapshot;
        let names = &snap.resources;
        let Some(warm) = self.warm else {
            return;
        };
        // Filter results of rules this session used, and of those the last one did.
        let mut statics = self.kept_statics;
        if statics.len() > MAX_KEPT_STATICS {
            statics.clear();
        }
        for (rules, s) in self.statics {
            statics.insert(snap.rules[rules.0 as usize].clone(), s);
        }
        let (used, gpus_used, device_use) = self.capacity.into_node_state();
        warm.keep_node_state(NodeState {
            nodes: snap.lineage.nodes.clone(),
            resources: names.clone(),
            generation: snap.lineage.generation,
            moved: self.changes.into_nodes(),
            statics,
            used,
            gpus_used,
            device_use,
            index: self.index,
            topo: self.topo,
        });
    }
}

//! Nodes in the same state, for the pod-aware search: two nodes with the same allocatable,
//! devices (all but their UUIDs), usage and device usage take a task alike, so a scorer that
//! reads a node only through that state ([`crate::NodeScorer::by_state`]) gives them the same
//! score and a chooser that does ([`crate::DeviceChooser::by_state`]) the same devices. The
//! search then scores one node per state and takes, among the states of the best score, the
//! node of least tie rank that passes the checks of its own (static filters, reservations,
//! inter-pod rules): the node scoring every node would have found.
//!
//! States are kept up to date from the session's log of nodes whose usage changed, so a
//! search costs a look at each state and, mostly, at its first node.

use std::collections::{BTreeSet, HashMap};

use super::Session;
use crate::model::NodeId;

/// The session's nodes grouped by state.
pub(super) struct StateClasses {
    /// Per node, its static class: allocatable, sharing and devices (models, memory, slots,
    /// compute, health, islands), which the session never changes.
    statics: Vec<u32>,
    ids: HashMap<Vec<i64>, u32>,
    of_node: Vec<u32>,
    /// Per state, its nodes by tie rank.
    members: Vec<BTreeSet<(u32, NodeId)>>,
    /// How much of the session's log of changed nodes has been seen.
    seen: usize,
}

impl StateClasses {
    pub(super) fn new(session: &Session) -> Self {
        let snap = session.snapshot;
        let mut static_ids = HashMap::new();
        let statics = (snap.nodes.iter())
            .map(|n| {
                // MIG slices' usage is not part of the state: such nodes stand alone.
                let alone = (!n.slices.is_empty()).then_some(n.id);
                let gpus: Vec<_> = (n.gpus.iter())
                    .map(|g| {
                        let model = g.model.as_deref();
                        let kind = (g.memory_mib, g.nvlink_domain, g.slots, g.cores);
                        (model, kind, g.healthy, g.mig)
                    })
                    .collect();
                let key = (
                    alone,
                    n.allocatable.iter().collect::<Vec<_>>(),
                    n.sharing,
                    gpus,
                );
                let next = static_ids.len() as u32;
                *static_ids.entry(key).or_insert(next)
            })
            .collect();
        let mut classes = StateClasses {
            statics,
            ids: HashMap::new(),
            of_node: vec![u32::MAX; snap.nodes.len()],
            members: Vec::new(),
            seen: session.touched.len(),
        };
        for n in &snap.nodes {
            classes.place(session, n.id);
        }
        classes
    }

    /// Moves the nodes whose usage changed since the last look to their state now.
    pub(super) fn refresh(&mut self, session: &Session) {
        for i in self.seen..session.touched.len() {
            self.place(session, session.touched[i]);
        }
        self.seen = session.touched.len();
    }

    fn place(&mut self, session: &Session, node: NodeId) {
        let i = node.index();
        let mut key = vec![self.statics[i] as i64, session.gpus_used[i] as i64];
        key.extend(session.used[i].iter().flat_map(|(id, v)| [id.0 as i64, v]));
        for u in session.usage(node) {
            key.extend([u.slots, u.memory_mib, u.cores].map(i64::from));
        }
        let next = self.ids.len() as u32;
        let class = *self.ids.entry(key).or_insert(next);
        if class == next {
            self.members.push(BTreeSet::new());
        }
        let entry = session.fw.tie_rank(node);
        let old = std::mem::replace(&mut self.of_node[i], class);
        if old != u32::MAX {
            self.members[old as usize].remove(&entry);
        }
        self.members[class as usize].insert(entry);
    }

    /// Each non-empty state's nodes, least tie rank first.
    pub(super) fn states(&self) -> impl Iterator<Item = &BTreeSet<(u32, NodeId)>> {
        self.members.iter().filter(|m| !m.is_empty())
    }
}

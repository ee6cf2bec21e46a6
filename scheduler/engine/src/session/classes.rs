//! Nodes in the same state, for the pod-aware search: two nodes with the same allocatable,
//! devices (all but their UUIDs), usage and device usage take a task alike, so a scorer that
//! reads a node only through that state ([`crate::NodeScorer::by_state`]) gives them the same
//! score and a chooser that does ([`crate::DeviceChooser::by_state`]) the same devices. The
//! search then scores one node per state and takes, among the states of the best score, the
//! node of least tie rank that passes the checks of its own (static filters, reservations,
//! inter-pod rules): the node scoring every node would have found.
//!
//! States are kept up to date from the session's log of nodes whose usage changed, so a
//! search costs a look at each occupied state and, mostly, at its first node. A state never
//! changes once numbered (a node that changes moves to another), so what a state offers a
//! request is kept per state and request ([`RoomKey`]) for the rest of the session: whether
//! it has room and, where the scorers and the device chooser read tasks only by their shape
//! ([`crate::NodeScorer::by_shape`]), its score.

use std::collections::BTreeSet;

use super::score::Candidate;
use super::Session;
use crate::devices::ShareAsk;
use crate::hash::Map;
use crate::model::{NodeId, ShapeId};

/// What a state offers a task depends on besides the state: its shape (placement rules and
/// request) and its device share. Tasks whose containers ask apart have no key.
pub(super) type RoomKey = (ShapeId, Option<ShareAsk>);

/// Per state, whether it has room: not yet known, yes, no.
const UNKNOWN: u8 = 0;
const ROOM: u8 = 1;
const NO_ROOM: u8 = 2;

/// What is known of each state for one request (see [`RoomKey`]), by state number.
#[derive(Default)]
struct Known {
    room: Vec<u8>,
    scores: Vec<Option<i64>>,
}

/// The session's nodes grouped by state.
pub(super) struct StateClasses {
    /// Per node, its static class: allocatable, sharing and devices (models, memory, slots,
    /// compute, health, islands), which the session never changes.
    statics: Vec<u32>,
    ids: Map<Vec<i64>, u32>,
    of_node: Vec<u32>,
    /// Per state, its nodes by tie rank, and the first of them.
    members: Vec<BTreeSet<(u32, NodeId)>>,
    first: Vec<Option<NodeId>>,
    /// The states with nodes, in no particular order, and each state's place there.
    occupied: Vec<u32>,
    place_in_occupied: Vec<u32>,
    /// Per request, what is known of each state.
    known: Map<RoomKey, Known>,
    /// The key being built by [`Self::place`] (kept to spare an allocation per change).
    scratch: Vec<i64>,
    /// How much of the session's log of changed nodes has been seen.
    seen: usize,
}

impl StateClasses {
    pub(super) fn new(session: &Session) -> Self {
        let snap = session.snapshot;
        let mut static_ids = Map::default();
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
            ids: Map::default(),
            of_node: vec![u32::MAX; snap.nodes.len()],
            members: Vec::new(),
            first: Vec::new(),
            occupied: Vec::new(),
            place_in_occupied: Vec::new(),
            known: Map::default(),
            scratch: Vec::new(),
            seen: session.changes.len(),
        };
        for n in &snap.nodes {
            classes.place(session, n.id);
        }
        classes
    }

    /// Moves the nodes whose usage changed since the last look to their state now.
    pub(super) fn refresh(&mut self, session: &Session) {
        for &node in session.changes.since(self.seen) {
            self.place(session, node);
        }
        self.seen = session.changes.len();
    }

    fn place(&mut self, session: &Session, node: NodeId) {
        let i = node.index();
        let key = &mut self.scratch;
        key.clear();
        key.extend([self.statics[i] as i64, session.capacity.closed(node) as i64]);
        key.extend(
            session
                .capacity
                .used(node)
                .iter()
                .flat_map(|(id, v)| [id.0 as i64, v]),
        );
        for u in session.usage(node) {
            key.extend([u.slots, u.memory_mib, u.cores].map(i64::from));
        }
        let class = match self.ids.get(key.as_slice()) {
            Some(&class) => class,
            None => {
                let class = self.ids.len() as u32;
                self.ids.insert(key.clone(), class);
                self.members.push(BTreeSet::new());
                self.first.push(None);
                self.place_in_occupied.push(u32::MAX);
                class
            }
        };
        let entry = session.fw.tie_rank(node);
        let old = std::mem::replace(&mut self.of_node[i], class);
        if old != u32::MAX {
            let members = &mut self.members[old as usize];
            members.remove(&entry);
            self.first[old as usize] = members.first().map(|&(_, n)| n);
            if members.is_empty() {
                self.vacate(old);
            }
        }
        let members = &mut self.members[class as usize];
        if members.is_empty() {
            self.place_in_occupied[class as usize] = self.occupied.len() as u32;
            self.occupied.push(class);
        }
        members.insert(entry);
        self.first[class as usize] = members.first().map(|&(_, n)| n);
    }

    /// Takes a state that lost its last node out of the occupied ones.
    fn vacate(&mut self, class: u32) {
        let at = std::mem::replace(&mut self.place_in_occupied[class as usize], u32::MAX);
        self.occupied.swap_remove(at as usize);
        if let Some(&moved) = self.occupied.get(at as usize) {
            self.place_in_occupied[moved as usize] = at;
        }
    }

    /// Per state with nodes whose first node has `room` (asked once per state and request
    /// when the request has a `key`), that node and the state's first node that `passes`
    /// (the node taken if the state scores best); in no particular order (the search's
    /// choice does not depend on it: tie ranks are unique).
    pub(super) fn candidates(
        &mut self,
        key: Option<RoomKey>,
        room: impl Fn(NodeId) -> bool,
        passes: impl Fn(NodeId) -> bool,
    ) -> Vec<Candidate> {
        let mut known = key.map(|key| &mut self.known.entry(key).or_default().room);
        if let Some(known) = &mut known {
            // States are only added: the list grows with them.
            known.resize(self.members.len(), UNKNOWN);
        }
        let mut found = Vec::new();
        for &state in &self.occupied {
            let Some(first) = self.first[state as usize] else {
                continue;
            };
            let has_room = match &mut known {
                None => room(first),
                Some(known) => {
                    let slot = &mut known[state as usize];
                    if *slot == UNKNOWN {
                        *slot = if room(first) { ROOM } else { NO_ROOM };
                    }
                    *slot == ROOM
                }
            };
            if !has_room {
                continue;
            }
            let taken = match passes(first) {
                true => Some(first),
                false => (self.members[state as usize].iter())
                    .find(|&&(_, n)| passes(n))
                    .map(|&(_, n)| n),
            };
            if let Some(taken) = taken {
                found.push(Candidate {
                    scored: first,
                    taken,
                    state: Some(state),
                });
            }
        }
        found
    }

    /// The scores known per state for the request of `key` (`None`: not yet scored).
    pub(super) fn scores(&mut self, key: RoomKey) -> &mut [Option<i64>] {
        let scores = &mut self.known.entry(key).or_default().scores;
        scores.resize(self.members.len(), None);
        scores
    }
}

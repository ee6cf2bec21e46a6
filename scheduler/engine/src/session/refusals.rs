//! What the node search remembers of its failures, and the reasons counted for them: caches
//! that never change a decision, only spare a search or a scan. Each entry holds while no
//! capacity is given back since it was kept (the `released` epoch).

use super::explain::Scan;
use super::ReservedNodes;
use crate::hash::Map;
use crate::model::{JobId, ShapeId};
use crate::refusal::NoNode;

/// Failures the node search remembers and the reasons counted for them.
#[derive(Default)]
pub(super) struct Refusals {
    /// Bumped whenever capacity is given back; a shape that failed since the last bump fails
    /// again.
    released: u64,
    /// The shapes that found no node, with the epoch they failed at.
    failures: Map<(ShapeId, ReservedNodes), u64>,
    /// Per shape, on clusters that share devices: the nodes without room for it (resources or
    /// devices; a bit per node) since `released` was the value kept. Usage only grows until
    /// capacity is given back, so they still have none, and the search passes them at a
    /// bit's cost.
    room_misses: Map<ShapeId, (u64, Vec<u64>)>,
    /// Why no node takes each failed shape, counted only when asked for.
    explanations: Map<(ShapeId, ReservedNodes), (u64, NoNode)>,
    /// The same for tasks with inter-pod rules, per gang and shape, valid while nothing is
    /// committed (their epoch is the count of committed operations).
    gang_explanations: Map<(JobId, ShapeId, ReservedNodes), (u64, NoNode)>,
    /// While set, `Session::why_no_node` gives [`NoNode::Uncounted`] without scanning: the
    /// caller will not report it (see `Session::set_quiet`).
    quiet: bool,
    /// Per shape, the scan its explanations start from (see `explain.rs`).
    scans: Map<ShapeId, Scan>,
}

impl Refusals {
    /// The epoch: how many times capacity was given back.
    pub(super) fn released(&self) -> u64 {
        self.released
    }

    /// Capacity was given back (or nodes reserved): every failure kept is stale.
    pub(super) fn note_released(&mut self) {
        self.released += 1;
    }

    /// Whether the shape found no node since capacity was last given back.
    pub(super) fn failed(&self, shape: ShapeId, access: ReservedNodes) -> bool {
        self.failures.get(&(shape, access)) == Some(&self.released)
    }

    pub(super) fn note_failed(&mut self, shape: ShapeId, access: ReservedNodes) {
        self.failures.insert((shape, access), self.released);
    }

    /// The shape's nodes without room, still valid (all clear when none are, `words` words).
    pub(super) fn take_room_misses(&mut self, shape: ShapeId, words: usize) -> Vec<u64> {
        match self.room_misses.remove(&shape) {
            Some((at, missed)) if at == self.released => missed,
            Some((_, mut missed)) => {
                missed.fill(0);
                missed
            }
            None => vec![0; words],
        }
    }

    pub(super) fn keep_room_misses(&mut self, shape: ShapeId, missed: Vec<u64>) {
        self.room_misses.insert(shape, (self.released, missed));
    }

    pub(super) fn quiet(&self) -> bool {
        self.quiet
    }

    pub(super) fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// Why no node takes the shape, when counted since capacity was last given back.
    pub(super) fn reason(&self, shape: ShapeId, access: ReservedNodes) -> Option<&NoNode> {
        match self.explanations.get(&(shape, access)) {
            Some((epoch, why)) if *epoch == self.released => Some(why),
            _ => None,
        }
    }

    pub(super) fn keep_reason(&mut self, shape: ShapeId, access: ReservedNodes, why: NoNode) {
        (self.explanations).insert((shape, access), (self.released, why));
    }

    /// Why no node takes a gang's members of a shape, when counted at `epoch`.
    pub(super) fn gang_reason(
        &self,
        key: (JobId, ShapeId, ReservedNodes),
        epoch: u64,
    ) -> Option<&NoNode> {
        match self.gang_explanations.get(&key) {
            Some((at, why)) if *at == epoch => Some(why),
            _ => None,
        }
    }

    pub(super) fn keep_gang_reason(
        &mut self,
        key: (JobId, ShapeId, ReservedNodes),
        epoch: u64,
        why: NoNode,
    ) {
        self.gang_explanations.insert(key, (epoch, why));
    }

    /// Takes the shape's scan out (to bring it up to date and put it back).
    pub(super) fn take_scan(&mut self, shape: ShapeId) -> Option<Scan> {
        self.scans.remove(&shape)
    }

    pub(super) fn keep_scan(&mut self, shape: ShapeId, scan: Scan) {
        self.scans.insert(shape, scan);
    }
}

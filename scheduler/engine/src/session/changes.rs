//! The session's one log of node changes.

use crate::model::NodeId;

/// Every node whose usage changed since the session opened, in order and with repeats: each
/// placement, eviction or undo (`charge`), each hold taken for a nominated pod (while opening)
/// and each hold released or restored. It only grows; each reader keeps how far it has read.
///
/// Its consumers:
/// - the explanation scans (`explain.rs`) and the node state classes (`classes.rs`) bring their
///   per-node state up to date from the entries past the point they last read
///   ([`Changes::since`]);
/// - the hand-on to a [`crate::Warm`] (`carry.rs`) takes the nodes as a set
///   ([`Changes::into_nodes`]): the next session of the same nodes looks again at those and at
///   the snapshot's own changes only.
#[derive(Default)]
pub(super) struct Changes {
    nodes: Vec<NodeId>,
}

impl Changes {
    pub(super) fn note(&mut self, node: NodeId) {
        self.nodes.push(node);
    }

    /// How many changes are logged: where a reader that is up to date stands.
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes changed since a reader stood at `seen`.
    pub(super) fn since(&self, seen: usize) -> &[NodeId] {
        &self.nodes[seen..]
    }

    /// Every node changed, sorted, each once.
    pub(super) fn into_nodes(self) -> Vec<NodeId> {
        let mut nodes = self.nodes;
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
}

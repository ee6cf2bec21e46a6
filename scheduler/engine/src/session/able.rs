//! The nodes of a domain that can take a gang member, kept for the next member alike: when
//! placing a member changes what its rules see on its own node alone (one member per node by
//! hostname anti-affinity, the common training pattern), every other node of the domain takes
//! the next member exactly as it took this one, so only the node just used is asked again.

use super::{ReservedNodes, Session};
use crate::model::{NodeId, RulesId, ShapeId, TaskId};
use basalt_topology::DomainId;

/// Which members are alike for a domain search: shape, placement rules, inter-pod view, and
/// where and how they search.
type AbleKey = (
    ShapeId,
    RulesId,
    usize,
    DomainId,
    ReservedNodes,
    Option<u32>,
);

pub(crate) struct AbleNodes {
    key: AbleKey,
    /// What the session had done when they were kept: valid only after exactly the one
    /// placement they were kept for.
    epoch: (u64, u64, usize),
    nodes: Vec<NodeId>,
    placed: NodeId,
}

impl Session<'_> {
    fn able_key(
        &self,
        task: TaskId,
        d: DomainId,
        access: ReservedNodes,
        island: Option<u32>,
    ) -> AbleKey {
        let t = self.snapshot.task(task);
        let view = self.pods.view_id(self.snapshot, task);
        (t.shape, t.rules, view, d, self.effective(access), island)
    }

    fn able_epoch(&self) -> (u64, u64, usize) {
        (
            self.charges,
            self.refusals.released(),
            self.reservations.nominations().len(),
        )
    }

    /// The nodes of domain `d` (its `nodes`) that can take the task now, in their order.
    pub(crate) fn able_in(
        &mut self,
        task: TaskId,
        d: DomainId,
        nodes: &[u32],
        access: ReservedNodes,
        island: Option<u32>,
    ) -> Vec<NodeId> {
        if let Some(kept) = self.able.take() {
            let key = self.able_key(task, d, access, island);
            if kept.key == key && kept.epoch == self.able_epoch() {
                let mut nodes = kept.nodes;
                if !self.can_take(task, kept.placed, access, island) {
                    nodes.retain(|&n| n != kept.placed);
                }
                return nodes;
            }
        }
        self.nodes_that_take(task, nodes.iter().map(|&n| NodeId(n)), access, island)
    }

    /// Keeps `able` (what [`Session::able_in`] gave) after the task was placed on `placed`,
    /// when the next member alike may reuse it.
    pub(crate) fn keep_able(
        &mut self,
        task: TaskId,
        d: DomainId,
        access: ReservedNodes,
        island: Option<u32>,
        able: Vec<NodeId>,
        placed: NodeId,
    ) {
        // A member's DRA claims may take devices other nodes reach too (`allNodes` slices, a
        // shared claim now allocated), so the other nodes need not take the next one alike.
        if self.pods.local_to_node(self.snapshot, task) && self.claim_need(task).is_none() {
            self.able = Some(AbleNodes {
                key: self.able_key(task, d, access, island),
                epoch: self.able_epoch(),
                nodes: able,
                placed,
            });
        }
    }
}

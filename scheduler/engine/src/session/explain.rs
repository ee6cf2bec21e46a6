//! Why no node takes a pod: kube-scheduler's "0/N nodes are available: 2 insufficient
//! nvidia.com/gpu, 1 didn't match pod anti-affinity rules." Each node is counted once, under
//! the first check it fails in kube-scheduler's filter order: static filters, resources, then
//! devices, then the rules about other pods (ports among them), then reservations.
//!
//! The first two depend only on the shape (placement rules and request) and on usage: a scan
//! of every node for them is kept per shape and brought up to date by looking again at the
//! nodes whose usage changed since (the session logs them), so it is always exact. A pod with
//! inter-pod rules, whose reason is its own, checks its rules only on the nodes with room: a
//! saturated cluster explains a thousand failing gangs without a scan of the cluster each.
//!
//! Nodes are counted per [`Refusal`], a `Copy` value; only the message words them, merging
//! refusals that word alike (the same taint on two nodes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{ReservedNodes, Session};
use crate::model::{NodeId, RulesId, ShapeId, TaskId};
use crate::refusal::{NoNode, Refusal};
use crate::resources::{ResourceId, Resources};

/// A node refused by a static filter (its class in [`Scan::class`]); other classes are the
/// bit mask of the resources it is short of, 0 for room.
const REFUSED: u64 = u64::MAX;

/// What a scan of every node found for a shape, kept up to date (see the module docs).
pub(crate) struct Scan {
    /// Per node: [`REFUSED`], or the resources it is short of as a bit mask (0: room).
    class: Vec<u64>,
    /// Nodes refused by a static filter, by refusal (static: never changes in a session).
    refused: BTreeMap<Refusal, usize>,
    /// Nodes short of each resource, by resource index (a node short of two counts twice).
    short: Vec<usize>,
    room: BTreeSet<NodeId>,
    /// How much of the session's log of changed nodes this scan has seen.
    seen: usize,
}

/// Masks hold one bit per resource; a cluster with more resources than that is scanned whole
/// every time.
const MASKABLE: usize = 63;

/// The resources a node is short of as a bit mask, without `unworded` (the share totals the
/// device check words instead, see [`Session::devices_short`]).
fn short_mask(request: &Resources, used: &Resources, alloc: &Resources, unworded: u64) -> u64 {
    request
        .short_on(used, alloc)
        .fold(0, |m, id| m | (1u64 << id.0))
        & !unworded
}

impl Scan {
    fn set(&mut self, node: NodeId, class: u64) {
        let old = std::mem::replace(&mut self.class[node.index()], class);
        for bit in 0..MASKABLE {
            self.short[bit] -= ((old >> bit) & 1) as usize;
            self.short[bit] += ((class >> bit) & 1) as usize;
        }
        match (old == 0, class == 0) {
            (true, false) => {
                self.room.remove(&node);
            }
            (false, true) => {
                self.room.insert(node);
            }
            _ => {}
        }
    }
}

impl Session<'_> {
    /// The shape's scan, up to date.
    fn scan(&mut self, shape: ShapeId, rules: RulesId, request: &Resources) -> Scan {
        let maskable = self.snapshot.resources.len() <= MASKABLE;
        let totals = self.snapshot.share_names.totals();
        let unworded = (totals.iter().flatten())
            .fold(0u64, |m, id| m | 1u64.checked_shl(id.0 as u32).unwrap_or(0));
        if let Some(mut scan) = self.refusals.take_scan(shape).filter(|_| maskable) {
            for &node in self.changes.since(scan.seen) {
                if scan.class[node.index()] != REFUSED {
                    let alloc = &self.snapshot.nodes[node.index()].allocatable;
                    scan.set(
                        node,
                        short_mask(request, self.capacity.used(node), alloc, unworded),
                    );
                }
            }
            scan.seen = self.changes.len();
            return scan;
        }
        let r = &self.snapshot.rules[rules.0 as usize];
        let mut scan = Scan {
            class: vec![0; self.snapshot.nodes.len()],
            refused: BTreeMap::new(),
            short: vec![0; MASKABLE.max(self.snapshot.resources.len())],
            room: BTreeSet::new(),
            seen: self.changes.len(),
        };
        // Nodes known to pass the static filters are not asked again (only failures are worded).
        let passes = self.statics.get(&rules).map(|s| &s.ok);
        let mut room = Vec::new();
        for node in &self.snapshot.nodes {
            let i = node.id.index();
            if !passes.is_some_and(|ok| ok[i]) {
                let refused = (self.fw.filter_node(r, node))
                    .and_then(|()| self.claims_could_fit(rules, node.id));
                if let Err(reason) = refused {
                    *scan.refused.entry(reason).or_default() += 1;
                    scan.class[i] = REFUSED;
                    continue;
                }
            }
            // A closed node's devices read 0: say why rather than "insufficient".
            let closed = node.devices_closed.is_some()
                && crate::snapshot::asks_closed(node, &self.snapshot.share_names, request);
            if closed {
                let reason = Refusal::DevicesClosed { node: node.id };
                *scan.refused.entry(reason).or_default() += 1;
                scan.class[i] = REFUSED;
                continue;
            }
            let mut mask = 0;
            for id in request.short_on(self.capacity.used(node.id), &node.allocatable) {
                if totals.contains(&Some(id)) {
                    continue;
                }
                scan.short[id.0 as usize] += 1;
                mask |= 1u64.checked_shl(id.0 as u32).unwrap_or(0);
            }
            scan.class[i] = mask;
            if mask == 0 {
                room.push(node.id);
            }
        }
        scan.room = room.into_iter().collect();
        scan
    }

    /// Why no node takes the task: every node counted under the refusal it gives.
    pub(super) fn explain(
        &mut self,
        task: TaskId,
        shape: ShapeId,
        rules: RulesId,
        request: &Resources,
        access: ReservedNodes,
    ) -> NoNode {
        let (counts, _) = self.count_refusals(task, shape, rules, request, access);
        NoNode::Counted(Arc::new(counts))
    }

    /// Nodes per refusal for the task, and the nodes that could take it now.
    pub(super) fn count_refusals(
        &mut self,
        task: TaskId,
        shape: ShapeId,
        rules: RulesId,
        request: &Resources,
        access: ReservedNodes,
    ) -> (BTreeMap<Refusal, usize>, Vec<NodeId>) {
        let scan = self.scan(shape, rules, request);
        let mut counts = scan.refused.clone();
        let mut available = Vec::new();
        let check = self.pods.prepare(self.snapshot, task);
        for &node in &scan.room {
            let short =
                (self.devices_short(task, node)).and_then(|()| self.claims_short(task, node));
            if let Err(refusal) = short {
                *counts.entry(refusal).or_default() += 1;
                continue;
            }
            if let Some(Err(refusal)) = check.as_ref().map(|c| c.check(node)) {
                *counts.entry(refusal).or_default() += 1;
                continue;
            }
            if !self.may_use(node, access) {
                *counts.entry(Refusal::Reserved).or_default() += 1;
                continue;
            }
            available.push(node);
        }
        for (id, &n) in scan.short.iter().enumerate().filter(|(_, &n)| n > 0) {
            *counts
                .entry(Refusal::Insufficient(ResourceId(id as u16)))
                .or_default() += n;
        }
        drop(check);
        self.refusals.keep_scan(shape, scan);
        (counts, available)
    }
}

//! Why no node takes a pod: kube-scheduler's "0/N nodes are available: 2 insufficient
//! nvidia.com/gpu, 1 didn't match pod anti-affinity rules." Each node is counted once, under
//! the first check it fails in kube-scheduler's filter order: static filters, resources, then
//! the rules about other pods (ports among them), then reservations.
//!
//! The first two depend only on the shape (placement rules and request) and on usage: a scan
//! of every node for them is kept per shape, with the nodes that passed, while no node's usage
//! falls below what it saw (no eviction or released hold since, and no statement open at the
//! scan discarded); nodes that filled since are checked again. A pod with inter-pod rules, whose reason is its own,
//! checks its rules on those nodes alone, so a saturated cluster explains a thousand failing
//! gangs with one scan instead of one each.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::{ReservedNodes, Session};
use crate::framework::Reason;
use crate::model::{NodeId, RulesId, ShapeId, TaskId};
use crate::resources::{ResourceId, Resources};

/// What a full scan found for a shape (see the module documentation).
pub(crate) struct Scan {
    /// Nodes refused by a static filter, by reason.
    refused: BTreeMap<Reason, usize>,
    /// Nodes short of each resource (a node short of two counts under both).
    short: BTreeMap<ResourceId, usize>,
    /// Nodes that passed both when scanned.
    room: Vec<NodeId>,
}

impl Session<'_> {
    fn scan(&mut self, shape: ShapeId, rules: RulesId, request: &Resources) -> Rc<Scan> {
        if let Some((epoch, scan)) = self.scans.get(&shape) {
            if *epoch == self.scan_epoch {
                return scan.clone();
            }
        }
        self.scanned_open |= self.open_ops > 0;
        let r = &self.snapshot.rules[rules.0 as usize];
        let mut scan = Scan {
            refused: BTreeMap::new(),
            short: BTreeMap::new(),
            room: Vec::new(),
        };
        // Nodes known to pass the static filters are not asked again (only failures are worded).
        let passes = self.statics.get(&rules).map(|s| &s.ok);
        for node in &self.snapshot.nodes {
            let known_ok = passes.is_some_and(|ok| ok[node.id.index()]);
            if !known_ok {
                if let Err(reason) = self.fw.filter_node(r, node) {
                    *scan.refused.entry(reason).or_default() += 1;
                    continue;
                }
            }
            let mut short = false;
            // Counted per resource and worded once: a message per node is an allocation.
            for id in request.short_on(&self.used[node.id.index()], &node.allocatable) {
                *scan.short.entry(id).or_default() += 1;
                short = true;
            }
            if !short {
                scan.room.push(node.id);
            }
        }
        let scan = Rc::new(scan);
        self.scans.insert(shape, (self.scan_epoch, scan.clone()));
        scan
    }

    /// The aggregated reason no node takes the task, most frequent reasons first.
    pub(super) fn explain(
        &mut self,
        task: TaskId,
        shape: ShapeId,
        rules: RulesId,
        request: &Resources,
        access: ReservedNodes,
    ) -> String {
        let scan = self.scan(shape, rules, request);
        let mut counts = scan.refused.clone();
        let mut short = scan.short.clone();
        let check = self.pods.prepare(self.snapshot, task);
        for &node in &scan.room {
            let alloc = &self.snapshot.nodes[node.index()].allocatable;
            // Filled since the scan (usage only grows until capacity is given back).
            let now_short: Vec<ResourceId> =
                request.short_on(&self.used[node.index()], alloc).collect();
            if !now_short.is_empty() {
                for id in now_short {
                    *short.entry(id).or_default() += 1;
                }
                continue;
            }
            if let Some(Err(reason)) = check.as_ref().map(|c| c.check(node)) {
                *counts.entry(reason).or_default() += 1;
                continue;
            }
            if !self.may_use(node, access) {
                *counts
                    .entry("were reserved for a starving gang".into())
                    .or_default() += 1;
            }
        }
        for (id, n) in short {
            let name = self.snapshot.resources.name(id);
            *counts
                .entry(format!("insufficient {name}").into())
                .or_default() += n;
        }
        let mut list: Vec<(Reason, usize)> = counts.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let parts: Vec<String> = list.iter().map(|(r, c)| format!("{c} {r}")).collect();
        let total = self.snapshot.nodes.len();
        if parts.is_empty() {
            format!("0/{total} nodes are available.")
        } else {
            format!("0/{total} nodes are available: {}.", parts.join(", "))
        }
    }
}

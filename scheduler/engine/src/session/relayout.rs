//! MIG re-layouts in the plan: the configured [`crate::MigRelayout`] policy's proposals,
//! checked against its contract, as the plan's `migLayouts` and the reasons of the pods that
//! wait for them.

use std::collections::BTreeMap;

use super::Session;
use crate::framework::RelayoutProposal;
use crate::model::{JobId, NodeId, TaskId};
use crate::plan::{MigLayout, MigPlacement};

/// What the plan reports of the cycle's re-layouts.
#[derive(Default)]
pub(super) struct Relayouts {
    pub layouts: Vec<MigLayout>,
    /// Per job with members waiting for a re-layout: the message of its condition.
    pub jobs: BTreeMap<JobId, String>,
    /// The waiting pods (no reservation elsewhere is reported for them).
    pub tasks: Vec<TaskId>,
}

impl Session<'_> {
    /// The MIG slices of a node taken now (bound pods and this cycle's placements).
    pub fn slices_used(&self, node: NodeId) -> u64 {
        // Empty when no node has slices.
        self.capacity.slices_used(node)
    }

    /// Whether GPU `position` of the node could be re-laid now: healthy, on an open node not
    /// reconfiguring, and idle: a whole device no pod holds, or in MIG mode with none of its
    /// instances held.
    pub fn gpu_relayable(&self, node: NodeId, position: usize) -> bool {
        let n = self.snapshot.node(node);
        let Some(g) = n.gpus.get(position) else {
            return false;
        };
        let open = !n.unschedulable && n.devices_closed.is_none() && n.mig_reconfiguring.is_none();
        let idle = if g.mig {
            let used = self.slices_used(node);
            !(n.slices.iter().enumerate())
                .any(|(p, s)| s.mig.gpu == g.index && used & (1 << p) != 0)
        } else {
            self.capacity.closed(node) & (1 << position) == 0
        };
        open && g.healthy && n.sharing == crate::devices::Sharing::Exclusive && idle
    }

    /// Asks the policy, keeps the proposals that honour the contract (a broken one is dropped
    /// whole) and words them for the plan.
    pub(super) fn relayouts(&self) -> Relayouts {
        let mut out = Relayouts::default();
        let Some(policy) = &self.fw.mig_relayout else {
            return out;
        };
        let mut seen_gpus = Vec::new();
        for p in policy.propose(&self.view()) {
            if !self.honours_contract(&p, &seen_gpus, &out.tasks) {
                continue;
            }
            seen_gpus.push((p.node, p.gpu));
            let node = &self.snapshot.node(p.node).name;
            let layout: Vec<String> = p.layout.iter().map(|(n, s)| format!("{n}@{s}")).collect();
            for &t in &p.waiting {
                let message = format!(
                    "waits for MIG re-layout of {node} GPU {} to {}",
                    p.gpu,
                    layout.join(",")
                );
                out.jobs.entry(self.snapshot.task(t).job).or_insert(message);
            }
            out.tasks.extend(&p.waiting);
            out.layouts.push(MigLayout {
                node: node.clone(),
                gpu: p.gpu,
                layout: (p.layout.into_iter())
                    .map(|(profile, start)| MigPlacement { profile, start })
                    .collect(),
                pods: (p.waiting.iter())
                    .map(|&t| self.snapshot.task(t).name.to_string())
                    .collect(),
            });
        }
        out
    }

    fn honours_contract(
        &self,
        p: &RelayoutProposal,
        seen_gpus: &[(NodeId, u32)],
        waiting: &[TaskId],
    ) -> bool {
        let Some(n) = self.snapshot.nodes.get(p.node.index()) else {
            return false;
        };
        let Some(position) = n.gpus.iter().position(|g| g.index == p.gpu) else {
            return false;
        };
        let pending = |t: &TaskId| self.jobs.is_pending(*t);
        self.gpu_relayable(p.node, position)
            && !seen_gpus.contains(&(p.node, p.gpu))
            && !p.layout.is_empty()
            && p.waiting.iter().all(|t| pending(t) && !waiting.contains(t))
    }
}

//! Fair share over time: the weights capacity beyond guarantees and entitlements is divided by,
//! adjusted by what each queue used (KAI-Scheduler's time-based fair share, exact and without a
//! metrics server: usage comes with the snapshot, see `basalt_engine::usage`).
//!
//! Among the children of one parent, with `w` a queue's weight over its siblings' total and
//! `u` its usage over theirs:
//!
//! ```text
//! adjusted = max(0, w + k·(w − u))
//! ```
//!
//! A queue's usage is one number: the fraction of the cluster it held on average, each resource
//! weighed by `resourceWeights` (`Σ ω_r·usage_r / capacity_r / Σ ω_r`, over the resources the
//! queues share some of). No usage among the siblings leaves every weight as it was. The
//! adjusted weights are whole numbers (`adjusted · 2^20`, at least 1, so a queue that used much
//! still takes what nobody else wants: the water-filling stays work-conserving).

use basalt_engine::{QueueId, SessionView, UsageWeights};

/// The scale of adjusted weights: `2^20` per unit of the siblings' total.
pub const WEIGHT_SCALE: f64 = (1u64 << 20) as f64;

/// How usage adjusts the weights.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageWeighting {
    /// How strongly usage moves a weight (KAI's `kValue`): 0 leaves weights as they are.
    pub k: f64,
    /// The weight of each resource in a queue's usage (by resource name).
    pub resource_weights: Vec<(String, f64)>,
}

impl UsageWeighting {
    /// Every queue's weight adjusted by its usage among its siblings, and the part of the
    /// cluster each used (both indexed by `QueueId`).
    pub fn weights(&self, session: &SessionView) -> UsageWeights {
        let snap = session.snapshot;
        let capacity = session.queue_capacity();
        let weighed: Vec<(basalt_engine::ResourceId, f64, f64)> = (self.resource_weights.iter())
            .filter_map(|(name, w)| snap.resources.id(name).map(|r| (r, *w)))
            .filter(|&(r, w)| w > 0.0 && capacity.get(r) > 0)
            .map(|(r, w)| (r, w, capacity.get(r) as f64))
            .collect();
        let total_weight: f64 = weighed.iter().map(|&(_, w, _)| w).sum();
        // The fraction of the cluster each queue held on average.
        let used: Vec<f64> = (snap.queues.iter())
            .map(|q| {
                let usage = session.queue_usage(q.id);
                let sum: f64 = (weighed.iter())
                    .map(|&(r, w, cap)| w * usage.get(r.0 as usize).copied().unwrap_or(0.0) / cap)
                    .sum();
                if total_weight > 0.0 {
                    sum / total_weight
                } else {
                    0.0
                }
            })
            .collect();
        let mut out = vec![0i64; snap.queues.len()];
        let mut parents: Vec<Option<QueueId>> = snap.queues.iter().map(|q| q.parent).collect();
        parents.sort_unstable();
        parents.dedup();
        for parent in parents {
            let siblings: Vec<QueueId> = (snap.queues.iter())
                .filter(|q| q.parent == parent)
                .map(|q| q.id)
                .collect();
            let weight_sum: f64 = siblings.iter().map(|&q| snap.queue(q).weight as f64).sum();
            let used_sum: f64 = siblings.iter().map(|&q| used[q.index()]).sum();
            for &q in &siblings {
                let w = snap.queue(q).weight as f64 / weight_sum;
                let u = if used_sum > 0.0 {
                    used[q.index()] / used_sum
                } else {
                    w
                };
                let adjusted = (w + self.k * (w - u)).max(0.0);
                out[q.index()] = ((adjusted * WEIGHT_SCALE).round() as i64).max(1);
            }
        }
        UsageWeights { weights: out, used }
    }
}

//! Each queue's usage over a replay as the cycles' plans report it (with a usage half-life,
//! `fairness.usage.halfLife`): what the report's `queue_usage.csv` and chart show. A point per
//! applied plan; none without a half-life, so such a run records nothing new.

use basalt_engine::QueueStatus;

use super::*;

/// The GPUs resource, whose usage the report shows.
const GPU: &str = "nvidia.com/gpu";

/// Every queue's usage, adjusted share and allocation at one cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct UsagePoint {
    pub t_ms: i64,
    /// Per queue (in [`Outcome::queues`] order): the decayed average of the GPUs it held, at
    /// the cycle's instant, as the plan's usage of `nvidia.com/gpu` says.
    pub usage_gpus: Vec<f64>,
    /// Per queue: its usage-adjusted weight over its siblings' (the plan's `usageWeight`);
    /// `None` when the fair share does not adjust weights.
    pub adjusted_share: Vec<Option<f64>>,
    /// Per queue: GPUs held once the cycle's plan was applied.
    pub allocated_gpus: Vec<u32>,
}

impl Simulator<'_> {
    /// Records what the plan's queue statuses say of usage, once the plan is applied.
    pub(super) fn record_usage(&mut self, statuses: &[QueueStatus]) {
        let by_name: HashMap<&str, &QueueStatus> =
            statuses.iter().map(|q| (q.name.as_str(), q)).collect();
        let status = |q: &QueueDef| by_name.get(q.name.as_str());
        let queues = &self.workload.queues;
        let point = UsagePoint {
            t_ms: self.now,
            usage_gpus: (queues.iter())
                .map(|q| {
                    status(q)
                        .and_then(|s| s.usage.get(GPU).copied())
                        .unwrap_or(0.0)
                })
                .collect(),
            adjusted_share: (queues.iter())
                .map(|q| status(q).and_then(|s| s.usage_weight))
                .collect(),
            allocated_gpus: self.queue_gpus.clone(),
        };
        match self.usage_points.last_mut() {
            Some(last) if last.t_ms == point.t_ms => *last = point,
            _ => self.usage_points.push(point),
        }
    }
}

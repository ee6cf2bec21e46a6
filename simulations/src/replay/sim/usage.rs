//! Each queue's usage over a replay as the cycles' plans report it (with a usage half-life,
//! `fairness.usage.halfLife`): what the report's `queue_usage.csv` and chart show. A point per
//! applied plan; none without a half-life, so such a run records nothing new.
//!
//! Between cycles holdings change only when a job completes (evictions and binds are a plan's):
//! there the job's queue's usage record is brought to the instant with the engine's own step
//! ([`basalt_engine::QueueUsage::advance`]), charging what it held since its last record, and
//! holds the job no more, so the next cycle charges exactly what was held when.

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
    /// A job ends (its pods still placed): its queue's usage is brought to now and its
    /// holding is the job's less. Nothing without a half-life (no usage is carried then).
    pub(super) fn usage_at_completion(&mut self, job: u32) {
        let j = job as usize;
        let queue = &self.workload.queues[self.prepared[j].queue as usize].name;
        let Some(record) = self.usage.iter_mut().find(|u| &u.queue == queue) else {
            return;
        };
        let half_life = self.config.fairness.usage.half_life_ms().unwrap_or(0);
        record.advance(self.now, half_life);
        let Some(held) = &mut record.held else {
            return;
        };
        let placed = (self.state[j].pods.iter().zip(&self.prepared[j].requests))
            .filter(|(placement, _)| placement.is_some());
        for (_, request) in placed {
            for (r, v) in request {
                held.entry(r.clone()).and_modify(|h| *h -= v);
            }
            // A pod takes a pod slot, as the snapshot counts it.
            if !request.contains_key(basalt_engine::PODS_NAME) {
                held.entry(basalt_engine::PODS_NAME.into())
                    .and_modify(|h| *h -= 1);
            }
        }
        held.retain(|_, v| *v > 0);
    }

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

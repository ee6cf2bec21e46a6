//! Queue usage in a session: brought to the snapshot's instant when the session opens, from
//! what each leaf queue held since its usage was taken (see [`crate::usage`]).

use std::collections::HashMap;

use crate::model::QueueId;
use crate::plan::{UsageEffect, UsageOrder};
use crate::snapshot::ancestors;
use crate::usage::{decayed, kept, QueueUsage};

use super::Session;

impl Session<'_> {
    /// Every queue's usage at the snapshot's instant (`queue × dims`), or nothing without a
    /// half-life. Leaves decay their own record by its age and add what the record says they
    /// held since (its `held`; a record without one, the snapshot's holding); a queue without
    /// a record starts from nothing now. An inner queue's usage is its children's sum,
    /// whatever its own record says.
    pub(super) fn usage_now(&self) -> Vec<f64> {
        let (snap, half_life) = (self.snapshot, self.fw.usage_half_life_ms);
        if half_life <= 0 {
            return Vec::new();
        }
        let dims = snap.resources.len();
        let records: HashMap<&str, &QueueUsage> =
            (snap.usage.iter()).map(|u| (u.queue.as_str(), u)).collect();
        let mut inner = vec![false; snap.queues.len()];
        for p in snap.queues.iter().filter_map(|q| q.parent) {
            inner[p.index()] = true;
        }
        let mut usage = vec![0.0; snap.queues.len() * dims];
        for q in snap.queues.iter().filter(|q| !inner[q.id.index()]) {
            let record = records.get(q.name.as_str());
            let keep = record.map_or(1.0, |r| {
                kept(snap.now_ms.saturating_sub(r.at_ms), half_life)
            });
            let holding = self.queue_allocated(q.id);
            for r in snap.resources.ids() {
                let name = snap.resources.name(r);
                let held = match record.and_then(|u| u.held.as_ref()) {
                    Some(held) => held.get(name).copied().unwrap_or(0),
                    None => holding.get(r),
                };
                let now = match record {
                    Some(u) => u.used_after(name, held, keep),
                    None => decayed(0.0, held.max(0) as f64, keep),
                };
                for a in ancestors(snap, q.id) {
                    usage[a.index() * dims + r.0 as usize] += now;
                }
            }
        }
        usage
    }

    /// The queue's usage at the snapshot's instant, by resource id; empty without a half-life.
    pub fn queue_usage(&self, queue: QueueId) -> &[f64] {
        self.queues.usage(queue, self.snapshot.resources.len())
    }

    /// The weight the fair share divides by: the policy's, adjusted by usage, else the queue's.
    pub fn weight(&self, queue: QueueId) -> i64 {
        match self.queues.usage_weights() {
            Some(w) => w.weights[queue.index()],
            None => self.snapshot.queue(queue).weight as i64,
        }
    }

    /// The weight adjusted by usage, when the policy adjusted it.
    pub fn usage_weight(&self, queue: QueueId) -> Option<i64> {
        (self.queues.usage_weights()).map(|w| w.weights[queue.index()])
    }

    /// The queue's adjusted weight over the sum of its siblings' (itself included).
    pub(super) fn usage_weight_part(&self, queue: QueueId) -> Option<f64> {
        let weights = &self.queues.usage_weights()?.weights;
        let parent = self.snapshot.queue(queue).parent;
        let siblings: i64 = (self.snapshot.queues.iter())
            .filter(|s| s.parent == parent)
            .map(|s| weights[s.id.index()])
            .sum();
        Some(weights[queue.index()] as f64 / siblings.max(1) as f64)
    }

    /// What usage does to the queue's place among its siblings of the same priority: before
    /// the next one its usage left a smaller adjusted weight (the one it passes), else after
    /// the nearest with a larger; none when no sibling's differs (or usage is off). The queue
    /// order breaks equal shares by adjusted weight, and the fair share divides by it.
    pub(super) fn usage_effect(&self, queue: QueueId) -> Option<UsageEffect> {
        let adjusted = self.queues.usage_weights()?;
        let snap = self.snapshot;
        let me = snap.queue(queue);
        let weight = |q: QueueId| adjusted.weights[q.index()];
        let siblings = || {
            (snap.queues.iter())
                .filter(|s| s.id != queue && s.parent == me.parent && s.priority == me.priority)
                .map(|s| s.id)
        };
        let (order, other) = match siblings()
            .filter(|&s| weight(s) < weight(queue))
            .max_by_key(|&s| (weight(s), std::cmp::Reverse(s)))
        {
            Some(next) => (UsageOrder::Before, next),
            None => (
                UsageOrder::After,
                siblings()
                    .filter(|&s| weight(s) > weight(queue))
                    .min_by_key(|&s| (weight(s), s))?,
            ),
        };
        Some(UsageEffect {
            order,
            queue: snap.queue(other).name.clone(),
            used: adjusted.used[queue.index()],
            against: adjusted.used[other.index()],
        })
    }

    /// Every queue's usage as the plan returns it, taken at the snapshot's instant, with what
    /// the queue holds once the plan is carried out (its binds and nominations in, its victims
    /// out: what the next record charges); none without a half-life.
    pub(super) fn usage_update(&self) -> Vec<QueueUsage> {
        if !self.queues.has_usage() {
            return Vec::new();
        }
        let snap = self.snapshot;
        (snap.queues.iter())
            .map(|q| QueueUsage {
                queue: q.name.clone(),
                at_ms: snap.now_ms,
                used: self.usage_named(q.id),
                held: Some(self.held_named(q.id)),
            })
            .collect()
    }

    /// What the queue holds now, by resource name, zeros left out.
    fn held_named(&self, queue: QueueId) -> std::collections::BTreeMap<String, i64> {
        let names = &self.snapshot.resources;
        (names.ids())
            .map(|r| (r, self.queue_allocated(queue).get(r)))
            .filter(|&(_, v)| v > 0)
            .map(|(r, v)| (names.name(r).to_string(), v))
            .collect()
    }

    /// The queue's usage by resource name, zeros left out.
    pub(super) fn usage_named(&self, queue: QueueId) -> std::collections::BTreeMap<String, f64> {
        let names = &self.snapshot.resources;
        (names.ids())
            .zip(self.queue_usage(queue))
            .filter(|(_, &v)| v > 0.0)
            .map(|(r, &v)| (names.name(r).to_string(), v))
            .collect()
    }
}

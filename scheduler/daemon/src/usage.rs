//! Queue usage carried from one cycle to the next (fairness over time, issue 36). Its one
//! owner is [`CarriedUsage`]: the last plan's usage, full precision. The Queues' statuses hold
//! what was last written (four digits, `basalt_crds::usage_status`) and reach the snapshot
//! through conversion; that is what a restart or a new leader starts from. Each cycle the
//! snapshot gets, per queue, the newer of the two: a status write seen back through the watch
//! never sets the usage back, and one written by another leader since is taken up.

use std::collections::BTreeMap;

use basalt_engine::{Plan, QueueUsage};

#[derive(Default)]
pub struct CarriedUsage {
    last: BTreeMap<String, QueueUsage>,
}

impl CarriedUsage {
    /// Keeps the plan's usage for the next cycle (a plan without usage, the feature off,
    /// forgets it).
    pub fn remember(&mut self, plan: &Plan) {
        self.last = (plan.usage.iter())
            .map(|u| (u.queue.clone(), u.clone()))
            .collect();
    }

    /// The usage for this cycle's snapshot, from what the statuses say (`read`): per queue the
    /// newer record, the carried one on a tie. `None` when nothing is carried (the snapshot's
    /// own is right as it is).
    pub fn merged(&self, read: &[QueueUsage]) -> Option<Vec<QueueUsage>> {
        if self.last.is_empty() {
            return None;
        }
        let mut out = self.last.clone();
        for u in read {
            match out.get(&u.queue) {
                Some(carried) if carried.at_ms >= u.at_ms => {}
                _ => {
                    out.insert(u.queue.clone(), u.clone());
                }
            }
        }
        Some(out.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(queue: &str, at_ms: i64, gpus: f64) -> QueueUsage {
        QueueUsage {
            queue: queue.into(),
            at_ms,
            used: [("nvidia.com/gpu".to_string(), gpus)].into(),
            held: None,
        }
    }

    #[test]
    fn the_newer_record_wins_per_queue() {
        let mut carried = CarriedUsage::default();
        assert_eq!(carried.merged(&[usage("a", 5, 1.0)]), None);
        carried.remember(&Plan {
            usage: vec![usage("a", 10, 2.0), usage("b", 10, 3.0)],
            ..Plan::default()
        });
        let read = [usage("a", 9, 9.0), usage("b", 11, 4.0), usage("c", 1, 5.0)];
        assert_eq!(
            carried.merged(&read),
            Some(vec![
                usage("a", 10, 2.0),
                usage("b", 11, 4.0),
                usage("c", 1, 5.0)
            ])
        );
        carried.remember(&Plan::default());
        assert_eq!(carried.merged(&read), None);
    }
}

//! HAMi's per-pod node policy, `hami.io/node-scheduler-policy`, as a [`Score`]: for a pod that
//! states it, `binpack` prefers the node whose cards are most used and `spread` the least
//! used, by HAMi's node score (`pkg/scheduler/policy/node_policy.go` ComputeDefaultScore: the
//! node's used slots, compute and memory, each over its cards' totals, summed). Pods that
//! state none score 0 here and keep Basalt's own order (binpack of the weighted utilisation,
//! fragmentation-aware where devices are shared, which scores 0 for pods that state one).
//!
//! The score stays out of sessions where no pod states the policy, so the bucketed node
//! order is untouched there.

use basalt_engine::devices::DevicePolicy;
use basalt_engine::{NodeId, NodeScorer, Score, SessionView, TaskId};

/// Each of HAMi's three ratios in millionths.
const SCALE: u64 = 1_000_000;

pub struct HamiNodePolicy;

/// The node policy the task's pod states, if any.
pub fn node_policy(session: &SessionView, task: TaskId) -> Option<DevicePolicy> {
    session.device_filters(task).and_then(|f| f.node_policy)
}

impl Score for HamiNodePolicy {
    fn name(&self) -> &str {
        "hami-node-policy"
    }

    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>> {
        let stated = (session.snapshot.rules.iter())
            .any(|r| r.devices.as_ref().is_some_and(|f| f.node_policy.is_some()));
        stated.then(|| Box::new(HamiNodePolicy) as Box<dyn NodeScorer>)
    }
}

/// HAMi's node score, in millionths of each ratio (0 to 3,000,000): slots, compute and memory
/// in use over the node's cards' totals. Whole devices (a node that does not share them) count
/// as all three taken or free.
pub fn node_use(session: &SessionView, node: NodeId) -> u64 {
    let n = session.snapshot.node(node);
    let ratio = |used: u64, total: u64| (used * SCALE).checked_div(total).unwrap_or(0);
    if !n.sharing.shares() {
        let total = n.gpus.len() as u64;
        let used = total - session.free_gpus(node) as u64;
        return 3 * ratio(used, total);
    }
    let (mut slots, mut cores, mut memory) = ((0, 0), (0, 0), (0, 0));
    for (g, u) in n.gpus.iter().zip(session.device_use(node)) {
        slots = (slots.0 + u.slots as u64, slots.1 + g.slots as u64);
        cores = (cores.0 + u.cores as u64, cores.1 + g.cores as u64);
        let total = g.memory_mib.unwrap_or(0);
        memory = (memory.0 + u.memory_mib as u64, memory.1 + total);
    }
    ratio(slots.0, slots.1) + ratio(cores.0, cores.1) + ratio(memory.0, memory.1)
}

impl NodeScorer for HamiNodePolicy {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, _: u64) -> i64 {
        match node_policy(session, task) {
            None => 0,
            Some(DevicePolicy::Binpack) => node_use(session, node) as i64,
            Some(DevicePolicy::Spread) => -(node_use(session, node) as i64),
        }
    }

    /// The node's cards and their usage: its state alone.
    fn by_state(&self) -> bool {
        true
    }

    /// The pod's node policy: one of its placement rules.
    fn by_shape(&self) -> bool {
        true
    }
}

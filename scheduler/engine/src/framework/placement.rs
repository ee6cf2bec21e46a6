//! Where a task goes: static node filters, the bucketed node order, pod-aware scorers and the
//! device choice.

use crate::model::{Node, NodeId, PlacementRules, TaskId};
use crate::refusal::Refusal;
use crate::resources::Resources;
use crate::session::SessionView;

/// A static node filter: its answer may depend only on the pod's placement rules and the node's
/// labels, taints and schedulability, never on free capacity. That is what lets a session
/// evaluate it once per distinct set of rules instead of once per pod. Capacity fit (every
/// resource, and whole GPUs per device) is the engine's own check.
pub trait NodeFilter: Send + Sync {
    fn name(&self) -> &str;
    fn filter(&self, rules: &PlacementRules, node: &Node) -> Result<(), Refusal>;
}

/// Node preference as a function of the node's capacity and usage alone; lower keys are better.
/// Because nodes with equal allocatable order the same way for any request, the session keeps
/// them in sorted buckets and never scores every node for every pod.
pub trait NodeOrder: Send + Sync {
    fn name(&self) -> &str;
    fn key(&self, allocatable: &Resources, used: &Resources) -> u64;
}

/// A pod-aware node score: how good it is to put this task on this node with these devices
/// (a mask of the node's device positions, as [`DevicePick`] chose them). Whole numbers,
/// higher is better; the scores of all configured scorers are summed (saturating) and equal
/// sums go to the node of least [`crate::Framework::node_rank`].
///
/// Scoring sees every feasible node (static filters, capacity, devices, inter-pod rules) for
/// every task, where [`NodeOrder`] keeps nodes in sorted buckets and asks a few; so a scorer
/// declares per session whether it has anything to say: `prepare` returns `None` and the
/// session keeps the bucketed node order, exactly as without the scorer.
pub trait Score: Send + Sync {
    fn name(&self) -> &str;
    /// Called once when a session opens, to precompute what scoring needs (e.g. the typical
    /// pod shapes of the workload), or `None` to stay out of this session.
    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>>;
}

/// A [`Score`] prepared for one session.
pub trait NodeScorer {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, devices: u64) -> i64;
    /// Whether the score reads the node only through its state: allocatable, devices (not
    /// their UUIDs), usage and device usage; never its name, labels or id. When every scorer
    /// and the device chooser say so, the search scores one node per state (nodes of a
    /// cluster are mostly in a few), and still finds the node scoring every node would.
    fn by_state(&self) -> bool {
        false
    }
    /// Whether, with [`Self::by_state`], the score reads the task only through its shape:
    /// its placement rules, request and device share (never its name, labels, job or
    /// priority), so the same state and shape score the same all session long. When every
    /// scorer and the device chooser say so, the search keeps each state's score per shape
    /// for the session instead of scoring the state again for each task of that shape.
    fn by_shape(&self) -> bool {
        false
    }
}

/// Which of a node's devices a task takes. The engine decides which devices the task could
/// take at all (free whole devices, shared devices with room, the pod's device filters, the
/// NVLink island the topology chose); the policy picks among them.
pub trait DevicePick: Send + Sync {
    fn name(&self) -> &str;
    fn prepare<'s>(&'s self, session: &SessionView) -> Box<dyn DeviceChooser + 's>;
}

/// A [`DevicePick`] prepared for one session.
pub trait DeviceChooser {
    /// `count` devices out of `open` (a mask of device positions with at least `count` bits
    /// set), as a mask. Must be a function of its arguments and the session: the search asks
    /// once per node it scores and placing asks again.
    fn pick(
        &mut self,
        session: &SessionView,
        task: TaskId,
        node: NodeId,
        open: u64,
        count: u32,
    ) -> u64;
    /// Whether the choice reads the node only through its state (see [`NodeScorer::by_state`]).
    fn by_state(&self) -> bool {
        false
    }
    /// Whether the choice reads the task only through its shape (see
    /// [`NodeScorer::by_shape`]).
    fn by_shape(&self) -> bool {
        false
    }
}

/// The engine's neutral device choice: the lowest free positions (plugins configure the
/// scheduler's own, which keeps NVLink islands whole and follows HAMi's policies).
pub struct LowestOpen;

impl DevicePick for LowestOpen {
    fn name(&self) -> &str {
        "lowest-open"
    }
    fn prepare<'s>(&'s self, _: &SessionView) -> Box<dyn DeviceChooser + 's> {
        Box::new(LowestOpen)
    }
}

impl DeviceChooser for LowestOpen {
    fn pick(&mut self, _: &SessionView, _: TaskId, _: NodeId, open: u64, count: u32) -> u64 {
        lowest_bits(open, count)
    }
    fn by_state(&self) -> bool {
        true
    }
    fn by_shape(&self) -> bool {
        true
    }
}

/// The `count` lowest set bits of `mask`.
pub fn lowest_bits(mut mask: u64, count: u32) -> u64 {
    let mut out = 0;
    for _ in 0..count {
        let bit = mask & mask.wrapping_neg();
        out |= bit;
        mask &= !bit;
    }
    out
}

/// Least-allocated order with equal weights, the neutral default.
pub struct LeastAllocated;

impl NodeOrder for LeastAllocated {
    fn name(&self) -> &str {
        "least-allocated"
    }
    fn key(&self, allocatable: &Resources, used: &Resources) -> u64 {
        allocatable
            .iter()
            .filter(|&(_, a)| a > 0)
            .map(|(id, a)| (used.get(id).clamp(0, a) as u128 * 1_000_000 / a as u128) as u64)
            .sum()
    }
}

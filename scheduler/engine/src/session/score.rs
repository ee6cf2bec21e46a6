//! The pod-aware search: with [`crate::Score`] plugins that prepared themselves for this
//! session, a task's feasible nodes (static filters, reservations, capacity, devices,
//! inter-pod rules) are each given the devices the framework's [`crate::DevicePick`] chooses
//! there and scored; the highest sum wins, equal sums go to the least
//! [`crate::Framework::tie_rank`]. Without such scorers none of this runs and the bucketed
//! [`crate::NodeOrder`] search of `search.rs` decides, as it always did.

use super::devices::DeviceNeed;
use super::Session;
use crate::framework::{DeviceChooser, NodeScorer};
use crate::model::{NodeId, TaskId};

/// A node to score and the node taken if it wins: the same node, or one in the same state
/// (`classes.rs`), whose number is given where the search groups nodes by state.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    pub(super) scored: NodeId,
    pub(super) taken: NodeId,
    pub(super) state: Option<u32>,
}

impl Session<'_> {
    /// Prepares the framework's scorers and device choice for this session.
    pub(super) fn prepare_scoring(&mut self) {
        let fw = self.fw;
        let scorers = (fw.scores.iter())
            .filter_map(|s| s.prepare(&self.view()))
            .collect();
        self.scorers = scorers;
        self.chooser = Some(fw.device_pick.prepare(&self.view()));
    }

    /// Whether some scorer looks at pods this session (the search then scores every
    /// feasible node instead of walking the buckets).
    pub fn scores_pods(&self) -> bool {
        !self.scorers.is_empty()
    }

    /// Whether every scorer and the device choice read nodes only through their state.
    pub(super) fn scores_by_state(&self) -> bool {
        self.scorers.iter().all(|s| s.by_state())
            && self.chooser.as_ref().is_some_and(|c| c.by_state())
    }

    /// Whether every scorer and the device choice read tasks only through their shape (see
    /// [`crate::NodeScorer::by_shape`]).
    pub(super) fn scores_by_shape(&self) -> bool {
        self.scorers.iter().all(|s| s.by_shape())
            && self.chooser.as_ref().is_some_and(|c| c.by_shape())
    }

    /// The best of `feasible` by the scorers' sum, ties to the least tie rank. `known`: the
    /// scores of states already scored for this task's shape, by state number, which this
    /// search completes.
    pub(super) fn best_scored(
        &mut self,
        task: TaskId,
        need: &DeviceNeed,
        feasible: &[Candidate],
        mut known: Option<&mut [Option<i64>]>,
    ) -> Option<NodeId> {
        let mut scorers = std::mem::take(&mut self.scorers);
        let mut chooser = self.chooser.take().expect("device choices do not nest");
        let mut best: Option<(i64, (u32, NodeId))> = None;
        for &Candidate {
            scored: node,
            taken,
            state,
        } in feasible
        {
            let kept = known.as_deref().zip(state).and_then(|(k, s)| k[s as usize]);
            let score = kept.unwrap_or_else(|| {
                let score = score_on(self, &mut scorers, &mut *chooser, task, need, node);
                if let Some((k, s)) = known.as_deref_mut().zip(state) {
                    k[s as usize] = Some(score);
                }
                score
            });
            let rank = self.fw.tie_rank(taken);
            if best.is_none_or(|(s, r)| score > s || (score == s && rank < r)) {
                best = Some((score, rank));
            }
        }
        self.scorers = scorers;
        self.chooser = Some(chooser);
        best.map(|(_, (_, node))| node)
    }
}

/// The scorers' sum for the task on `node`, with the devices the chooser picks there.
fn score_on(
    session: &Session,
    scorers: &mut [Box<dyn NodeScorer + '_>],
    chooser: &mut (dyn DeviceChooser + '_),
    task: TaskId,
    need: &DeviceNeed,
    node: NodeId,
) -> i64 {
    let devices = match need.want {
        0 => 0,
        _ if need.per_container(session.snapshot.node(node).sharing) => {
            let takes = session.container_takes(need, node, None, session.usage(node));
            (takes.iter().flatten()).fold(0u64, |m, t| m | 1 << t.position)
        }
        want => {
            let open = session.open_devices_with(need, node, None, session.usage(node));
            chooser.pick(&session.view(), task, node, open, want)
        }
    };
    (scorers.iter_mut()).fold(0i64, |sum, s| {
        sum.saturating_add(s.score(&session.view(), task, node, devices))
    })
}

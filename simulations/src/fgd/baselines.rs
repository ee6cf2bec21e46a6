//! The paper's baseline policies as plugins of the engine's framework: a [`Score`] for the
//! node and a [`DevicePick`] for the devices (formulas in `policy.rs`). They read the node and
//! the pod through `basalt_plugins::fragmentation`'s views, exactly what the old placement loop
//! kept itself.
//!
//! `random` draws without state: a node's score and a device's choice are [`draw`]s of (seed,
//! arrival, node), the arrival being the snapshot's `now_ms`. The highest draw among the
//! feasible nodes is a uniformly random one.

use basalt_engine::{
    lowest_bits, DeviceChooser, DevicePick, NodeId, NodeScorer, Score, SessionView, TaskId,
};
use basalt_plugins::fragmentation::{task_shape, tightest_each, Models, NodeFree, FULL};

use super::policy::{self, ClassMix, Policy};
use super::rng::draw;

/// `clustering`'s class: every pod sharing one GPU is one class (the paper's simulator tags
/// them all alike), whole-GPU pods by their GPU count.
pub fn class(share: u16, count: u32) -> u32 {
    if share < FULL {
        0
    } else {
        count
    }
}

/// A baseline policy, with the run's seed for `random`.
pub struct Baseline {
    pub policy: Policy,
    pub seed: u64,
}

/// A [`Baseline`] prepared for one session.
struct Prepared {
    policy: Policy,
    seed: u64,
    arrival: u64,
    models: Models,
    free: NodeFree,
    /// Per node, the classes of the GPU pods it holds with their counts (`clustering`).
    classes: Vec<Vec<(u32, u32)>>,
}

impl Score for Baseline {
    fn name(&self) -> &str {
        self.policy.name()
    }

    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>> {
        Some(Box::new(self.prepared(session)))
    }
}

impl DevicePick for Baseline {
    fn name(&self) -> &str {
        self.policy.name()
    }

    fn prepare<'s>(&'s self, session: &SessionView) -> Box<dyn DeviceChooser + 's> {
        Box::new(self.prepared(session))
    }
}

impl Baseline {
    fn prepared(&self, session: &SessionView) -> Prepared {
        let snap = session.snapshot;
        let mut classes = Vec::new();
        if self.policy == Policy::Clustering {
            classes = vec![Vec::new(); snap.nodes.len()];
            for node in &snap.nodes {
                let list: &mut Vec<(u32, u32)> = &mut classes[node.id.index()];
                for &t in session.node_tasks(node.id) {
                    let (_, share, count) = task_shape(session, t);
                    if count == 0 {
                        continue;
                    }
                    let c = class(share, count);
                    match list.iter_mut().find(|(x, _)| *x == c) {
                        Some((_, k)) => *k += 1,
                        None => list.push((c, 1)),
                    }
                }
            }
        }
        Prepared {
            policy: self.policy,
            seed: self.seed,
            arrival: snap.now_ms.max(0) as u64,
            models: Models::of(session),
            free: NodeFree::default(),
            classes,
        }
    }
}

impl NodeScorer for Prepared {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, _: u64) -> i64 {
        if self.policy == Policy::Random {
            return (draw(self.seed, self.arrival, node.0 as u64, 0) >> 1) as i64;
        }
        let (cpu, share, count) = task_shape(session, task);
        self.models.node_free(session, node, &mut self.free);
        let gpu_free: i64 = self.free.gpus.iter().map(|&g| g as i64).sum();
        let gpu = count as i64 * share as i64;
        let cpu_free = self.free.cpu;
        (match self.policy {
            Policy::BestFit => policy::bestfit(cpu_free, cpu, gpu_free, gpu),
            Policy::DotProd => policy::dotprod(cpu_free, cpu, gpu_free, gpu),
            Policy::Packing => policy::packing(count, share, &self.free.gpus),
            Policy::Clustering => {
                let list = &self.classes[node.index()];
                let c = class(share, count);
                let mix = ClassMix::of(list, c);
                policy::clustering(count > 0, gpu_free, mix)
            }
            Policy::Random | Policy::Fgd | Policy::Basalt => {
                unreachable!("{} is not a baseline", self.policy)
            }
        }) as i64
    }
}

impl DeviceChooser for Prepared {
    /// Whole GPUs: the lowest open ones. One shared GPU: the tightest fit (`random`: a random
    /// one of those with room). Several shared GPUs: the tightest, one after another.
    fn pick(
        &mut self,
        session: &SessionView,
        task: TaskId,
        node: NodeId,
        open: u64,
        count: u32,
    ) -> u64 {
        let (_, share, _) = task_shape(session, task);
        if share >= FULL {
            return lowest_bits(open, count);
        }
        self.models.node_free(session, node, &mut self.free);
        if count == 1 && self.policy == Policy::Random {
            let fitting: Vec<u32> = (0..64).filter(|p| open & (1 << p) != 0).collect();
            let d = draw(self.seed, self.arrival, node.0 as u64, 1);
            return 1 << fitting[(d % fitting.len() as u64) as usize];
        }
        tightest_each(&self.free.gpus, open, share, count)
    }
}

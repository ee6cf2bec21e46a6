//! The placement loop: pods arrive one at a time, each is placed at once on the best feasible
//! node or dropped, and nothing ever leaves. GPUs are accounted per device in milli.
//!
//! - feasible node: CPU and memory fit; the node's GPU model is allowed; at least `num_gpu` GPUs
//!   each with free share ≥ the pod's per-GPU share;
//! - node choice: the highest score wins; ties go to the best node in a random ranking of all
//!   nodes drawn once per run from the seed (`random` picks a uniformly random feasible node);
//! - GPU choice: whole-GPU pods take the lowest-numbered fully free GPUs; a sharing pod takes the
//!   tightest-fitting GPU (`random`: a uniformly random GPU that fits; `fgd`: the GPU with the best
//!   fgd score, lowest index on ties). A pod asking several GPUs with a share below 1000 (absent
//!   from the openb lists) takes the tightest-fitting ones under every policy.

use std::collections::HashMap;

use super::frag::{fgd_score, Fragmenter, ModelSet, Shape};
use super::measure::Trajectory;
use super::policy::{self, BasaltScore, ClassMix, Policy};
use super::rng::{Rng, Stream};
use super::trace::{NodeSpec, PodSpec, GPU_MILLI};
use super::FgdError;

const FULL: u16 = GPU_MILLI as u16;

#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub cpu: i64,
    pub mem: i64,
    pub gpus: u32,
    /// Model id; `None` when the list gives no model.
    pub model: Option<u8>,
    /// Offset of this node's GPUs in the flat per-GPU arrays.
    off: usize,
}

#[derive(Clone, Debug)]
pub struct PodInfo {
    pub cpu: i64,
    pub mem: i64,
    pub num_gpu: u32,
    pub share: u16,
    pub models: ModelSet,
    /// `clustering` class: the share for sharing pods, the GPU count for whole-GPU pods.
    class: u32,
    /// Id of (cpu, share, count): what the fgd score of a node depends on besides the node.
    key: u32,
    pub request: u64,
}

/// The cluster, the trace and the typical shapes, shared read-only by every run.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub nodes: Vec<NodeInfo>,
    pub pods: Vec<PodInfo>,
    pub models: Vec<String>,
    pub capacity_milli: u64,
    pub frag: Fragmenter,
    keys: usize,
    gpu_total: usize,
}

impl Experiment {
    pub fn new(nodes: &[NodeSpec], pods: &[PodSpec]) -> Result<Self, FgdError> {
        let mut models: Vec<String> = nodes
            .iter()
            .filter(|n| !n.model.is_empty())
            .map(|n| n.model.clone())
            .collect();
        models.sort();
        models.dedup();
        // 63, not 64: the all-ones set is reserved for "any model".
        if models.len() > 63 {
            return Err(FgdError::Cluster(format!(
                "{} GPU models in the node list; at most 63 are supported",
                models.len()
            )));
        }
        let model_id = |m: &str| models.iter().position(|x| x == m).map(|i| i as u8);
        let mut off = 0;
        let mut node_infos = Vec::with_capacity(nodes.len());
        for n in nodes {
            node_infos.push(NodeInfo {
                cpu: n.cpu_milli,
                mem: n.memory_mib,
                gpus: n.gpus,
                model: if n.model.is_empty() {
                    None
                } else {
                    model_id(&n.model)
                },
                off,
            });
            off += n.gpus as usize;
        }
        let capacity_milli = off as u64 * GPU_MILLI as u64;
        if capacity_milli == 0 {
            return Err(FgdError::Cluster(
                "the node list has no GPUs; the experiment measures GPU allocation".to_string(),
            ));
        }
        let mut keys: HashMap<(i64, u16, u32), u32> = HashMap::new();
        let mut pod_infos = Vec::with_capacity(pods.len());
        for p in pods {
            let models = if p.gpu_spec.is_empty() {
                ModelSet::ANY
            } else {
                // Models no node has cannot be chosen; a pod allowing only those never fits.
                ModelSet(
                    p.gpu_spec
                        .iter()
                        .filter_map(|m| model_id(m))
                        .fold(0u64, |acc, id| acc | (1u64 << id)),
                )
            };
            let share = p.gpu_milli as u16;
            let next = keys.len() as u32;
            let key = *keys.entry((p.cpu_milli, share, p.num_gpu)).or_insert(next);
            pod_infos.push(PodInfo {
                cpu: p.cpu_milli,
                mem: p.memory_mib,
                num_gpu: p.num_gpu,
                share,
                models,
                class: (p.num_gpu << 11) | share as u32,
                key,
                request: p.gpu_request(),
            });
        }
        let frag = Fragmenter::from_trace(
            pod_infos.iter().map(|p| Shape {
                cpu_milli: p.cpu,
                gpu_milli: p.share,
                num_gpu: p.num_gpu,
                models: p.models,
            }),
            95,
        );
        Ok(Experiment {
            nodes: node_infos,
            pods: pod_infos,
            models,
            capacity_milli,
            frag,
            keys: keys.len(),
            gpu_total: off,
        })
    }

    /// GPU requests of the trace pods, in milli, for the workload generator.
    pub fn requests(&self) -> Vec<u64> {
        self.pods.iter().map(|p| p.request).collect()
    }

    /// Runs one policy over one arrival sequence. `seed` feeds the tie ranking and the policy's
    /// own draws (the workload is already drawn).
    pub fn run(&self, workload: &[u32], policy: Policy, seed: u64) -> Trajectory {
        let mut state = State::new(self, policy, seed);
        let mut samples = Vec::with_capacity(workload.len());
        let (mut arrived, mut allocated) = (0u64, 0u64);
        for &i in workload {
            let pod = &self.pods[i as usize];
            arrived += pod.request;
            if state.arrive(pod) {
                allocated += pod.request;
            }
            samples.push((arrived, allocated));
        }
        Trajectory {
            capacity_milli: self.capacity_milli,
            samples,
        }
    }
}

/// A remembered fgd evaluation of (node, pod key), valid while the node's version matches.
#[derive(Clone, Copy, Default)]
struct FgdEntry {
    version: u32,
    score: i32,
    gpu: u16,
}

/// The fgd cache holds at most this many (node, pod key) entries (12 bytes each); beyond it
/// every evaluation is computed afresh: slower, same result.
const FGD_CACHE_MAX: usize = 1 << 22;

/// No GPU chosen by the fgd evaluation (CPU-only, whole-GPU or multi-GPU pods).
const NO_GPU: u16 = u16::MAX;

struct State<'a> {
    exp: &'a Experiment,
    policy: Policy,
    cpu_free: Vec<i64>,
    mem_free: Vec<i64>,
    gpu_free: Vec<u16>,
    gpu_free_total: Vec<u32>,
    /// GPU pods per class on each node (`clustering`).
    classes: Vec<Vec<(u32, u32)>>,
    /// Position of each node in the run's tie ranking (lower wins).
    rank: Vec<u32>,
    rng: Rng,
    basalt: BasaltScore,
    /// Bumped whenever a node changes; invalidates its fgd entries.
    version: Vec<u32>,
    f_before: Vec<(u32, f64)>,
    fgd_cache: Vec<FgdEntry>,
    feasible: Vec<u32>,
}

impl<'a> State<'a> {
    fn new(exp: &'a Experiment, policy: Policy, seed: u64) -> Self {
        let n = exp.nodes.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        Rng::stream(seed, Stream::TieRank).shuffle(&mut order);
        let mut rank = vec![0u32; n];
        for (pos, &node) in order.iter().enumerate() {
            rank[node as usize] = pos as u32;
        }
        let fgd = policy == Policy::Fgd;
        let cache = if fgd && n.saturating_mul(exp.keys) <= FGD_CACHE_MAX {
            n * exp.keys
        } else {
            0
        };
        State {
            exp,
            policy,
            cpu_free: exp.nodes.iter().map(|n| n.cpu).collect(),
            mem_free: exp.nodes.iter().map(|n| n.mem).collect(),
            gpu_free: vec![FULL; exp.gpu_total],
            gpu_free_total: exp.nodes.iter().map(|n| n.gpus * GPU_MILLI).collect(),
            classes: vec![Vec::new(); n],
            rank,
            rng: Rng::stream(seed, Stream::Policy),
            basalt: BasaltScore::new(),
            version: vec![1; n],
            f_before: vec![(0, 0.0); if fgd { n } else { 0 }],
            fgd_cache: vec![FgdEntry::default(); cache],
            feasible: Vec::with_capacity(n),
        }
    }

    fn gpus(&self, n: usize) -> &[u16] {
        let node = &self.exp.nodes[n];
        &self.gpu_free[node.off..node.off + node.gpus as usize]
    }

    fn fits(&self, n: usize, pod: &PodInfo) -> bool {
        let node = &self.exp.nodes[n];
        if self.cpu_free[n] < pod.cpu || self.mem_free[n] < pod.mem {
            return false;
        }
        if !pod.models.allows(node.model) {
            return false;
        }
        if pod.num_gpu == 0 {
            return true;
        }
        let room = self.gpus(n).iter().filter(|&&f| f >= pod.share).count();
        room >= pod.num_gpu as usize
    }

    /// Places the pod if some node fits; returns whether it was placed.
    fn arrive(&mut self, pod: &PodInfo) -> bool {
        let n_nodes = self.exp.nodes.len();
        let chosen = if self.policy == Policy::Random {
            self.feasible.clear();
            for n in 0..n_nodes {
                if self.fits(n, pod) {
                    self.feasible.push(n as u32);
                }
            }
            if self.feasible.is_empty() {
                None
            } else {
                let i = self.rng.below(self.feasible.len() as u64) as usize;
                Some((self.feasible[i] as usize, NO_GPU))
            }
        } else {
            let mut best: Option<(i32, u32, usize, u16)> = None;
            for n in 0..n_nodes {
                if !self.fits(n, pod) {
                    continue;
                }
                let (score, gpu) = self.score(n, pod);
                let rank = self.rank[n];
                if best.is_none_or(|(s, r, _, _)| score > s || (score == s && rank < r)) {
                    best = Some((score, rank, n, gpu));
                }
            }
            best.map(|(_, _, n, gpu)| (n, gpu))
        };
        match chosen {
            Some((n, gpu)) => {
                self.place(n, pod, gpu);
                true
            }
            None => false,
        }
    }

    /// The node's score for the pod and, for `fgd`, the sharing GPU it chose.
    fn score(&mut self, n: usize, pod: &PodInfo) -> (i32, u16) {
        let node = &self.exp.nodes[n];
        let cpu_free = self.cpu_free[n];
        let gpu_free = self.gpu_free_total[n] as i64;
        let gpu = pod.request as i64;
        let s = match self.policy {
            Policy::BestFit => policy::bestfit(cpu_free, pod.cpu, gpu_free, gpu),
            Policy::DotProd => policy::dotprod(cpu_free, pod.cpu, gpu_free, gpu),
            Policy::Clustering => {
                let list = &self.classes[n];
                let mix = if list.is_empty() {
                    ClassMix::NoGpuPods
                } else if list.iter().any(|&(c, _)| c == pod.class) {
                    if list.len() == 1 {
                        ClassMix::OnlyThis
                    } else {
                        ClassMix::ThisAndOthers
                    }
                } else {
                    ClassMix::OnlyOthers
                };
                policy::clustering(pod.num_gpu > 0, gpu_free, mix)
            }
            Policy::Packing => policy::packing(pod.num_gpu, pod.share, self.gpus(n)),
            Policy::Basalt => {
                let cap_gpu = node.gpus as i64 * GPU_MILLI as i64;
                self.basalt.score(
                    (node.cpu, node.mem, cap_gpu),
                    (
                        node.cpu - cpu_free + pod.cpu,
                        node.mem - self.mem_free[n] + pod.mem,
                        cap_gpu - gpu_free + gpu,
                    ),
                )
            }
            Policy::Fgd => return self.fgd(n, pod),
            Policy::Random => unreachable!("random picks without scores"),
        };
        (s, NO_GPU)
    }

    fn f_before(&mut self, n: usize) -> f64 {
        if self.f_before[n].0 != self.version[n] {
            let node = &self.exp.nodes[n];
            let f = self
                .exp
                .frag
                .fragmentation(node.model, self.cpu_free[n], self.gpus(n));
            self.f_before[n] = (self.version[n], f);
        }
        self.f_before[n].1
    }

    /// fgd: the score of placing the pod here, with the GPU choice that gives the best score.
    fn fgd(&mut self, n: usize, pod: &PodInfo) -> (i32, u16) {
        let slot = n * self.exp.keys + pod.key as usize;
        if let Some(e) = self.fgd_cache.get(slot) {
            if e.version == self.version[n] {
                return (e.score, e.gpu);
            }
        }
        let before = self.f_before(n);
        let node = &self.exp.nodes[n];
        let frag = &self.exp.frag;
        let cpu_after = self.cpu_free[n] - pod.cpu;
        let mut after: Vec<u16> = self.gpus(n).to_vec();
        let (score, gpu) = if pod.num_gpu == 1 && pod.share < FULL {
            let mut best: Option<(i32, u16)> = None;
            for i in 0..after.len() {
                let f = after[i];
                // GPUs with equal free share give equal results; the first one wins ties.
                if f < pod.share || after[..i].contains(&f) {
                    continue;
                }
                after[i] = f - pod.share;
                let s = fgd_score(before, frag.fragmentation(node.model, cpu_after, &after));
                after[i] = f;
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, i as u16));
                }
            }
            best.expect("a feasible node has a GPU that fits")
        } else {
            take_gpus(&mut after, pod, None);
            let s = fgd_score(before, frag.fragmentation(node.model, cpu_after, &after));
            (s, NO_GPU)
        };
        if let Some(e) = self.fgd_cache.get_mut(slot) {
            *e = FgdEntry {
                version: self.version[n],
                score,
                gpu,
            };
        }
        (score, gpu)
    }

    fn place(&mut self, n: usize, pod: &PodInfo, fgd_gpu: u16) {
        let node = &self.exp.nodes[n];
        let (off, len) = (node.off, node.gpus as usize);
        self.cpu_free[n] -= pod.cpu;
        self.mem_free[n] -= pod.mem;
        if pod.num_gpu > 0 {
            let gpus = &mut self.gpu_free[off..off + len];
            let pick = if pod.num_gpu == 1 && pod.share < FULL {
                match self.policy {
                    Policy::Fgd if fgd_gpu != NO_GPU => Some(fgd_gpu as usize),
                    Policy::Random => {
                        let fitting: Vec<usize> =
                            (0..len).filter(|&i| gpus[i] >= pod.share).collect();
                        Some(fitting[self.rng.below(fitting.len() as u64) as usize])
                    }
                    _ => None,
                }
            } else {
                None
            };
            take_gpus(gpus, pod, pick);
            self.gpu_free_total[n] -= pod.request as u32;
            let list = &mut self.classes[n];
            match list.iter_mut().find(|(c, _)| *c == pod.class) {
                Some((_, k)) => *k += 1,
                None => list.push((pod.class, 1)),
            }
        }
        self.version[n] += 1;
    }
}

/// Takes the pod's GPUs from `gpus` (free milli per GPU): `pick` when given (a sharing pod's
/// chosen GPU), else the lowest-numbered fully free GPUs for whole-GPU pods, else the
/// tightest-fitting ones.
fn take_gpus(gpus: &mut [u16], pod: &PodInfo, pick: Option<usize>) {
    if pod.num_gpu == 0 {
        return;
    }
    if let Some(i) = pick {
        gpus[i] -= pod.share;
        return;
    }
    if pod.share == FULL {
        let mut left = pod.num_gpu;
        for g in gpus.iter_mut() {
            if left == 0 {
                break;
            }
            if *g == FULL {
                *g = 0;
                left -= 1;
            }
        }
        debug_assert_eq!(left, 0, "feasibility was checked");
        return;
    }
    for _ in 0..pod.num_gpu {
        let t = policy::tightest(gpus, pod.share).expect("feasibility was checked");
        gpus[t] -= pod.share;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: i64, gpus: u32, model: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            cpu_milli: cpu,
            memory_mib: 1 << 20,
            gpus,
            model: model.to_string(),
        }
    }

    fn pod(cpu: i64, num_gpu: u32, share: u32) -> PodSpec {
        PodSpec {
            name: "p".to_string(),
            cpu_milli: cpu,
            memory_mib: 1024,
            num_gpu,
            gpu_milli: share,
            gpu_spec: Vec::new(),
        }
    }

    #[test]
    fn feasibility_checks_cpu_memory_model_and_gpu_room() {
        let nodes = [node("a", 8000, 2, "T4"), node("b", 8000, 2, "V100M16")];
        let mut only_v100 = pod(1000, 1, 500);
        only_v100.gpu_spec = vec!["V100M16".to_string()];
        let mut big_mem = pod(1000, 0, 0);
        big_mem.memory_mib = 2 << 20;
        let pods = [
            only_v100,
            pod(9000, 0, 0),
            pod(1000, 3, 1000),
            big_mem,
            pod(1000, 2, 1000),
        ];
        let exp = Experiment::new(&nodes, &pods).unwrap();
        let s = State::new(&exp, Policy::BestFit, 1);
        assert!(!s.fits(0, &exp.pods[0]) && s.fits(1, &exp.pods[0]));
        assert!(!s.fits(0, &exp.pods[1]));
        assert!(!s.fits(0, &exp.pods[2]));
        assert!(!s.fits(0, &exp.pods[3]));
        assert!(s.fits(0, &exp.pods[4]));
    }

    #[test]
    fn whole_gpu_pods_take_lowest_free_and_sharing_pods_the_tightest() {
        let exp = Experiment::new(
            &[node("a", 64000, 4, "T4")],
            &[pod(1000, 1, 600), pod(1000, 2, 1000), pod(1000, 1, 300)],
        )
        .unwrap();
        let mut s = State::new(&exp, Policy::BestFit, 1);
        // 600 on the first GPU (all equally tight): [400, 1000, 1000, 1000].
        assert!(s.arrive(&exp.pods[0]));
        assert_eq!(s.gpus(0), &[400, 1000, 1000, 1000]);
        // Two whole GPUs: the lowest-numbered fully free ones, 1 and 2.
        assert!(s.arrive(&exp.pods[1]));
        assert_eq!(s.gpus(0), &[400, 0, 0, 1000]);
        // 300: tightest is GPU 0 (400 free).
        assert!(s.arrive(&exp.pods[2]));
        assert_eq!(s.gpus(0), &[100, 0, 0, 1000]);
        // Another 300 fits only on GPU 3.
        assert!(s.arrive(&exp.pods[2]));
        assert_eq!(s.gpus(0), &[100, 0, 0, 700]);
        // Two whole GPUs no longer fit: dropped.
        assert!(!s.arrive(&exp.pods[1]));
    }

    #[test]
    fn ties_follow_the_seeded_ranking_and_scores_win() {
        // Three identical idle nodes: bestfit ties everywhere, so the first pod lands on the
        // node ranked first; then bestfit prefers the now fuller node.
        let nodes: Vec<NodeSpec> = (0..3)
            .map(|i| node(&format!("n{i}"), 64000, 8, "G2"))
            .collect();
        let exp = Experiment::new(&nodes, &[pod(4000, 1, 1000)]).unwrap();
        let mut s = State::new(&exp, Policy::BestFit, 9);
        let first = (0..3).min_by_key(|&n| s.rank[n]).unwrap();
        s.arrive(&exp.pods[0]);
        assert_eq!(s.gpu_free_total[first], 7000);
        s.arrive(&exp.pods[0]);
        assert_eq!(s.gpu_free_total[first], 6000);
    }

    #[test]
    fn fgd_picks_the_gpu_that_fragments_least_not_the_tightest() {
        // Trace: 8 half-GPU pods, one 400 and one 300: typical shapes 500 (weight 0.8), 300 and
        // 400 (0.1 each). On an idle 2-GPU node the 400 pod goes to GPU 0 (equal options, lowest
        // index): [600, 1000]; F = 0 (every shape fits, no GPU below any share).
        // The 300 pod then: on GPU 0 → [300, 1000]: 0.8·300 (below 500) + 0.1·300 (below 400)
        // = 270 → ⌊100·sigmoid(−0.27)⌋ = ⌊43.29⌋ = 43; on GPU 1 → [600, 700]: 0 → 50.
        // fgd takes GPU 1, where the tightest fit would take GPU 0.
        let mut pods = vec![pod(1000, 1, 500); 8];
        pods.push(pod(1000, 1, 400));
        pods.push(pod(1000, 1, 300));
        let exp = Experiment::new(&[node("a", 64000, 2, "T4")], &pods).unwrap();
        let mut s = State::new(&exp, Policy::Fgd, 1);
        assert!(s.arrive(&exp.pods[8]));
        assert_eq!(s.gpus(0), &[600, 1000]);
        assert_eq!(s.f_before(0), 0.0);
        assert_eq!(s.fgd(0, &exp.pods[9]), (50, 1));
        assert!(s.arrive(&exp.pods[9]));
        assert_eq!(s.gpus(0), &[600, 700]);
        // The same decision under bestfit takes the tightest GPU.
        let mut b = State::new(&exp, Policy::BestFit, 1);
        b.arrive(&exp.pods[8]);
        b.arrive(&exp.pods[9]);
        assert_eq!(b.gpus(0), &[300, 1000]);
    }

    #[test]
    fn fgd_score_of_the_costlier_gpu_by_hand() {
        // Shapes: 500 ×8, 300, 400, whole GPU ×1 each: weights 8/11, 1/11, 1/11, 1/11.
        // GPU 1 is fully used, so a 300 pod can only go to GPU 0: [600, 0] → [300, 0].
        // F_before: 500, 400, 300 fit with nothing below their share; the whole-GPU shape cannot
        // run: idle 600 → 600/11 = 54.55.
        // F_after: 500, 400 and whole cannot run (300 idle each), 300 fits with 0 below:
        // 300·10/11 = 272.73. Δ = −218.18 → sigmoid(−0.21818) = 0.4457 → 44.
        let mut pods = vec![pod(1000, 1, 500); 8];
        pods.push(pod(1000, 1, 400));
        pods.push(pod(1000, 1, 300));
        pods.push(pod(1000, 1, 1000));
        let exp = Experiment::new(&[node("a", 64000, 2, "T4")], &pods).unwrap();
        let mut s = State::new(&exp, Policy::Fgd, 1);
        assert!(s.arrive(&exp.pods[8]));
        assert!(s.arrive(&exp.pods[10]));
        assert_eq!(s.gpus(0), &[600, 0]);
        assert_eq!(s.fgd(0, &exp.pods[9]), (44, 0));
    }

    #[test]
    fn fgd_cache_does_not_change_decisions() {
        use crate::fgd::{trace, workload, SAMPLE_NODES, SAMPLE_PODS};
        let nodes = trace::read_nodes("nodes", SAMPLE_NODES).unwrap();
        let pods = trace::read_pods("pods", SAMPLE_PODS).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        let w = workload::generate(&exp.requests(), exp.capacity_milli, 42);
        let replay = |cached: bool| {
            let mut s = State::new(&exp, Policy::Fgd, 42);
            if !cached {
                s.fgd_cache.clear();
            }
            let placed: Vec<bool> = w.iter().map(|&i| s.arrive(&exp.pods[i as usize])).collect();
            (placed, s.gpu_free.clone(), s.cpu_free.clone())
        };
        let cached = replay(true);
        assert!(cached.0.iter().any(|&p| !p), "the sample fills the cluster");
        assert_eq!(cached, replay(false));
    }

    #[test]
    fn random_policy_places_on_feasible_nodes_only() {
        let nodes = [node("a", 64000, 1, "T4"), node("b", 64000, 1, "V100M16")];
        let mut p = pod(1000, 1, 1000);
        p.gpu_spec = vec!["V100M16".to_string()];
        let exp = Experiment::new(&nodes, &[p]).unwrap();
        for seed in 0..10 {
            let t = exp.run(&[0, 0], Policy::Random, seed);
            assert_eq!(t.samples, vec![(1000, 1000), (2000, 1000)]);
        }
    }
}

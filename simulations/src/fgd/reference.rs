//! The experiment's placement loop as it was before it ran through the engine, kept as the
//! test oracle of the engine path (`engine.rs`): for every paper policy and a seed, both place
//! every arrival on the same node and GPUs. Pods arrive one at a time, each is placed at once
//! on the best feasible node or dropped, and nothing ever leaves; GPUs are accounted per
//! device in milli.

use basalt_plugins::fragmentation::fgd_score;

use super::engine::{tie_ranks, Placement};
use super::experiment::{Experiment, PodInfo};
use super::measure::Trajectory;
use super::policy::{self, ClassMix, Policy};
use super::rng::draw;
use crate::openb::GPU_MILLI;

const FULL: u16 = GPU_MILLI as u16;

/// Runs a paper policy over one arrival sequence: the trajectory and where each arrival went.
pub fn run(
    exp: &Experiment,
    workload: &[u32],
    policy: Policy,
    seed: u64,
) -> (Trajectory, Vec<Placement>) {
    let mut state = State::new(exp, policy, seed);
    let mut samples = Vec::with_capacity(workload.len());
    let mut placements = Vec::with_capacity(workload.len());
    let (mut arrived, mut allocated) = (0u64, 0u64);
    for (k, &i) in workload.iter().enumerate() {
        let pod = &exp.pods[i as usize];
        arrived += pod.request;
        state.arrival = k as u64;
        let placed = state.arrive(pod);
        if placed.is_some() {
            allocated += pod.request;
        }
        samples.push((arrived, allocated));
        placements.push(placed);
    }
    let trajectory = Trajectory {
        capacity_milli: exp.capacity_milli,
        samples,
    };
    (trajectory, placements)
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
    seed: u64,
    /// The arrival being placed (what `random` draws for).
    arrival: u64,
    /// Bumped whenever a node changes; invalidates its fgd entries.
    version: Vec<u32>,
    f_before: Vec<(u32, f64)>,
    fgd_cache: Vec<FgdEntry>,
}

impl<'a> State<'a> {
    fn new(exp: &'a Experiment, policy: Policy, seed: u64) -> Self {
        let n = exp.nodes.len();
        let rank = tie_ranks(n, seed);
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
            seed,
            arrival: 0,
            version: vec![1; n],
            f_before: vec![(0, 0.0); if fgd { n } else { 0 }],
            fgd_cache: vec![FgdEntry::default(); cache],
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

    /// Places the pod if some node fits; returns where (node, GPUs as a mask).
    fn arrive(&mut self, pod: &PodInfo) -> Placement {
        let n_nodes = self.exp.nodes.len();
        let chosen = if self.policy == Policy::Random {
            // The highest draw among the feasible nodes, ties to the ranking.
            let mut best: Option<(u64, u32, usize)> = None;
            for n in 0..n_nodes {
                if !self.fits(n, pod) {
                    continue;
                }
                let d = draw(self.seed, self.arrival, n as u64, 0) >> 1;
                let rank = self.rank[n];
                if best.is_none_or(|(b, r, _)| d > b || (d == b && rank < r)) {
                    best = Some((d, rank, n));
                }
            }
            best.map(|(_, _, n)| (n, NO_GPU))
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
        chosen.map(|(n, gpu)| (n as u32, self.place(n, pod, gpu)))
    }

    /// The node's score for the pod and, for `fgd`, the sharing GPU it chose.
    fn score(&mut self, n: usize, pod: &PodInfo) -> (i32, u16) {
        let cpu_free = self.cpu_free[n];
        let gpu_free = self.gpu_free_total[n] as i64;
        let gpu = pod.request as i64;
        let s = match self.policy {
            Policy::BestFit => policy::bestfit(cpu_free, pod.cpu, gpu_free, gpu),
            Policy::DotProd => policy::dotprod(cpu_free, pod.cpu, gpu_free, gpu),
            Policy::Clustering => {
                let list = &self.classes[n];
                let mix = ClassMix::of(list, pod.class);
                policy::clustering(pod.num_gpu > 0, gpu_free, mix)
            }
            Policy::Packing => policy::packing(pod.num_gpu, pod.share, self.gpus(n)),
            Policy::Fgd => return self.fgd(n, pod),
            Policy::Random | Policy::Basalt => {
                unreachable!("{} is no paper policy here", self.policy)
            }
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

    /// Places the pod; returns the GPUs it took as a mask.
    fn place(&mut self, n: usize, pod: &PodInfo, fgd_gpu: u16) -> u64 {
        let mut taken = 0u64;
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
                        let d = draw(self.seed, self.arrival, n as u64, 1);
                        Some(fitting[(d % fitting.len() as u64) as usize])
                    }
                    _ => None,
                }
            } else {
                None
            };
            let before = gpus.to_vec();
            take_gpus(gpus, pod, pick);
            taken = (0..len)
                .filter(|&i| gpus[i] != before[i])
                .fold(0, |m, i| m | 1 << i);
            self.gpu_free_total[n] -= pod.request as u32;
            let list = &mut self.classes[n];
            match list.iter_mut().find(|(c, _)| *c == pod.class) {
                Some((_, k)) => *k += 1,
                None => list.push((pod.class, 1)),
            }
        }
        self.version[n] += 1;
        taken
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
    use crate::openb::{Node as NodeSpec, Pod as PodSpec};

    /// The engine path places every arrival where this loop does, for each paper policy.
    fn engine_matches_reference(exp: &Experiment, seeds: &[u64], limit: usize) {
        for &seed in seeds {
            let mut w = crate::fgd::workload::generate(&exp.requests(), exp.capacity_milli, seed);
            w.truncate(limit);
            for p in Policy::ALL.into_iter().filter(|&p| p != Policy::Basalt) {
                let (want_t, want) = run(exp, &w, p, seed);
                let (got_t, got) = exp.run(&w, p, seed).unwrap();
                let first = want.iter().zip(&got).position(|(a, b)| a != b);
                assert_eq!(first, None, "{p}, seed {seed}: arrival {first:?} differs");
                assert_eq!(want_t, got_t, "{p}");
                assert!(got.iter().any(Option::is_none) || limit < w.len() + 1);
            }
        }
    }

    #[test]
    fn engine_path_places_like_the_reference_on_the_sample() {
        use crate::fgd::{SAMPLE_NODES, SAMPLE_PODS};
        let nodes = crate::openb::read_nodes("nodes", SAMPLE_NODES.as_bytes()).unwrap();
        let pods = crate::openb::read_pods("pods", SAMPLE_PODS.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        engine_matches_reference(&exp, &[42, 7], usize::MAX);
    }

    /// The same on the first 2,000 arrivals of the full openb default lists, when
    /// `BASALT_OPENB_DIR` names a directory holding them (alibaba/clusterdata,
    /// `cluster-trace-gpu-v2023/csv/`; see `simulations/traces/README.md`).
    #[test]
    fn engine_path_places_like_the_reference_on_the_default_list() {
        let Ok(dir) = std::env::var("BASALT_OPENB_DIR") else {
            eprintln!("BASALT_OPENB_DIR not set: skipped");
            return;
        };
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}"));
        let (Ok(n), Ok(p)) = (
            read("openb_node_list_gpu_node.csv"),
            read("openb_pod_list_default.csv"),
        ) else {
            eprintln!("openb lists not found under {dir}: skipped");
            return;
        };
        let nodes = crate::openb::read_nodes("nodes", n.as_bytes()).unwrap();
        let pods = crate::openb::read_pods("pods", p.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        engine_matches_reference(&exp, &[42], 2_000);
    }

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
            ..PodSpec::default()
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
        assert!(s.arrive(&exp.pods[0]).is_some());
        assert_eq!(s.gpus(0), &[400, 1000, 1000, 1000]);
        // Two whole GPUs: the lowest-numbered fully free ones, 1 and 2.
        assert!(s.arrive(&exp.pods[1]).is_some());
        assert_eq!(s.gpus(0), &[400, 0, 0, 1000]);
        // 300: tightest is GPU 0 (400 free).
        assert!(s.arrive(&exp.pods[2]).is_some());
        assert_eq!(s.gpus(0), &[100, 0, 0, 1000]);
        // Another 300 fits only on GPU 3.
        assert!(s.arrive(&exp.pods[2]).is_some());
        assert_eq!(s.gpus(0), &[100, 0, 0, 700]);
        // Two whole GPUs no longer fit: dropped.
        assert!(s.arrive(&exp.pods[1]).is_none());
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
        assert!(s.arrive(&exp.pods[8]).is_some());
        assert_eq!(s.gpus(0), &[600, 1000]);
        assert_eq!(s.f_before(0), 0.0);
        assert_eq!(s.fgd(0, &exp.pods[9]), (50, 1));
        assert!(s.arrive(&exp.pods[9]).is_some());
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
        assert!(s.arrive(&exp.pods[8]).is_some());
        assert!(s.arrive(&exp.pods[10]).is_some());
        assert_eq!(s.gpus(0), &[600, 0]);
        assert_eq!(s.fgd(0, &exp.pods[9]), (44, 0));
    }

    #[test]
    fn fgd_cache_does_not_change_decisions() {
        use crate::fgd::{workload, SAMPLE_NODES, SAMPLE_PODS};
        let nodes = crate::openb::read_nodes("nodes", SAMPLE_NODES.as_bytes()).unwrap();
        let pods = crate::openb::read_pods("pods", SAMPLE_PODS.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        let w = workload::generate(&exp.requests(), exp.capacity_milli, 42);
        let replay = |cached: bool| {
            let mut s = State::new(&exp, Policy::Fgd, 42);
            if !cached {
                s.fgd_cache.clear();
            }
            let placed: Vec<bool> = (w.iter())
                .map(|&i| s.arrive(&exp.pods[i as usize]).is_some())
                .collect();
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
            let (t, _) = run(&exp, &[0, 0], Policy::Random, seed);
            assert_eq!(t.samples, vec![(1000, 1000), (2000, 1000)]);
        }
    }
}

//! The placement policies of the experiment and their node scores (whole numbers 0–100, rounded
//! down; the highest wins). CPU is in milli with normaliser 128,000, GPU in milli with normaliser
//! 8,000; "free" is what the node has left before placing; `gpu` is the pod's total GPU request.
//! Integer formulas are evaluated exactly (no floats), so floors never wobble.

use std::fmt;
use std::str::FromStr;

use basalt_engine::{ResourceNames, Resources, CPU, GPU, MEMORY};
use basalt_plugins::nodeorder::Utilisation;

use super::FgdError;
use crate::openb::GPU_MILLI;

const CPU_NORM: i128 = 128_000;
const GPU_NORM: i128 = 8_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    BestFit,
    DotProd,
    Clustering,
    Packing,
    Random,
    Fgd,
    Basalt,
}

impl Policy {
    pub const ALL: [Policy; 7] = [
        Policy::Random,
        Policy::DotProd,
        Policy::Clustering,
        Policy::Packing,
        Policy::BestFit,
        Policy::Fgd,
        Policy::Basalt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::BestFit => "bestfit",
            Policy::DotProd => "dotprod",
            Policy::Clustering => "clustering",
            Policy::Packing => "packing",
            Policy::Random => "random",
            Policy::Fgd => "fgd",
            Policy::Basalt => "basalt",
        }
    }

    /// `all`, one name, or a comma list (duplicates dropped, order kept).
    pub fn parse_list(s: &str) -> Result<Vec<Policy>, FgdError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let add: Vec<Policy> = if part == "all" {
                Policy::ALL.to_vec()
            } else {
                vec![part.parse()?]
            };
            for p in add {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = FgdError;
    fn from_str(s: &str) -> Result<Self, FgdError> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| FgdError::UnknownPolicy(s.to_string()))
    }
}

fn floor_div(num: i128, den: i128) -> i32 {
    num.div_euclid(den).clamp(0, 100) as i32
}

/// `bestfit` = ⌊100·(1 − [½(cpuFree − cpu)/128000 + ½(gpuFree − gpu)/8000])⌋
/// = ⌊(100·256000 − 100·(cpuFree − cpu) − 1600·(gpuFree − gpu)) / 256000⌋.
pub fn bestfit(cpu_free: i64, cpu: i64, gpu_free: i64, gpu: i64) -> i32 {
    let den = 2 * CPU_NORM;
    let num = 100 * den
        - 100 * (cpu_free - cpu) as i128
        - 100 * (den / (2 * GPU_NORM)) * (gpu_free - gpu) as i128;
    floor_div(num, den)
}

/// `dotprod` = ⌊100·(1 − ½[cpuFree·cpu/128000² + gpuFree·gpu/8000²])⌋
/// = ⌊(100·D − 50·cpuFree·cpu − 50·256·gpuFree·gpu) / D⌋ with D = 128000² = 256·8000².
pub fn dotprod(cpu_free: i64, cpu: i64, gpu_free: i64, gpu: i64) -> i32 {
    let den = CPU_NORM * CPU_NORM;
    let ratio = den / (GPU_NORM * GPU_NORM);
    let num = 100 * den
        - 50 * cpu_free as i128 * cpu as i128
        - 50 * ratio * gpu_free as i128 * gpu as i128;
    floor_div(num, den)
}

/// Which GPU pods a node hosts, relative to the class of the pod being placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassMix {
    /// Only GPU pods of this pod's class.
    OnlyThis,
    /// This pod's class and others.
    ThisAndOthers,
    /// No GPU pods at all.
    NoGpuPods,
    /// GPU pods, none of this class.
    OnlyOthers,
}

impl ClassMix {
    /// The mix of a node holding GPU pods of `classes` (class, count) for a pod of `class`.
    pub fn of(classes: &[(u32, u32)], class: u32) -> ClassMix {
        if classes.is_empty() {
            ClassMix::NoGpuPods
        } else if classes.iter().any(|&(c, _)| c == class) {
            if classes.len() == 1 {
                ClassMix::OnlyThis
            } else {
                ClassMix::ThisAndOthers
            }
        } else {
            ClassMix::OnlyOthers
        }
    }
}

/// `clustering` = ⌊25·(8000 − gpuFree)/8000⌋ + 75 / 50 / 25 / 0 by [`ClassMix`]; CPU-only pods
/// score 0 everywhere (`gpu_pod` false).
pub fn clustering(gpu_pod: bool, gpu_free: i64, mix: ClassMix) -> i32 {
    if !gpu_pod {
        return 0;
    }
    let base = (25 * (GPU_NORM - gpu_free as i128)).div_euclid(GPU_NORM);
    let bonus = match mix {
        ClassMix::OnlyThis => 75,
        ClassMix::ThisAndOthers => 50,
        ClassMix::NoGpuPods => 25,
        ClassMix::OnlyOthers => 0,
    };
    (base + bonus).clamp(0, 100) as i32
}

/// The tightest-fitting GPU for a share: least free share that still fits, lowest index on ties.
pub fn tightest(gpu_free: &[u16], share: u16) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &f) in gpu_free.iter().enumerate() {
        if f >= share && best.is_none_or(|b| f < gpu_free[b]) {
            best = Some(i);
        }
    }
    best
}

/// `packing`: a sharing pod that fits on a partly used GPU (the tightest one, `free` milli
/// left): max(100 − ⌊free/100⌋, 50). A pod that needs fully free GPUs (k of them): max(50 − k,
/// 33), or max(33 − g, g) on a node whose g GPUs are all free. CPU-only pods: 0.
/// Assumes the pod fits on the node.
pub fn packing(num_gpu: u32, share: u16, gpu_free: &[u16]) -> i32 {
    if num_gpu == 0 {
        return 0;
    }
    let full = GPU_MILLI as u16;
    if num_gpu == 1 && share < full {
        if let Some(t) = tightest(gpu_free, share) {
            let free = gpu_free[t] as i32;
            if free < full as i32 {
                return (100 - free / 100).max(50);
            }
        }
    }
    let g = gpu_free.len() as i32;
    if gpu_free.iter().all(|&f| f == full) {
        (33 - g).max(g)
    } else {
        (50 - num_gpu as i32).max(33)
    }
}

/// Basalt's default node scoring (`binpack`, weights cpu 1 / memory 1 / nvidia.com/gpu 10) through
/// [`Utilisation`] itself: the node's weighted utilisation *after* placing the pod (as the
/// engine's `key_with` scores it), with GPU usage counted in milli over `gpus × 1000`, mapped to
/// 0–100 as ⌊utilisation in millionths / 10,000⌋. Higher = fuller = preferred, which is what the
/// engine's binpack key (1,000,000 − utilisation, lowest first) prefers.
pub struct BasaltScore {
    utilisation: Utilisation,
    alloc: Resources,
    used: Resources,
}

impl Default for BasaltScore {
    fn default() -> Self {
        Self::new()
    }
}

impl BasaltScore {
    pub fn new() -> Self {
        let names = ResourceNames::new(basalt_crds::convert::device_names::GPU_NAME, []);
        let config = basalt_plugins::Config::default();
        BasaltScore {
            utilisation: Utilisation::new(&config.node_order, &names),
            alloc: Resources::zero(names.len()),
            used: Resources::zero(names.len()),
        }
    }

    /// `cap_*` the node's capacity, `used_*` its usage with the pod placed (CPU milli, memory MiB,
    /// GPU milli).
    pub fn score(&mut self, cap: (i64, i64, i64), used: (i64, i64, i64)) -> i32 {
        const MIB: i64 = 1 << 20;
        self.alloc.set(CPU, cap.0);
        self.alloc.set(MEMORY, cap.1 * MIB);
        self.alloc.set(GPU, cap.2);
        self.used.set(CPU, used.0);
        self.used.set(MEMORY, used.1 * MIB);
        self.used.set(GPU, used.2);
        let u = self.utilisation.utilisation(&self.alloc, &self.used);
        (u / 10_000).min(100) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_named() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
        }
        let e = "worstfit".parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains("worstfit"), "{e}");
        assert_eq!(
            Policy::parse_list("fgd,random,fgd").unwrap(),
            vec![Policy::Fgd, Policy::Random]
        );
        assert_eq!(Policy::parse_list("all").unwrap().len(), 7);
        assert!(Policy::parse_list("fgd,nope").is_err());
    }

    #[test]
    fn bestfit_by_hand() {
        // Node: 64000 CPU free, 4000 GPU milli free; pod 8000 CPU, 1000 GPU.
        // 1 − [½·56000/128000 + ½·3000/8000] = 1 − [0.21875 + 0.1875] = 0.59375 → 59.
        assert_eq!(bestfit(64000, 8000, 4000, 1000), 59);
        // Exact fit of both: 1 − 0 = 1 → 100.
        assert_eq!(bestfit(8000, 8000, 1000, 1000), 100);
        // Empty big node: 1 − [½·(128000−0)/128000 + ½·8000/8000] = 0 → 0.
        assert_eq!(bestfit(128000, 0, 8000, 0), 0);
        // Larger than the normalisers: negative, clamped to 0.
        assert_eq!(bestfit(200000, 0, 8000, 0), 0);
    }

    #[test]
    fn dotprod_by_hand() {
        // 1 − ½[64000·8000/128000² + 4000·1000/8000²] = 1 − ½[0.03125 + 0.0625] = 0.953125 → 95.
        assert_eq!(dotprod(64000, 8000, 4000, 1000), 95);
        // 1 − ½[128000·128000/128000² + 8000·8000/8000²] = 0 → 0.
        assert_eq!(dotprod(128000, 128000, 8000, 8000), 0);
        // 1 − ½[96000·4000/128000² + 2000·500/8000²] = 1 − ½[0.0234375 + 0.015625]
        // = 0.98046875 → 98.
        assert_eq!(dotprod(96000, 4000, 2000, 500), 98);
    }

    #[test]
    fn clustering_by_hand() {
        // 8 GPUs, 3000 milli free: ⌊25·5000/8000⌋ = ⌊15.625⌋ = 15; +75 → 90.
        assert_eq!(clustering(true, 3000, ClassMix::OnlyThis), 90);
        assert_eq!(clustering(true, 3000, ClassMix::ThisAndOthers), 65);
        assert_eq!(clustering(true, 3000, ClassMix::OnlyOthers), 15);
        // Idle 2-GPU node: ⌊25·6000/8000⌋ = 18; no GPU pods → +25 = 43.
        assert_eq!(clustering(true, 2000, ClassMix::NoGpuPods), 43);
        assert_eq!(clustering(false, 0, ClassMix::OnlyThis), 0);
    }

    #[test]
    fn packing_by_hand() {
        // Sharing pod (300) fits on partly used GPUs with 450 and 700 free: the tightest is 450:
        // 100 − ⌊450/100⌋ = 96.
        assert_eq!(packing(1, 300, &[1000, 700, 450, 0]), 96);
        // Only fully free GPUs fit (the partly used one has 200 < 300): k = 1 → max(49, 33) = 49.
        assert_eq!(packing(1, 300, &[1000, 200]), 49);
        // Whole 2-GPU pod on a partly used node: max(50 − 2, 33) = 48.
        assert_eq!(packing(2, 1000, &[1000, 1000, 0, 0]), 48);
        // 8-GPU pod on a partly used node: max(42, 33) = 42.
        assert_eq!(
            packing(
                8,
                1000,
                &[1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 0]
            ),
            42
        );
        // Idle 8-GPU node: max(33 − 8, 8) = 25; idle 2-GPU node: 31.
        assert_eq!(packing(1, 1000, &[1000; 8]), 25);
        assert_eq!(packing(1, 500, &[1000; 2]), 31);
        assert_eq!(packing(0, 0, &[1000; 2]), 0);
    }

    #[test]
    fn tightest_prefers_least_free_then_lowest_index() {
        assert_eq!(tightest(&[1000, 400, 600, 400], 300), Some(1));
        assert_eq!(tightest(&[1000, 200], 300), Some(0));
        assert_eq!(tightest(&[100, 200], 300), None);
    }

    #[test]
    fn basalt_score_by_hand() {
        let mut b = BasaltScore::new();
        // Node 96 CPUs, 384 GiB, 8 GPUs; after placing: 48 CPUs, 96 GiB, 4000 milli GPU used.
        // (1·0.5 + 1·0.25 + 10·0.5) / 12 = 5.75 / 12 = 0.479166… → 47.
        assert_eq!(b.score((96000, 393216, 8000), (48000, 98304, 4000)), 47);
        // Full node → 100; empty node → 0.
        assert_eq!(b.score((1000, 1024, 2000), (1000, 1024, 2000)), 100);
        assert_eq!(b.score((1000, 1024, 2000), (0, 0, 0)), 0);
        // A node without GPUs: only CPU and memory count: (0.5 + 0.5) / 2 → 50.
        assert_eq!(b.score((1000, 1024, 0), (500, 512, 0)), 50);
    }
}

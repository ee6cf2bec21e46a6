//! The synthetic MIG workload: single pods asking for one H100 MIG profile, arriving as a
//! Poisson process and running for an exponentially distributed time, seeded.

use crate::fgd::rng::{Rng, Stream};

/// The documented mix, by share of pods: 40 % `1g.10gb`, 25 % `2g.20gb`, 20 % `3g.40gb`,
/// 15 % `7g.80gb` (2.55 compute slices per pod on average).
pub const MIX: [(&str, u32, u64); 4] = [
    ("1g.10gb", 1, 40),
    ("2g.20gb", 2, 25),
    ("3g.40gb", 3, 20),
    ("7g.80gb", 7, 15),
];

/// One pod of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct MigPod {
    pub arrive_s: f64,
    pub profile: &'static str,
    pub compute_slices: u32,
    pub run_s: f64,
}

/// What the workload looks like.
#[derive(Clone, Debug)]
pub struct Workload {
    pub gpus: u32,
    /// Offered compute over the cluster's, in percent (arrival rate × mean run × mean slices).
    pub load_percent: u32,
    pub mean_run_s: f64,
    pub horizon_s: f64,
    pub seed: u64,
}

/// Exponential with this mean, from a uniform draw.
fn exponential(rng: &mut Rng, mean: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    -mean * (1.0 - u).ln()
}

impl Workload {
    /// The pods arriving before the horizon, in arrival order; the same for a seed whatever
    /// the layouts it is replayed with.
    pub fn pods(&self) -> Vec<MigPod> {
        let mut rng = Rng::stream(self.seed, Stream::Workload);
        let total: u64 = MIX.iter().map(|m| m.2).sum();
        let mean_slices: f64 =
            MIX.iter().map(|m| m.1 as f64 * m.2 as f64).sum::<f64>() / total as f64;
        let capacity = self.gpus as f64 * 7.0;
        let rate = self.load_percent as f64 / 100.0 * capacity / (mean_slices * self.mean_run_s);
        let mut pods = Vec::new();
        let mut t = 0.0;
        loop {
            t += exponential(&mut rng, 1.0 / rate);
            if t >= self.horizon_s {
                return pods;
            }
            let mut pick = rng.below(total);
            let &(profile, compute_slices, _) = (MIX.iter())
                .find(|m| {
                    let hit = pick < m.2;
                    pick = pick.saturating_sub(m.2);
                    hit
                })
                .expect("pick < total");
            pods.push(MigPod {
                arrive_s: t,
                profile,
                compute_slices,
                run_s: exponential(&mut rng, self.mean_run_s).max(1.0),
            });
        }
    }
}

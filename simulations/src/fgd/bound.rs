//! The limit: per seed, a bound on unallocated GPU % that no placement of the same arrivals can
//! beat, and an achievable point, reported beside the policies (`basalt-sim fgd --bound`).
//!
//! **What the bound relaxes.** Pods never leave, so after arrival `k` any placement, online or
//! not, in any order, holds a subset of the first `k` arrivals at once. `OPT(k)` is the most GPU
//! any such subset can hold on the cluster, with every feasibility rule; the online allocation
//! after arrival `k` is at most `min(arrived_k, OPT(k))`, and `OPT` grows with `k`. The bound
//! replaces `OPT(k)` by an upper bound on it: the LP relaxation of [`lp`] (integrality dropped,
//! nodes of one type pooled, arrival order and the no-migration rule ignored, tightened with
//! valid cuts), solved through its dual so that floating point can only make it looser. Each
//! point `x` uses `OPT` of the last arrival whose arrived % rounds to at most `x` (so one LP per
//! point) and the protocol's own binning: the mean over the bin's arrivals of
//! `min(arrived_k, LP)` (a bin with no arrival: the state as the load passed it). Where the
//! packing below places all those arrivals, `OPT = arrived` and no LP is needed. The reported
//! unallocated % is rounded down to 0.001, so rounding cannot make it invalid.
//!
//! **The achievable point.** Per seed and point, the best of the policies run in the same call
//! and of an offline packing ([`pack`]): for a bin, the packing of the arrivals up to its first
//! one (which every arrival of the bin has arrived by); it ignores the arrival order, so it is a
//! placement of a subset of the arrivals, not one an online scheduler is known to reach. Rounded
//! up to 0.001. Medians over seeds of both are taken as for the policies; the median keeps the
//! order of per-seed values, so the bound's median is at most every policy's.

pub mod lp;
pub mod pack;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::measure::{self, rounded_pct, POINTS};
use super::{Experiment, Point, PolicyCurve};
use lp::Relaxation;

/// One seed's limit: allocated milli-GPU at each point of [`POINTS`].
#[derive(Clone, Debug, PartialEq)]
pub struct SeedLimit {
    pub bound_milli: Vec<f64>,
    pub achievable_milli: Vec<f64>,
    /// LPs solved (points whose arrivals the packing could not all place).
    pub lps: usize,
    /// LPs the solver failed on; their points fall back to the arrived GPU (still a bound).
    pub failed: Vec<String>,
}

/// The limit of every seed and the curves over seeds.
#[derive(Clone, Debug)]
pub struct Limit {
    pub bound: PolicyCurve,
    pub achievable: PolicyCurve,
    pub seeds: Vec<SeedLimit>,
    pub elapsed: Vec<Duration>,
}

/// The limit of one seed's arrivals (`workload`: trace indices in arrival order).
pub fn seed_limit(exp: &Experiment, relax: &Relaxation, workload: &[u32]) -> SeedLimit {
    let cap = exp.capacity_milli;
    let arrived: Vec<u64> = (workload.iter())
        .scan(0, |sum, &p| {
            *sum += exp.pods[p as usize].request;
            Some(*sum)
        })
        .collect();
    let pct: Vec<u64> = arrived.iter().map(|&a| rounded_pct(a, cap)).collect();
    let mut out = SeedLimit {
        bound_milli: Vec::with_capacity(POINTS.len()),
        achievable_milli: Vec::with_capacity(POINTS.len()),
        lps: 0,
        failed: Vec::new(),
    };
    for &x in &POINTS {
        let x = x as u64;
        // Arrived % never falls, so the arrivals up to the last one at most x are a prefix.
        let upto = pct.partition_point(|&r| r <= x);
        if upto == 0 {
            out.bound_milli.push(0.0);
            out.achievable_milli.push(0.0);
            continue;
        }
        let last = upto - 1;
        let first_in_bin = pct.partition_point(|&r| r < x);
        let bin = &arrived[first_in_bin..upto];
        let packed = pack::best(exp, &workload[..upto]);
        let (opt, achievable) = if packed == arrived[last] {
            // Everything up to `last` fits at once: OPT is what arrived, exactly.
            (
                arrived[last] as f64,
                bin.first().copied().unwrap_or(arrived[last]),
            )
        } else {
            out.lps += 1;
            let opt = relax
                .upper_bound(&shape_counts(relax, &workload[..upto]))
                .unwrap_or_else(|e| {
                    out.failed.push(format!("point {x} %: {e}"));
                    arrived[last] as f64
                });
            let achievable = if first_in_bin == last || bin.is_empty() {
                packed
            } else {
                pack::best(exp, &workload[..=first_in_bin])
            };
            (opt, achievable)
        };
        let bound = if bin.is_empty() {
            (arrived[last] as f64).min(opt)
        } else {
            bin.iter().map(|&a| (a as f64).min(opt)).sum::<f64>() / bin.len() as f64
        };
        out.bound_milli.push(bound);
        out.achievable_milli.push(achievable as f64);
    }
    out
}

fn shape_counts(relax: &Relaxation, pods: &[u32]) -> Vec<u32> {
    let mut counts = vec![0; relax.shapes()];
    for s in pods.iter().filter_map(|&p| relax.shape_of(p)) {
        counts[s as usize] += 1;
    }
    counts
}

/// The limit of every workload (`threads` at a time). `policy_runs[s]` holds, per policy run on
/// seed `s`, its unallocated % at each point: the achievable point is at least as good as each.
pub fn run(
    exp: &Experiment,
    workloads: &[Vec<u32>],
    policy_runs: &[Vec<Vec<f64>>],
    threads: usize,
) -> Limit {
    let relax = Relaxation::new(exp);
    type Slot = Option<(SeedLimit, Duration)>;
    let results: Mutex<Vec<Slot>> = Mutex::new(vec![None; workloads.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, workloads.len().max(1)) {
            scope.spawn(|| loop {
                let s = next.fetch_add(1, Ordering::Relaxed);
                let Some(w) = workloads.get(s) else { break };
                let start = Instant::now();
                let limit = seed_limit(exp, &relax, w);
                results.lock().expect("no worker panics")[s] = Some((limit, start.elapsed()));
            });
        }
    });
    let (seeds, elapsed): (Vec<SeedLimit>, Vec<Duration>) = (results.into_inner())
        .expect("no worker panics")
        .into_iter()
        .map(|r| r.expect("every seed ran"))
        .unzip();
    let unallocated = |milli: f64| 100.0 - 100.0 * milli / exp.capacity_milli as f64;
    let bound: Vec<Vec<f64>> = (seeds.iter())
        .map(|l| l.bound_milli.iter().map(|&m| unallocated(m)).collect())
        .collect();
    let achievable: Vec<Vec<f64>> = (seeds.iter().enumerate())
        .map(|(s, l)| {
            (l.achievable_milli.iter().enumerate())
                .map(|(i, &m)| {
                    let runs = policy_runs.get(s).map(Vec::as_slice).unwrap_or(&[]);
                    runs.iter().map(|r| r[i]).fold(unallocated(m), f64::min)
                })
                .collect()
        })
        .collect();
    Limit {
        bound: median_curve("bound", &bound, f64::floor),
        achievable: median_curve("achievable", &achievable, f64::ceil),
        seeds,
        elapsed,
    }
}

/// The median over seeds at each point, rounded to 0.001 by `round` (down for the bound, up for
/// the achievable point, so that rounding never overstates either).
fn median_curve(name: &str, per_seed: &[Vec<f64>], round: fn(f64) -> f64) -> PolicyCurve {
    let points = (POINTS.iter().enumerate())
        .map(|(i, &x)| {
            let mut v: Vec<f64> = per_seed.iter().map(|c| c[i]).collect();
            let r = round(measure::median(&mut v) * 1000.0);
            Point {
                arrived_gpu_pct: x,
                unallocated_gpu_pct: (r / 1000.0).clamp(0.0, 100.0) + 0.0,
            }
        })
        .collect();
    PolicyCurve {
        policy: name.to_string(),
        points,
    }
}

//! The fragmentation experiment of "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
//! with Fragmentation Gradient Descent" (Weng et al., USENIX ATC'23) on the Alibaba openb lists.
//!
//! Per seed, one arrival sequence ([`workload`]) is replayed under each policy ([`policy`])
//! through the engine ([`engine`]): each arrival is one scheduling cycle with one pending pod,
//! placed at once or dropped; nothing leaves. After each arrival the arrived and allocated GPU are recorded; [`measure`] turns
//! that into unallocated GPU % at every 5 % of arrived load, and the report takes the median over
//! seeds. Randomness is seeded ([`rng`]) with separate streams for the workload, the tie ranking
//! and the `random` policy, so every policy sees the same workload for a seed.

pub mod baselines;
pub mod bound;
pub mod engine;
pub mod experiment;
pub mod measure;
pub mod policy;
#[cfg(test)]
mod reference;
pub mod rng;

pub mod workload;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use experiment::Experiment;
pub use policy::Policy;

/// The bundled sample (see `simulations/traces/openb-sample/README.md`).
pub const SAMPLE_NODES: &str = include_str!("../../traces/openb-sample/nodes.csv");
pub const SAMPLE_PODS: &str = include_str!("../../traces/openb-sample/pods.csv");
pub const SAMPLE_NODES_LABEL: &str = "simulations/traces/openb-sample/nodes.csv";
pub const SAMPLE_PODS_LABEL: &str = "simulations/traces/openb-sample/pods.csv";

#[derive(Debug, thiserror::Error)]
pub enum FgdError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    List(#[from] crate::openb::OpenbError),
    #[error(
        "unknown policy `{0}` (known: bestfit, dotprod, clustering, packing, random, fgd, basalt, all)"
    )]
    UnknownPolicy(String),
    #[error("--seeds: {0}")]
    Seeds(String),
    #[error("{0}")]
    Cluster(String),
    /// More arrivals than [`workload::max_arrivals`] for one seed.
    #[error(
        "seed {seed}: reaching {target} % of the node list's {gpus} GPUs (column `gpu`) takes more \
         than {max} arrivals, the limit a seed on {nodes} nodes ({max_arrivals} arrivals, and \
         {max_visits} arrivals × nodes): the pod list's {pods} pods ask {mean:.3} GPU each on \
         average (columns `num_gpu` × `gpu_milli`)",
        target = workload::TARGET_PCT,
        max_arrivals = workload::MAX_ARRIVALS,
        max_visits = workload::MAX_NODE_VISITS
    )]
    TooManyArrivals {
        seed: u64,
        max: usize,
        nodes: usize,
        gpus: u64,
        pods: usize,
        mean: f64,
    },
}

/// Seeds as `42-51`, `42,43` or a mix (`1-3,7`); duplicates dropped, order kept.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, FgdError> {
    let bad = |why: String| FgdError::Seeds(why);
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| bad(format!("{t:?} is not a whole number")))
    };
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad(format!("empty item in {s:?}")));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(part)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(bad(format!("range {part:?} runs backwards")));
        }
        if hi - lo >= 10_000 {
            return Err(bad(format!("range {part:?} has more than 10,000 seeds")));
        }
        for v in lo..=hi {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// One policy's curve: unallocated GPU % at each arrived-load point, median over seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyCurve {
    pub policy: String,
    pub points: Vec<Point>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub arrived_gpu_pct: u32,
    pub unallocated_gpu_pct: f64,
}

/// What one policy cost to run.
#[derive(Clone, Debug)]
pub struct PolicyStats {
    pub policy: Policy,
    /// Arrivals per seed (the same for every policy).
    pub arrivals: Vec<usize>,
    /// Run time of each seed (in the order of the seeds).
    pub elapsed: Vec<Duration>,
    /// Points filled from the previous state because no arrival fell in their bin, summed over
    /// seeds.
    pub carried: usize,
    /// Unallocated % at each point, per seed (in the order of the seeds).
    pub per_seed: Vec<Vec<f64>>,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub curves: Vec<PolicyCurve>,
    pub stats: Vec<PolicyStats>,
}

/// The arrival sequence of each seed, refused when one is longer than the limit.
pub fn workloads(exp: &Experiment, seeds: &[u64]) -> Result<Vec<Vec<u32>>, FgdError> {
    let requests = exp.requests();
    let mut workloads: Vec<Vec<u32>> = Vec::with_capacity(seeds.len());
    for &seed in seeds {
        let w = workload::generate(&requests, exp.capacity_milli, seed);
        let max = workload::max_arrivals(exp.nodes.len());
        if w.len() > max {
            return Err(FgdError::TooManyArrivals {
                seed,
                max,
                nodes: exp.nodes.len(),
                gpus: exp.capacity_milli / crate::openb::GPU_MILLI as u64,
                pods: requests.len(),
                mean: requests.iter().sum::<u64>() as f64 / requests.len() as f64 / 1000.0,
            });
        }
        workloads.push(w);
    }
    Ok(workloads)
}

/// Runs every policy on every seed (`threads` at a time) and takes the median per point.
pub fn run(
    exp: &Experiment,
    policies: &[Policy],
    seeds: &[u64],
    threads: usize,
) -> Result<Outcome, FgdError> {
    let workloads = workloads(exp, seeds)?;
    let jobs: Vec<(usize, usize)> = (0..policies.len())
        .flat_map(|p| (0..seeds.len()).map(move |s| (p, s)))
        .collect();
    type Slot = Option<Result<(measure::Curve, Duration), String>>;
    let results: Mutex<Vec<Slot>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(p, s)) = jobs.get(j) else { break };
                let start = Instant::now();
                let ran = exp.run(&workloads[s], policies[p], seeds[s]);
                let done = ran
                    .map(|(t, _)| (measure::curve(&t), start.elapsed()))
                    .map_err(|e| e.to_string());
                results.lock().expect("no worker panics")[j] = Some(done);
            });
        }
    });
    let results: Vec<(measure::Curve, Duration)> = (results.into_inner())
        .expect("no worker panics")
        .into_iter()
        .map(|r| r.expect("every job ran").map_err(FgdError::Cluster))
        .collect::<Result<_, _>>()?;
    let mut curves = Vec::new();
    let mut stats = Vec::new();
    for (p, &policy) in policies.iter().enumerate() {
        let runs: Vec<&(measure::Curve, Duration)> = (0..seeds.len())
            .map(|s| &results[p * seeds.len() + s])
            .collect();
        let points = measure::POINTS
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let mut v: Vec<f64> = runs.iter().map(|(c, _)| c.unallocated_pct[i]).collect();
                Point {
                    arrived_gpu_pct: x,
                    unallocated_gpu_pct: round3(measure::median(&mut v)),
                }
            })
            .collect();
        curves.push(PolicyCurve {
            policy: policy.name().to_string(),
            points,
        });
        stats.push(PolicyStats {
            policy,
            arrivals: workloads.iter().map(Vec::len).collect(),
            elapsed: runs.iter().map(|(_, d)| *d).collect(),
            carried: runs.iter().map(|(c, _)| c.carried).sum(),
            per_seed: runs
                .iter()
                .map(|(c, _)| c.unallocated_pct.clone())
                .collect(),
        });
    }
    Ok(Outcome { curves, stats })
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0 + 0.0
}

/// JSON: one object for one policy, an array of them for several.
pub fn render_json(curves: &[PolicyCurve]) -> serde_json::Result<String> {
    let s = if curves.len() == 1 {
        serde_json::to_string_pretty(&curves[0])?
    } else {
        serde_json::to_string_pretty(curves)?
    };
    Ok(s + "\n")
}

/// A table: arrived GPU % down, one column of unallocated GPU % per policy.
pub fn render_text(curves: &[PolicyCurve], header: &str) -> String {
    let mut out = String::new();
    out.push_str(header);
    out.push_str("\nunallocated GPU % (median over seeds) by arrived GPU load\n\n");
    out.push_str(&format!("{:>9}", "arrived%"));
    for c in curves {
        out.push_str(&format!(" {:>10}", c.policy));
    }
    out.push('\n');
    for (i, &x) in measure::POINTS.iter().enumerate() {
        out.push_str(&format!("{x:>9}"));
        for c in curves {
            out.push_str(&format!(" {:>10.2}", c.points[i].unallocated_gpu_pct));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_ranges_lists_and_errors() {
        assert_eq!(parse_seeds("42-45").unwrap(), vec![42, 43, 44, 45]);
        assert_eq!(parse_seeds("42,43").unwrap(), vec![42, 43]);
        assert_eq!(parse_seeds("1-2,7,2").unwrap(), vec![1, 2, 7]);
        assert!(parse_seeds("5-3").is_err());
        assert!(parse_seeds("x")
            .unwrap_err()
            .to_string()
            .contains("--seeds"));
        assert!(parse_seeds("").is_err());
    }

    #[test]
    fn sample_parses_and_every_policy_sees_the_same_workload() {
        let nodes = crate::openb::read_nodes(SAMPLE_NODES_LABEL, SAMPLE_NODES.as_bytes()).unwrap();
        let pods = crate::openb::read_pods(SAMPLE_PODS_LABEL, SAMPLE_PODS.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        let req = exp.requests();
        let w = workload::generate(&req, exp.capacity_milli, 42);
        assert_eq!(w, workload::generate(&req, exp.capacity_milli, 42));
        // Arrived demand after each arrival is the workload's alone: identical for every policy.
        let arrived = |p: Policy| -> Vec<u64> {
            exp.run(&w, p, 42)
                .unwrap()
                .0
                .samples
                .iter()
                .map(|s| s.0)
                .collect()
        };
        let reference = arrived(Policy::Fgd);
        for p in Policy::ALL {
            assert_eq!(arrived(p), reference, "{p}");
        }
        // Same seed, same policy: the same trajectory; the run is deterministic.
        for p in Policy::ALL {
            assert_eq!(
                exp.run(&w, p, 42).unwrap(),
                exp.run(&w, p, 42).unwrap(),
                "{p}"
            );
        }
    }

    #[test]
    fn run_medians_are_deterministic_across_thread_counts() {
        let nodes = crate::openb::read_nodes(SAMPLE_NODES_LABEL, SAMPLE_NODES.as_bytes()).unwrap();
        let pods = crate::openb::read_pods(SAMPLE_PODS_LABEL, SAMPLE_PODS.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        let a = run(&exp, &Policy::ALL, &[1, 2, 3], 1).unwrap();
        let b = run(&exp, &Policy::ALL, &[1, 2, 3], 4).unwrap();
        assert_eq!(a.curves, b.curves);
        for c in &a.curves {
            assert_eq!(c.points.len(), 26);
            for p in &c.points {
                assert!((0.0..=100.0).contains(&p.unallocated_gpu_pct));
            }
        }
    }
}

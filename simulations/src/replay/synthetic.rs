//! A seeded synthetic workload for sizing runs: gangs of 1–64 GPUs (8-GPU pods), log-uniform
//! durations from one minute to one day, Poisson arrivals at a given offered load, four queues
//! of weights 1–4. The same seed gives the same trace.

use super::readers::{MAX_TRACE_SECONDS, PHILLY_CPU_PER_GPU, PHILLY_MEM_PER_GPU};
use super::workload::{PodShape, QueueDef, TraceJob, Workload};
use crate::fgd::rng::SplitMix64;

/// Gang sizes in GPUs and their probabilities.
const SIZES: [(u32, f64); 7] = [
    (1, 0.55),
    (2, 0.10),
    (4, 0.10),
    (8, 0.15),
    (16, 0.06),
    (32, 0.03),
    (64, 0.01),
];
const MIN_S: f64 = 60.0;
const MAX_S: f64 = 86_400.0;
/// The most jobs a synthetic trace may have (the sizing runs use up to a few million).
pub const MAX_JOBS: usize = 100_000_000;

pub fn workload(
    jobs: usize,
    seed: u64,
    load: f64,
    cluster_gpus: u64,
    gpus_per_node: u32,
) -> anyhow::Result<super::workload::Workload> {
    anyhow::ensure!(
        load.is_finite() && load > 0.0,
        "--synthetic-load: must be positive, got {load}"
    );
    anyhow::ensure!(
        cluster_gpus > 0,
        "the synthetic trace needs a cluster with GPUs"
    );
    anyhow::ensure!(
        jobs <= MAX_JOBS,
        "--synthetic-jobs: {jobs} is more than {MAX_JOBS}"
    );
    let mean_gpus: f64 = SIZES.iter().map(|(g, p)| *g as f64 * p).sum();
    let mean_duration = (MAX_S - MIN_S) / (MAX_S / MIN_S).ln();
    // Arrival rate that asks for `load` of the cluster's GPU-time.
    let rate = load * cluster_gpus as f64 / (mean_gpus * mean_duration);
    let mut rng = SplitMix64::new(seed);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(jobs);
    let width = jobs.saturating_sub(1).to_string().len();
    for i in 0..jobs {
        t += -(1.0 - rng.unit()).ln() / rate;
        // A load so low that arrivals run past any trace's span would saturate the clock.
        anyhow::ensure!(
            t < MAX_TRACE_SECONDS as f64,
            "--synthetic-load: {load:?} spaces arrivals so far apart that job {i} would arrive after {MAX_TRACE_SECONDS} s; raise the load"
        );
        let mut u = rng.unit();
        let mut gpus = SIZES[SIZES.len() - 1].0;
        for (g, p) in SIZES {
            if u < p {
                gpus = g;
                break;
            }
            u -= p;
        }
        let duration = MIN_S * (MAX_S / MIN_S).powf(rng.unit());
        let queue = (rng.next_u64() % 4) as usize;
        let per = gpus_per_node.min(gpus).max(1);
        let pods = (0..gpus.div_ceil(per))
            .map(|k| {
                let g = per.min(gpus - k * per);
                PodShape {
                    cpu_milli: PHILLY_CPU_PER_GPU * g as i64,
                    memory: PHILLY_MEM_PER_GPU * g as i64,
                    gpus: g,
                    gpu_milli: 1000,
                    gpu_models: vec![],
                }
            })
            .collect::<Vec<_>>();
        out.push(TraceJob {
            name: format!("syn-{i:0width$}"),
            queue: format!("team-{}", queue + 1),
            priority: 0,
            submit_ms: (t * 1000.0) as i64,
            duration_ms: (duration * 1000.0) as i64,
            min_member: pods.len() as u32,
            tp_size: per,
            pods,
        });
    }
    Ok(Workload {
        source: format!("synthetic ({jobs} jobs, seed {seed}, offered load {load})"),
        jobs: out,
        queues: (1..=4)
            .map(|w| QueueDef {
                name: format!("team-{w}"),
                weight: w,
            })
            .collect(),
        notes: vec![],
    })
}

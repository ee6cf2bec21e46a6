//! Metrics of a replay, computed from the [`Outcome`]: everything here is a pure function of
//! the simulated run (no wall-clock figures), so the same inputs give byte-identical JSON.
//!
//! Definitions (also in docs/simulations.md):
//! - queueing delay = first start − submit; JCT = end − submit (finished jobs only);
//!   gang wait = queueing delay of jobs with more than one pod;
//! - percentiles are nearest-rank: the ⌈p/100 · n⌉-th smallest value;
//! - time averages weight each recorded state by how long it lasted, from the first arrival to
//!   the end of the run;
//! - fragmentation = idle GPUs on nodes with at least one GPU in use;
//! - per-device fragmentation, in GPU compute (HAMi's cores, 100 per device) as the engine
//!   accounts devices: *fragmented* compute is what is free on devices some pod holds, *whole
//!   free* compute that of devices no pod holds; both over the cluster's compute; a *partially
//!   used* GPU is one some pod holds with compute left. Only devices shared per device
//!   (`--gpu-share hami`, or HAMi nodes from manifests) can be partly used: whole devices
//!   (round-up) are used or free, and pool shares hold no device;
//! - Jain's index at an instant is over the queues with demand: x_q = held_q / min(demand_q,
//!   deserved_q), deserved_q = total GPUs · weight_q / Σ weights; J = (Σx)² / (n·Σx²). Its time
//!   average skips instants where every x is 0.

use serde::Serialize;

use super::sim::{Outcome, Sample, Status};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Stats {
    pub fn of(mut v: Vec<f64>) -> Stats {
        if v.is_empty() {
            return Stats::default();
        }
        v.sort_by(f64::total_cmp);
        Stats {
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: percentile(&v, 50.0),
            p95: percentile(&v, 95.0),
            p99: percentile(&v, 99.0),
            max: *v.last().expect("not empty"),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    pub name: String,
    pub weight: u32,
    pub deserved_share: f64,
    /// Time-averaged share of the cluster's GPUs the queue held.
    pub mean_share: f64,
    pub jobs: usize,
    pub finished: usize,
    pub never_started: usize,
    pub queueing_delay_s: Stats,
    pub jct_s: Stats,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadPoint {
    /// GPUs demanded by live jobs over capacity, rounded to a multiple of 10 %.
    pub load_pct: u32,
    pub unallocated_gpu_pct: f64,
    /// Share of the run's time spent at this load.
    pub time_share: f64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// False when the run was interrupted: the figures cover only the simulated time reached.
    pub complete: bool,
    pub config: String,
    pub total_gpus: u32,
    pub simulated_end_s: f64,
    pub events: u64,
    pub cycles: u64,
    pub bindings: u64,
    pub jobs: usize,
    pub finished: usize,
    pub running_at_end: usize,
    pub never_started: usize,
    pub queueing_delay_s: Stats,
    pub jct_s: Stats,
    pub gang_wait_s: Stats,
    /// Time-averaged GPUs allocated / total.
    pub mean_allocation: f64,
    /// Time-averaged GPU demand of placed pods in milli (fractions as fractions) / capacity.
    pub mean_gpu_share_used: f64,
    pub mean_fragmented_gpus: f64,
    /// Fragmented GPUs over idle GPUs, time-averaged over instants with idle GPUs.
    pub mean_fragmented_share_of_idle: f64,
    /// Time-averaged GPU compute free on devices some pod holds (fragmented) / the cluster's
    /// GPU compute (per device: HAMi's cores, 100 per GPU).
    pub mean_fragmented_gpu_compute: f64,
    /// Time-averaged GPU compute of devices no pod holds / the cluster's GPU compute.
    pub mean_free_gpu_compute: f64,
    /// Fragmented compute over all free compute (fragmented + on free devices),
    /// time-averaged over instants with free compute.
    pub mean_fragmented_share_of_free_compute: f64,
    /// Time-averaged number of partially used GPUs: held by some pod, with compute left.
    pub mean_partial_gpus: f64,
    /// The same figures at the busiest instant: the first sample holding the most compute
    /// (the cluster's compute less fragmented and free); compute shares of the cluster's. A
    /// run whose pods all arrive at once and never leave lasts 0 s, so its time averages are
    /// 0: this is its state.
    pub peak_fragmentation: PeakFragmentation,
    pub unallocated_at_load: Vec<LoadPoint>,
    pub jain_fairness: Option<f64>,
    /// Share error and Jain's index over 1-day windows (see [`super::windows`]).
    pub daily_fairness: super::windows::WindowFairness,
    pub gangs_multi_pod: usize,
    /// Of the gangs with more than one pod, the share started inside one rack (None: no racks).
    pub gangs_in_one_rack: Option<f64>,
    pub tp_groups: u64,
    pub tp_groups_in_one_node: Option<f64>,
    pub tp_groups_in_one_nvlink_domain: Option<f64>,
    pub evictions: u64,
    pub lost_gpu_hours: f64,
    pub queues: Vec<QueueSummary>,
}

/// Per-device fragmentation at one instant (see [`Summary::peak_fragmentation`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeakFragmentation {
    pub t_s: f64,
    /// GPU compute held by pods / the cluster's.
    pub used_gpu_compute: f64,
    pub fragmented_gpu_compute: f64,
    pub free_gpu_compute: f64,
    pub partial_gpus: u32,
}

/// Per-interval weights: each sample lasts until the next one (the last lasts until `end`).
fn intervals(samples: &[Sample], end: i64) -> impl Iterator<Item = (&Sample, f64)> {
    samples.iter().enumerate().map(move |(i, s)| {
        let next = samples.get(i + 1).map_or(end, |n| n.t_ms);
        (s, (next - s.t_ms).max(0) as f64)
    })
}

fn time_mean(samples: &[Sample], end: i64, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let (mut sum, mut weight) = (0.0, 0.0);
    for (s, w) in intervals(samples, end) {
        if let Some(v) = f(s) {
            sum += v * w;
            weight += w;
        }
    }
    (weight > 0.0).then(|| sum / weight)
}

/// Deserved GPUs per queue: total · weight / Σ weights.
pub fn deserved(outcome: &Outcome) -> Vec<f64> {
    let sum: f64 = outcome
        .queues
        .iter()
        .map(|q| q.weight as f64)
        .sum::<f64>()
        .max(1.0);
    outcome
        .queues
        .iter()
        .map(|q| outcome.total_gpus as f64 * q.weight as f64 / sum)
        .collect()
}

/// Jain's index at one instant (see the module doc); `None` when no queue has demand or all
/// hold nothing.
pub fn jain(held: &[u32], demand: &[u32], deserved: &[f64]) -> Option<f64> {
    let xs: Vec<f64> = held
        .iter()
        .zip(demand)
        .zip(deserved)
        .filter(|((_, &d), _)| d > 0)
        .map(|((&h, &d), &fair)| {
            let f = (d as f64).min(fair);
            if f > 0.0 {
                h as f64 / f
            } else {
                0.0
            }
        })
        .collect();
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

pub fn summarize(outcome: &Outcome, config: &str) -> Summary {
    let secs = |ms: i64| ms as f64 / 1000.0;
    let jobs = &outcome.jobs;
    let end = outcome.end_ms;
    let total = outcome.total_gpus.max(1) as f64;
    let mut queueing = Vec::new();
    let mut jct = Vec::new();
    let mut gang = Vec::new();
    let nq = outcome.queues.len();
    let mut q_queueing = vec![Vec::new(); nq];
    let mut q_jct = vec![Vec::new(); nq];
    let mut q_jobs = vec![0usize; nq];
    let mut q_never = vec![0usize; nq];
    let (mut multi, mut one_rack, mut rack_known) = (0usize, 0usize, false);
    let (mut tp, mut tp_node, mut tp_nv) = (0u64, 0u64, 0u64);
    let (mut evictions, mut lost) = (0u64, 0i64);
    for (i, r) in jobs.iter().enumerate() {
        let q = outcome.job_queue[i] as usize;
        let submit = outcome.job_submit_ms[i];
        q_jobs[q] += 1;
        evictions += r.evictions as u64;
        lost += r.lost_gpu_ms;
        match r.first_start_ms {
            Some(start) => {
                let d = secs(start - submit);
                queueing.push(d);
                q_queueing[q].push(d);
                if outcome.job_pods[i] > 1 {
                    gang.push(d);
                }
            }
            None => {
                if r.status != Status::NotArrived {
                    q_never[q] += 1;
                }
            }
        }
        if let Some(e) = r.end_ms {
            let d = secs(e - submit);
            jct.push(d);
            q_jct[q].push(d);
        }
        if let Some(one) = r.one_rack {
            rack_known = true;
            one_rack += one as usize;
        }
        if outcome.job_pods[i] > 1 && r.first_start_ms.is_some() {
            multi += 1;
        }
        tp += r.tp_groups as u64;
        tp_node += r.tp_in_node as u64;
        tp_nv += r.tp_in_nvlink as u64;
    }
    let samples = &outcome.samples;
    let deserved = deserved(outcome);
    let dsum: f64 = deserved.iter().sum::<f64>().max(1e-12);
    let mut load: std::collections::BTreeMap<u32, (f64, f64)> = Default::default();
    let mut span = 0.0;
    for (s, w) in intervals(samples, end) {
        let pct = ((s.gpus_demanded as f64 / total * 10.0).round() * 10.0) as u32;
        let e = load.entry(pct).or_default();
        e.0 += (total - s.gpus_allocated as f64) / total * 100.0 * w;
        e.1 += w;
        span += w;
    }
    let unallocated_at_load = load
        .into_iter()
        .filter(|(_, (_, w))| *w > 0.0)
        .map(|(pct, (sum, w))| LoadPoint {
            load_pct: pct,
            unallocated_gpu_pct: sum / w,
            time_share: w / span,
        })
        .collect();
    let queues = outcome
        .queues
        .iter()
        .enumerate()
        .map(|(q, def)| QueueSummary {
            name: def.name.clone(),
            weight: def.weight,
            deserved_share: deserved[q] / dsum,
            mean_share: time_mean(samples, end, |s| Some(s.queue_gpus[q] as f64 / total))
                .unwrap_or(0.0),
            jobs: q_jobs[q],
            finished: q_jct[q].len(),
            never_started: q_never[q],
            queueing_delay_s: Stats::of(std::mem::take(&mut q_queueing[q])),
            jct_s: Stats::of(std::mem::take(&mut q_jct[q])),
        })
        .collect();
    let share = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
    let cores = outcome.total_gpu_cores.max(1) as f64;
    let held = |s: &Sample| {
        outcome
            .total_gpu_cores
            .saturating_sub(s.fragmented_gpu_cores + s.free_gpu_cores)
    };
    let peak = samples
        .iter()
        .fold(None::<&Sample>, |best, s| match best {
            Some(b) if held(b) >= held(s) => Some(b),
            _ => Some(s),
        })
        .map(|s| PeakFragmentation {
            t_s: secs(s.t_ms),
            used_gpu_compute: held(s) as f64 / cores,
            fragmented_gpu_compute: s.fragmented_gpu_cores as f64 / cores,
            free_gpu_compute: s.free_gpu_cores as f64 / cores,
            partial_gpus: s.partial_gpus,
        })
        .unwrap_or_default();
    Summary {
        complete: outcome.complete,
        config: config.to_string(),
        total_gpus: outcome.total_gpus,
        simulated_end_s: secs(end),
        events: outcome.events,
        cycles: outcome.cycles,
        bindings: outcome.bindings,
        jobs: jobs.len(),
        finished: jct.len(),
        running_at_end: jobs.iter().filter(|r| r.status == Status::Running).count(),
        never_started: q_never.iter().sum(),
        queueing_delay_s: Stats::of(queueing),
        jct_s: Stats::of(jct),
        gang_wait_s: Stats::of(gang),
        mean_allocation: time_mean(samples, end, |s| Some(s.gpus_allocated as f64 / total))
            .unwrap_or(0.0),
        mean_gpu_share_used: time_mean(samples, end, |s| {
            Some(s.gpu_milli_used as f64 / (total * 1000.0))
        })
        .unwrap_or(0.0),
        mean_fragmented_gpus: time_mean(samples, end, |s| Some(s.fragmented_gpus as f64))
            .unwrap_or(0.0),
        mean_fragmented_share_of_idle: time_mean(samples, end, |s| {
            let idle = outcome.total_gpus.saturating_sub(s.gpus_allocated);
            (idle > 0).then(|| s.fragmented_gpus as f64 / idle as f64)
        })
        .unwrap_or(0.0),
        mean_fragmented_gpu_compute: time_mean(samples, end, |s| {
            Some(s.fragmented_gpu_cores as f64 / cores)
        })
        .unwrap_or(0.0),
        mean_free_gpu_compute: time_mean(samples, end, |s| Some(s.free_gpu_cores as f64 / cores))
            .unwrap_or(0.0),
        mean_fragmented_share_of_free_compute: time_mean(samples, end, |s| {
            let free = s.fragmented_gpu_cores + s.free_gpu_cores;
            (free > 0).then(|| s.fragmented_gpu_cores as f64 / free as f64)
        })
        .unwrap_or(0.0),
        mean_partial_gpus: time_mean(samples, end, |s| Some(s.partial_gpus as f64)).unwrap_or(0.0),
        peak_fragmentation: peak,
        unallocated_at_load,
        jain_fairness: time_mean(samples, end, |s| {
            jain(&s.queue_gpus, &s.queue_demand, &deserved)
        }),
        daily_fairness: super::windows::fairness(samples, end, 86_400_000, &deserved, total),
        gangs_multi_pod: multi,
        gangs_in_one_rack: rack_known.then(|| one_rack as f64 / multi.max(1) as f64),
        tp_groups: tp,
        tp_groups_in_one_node: share(tp_node, tp),
        tp_groups_in_one_nvlink_domain: share(tp_nv, tp),
        evictions,
        lost_gpu_hours: lost as f64 / 3_600_000.0,
        queues,
    }
}

//! `basalt-sim bench --forecast`: what one forecast run costs (the daemon's background task,
//! `basalt_engine::forecast`) on a synthetic cluster whose running gangs end at stated instants
//! and whose backlog waits for them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use basalt_engine::forecast::{self, End, Limits, Method};
use basalt_engine::{JobPhase, PodPhase, PodSpec};
use basalt_plugins::Config;
use serde::Serialize;

use crate::synthetic::Synthetic;

/// Running gangs end over this span after the snapshot, spread evenly (several per second).
const SPREAD_S: i64 = 3600;
/// The synthetic backlog's highest priority.
const TOP_PRIORITY: i32 = 2;
/// Each waiting gang runs this long once it starts.
const RUN_MS: i64 = 30 * 60 * 1000;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForecastBench {
    pub nodes: usize,
    pub running_pods: usize,
    pub pending_pods: usize,
    /// Waiting gangs the forecast names.
    pub gangs: usize,
    /// Of them, those given a start.
    pub started: usize,
    pub cycles: u32,
    pub ends: u32,
    /// What the engine counted against `Limits::max_work`.
    pub work: u64,
    /// CPU time of one run deciding its first cycle (this thread's, from the kernel), best
    /// of `runs`.
    pub cpu_ms: f64,
    /// Wall time of the same run.
    pub wall_ms: f64,
    /// CPU time of one run given its first cycle's plan, as the daemon hands over its cycle's
    /// (the same forecast), best of `runs`.
    pub given_plan_cpu_ms: f64,
    pub runs: usize,
    /// FNV-1a of the forecast as JSON: a change for speed keeps it.
    pub forecast_digest: String,
}

/// Per pod its end: running gang `j` ends at a stated instant (spread over [`SPREAD_S`]),
/// a waiting pod [`RUN_MS`] after it starts; all exact.
pub fn ends(spec: &basalt_engine::ClusterSpec) -> HashMap<String, End> {
    let now = spec.now_ms;
    (spec.pods.iter())
        .map(|p| {
            let key = format!("{}/{}", p.namespace, p.name);
            let end = match (p.node.is_some(), p.phase) {
                (true, PodPhase::Running) => {
                    let gang = p.group.as_deref().unwrap_or(&p.name);
                    let j: i64 = gang.trim_start_matches("job-").parse().unwrap_or(0);
                    End::At {
                        ms: now + ((j * 7919) % SPREAD_S + 1) * 1000,
                        method: Method::Exact,
                    }
                }
                _ => End::After {
                    ms: RUN_MS,
                    method: Method::Exact,
                },
            };
            (key, end)
        })
        .collect()
}

pub fn run(setup: &Synthetic, config: &Config, runs: usize) -> anyhow::Result<ForecastBench> {
    let mut spec = setup.cluster();
    // The running gangs at the backlog's top priority: the backlog waits for their ends
    // instead of preempting them (a preempting backlog costs what its scheduling cycle does).
    for g in spec
        .groups
        .iter_mut()
        .filter(|g| g.phase == JobPhase::Running)
    {
        g.priority = Some(TOP_PRIORITY);
    }
    // Each names its GPUs, as the scheduler's gpu-ids annotation does on the pods it bound
    // (then the forecast's snapshots are patched, not assembled anew, from cycle to cycle).
    let mut taken: HashMap<String, u32> = HashMap::new();
    for p in spec.pods.iter_mut().filter(|p| p.node.is_some()) {
        p.priority = TOP_PRIORITY;
        let first = taken.entry(p.node.clone().unwrap_or_default()).or_default();
        p.gpu_ids = (*first..*first + setup.gpus_per_pod).collect();
        *first += setup.gpus_per_pod;
    }
    let ends = ends(&spec);
    let (mut cpu_ms, mut wall_ms) = (f64::INFINITY, f64::INFINITY);
    let mut last = None;
    let framework = |names: &_| basalt_plugins::framework(config, names);
    // The plan of the first cycle, as the daemon's cycle on these objects made it.
    let decided = {
        let snapshot = basalt_engine::Snapshot::build(spec.clone())?;
        let fw = framework(&snapshot.resources);
        basalt_engine::schedule(&snapshot, &fw, &mut basalt_engine::Warm::default())
    };
    // The pods shared with the run, as the daemon's kept conversions are: it copies only the
    // pods it moves.
    let pods: Vec<Arc<PodSpec>> = std::mem::take(&mut spec.pods)
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut given_plan_cpu_ms = f64::INFINITY;
    for _ in 0..runs.max(1) {
        for given in [None, Some(&decided)] {
            let (spec, pods) = (spec.clone(), pods.clone());
            let (cpu, wall) = (thread_cpu_ns(), Instant::now());
            let f =
                forecast::forecast_shared(spec, pods, given, framework, &ends, Limits::default())?;
            let wall = wall.elapsed().as_secs_f64() * 1e3;
            let cpu =
                (thread_cpu_ns().zip(cpu)).map(|(after, before)| (after - before) as f64 / 1e6);
            match given {
                None => {
                    wall_ms = wall_ms.min(wall);
                    cpu_ms = cpu_ms.min(cpu.unwrap_or(f64::INFINITY));
                }
                Some(_) => {
                    given_plan_cpu_ms = given_plan_cpu_ms.min(cpu.unwrap_or(f64::INFINITY));
                    anyhow::ensure!(
                        Some(&f) == last.as_ref(),
                        "the forecast given its first cycle's plan differs from deciding it"
                    );
                }
            }
            last = Some(f);
        }
    }
    let f = last.expect("at least one run");
    Ok(ForecastBench {
        nodes: setup.nodes,
        running_pods: setup.running,
        pending_pods: setup.pods,
        gangs: f.jobs.len(),
        started: f.jobs.iter().filter(|j| j.start_ms.is_some()).count(),
        cycles: f.cycles,
        ends: f.ends,
        work: f.work,
        cpu_ms,
        wall_ms,
        given_plan_cpu_ms,
        runs: runs.max(1),
        forecast_digest: crate::bench::digest(&serde_json::to_vec(&f)?),
    })
}

/// This thread's time on a CPU in nanoseconds (Linux's schedstat; `None` elsewhere).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

impl ForecastBench {
    pub fn text(&self) -> String {
        format!(
            "cluster: {} nodes; {} pods running (gangs ending over {SPREAD_S} s), {} pending \
             (each running {} min)\n\
             forecast: {} waiting gangs, {} given a start; {} cycles, {} ends applied, work {}\n\
             run: {:.0} ms CPU, {:.0} ms wall (best of {}); given its first cycle's plan (as \
             the daemon runs it) {:.0} ms CPU\n\
             forecast digest: {}\n",
            self.nodes,
            self.running_pods,
            self.pending_pods,
            RUN_MS / 60_000,
            self.gangs,
            self.started,
            self.cycles,
            self.ends,
            self.work,
            self.cpu_ms,
            self.wall_ms,
            self.runs,
            self.given_plan_cpu_ms,
            self.forecast_digest
        )
    }
}

//! `basalt-sim bench`: how fast the engine places a synthetic backlog, so a user can size the
//! scheduler for their cluster.

use std::time::Instant;

use basalt_engine::{Snapshot, Warm};
use basalt_plugins::Config;
use serde::Serialize;

use crate::synthetic::Synthetic;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    pub nodes: usize,
    pub pods: usize,
    pub gang_size: usize,
    pub gpus_per_node: u32,
    pub gpus_per_pod: u32,
    /// The fabric layout and mixed topology-constrained backlog.
    pub fabric: bool,
    /// Zones and a backlog with pod constraints (anti-affinity, spread, preferred affinity).
    pub constrained: bool,
    /// HAMi nodes and a backlog of pods sharing GPUs.
    pub sharing: bool,
    /// DRA ResourceSlices and a backlog of pods with claims (snapshot time includes
    /// conversion and CEL).
    pub dra: bool,
    pub pods_placed: usize,
    pub gangs_running: usize,
    pub evictions: usize,
    pub nominations: usize,
    /// Building the snapshot from specs (sorting, interning, validation), best of `runs`.
    pub snapshot_ms: f64,
    /// One scheduling cycle (the engine only), best of `runs`.
    pub cycle_ms: f64,
    pub pods_per_second: f64,
    /// With `constrained`: the cycle of the same cluster and backlog with every pod's
    /// constraints dropped (labels kept), best of `runs`, run alternately with the
    /// constrained one so both see the same machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unconstrained_cycle_ms: Option<f64>,
    /// With `explain_cost`: the cycle of the same snapshot with explanations off (no reason
    /// worded, no waiting job explained), best of `runs`, run alternately with the other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unexplained_cycle_ms: Option<f64>,
    /// Waiting jobs the plan explains.
    pub explained: usize,
    pub runs: usize,
    /// FNV-1a of the last cycle's plan as JSON: a change for speed that keeps every decision
    /// keeps the digest.
    pub plan_digest: String,
}

/// FNV-1a (64 bits) of `bytes`, in hex.
pub fn digest(bytes: &[u8]) -> String {
    let hash = (bytes.iter()).fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

pub fn run(
    setup: &Synthetic,
    config: &Config,
    runs: usize,
    explain_cost: bool,
) -> anyhow::Result<BenchReport> {
    let spec = if setup.dra {
        Default::default()
    } else {
        setup.cluster()
    };
    let objects = (setup.dra)
        .then(|| crate::dra_backlog::objects(setup.nodes, setup.pods, setup.gpus_per_node));
    // Best of `runs` too: a first build also pays the process's first page faults.
    let mut snapshot_ms = f64::INFINITY;
    let mut snapshot = None;
    for _ in 0..runs.max(1) {
        let spec = spec.clone();
        let start = Instant::now();
        let built = match &objects {
            Some(objects) => {
                let options = basalt_crds::ConvertOptions::default();
                basalt_crds::build_snapshot(objects, &options)?
            }
            None => Snapshot::build(spec)?,
        };
        snapshot_ms = snapshot_ms.min(start.elapsed().as_secs_f64() * 1e3);
        snapshot = Some(built);
    }
    let snapshot = snapshot.expect("at least one build");
    // The baseline of the constrained backlog: the same cluster and pods, no constraints.
    let unconstrained = setup.constrained.then(|| {
        let mut spec = spec.clone();
        spec.pods.iter_mut().for_each(|p| p.constraints = None);
        Snapshot::build(spec)
    });
    let unconstrained = unconstrained.transpose()?;
    // One framework, and per snapshot one Warm carried from run to run, as the daemon carries
    // them from cycle to cycle (the topologies are built once; the node state is brought back
    // to the snapshot's).
    let fw = basalt_plugins::framework(config, &snapshot.resources);
    let (mut warm, mut unconstrained_warm) = (Warm::default(), Warm::default());
    let mut best = f64::INFINITY;
    let mut baseline = f64::INFINITY;
    let mut plan = None;
    let mut unexplained = explain_cost.then(|| {
        let mut fw = basalt_plugins::framework(config, &snapshot.resources);
        fw.explain_failures = false;
        (fw, Warm::default(), f64::INFINITY)
    });
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let p = basalt_engine::schedule(&snapshot, &fw, &mut warm);
        best = best.min(start.elapsed().as_secs_f64());
        plan = Some(p);
        if let Some((fw, warm, best)) = &mut unexplained {
            let start = Instant::now();
            drop(basalt_engine::schedule(&snapshot, fw, warm));
            *best = best.min(start.elapsed().as_secs_f64());
        }
        if let Some(unconstrained) = &unconstrained {
            let start = Instant::now();
            let p = basalt_engine::schedule(unconstrained, &fw, &mut unconstrained_warm);
            baseline = baseline.min(start.elapsed().as_secs_f64());
            drop(p);
        }
    }
    let plan = plan.expect("at least one run");
    let placed = plan.bindings.len();
    let plan_digest = digest(&serde_json::to_vec(&plan)?);
    Ok(BenchReport {
        nodes: setup.nodes,
        pods: setup.pods,
        gang_size: setup.gang_size,
        fabric: setup.fabric,
        constrained: setup.constrained,
        sharing: setup.sharing,
        dra: setup.dra,
        gpus_per_node: setup.gpus_per_node,
        gpus_per_pod: setup.gpus_per_pod,
        pods_placed: placed,
        evictions: plan.evictions.len(),
        nominations: plan.nominations.len(),
        gangs_running: plan
            .pod_groups
            .iter()
            .filter(|g| g.phase == basalt_engine::JobPhase::Running)
            .count(),
        snapshot_ms,
        cycle_ms: best * 1e3,
        pods_per_second: if best > 0.0 {
            placed as f64 / best
        } else {
            0.0
        },
        unconstrained_cycle_ms: unconstrained.is_some().then_some(baseline * 1e3),
        unexplained_cycle_ms: unexplained.map(|(_, _, best)| best * 1e3),
        explained: (plan.pod_groups.iter())
            .filter(|g| g.explanation.is_some())
            .count(),
        runs: runs.max(1),
        plan_digest,
    })
}

impl BenchReport {
    pub fn text(&self) -> String {
        let backlog = if self.fabric {
            format!(
                "{} pods: 512-GPU gangs (spine), 4 x TP=8 gangs (rack), TP=8 jobs (nvlink), \
                 1-GPU pods; spines of 25 racks of 20 nodes, cliques in every fourth rack",
                self.pods
            )
        } else if self.dra {
            format!(
                "{} single pods, each with a DRA claim for 1-{} GPUs with a productName \
                 selector; GPUs as ResourceSlices (every fourth node A100s)",
                self.pods, self.gpus_per_node
            )
        } else if self.sharing {
            format!(
                "{} single pods sharing HAMi GPUs (80 GiB split 10 ways): per 20, 7 whole, \
                 4 half, 4 quarter, 3 8-GiB shares, a 2-GPU and a 4-GPU 30-GiB share",
                self.pods
            )
        } else {
            format!(
                "{} pods in gangs of {} ({} GPU each){}",
                self.pods,
                self.gang_size,
                self.gpus_per_pod,
                if self.constrained {
                    "; per 10 jobs 2 one pod per node, 2 zone spread, 1 preferred zone affinity"
                } else {
                    ""
                }
            )
        };
        let baseline = match self.unconstrained_cycle_ms {
            Some(ms) => format!(
                "same backlog without constraints: {ms:.1} ms (constrained {:.2}×)\n",
                self.cycle_ms / ms
            ),
            None => String::new(),
        };
        let baseline = match self.unexplained_cycle_ms {
            Some(ms) => format!(
                "{baseline}same cycle without explanations: {ms:.1} ms (explaining {} waiting \
                 jobs costs {:+.1} %)\n",
                self.explained,
                (self.cycle_ms / ms - 1.0) * 100.0
            ),
            None => baseline,
        };
        format!(
            "cluster: {} nodes × {} GPUs; backlog: {backlog}\n\
             placed: {} pods, {} gangs running; {} evictions, {} nominations\n\
             snapshot build: {:.1} ms (best of {})\n\
             cycle: {:.1} ms (best of {})\n\
             {baseline}throughput: {:.0} pods/s\n\
             plan digest: {}\n",
            self.nodes,
            self.gpus_per_node,
            self.pods_placed,
            self.gangs_running,
            self.evictions,
            self.nominations,
            self.snapshot_ms,
            self.runs,
            self.cycle_ms,
            self.runs,
            self.pods_per_second,
            self.plan_digest
        )
    }
}

//! `basalt-sim replay` and `compare`: real cluster traces through the daemon's scheduling code.
//!
//! - [`workload`]: the input model (jobs of pods, queues, cluster);
//! - [`readers`]: openb, Philly, native CSV / JSON, manifests, the cluster generator;
//! - [`synthetic`]: a seeded synthetic trace for sizing runs;
//! - [`sim`]: the discrete-event simulator around `basalt_plugins::schedule` (with `--dra`, the
//!   GPUs as DRA devices asked through ResourceClaims: `sim/dra.rs`);
//! - [`shares`]: real per-device GPU sharing (`--gpu-share hami`) and the device table behind
//!   the per-device fragmentation figures;
//! - [`metrics`]: the summary (a pure function of the run);
//! - [`report`]: summary.json, CSV time series, charts and report.md.

pub mod forecast;
pub mod metrics;
pub mod native;
pub mod readers;
pub mod report;
pub mod shares;
pub mod sim;
pub mod synthetic;
pub mod windows;
pub mod workload;

use std::path::PathBuf;

use basalt_engine::QueueSpec;
use clap::ValueEnum;

use readers::{Generator, GpuShare, Source};
use workload::{Cluster, Workload};

/// The bundled samples (see `simulations/traces/README.md` for their sources and licences).
pub const SAMPLE_PHILLY: &str = include_str!("../../traces/philly-sample.csv");
pub const SAMPLE_PHILLY_VC: &str = include_str!("../../traces/philly-vc-nodes.csv");
pub const SAMPLE_OPENB_PODS: &str = include_str!("../../traces/openb-pods-sample.csv");
pub const SAMPLE_OPENB_NODES: &str = include_str!("../../traces/openb-nodes-sample.csv");
/// Node scale of the default run: the bundled Philly day on 1/16 of the VCs' nodes, where jobs queue.
pub const DEFAULT_NODE_SCALE: f64 = 0.0625;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// Alibaba 2023 openb pod list.
    Openb,
    /// Philly job table (Pollux's processed philly.csv).
    Philly,
    /// Basalt's native CSV (one row per role of a job).
    Csv,
    /// Basalt's native JSON.
    Json,
}

impl TraceFormat {
    /// Recognises a CSV trace by its header.
    pub fn detect(source: &Source) -> anyhow::Result<TraceFormat> {
        if source.label().ends_with(".json") {
            return Ok(TraceFormat::Json);
        }
        let header = source.header()?;
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        Ok(if cols.contains(&"num_gpus") && cols.contains(&"cluster") {
            TraceFormat::Philly
        } else if cols.contains(&"gpu_milli") && cols.contains(&"name") {
            TraceFormat::Openb
        } else if cols.contains(&"job") {
            TraceFormat::Csv
        } else if header.starts_with('{') {
            TraceFormat::Json
        } else {
            anyhow::bail!(
                "{}: cannot tell the trace format from its header {header:?}; pass --format",
                source.label()
            )
        })
    }
}

/// Where the workload and the cluster come from (shared by `replay` and `compare`).
#[derive(Clone, Debug, clap::Args)]
pub struct TraceArgs {
    /// Workload trace (openb pod list, Philly table, native CSV or JSON). Without it (and
    /// without --synthetic-jobs) the bundled Philly sample is replayed.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace format; recognised from the header when absent.
    #[arg(long, value_enum)]
    pub format: Option<TraceFormat>,
    /// Philly per-VC node counts (`vc,node num`): queue weights and, without another cluster,
    /// the cluster (8-GPU nodes). Defaults to the bundled copy for Philly traces.
    #[arg(long, value_name = "FILE")]
    pub vc_nodes: Option<PathBuf>,
    /// Scale of the VC node counts (each rounded up; VCs missing from the list get 1 node).
    #[arg(long, value_name = "F")]
    pub node_scale: Option<f64>,
    /// Cluster from an openb node list CSV.
    #[arg(long, value_name = "FILE")]
    pub nodes_csv: Option<PathBuf>,
    /// Cluster from Kubernetes manifests (Nodes; Queues replace the generated ones by name).
    #[arg(long = "manifest", value_name = "FILE")]
    pub manifests: Vec<PathBuf>,
    /// Cluster from the generator: this many nodes.
    #[arg(long, value_name = "N")]
    pub nodes: Option<usize>,
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    #[arg(long, default_value = "H100")]
    pub gpu_model: String,
    #[arg(long, default_value_t = 16)]
    pub nodes_per_rack: usize,
    #[arg(long, default_value_t = 8)]
    pub racks_per_spine: usize,
    /// Nodes per NVLink clique (label nvidia.com/gpu.clique); 0 = none.
    #[arg(long, default_value_t = 0)]
    pub clique_nodes: usize,
    /// A seeded synthetic trace of this many jobs instead of --trace.
    #[arg(long, value_name = "N")]
    pub synthetic_jobs: Option<usize>,
    /// Offered GPU load of the synthetic trace (GPU-time asked / capacity).
    #[arg(long, default_value_t = 0.9)]
    pub synthetic_load: f64,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Fractional GPU pods (gpu_milli < 1000): hami (GPU nodes become HAMi nodes, shares are
    /// taken per device; the default for openb traces), round-up to a whole GPU (the default
    /// for other traces), or a per-node pool.
    #[arg(long, value_enum)]
    pub gpu_share: Option<ShareArg>,
    /// Queue quotas: static (capability = weight's share, no borrowing) or borrow (no capability).
    #[arg(long, value_enum, default_value_t = QuotaArg::Borrow)]
    pub quota: QuotaArg,
    /// Scheduling period in simulated seconds.
    #[arg(long, default_value_t = 1.0)]
    pub period: f64,
    /// Rebuild the whole cluster spec and snapshot every cycle (the slow reference path the
    /// incremental one is checked against; same results).
    #[arg(long)]
    pub full_rebuild: bool,
    /// The cluster's GPUs as DRA devices (driver gpu.nvidia.com, `gpu-<i>` in a pool per
    /// node) instead of the nvidia.com/gpu extended resource, and each GPU pod asking for its
    /// GPUs through a ResourceClaim of its own. Whole GPUs only: refused with fractional-GPU
    /// pods, --gpu-share and --quota static (Basalt's queues count no DRA device).
    #[arg(long)]
    pub dra: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShareArg {
    RoundUp,
    Pool,
    Hami,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuotaArg {
    Static,
    Borrow,
}

/// Everything a run needs, read and checked.
pub struct Loaded {
    pub workload: Workload,
    pub cluster: Cluster,
    pub manifest_queues: Vec<QueueSpec>,
    pub options: sim::Options,
    pub inputs: report::Inputs,
}

impl TraceArgs {
    pub fn load(&self) -> anyhow::Result<Loaded> {
        anyhow::ensure!(
            self.period.is_finite() && self.period >= 0.001,
            "--period: must be at least 0.001 seconds, got {}",
            self.period
        );
        let bundled = self.trace.is_none() && self.synthetic_jobs.is_none();
        let scale = self
            .node_scale
            .unwrap_or(if bundled { DEFAULT_NODE_SCALE } else { 1.0 });
        anyhow::ensure!(
            scale.is_finite() && scale > 0.0,
            "--node-scale: must be positive, got {scale}"
        );
        let mut notes = Vec::new();
        let (mut workload, format) = if self.synthetic_jobs.is_some() {
            anyhow::ensure!(
                self.trace.is_none(),
                "--synthetic-jobs and --trace exclude each other"
            );
            (Workload::default(), None)
        } else {
            let source = match &self.trace {
                Some(p) => Source::File(p.clone()),
                None => Source::Text {
                    label: "simulations/traces/philly-sample.csv (bundled)",
                    text: SAMPLE_PHILLY,
                },
            };
            let format = match self.format {
                Some(f) => f,
                None => TraceFormat::detect(&source)?,
            };
            let w = match format {
                TraceFormat::Openb => readers::read_openb_pods(&source)?,
                TraceFormat::Philly => readers::read_philly(&source)?,
                TraceFormat::Csv => readers::read_native_csv(&source)?,
                TraceFormat::Json => readers::read_native_json(&source)?,
            };
            (w, Some(format))
        };
        if self.dra {
            if let Some(s) = self.gpu_share {
                anyhow::bail!(
                    "--dra and --gpu-share {} exclude each other: with --dra GPUs are whole DRA devices",
                    s.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
                );
            }
            anyhow::ensure!(
                self.quota != QuotaArg::Static,
                "--dra and --quota static exclude each other: Basalt's queues count no DRA device, so a static GPU quota would bound nothing"
            );
        }
        let share = match (self.gpu_share, format) {
            _ if self.dra => GpuShare::RoundUp,
            (Some(ShareArg::RoundUp), _) => GpuShare::RoundUp,
            (Some(ShareArg::Pool), _) => GpuShare::Pool,
            (Some(ShareArg::Hami), _) | (None, Some(TraceFormat::Openb)) => GpuShare::Hami,
            (None, _) => GpuShare::RoundUp,
        };
        // Philly: VC node counts give queue weights (and the cluster, unless given).
        let mut vc_cluster = None;
        if format == Some(TraceFormat::Philly) || self.vc_nodes.is_some() {
            let src = match &self.vc_nodes {
                Some(p) => Source::File(p.clone()),
                None => Source::Text {
                    label: "simulations/traces/philly-vc-nodes.csv (bundled)",
                    text: SAMPLE_PHILLY_VC,
                },
            };
            let counts = readers::read_philly_vc_nodes(&src)?;
            let mut missing = Vec::new();
            for q in &mut workload.queues {
                q.weight = match counts.iter().find(|(vc, _)| *vc == q.name) {
                    Some(&(_, n)) => (n as f64 * scale).ceil() as u32,
                    None => {
                        missing.push(q.name.clone());
                        1
                    }
                };
            }
            if !missing.is_empty() {
                notes.push(format!(
                    "virtual clusters without a node count get 1 node: {}",
                    missing.join(", ")
                ));
            }
            // Weights are at most u32::MAX each (the cast saturates); their sum sizes the cluster.
            let nodes: u64 = workload.queues.iter().map(|q| u64::from(q.weight)).sum();
            anyhow::ensure!(
                nodes <= MAX_VC_NODES,
                "--node-scale {scale:?}: the virtual clusters would have {nodes} nodes, more than {MAX_VC_NODES}"
            );
            vc_cluster = Some(Generator {
                nodes: nodes as usize,
                gpus_per_node: readers::PHILLY_GPUS_PER_NODE,
                ..self.generator(0)
            });
            notes.push(format!(
                "queue weight = the VC's node count × {scale} (rounded up); deserved share ∝ weight"
            ));
        }
        let mut manifest_queues = Vec::new();
        let cluster = if !self.manifests.is_empty() {
            let (c, q) = readers::read_manifests(&self.manifests)?;
            manifest_queues = q;
            c
        } else if let Some(p) = &self.nodes_csv {
            readers::read_openb_nodes(&Source::File(p.clone()))?
        } else if let Some(n) = self.nodes {
            self.generator(n).build()
        } else if let Some(g) = vc_cluster {
            g.build()
        } else if format == Some(TraceFormat::Openb) && self.trace.is_some() {
            anyhow::bail!("an openb trace needs a cluster: pass --nodes-csv (the openb node list), --manifest or --nodes");
        } else {
            self.generator(16).build()
        };
        if let Some(n) = self.synthetic_jobs {
            let gpus: u64 = cluster
                .nodes
                .iter()
                .map(|n| n.allocatable.get("nvidia.com/gpu").copied().unwrap_or(0) as u64)
                .sum();
            workload = synthetic::workload(
                n,
                self.seed,
                self.synthetic_load,
                gpus,
                self.gpus_per_node.max(1),
            )?;
        }
        anyhow::ensure!(
            !workload.jobs.is_empty(),
            "{}: the trace has no jobs",
            workload.source
        );
        if share == GpuShare::RoundUp
            && !self.dra
            && workload
                .jobs
                .iter()
                .flat_map(|j| &j.pods)
                .any(|p| p.gpus > 0 && p.gpu_milli < 1000)
        {
            notes.push("fractional-GPU pods are rounded up to one whole GPU (--gpu-share round-up): GPU demand and allocation are overstated by the unused share; `mean GPU share used` counts the fractions as asked".into());
        }
        if share == GpuShare::Pool {
            notes.push("fractional-GPU pods draw on a per-node pool of 1,000 milli per GPU (--gpu-share pool): per-device fit is not checked, so shares may pack tighter than real devices allow".into());
        }
        if share == GpuShare::Hami {
            notes.push(format!(
                "GPUs are shared per device (--gpu-share hami): GPU nodes become HAMi nodes ({} slots per GPU, memory by GPU model, {} MiB when unknown); a pod asking gpu_milli < 1000 takes ⌈gpu_milli/10⌉ % of one GPU's compute and memory (nvidia.com/gpucores, nvidia.com/gpumem-percentage), whole-GPU pods take whole devices; GPUs allocated = devices holding a pod",
                shares::HAMI_SLOTS,
                shares::DEFAULT_GPU_MEMORY_MIB
            ));
            if self.quota == QuotaArg::Static {
                notes.push("--quota static bounds a queue's nvidia.com/gpu, which counts each device a pod takes a share of as one GPU (as round-up does)".into());
            }
        }
        if self.dra {
            notes.push(format!("GPUs are DRA devices (--dra): each node's GPUs are devices gpu-<i> of driver {} in a pool named after the node, and nodes advertise no nvidia.com/gpu; each pod asking n GPUs has a claim of its own for exactly n devices (of the job's GPU models, when it names some); queues count no DRA device, so their GPU shares and reclaim for GPUs do not apply, and evictions free a claim's devices only in the next cycle", sim::DRA_DRIVER));
        }
        notes.extend(workload.notes.iter().cloned());
        let quota = match self.quota {
            QuotaArg::Static => sim::Quota::Static,
            QuotaArg::Borrow => sim::Quota::Borrow,
        };
        let options = sim::Options {
            period_ms: (self.period * 1000.0).round() as i64,
            quota,
            gpu_share: share,
            fold_bound: None,
            full_rebuild: self.full_rebuild,
            dra: self.dra,
        };
        let inputs = report::Inputs {
            trace: format!("{} ({} jobs)", workload.source, workload.jobs.len()),
            cluster: format!("{} ({} nodes)", cluster.source, cluster.nodes.len()),
            options: format!(
                "period {} s, quota {}, {}",
                self.period,
                match quota {
                    sim::Quota::Static => "static",
                    sim::Quota::Borrow => "borrow",
                },
                match self.dra {
                    true => "GPUs as DRA devices (--dra)".to_string(),
                    false => format!("gpu-share {}", share.name()),
                }
            ),
            notes,
        };
        Ok(Loaded {
            workload,
            cluster,
            manifest_queues,
            options,
            inputs,
        })
    }

    fn generator(&self, nodes: usize) -> Generator {
        Generator {
            nodes,
            gpus_per_node: self.gpus_per_node,
            gpu_model: self.gpu_model.clone(),
            nodes_per_rack: self.nodes_per_rack,
            racks_per_spine: self.racks_per_spine,
            clique_nodes: self.clique_nodes,
            ..Generator::default()
        }
    }
}

/// The most nodes a cluster built from Philly's virtual-cluster node counts may have.
const MAX_VC_NODES: u64 = 1_000_000;

/// One run of the loaded trace under `config`; `tick` sees the number of events so far.
pub fn execute(
    loaded: &Loaded,
    config: &basalt_plugins::Config,
    label: &str,
    stop: &std::sync::atomic::AtomicBool,
    tick: impl FnMut(u64),
) -> anyhow::Result<(sim::Outcome, metrics::Summary)> {
    let sim = sim::Simulator::new(
        config,
        loaded.options.clone(),
        &loaded.cluster,
        &loaded.workload,
        &loaded.manifest_queues,
    )?;
    let outcome = sim.run(stop, tick)?;
    let summary = metrics::summarize(&outcome, label);
    Ok((outcome, summary))
}

/// Wall-clock figures of a run (kept out of summary.json, which must not vary between runs).
pub fn timing_text(o: &sim::Outcome) -> String {
    format!(
        "{} events, {} cycles in {:.2} s wall ({:.0} events/s; snapshot build {:.2} s, scheduling {:.2} s; {:.0} pods in {:.0} groups per snapshot; {} folded cycles run again whole)",
        o.events,
        o.cycles,
        o.wall_s,
        o.events as f64 / o.wall_s.max(1e-9),
        o.snapshot_s,
        o.schedule_s,
        o.snapshot_tasks as f64 / (o.cycles + o.redone).max(1) as f64,
        o.snapshot_jobs as f64 / (o.cycles + o.redone).max(1) as f64,
        o.redone,
    )
}

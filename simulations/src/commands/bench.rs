//! `basalt-sim bench`: one cycle (or one forecast) over a synthetic backlog, timed.

use std::path::PathBuf;

use super::Output;
use crate::{bench, bench_forecast, plan, synthetic};

#[derive(clap::Args)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 10000)]
    pods: usize,
    #[arg(long, default_value_t = 8)]
    gang_size: usize,
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    #[arg(long, default_value_t = 1)]
    gpus_per_pod: u32,
    /// Leaf queues of a three-level queue tree (0: every job in `default`).
    #[arg(long, default_value_t = 0)]
    queues: usize,
    /// Pods already running before the cycle (low-priority gangs packed onto the first
    /// nodes), so that reclaim and preempt have work to consider.
    #[arg(long, default_value_t = 0)]
    running: usize,
    /// A fabric (spines of 25 racks of 20 nodes, NVL72-style cliques in every fourth
    /// rack) with a mixed topology-constrained backlog: 512-GPU gangs (required spine),
    /// 32-GPU gangs of TP=8 groups (required rack), TP=8 jobs (required nvlink), 1-GPU pods.
    #[arg(long)]
    fabric: bool,
    /// Nodes in ten zones (whole racks dealt in turn) and a backlog with pod constraints:
    /// of every ten jobs, two keep one member per node (required hostname anti-affinity),
    /// two spread over zones (`maxSkew: 1`), one prefers its members' zone (preferred pod
    /// affinity). The same cluster and pods without their constraints are timed alongside,
    /// and the report gives the ratio.
    #[arg(long, conflicts_with = "fabric")]
    constrained: bool,
    /// HAMi nodes (GPUs of 80 GiB split 10 ways) and a backlog of single pods sharing GPUs
    /// in an openb-like mix: per 20 pods, 7 whole GPUs, 4 half GPUs, 4 quarter GPUs, 3
    /// 8 GiB shares with 20 % compute, one 2-GPU and one 4-GPU share of 30 GiB each.
    #[arg(long, conflicts_with_all = ["fabric", "constrained"])]
    sharing: bool,
    /// GPUs published as DRA ResourceSlices (every fourth node A100s, the rest H100s) and a
    /// backlog of single pods, each with its own claim for 1 to --gpus-per-node GPUs with a
    /// productName selector; the snapshot time includes conversion and the CEL selectors.
    #[arg(long, conflicts_with_all = ["fabric", "constrained", "sharing"])]
    dra: bool,
    /// Cycles to run; the best is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also time the cycle with explanations off (alternately), and report what explaining
    /// every waiting job costs.
    #[arg(long)]
    explain_cost: bool,
    /// Time one forecast run instead of a cycle: the --running gangs end at stated
    /// instants over an hour, the backlog waits for them.
    #[arg(long, conflicts_with_all = ["fabric", "sharing", "dra", "explain_cost"])]
    forecast: bool,
    /// Scheduler config (YAML); the default config when absent.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// The benchmark's report as text or JSON.
pub fn run(args: BenchArgs) -> anyhow::Result<String> {
    anyhow::ensure!(args.gang_size >= 1, "--gang-size: must be at least 1");
    anyhow::ensure!(
        args.gpus_per_node as usize <= basalt_engine::MAX_GPUS_PER_NODE,
        "--gpus-per-node: at most {} GPUs per node are supported",
        basalt_engine::MAX_GPUS_PER_NODE
    );
    let setup = synthetic::Synthetic {
        gang_size: args.gang_size,
        gpus_per_node: args.gpus_per_node,
        gpus_per_pod: args.gpus_per_pod,
        queues: args.queues,
        running: args.running,
        fabric: args.fabric,
        constrained: args.constrained,
        sharing: args.sharing,
        dra: args.dra,
        ..synthetic::Synthetic::new(args.nodes, args.pods)
    };
    let config = plan::load_config(args.config.as_deref())?;
    if args.forecast {
        let report = bench_forecast::run(&setup, &config, args.runs)?;
        return Ok(match args.output {
            Output::Text => report.text(),
            Output::Json => serde_json::to_string_pretty(&report)? + "\n",
        });
    }
    let report = bench::run(&setup, &config, args.runs, args.explain_cost)?;
    Ok(match args.output {
        Output::Text => report.text(),
        Output::Json => serde_json::to_string_pretty(&report)? + "\n",
    })
}

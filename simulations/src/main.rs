//! `basalt-sim`: what Basalt would do on a cluster, without a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use basalt_sim::{bench, plan, synthetic};

#[derive(Parser)]
#[command(
    name = "basalt-sim",
    version,
    about = "Basalt's offline planner and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanOutput {
    Text,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scheduling cycle over cluster dumps and print the plan (what Basalt would do).
    /// Without --snapshot, plans the built-in example cluster.
    Plan {
        /// Manifest files: multi-document YAML, JSON, or `kind: List` as `kubectl get -o yaml`
        /// prints them (Nodes, Pods, PriorityClasses, PodGroups, Queues, NodeTopologies).
        #[arg(long = "snapshot", value_name = "FILE")]
        snapshots: Vec<PathBuf>,
        /// Scheduler config (YAML); defaults apply to absent fields.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Pods with this schedulerName are Basalt's (repeatable; overrides the config).
        #[arg(long = "scheduler-name", value_name = "NAME")]
        scheduler_names: Vec<String>,
        #[arg(long, value_enum, default_value_t = PlanOutput::Text)]
        output: PlanOutput,
        /// The instant to plan at (RFC 3339, e.g. 2026-11-29T12:00:00Z); defaults to now. Waiting
        /// times (backfill reservations) are measured against it.
        #[arg(long, value_name = "TIME")]
        now: Option<jiff::Timestamp>,
    },
    /// Place a synthetic backlog of gangs and report pods placed per second and cycle time.
    Bench {
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
        /// Cycles to run; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Scheduler config (YAML); the default config when absent.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("basalt-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Builds the whole output before printing, so a failure never leaves half a result on stdout.
fn run(cli: Cli) -> anyhow::Result<String> {
    match cli.command {
        Command::Plan {
            snapshots,
            config,
            scheduler_names,
            output,
            now,
        } => {
            let mut config = plan::load_config(config.as_deref())?;
            if !scheduler_names.is_empty() {
                config.scheduler_names = scheduler_names;
            }
            let options = basalt_crds::ConvertOptions {
                scheduler_names: config.scheduler_names.clone(),
                now_ms: now.unwrap_or_else(jiff::Timestamp::now).as_millisecond(),
            };
            let (snapshot, warnings) = if snapshots.is_empty() {
                eprintln!(
                    "basalt-sim: no --snapshot given; planning {}",
                    plan::EXAMPLE_LABEL
                );
                let loaded = basalt_crds::read_objects(plan::EXAMPLE_LABEL, plan::EXAMPLE_CLUSTER)?;
                (
                    basalt_crds::build_snapshot(&loaded.objects, &options)?,
                    loaded.warnings,
                )
            } else {
                basalt_crds::load_files(&snapshots, &options)?
            };
            for w in warnings {
                eprintln!("basalt-sim: warning: {w}");
            }
            let result = basalt_plugins::schedule(&snapshot, &config);
            Ok(match output {
                PlanOutput::Text => plan::render_text(&snapshot, &result),
                PlanOutput::Json => serde_json::to_string_pretty(&result)? + "\n",
                PlanOutput::Yaml => serde_yaml::to_string(&result)?,
            })
        }
        Command::Bench {
            nodes,
            pods,
            gang_size,
            gpus_per_node,
            gpus_per_pod,
            queues,
            running,
            runs,
            config,
            output,
        } => {
            anyhow::ensure!(gang_size >= 1, "--gang-size: must be at least 1");
            anyhow::ensure!(
                gpus_per_node as usize <= basalt_engine::MAX_GPUS_PER_NODE,
                "--gpus-per-node: at most {} GPUs per node are supported",
                basalt_engine::MAX_GPUS_PER_NODE
            );
            let setup = synthetic::Synthetic {
                gang_size,
                gpus_per_node,
                gpus_per_pod,
                queues,
                running,
                ..synthetic::Synthetic::new(nodes, pods)
            };
            let config = plan::load_config(config.as_deref())?;
            let report = bench::run(&setup, &config, runs)?;
            Ok(match output {
                Output::Text => report.text(),
                Output::Json => serde_json::to_string_pretty(&report)? + "\n",
            })
        }
    }
}

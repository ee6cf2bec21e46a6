//! `basalt-sim`: what Basalt would do on a cluster, without a cluster.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use basalt_sim::{bench, synthetic};

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

#[derive(Subcommand)]
enum Command {
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
        /// Cycles to run; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
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
        Command::Bench {
            nodes,
            pods,
            gang_size,
            gpus_per_node,
            gpus_per_pod,
            runs,
            output,
        } => {
            anyhow::ensure!(gang_size >= 1, "--gang-size: must be at least 1");
            anyhow::ensure!(
                gpus_per_node as usize <= basalt_engine::MAX_GPUS_PER_NODE,
                "--gpus-per-node: at most {} GPUs per node are supported",
                basalt_engine::MAX_GPUS_PER_NODE
            );
            let setup = synthetic::Synthetic {
                nodes,
                pods,
                gang_size,
                gpus_per_node,
                gpus_per_pod,
            };
            let report = bench::run(&setup, &basalt_plugins::Config::default(), runs)?;
            Ok(match output {
                Output::Text => report.text(),
                Output::Json => serde_json::to_string_pretty(&report)? + "\n",
            })
        }
    }
}

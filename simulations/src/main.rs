//! `basalt-sim`: what Basalt would do on a cluster, without a cluster.
//!
//! The subcommands' flags and run functions live in `basalt_sim::commands`; this file names
//! them, installs the Ctrl-C handler and turns results into output and exit codes.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::{Parser, Subcommand};

use basalt_sim::commands::{apiserver, bench, fgd, plan, replay};

// A replay builds a snapshot and a session every cycle, hundreds of thousands of short-lived
// allocations per second; mimalloc serves them markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

#[derive(Subcommand)]
enum Command {
    /// Run one scheduling cycle over cluster dumps and print the plan (what Basalt would do).
    /// Without --snapshot, plans the built-in example cluster.
    Plan(plan::PlanArgs),
    /// Place a synthetic backlog of gangs and report pods placed per second and cycle time.
    Bench(bench::BenchArgs),
    /// The fragmentation experiment of the FGD paper (USENIX ATC'23) on the openb node and pod
    /// lists: unallocated GPU % at every 5 % of arrived GPU load, median over seeds. Without
    /// --nodes/--pods, runs the bundled sample.
    Fgd(fgd::FgdArgs),
    /// A synthetic MIG workload (1g/2g/3g/7g pods arriving and leaving) replayed with each
    /// static layout and with layouts chosen from demand: pending time, unallocated compute,
    /// re-layouts (`simulations/src/mig`).
    Mig {
        #[command(flatten)]
        args: basalt_sim::mig::MigArgs,
        /// Scheduler config (YAML); the default config when absent.
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
    },
    /// Serve an in-memory Kubernetes API server (for kubectl, kube-rs clients and the
    /// scheduler) until interrupted. Nothing is persisted.
    Apiserver(apiserver::ApiserverArgs),
    /// Replay a workload trace through Basalt's scheduler (simulated time) and write a report:
    /// summary.json, CSV time series, charts and report.md. Without --trace, replays the
    /// bundled Philly sample.
    Replay(replay::ReplayArgs),
    /// Check the forecast against the replay: replay to --at, forecast every waiting gang's
    /// start from the replay's cluster with arrivals stopped, replay on without arrivals and
    /// compare (exact run times: equal for every gang; learned: the error's median and p90).
    Forecast(replay::ForecastArgs),
    /// Replay the same trace under several configs and print one side-by-side table; writes a
    /// report with combined charts.
    Compare(replay::CompareArgs),
}

/// Exit code of an interrupted run (as a shell reports SIGINT).
const INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if let Command::Apiserver(args) = command {
        return match apiserver::serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("basalt-sim apiserver: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    if matches!(command, Command::Replay(_) | Command::Compare(_)) {
        // Without a handler Ctrl-C simply ends the process, which is still no partial report.
        let _ = ctrlc::set_handler(|| replay::STOP.store(true, Ordering::SeqCst));
    }
    match run(command) {
        Ok(out) => {
            print!("{out}");
            if replay::STOP.load(Ordering::SeqCst) {
                eprintln!("basalt-sim: interrupted; the figures above are partial");
                return ExitCode::from(INTERRUPTED);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("basalt-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Builds the whole output before printing, so a failure never leaves half a result on stdout.
fn run(command: Command) -> anyhow::Result<String> {
    match command {
        Command::Plan(args) => plan::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Fgd(args) => fgd::run(args),
        Command::Mig { args, config } => {
            let config = basalt_sim::plan::load_config(config.as_deref())?;
            Ok(basalt_sim::mig::render_text(&basalt_sim::mig::run(
                &args, &config,
            )?))
        }
        Command::Apiserver(_) => unreachable!("handled in main"),
        Command::Replay(args) => replay::replay(args),
        Command::Forecast(args) => replay::forecast(args),
        Command::Compare(args) => replay::compare(args),
    }
}

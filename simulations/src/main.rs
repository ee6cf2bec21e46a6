//! `basalt-sim`: what Basalt would do on a cluster, without a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use basalt_sim::replay::{self, report};
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
        /// Cycles to run; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Replay a workload trace through Basalt's scheduler (simulated time) and write a report:
    /// summary.json, CSV time series, charts and report.md. Without --trace, replays the
    /// bundled Philly sample.
    Replay {
        #[command(flatten)]
        trace: replay::TraceArgs,
        /// Scheduler config (YAML, as for `plan --config`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Report folder (replaced).
        #[arg(long, default_value = "basalt-report")]
        out: PathBuf,
        /// What to print: a text table or summary.json.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Replay the same trace under several configs and print one side-by-side table; writes a
    /// report with combined charts.
    Compare {
        #[command(flatten)]
        trace: replay::TraceArgs,
        /// Scheduler configs (repeat; each is one column). `default` names the built-in defaults.
        #[arg(long = "config", value_name = "FILE", required = true)]
        configs: Vec<PathBuf>,
        #[arg(long, default_value = "basalt-compare")]
        out: PathBuf,
    },
}

/// Set by Ctrl-C: runs stop, print what they measured and mark their report partial.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Exit code of an interrupted run (as a shell reports SIGINT).
const INTERRUPTED: u8 = 130;

fn progress(total: u64, label: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stdout().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let pb = indicatif::ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(label.to_string());
    pb
}

fn run_one(
    loaded: &replay::Loaded,
    config: &basalt_plugins::Config,
    label: &str,
) -> anyhow::Result<(replay::sim::Outcome, replay::metrics::Summary)> {
    let pb = progress(2 * loaded.workload.jobs.len() as u64, label);
    let result = replay::execute(loaded, config, label, &STOP, |n| {
        if n % 1024 == 0 {
            pb.set_position(n);
        }
    });
    pb.finish_and_clear();
    result
}

fn config_label(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Replay { .. } | Command::Compare { .. }
    ) {
        // Without a handler Ctrl-C simply ends the process, which is still no partial report.
        let _ = ctrlc::set_handler(|| STOP.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            if STOP.load(std::sync::atomic::Ordering::SeqCst) {
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
fn run(cli: Cli) -> anyhow::Result<String> {
    match cli.command {
        Command::Plan {
            snapshots,
            config,
            scheduler_names,
            output,
        } => {
            let mut config = plan::load_config(config.as_deref())?;
            if !scheduler_names.is_empty() {
                config.scheduler_names = scheduler_names;
            }
            let options = basalt_crds::ConvertOptions {
                scheduler_names: config.scheduler_names.clone(),
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
        Command::Replay {
            trace,
            config,
            out,
            output,
        } => {
            let label = config
                .as_deref()
                .map_or("default".to_string(), config_label);
            let config = plan::load_config(config.as_deref())?;
            let loaded = trace.load()?;
            let (outcome, summary) = run_one(&loaded, &config, &label)?;
            let names: Vec<String> = loaded
                .workload
                .jobs
                .iter()
                .map(|j| j.name.clone())
                .collect();
            let run = report::RunReport {
                label: label.clone(),
                outcome: &outcome,
                summary: &summary,
                job_names: &names,
            };
            report::write_atomically(&out, |dir| report::write_replay(dir, &run, &loaded.inputs))?;
            eprintln!("basalt-sim: {}", replay::timing_text(&outcome));
            Ok(match output {
                Output::Json => serde_json::to_string_pretty(&summary)? + "\n",
                Output::Text => {
                    let rows = report::table_rows(&[&summary]);
                    let mut text = String::new();
                    if !summary.complete {
                        text.push_str("PARTIAL: interrupted before the trace ended; figures cover the simulated time reached\n");
                    }
                    text.push_str(&report::text_table(&[label], &rows));
                    text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
                    text
                }
            })
        }
        Command::Compare {
            trace,
            configs,
            out,
        } => {
            let mut parsed = Vec::new();
            for path in &configs {
                let config = if path.as_os_str() == "default" {
                    basalt_plugins::Config::default()
                } else {
                    plan::load_config(Some(path))?
                };
                parsed.push((config_label(path), config));
            }
            let mut labels: Vec<String> = parsed.iter().map(|(l, _)| l.clone()).collect();
            for i in 0..labels.len() {
                if labels[..i].contains(&labels[i]) || labels[i + 1..].contains(&labels[i]) {
                    labels[i] = format!("{}#{}", labels[i], i + 1);
                }
            }
            let loaded = trace.load()?;
            let names: Vec<String> = loaded
                .workload
                .jobs
                .iter()
                .map(|j| j.name.clone())
                .collect();
            let mut results = Vec::new();
            for ((_, config), label) in parsed.iter().zip(&labels) {
                if STOP.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let (o, s) = run_one(&loaded, config, label)?;
                eprintln!("basalt-sim: {label}: {}", replay::timing_text(&o));
                results.push((label.clone(), o, s));
            }
            let runs: Vec<report::RunReport> = results
                .iter()
                .map(|(label, o, s)| report::RunReport {
                    label: label.clone(),
                    outcome: o,
                    summary: s,
                    job_names: &names,
                })
                .collect();
            report::write_atomically(&out, |dir| {
                report::write_compare(dir, &runs, &loaded.inputs)
            })?;
            let summaries: Vec<&replay::metrics::Summary> = results.iter().map(|r| &r.2).collect();
            let shown: Vec<String> = results.iter().map(|r| r.0.clone()).collect();
            let mut text = String::new();
            if results.len() < labels.len() || summaries.iter().any(|s| !s.complete) {
                text.push_str("PARTIAL: interrupted; runs not shown did not run, runs marked incomplete stopped early\n");
            }
            text.push_str(&report::text_table(&shown, &report::table_rows(&summaries)));
            text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
            Ok(text)
        }
    }
}

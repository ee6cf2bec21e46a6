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
    /// Serve an in-memory Kubernetes API server (for kubectl, kube-rs clients and the
    /// scheduler) until interrupted. Nothing is persisted.
    Apiserver {
        /// Address to listen on; port 0 picks a free port (printed, and written to the kubeconfig).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Write a kubeconfig for this server here (current context, namespace default).
        #[arg(long, value_name = "FILE")]
        write_kubeconfig: Option<PathBuf>,
        /// Fault settings to start with (JSON or YAML: latencyMs, rules, dropWatchesAfter);
        /// change them at run time with PUT /admin/faults.
        #[arg(long, value_name = "FILE")]
        faults: Option<PathBuf>,
        /// Seed of fault draws and generated names.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Changes kept for watch resumption (older resourceVersions get 410 Gone).
        #[arg(long, default_value_t = 10_000)]
        history: usize,
        /// Bound pods become Running and Ready at once, as if a kubelet started them.
        #[arg(long)]
        run_bound_pods: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Apiserver { .. } = cli.command {
        return match serve(cli.command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("basalt-sim apiserver: {e:#}");
                ExitCode::from(2)
            }
        };
    }
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

/// Runs the in-memory API server until Ctrl-C or SIGTERM.
fn serve(command: Command) -> anyhow::Result<()> {
    use anyhow::Context;
    let Command::Apiserver {
        listen,
        write_kubeconfig,
        faults,
        seed,
        history,
        run_bound_pods,
    } = command
    else {
        unreachable!("serve is called for the apiserver command only");
    };
    let faults = match faults {
        None => basalt_apiserver::Faults::default(),
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("--faults {}: cannot read", path.display()))?;
            serde_yaml::from_str(&text)
                .with_context(|| format!("--faults {}: not valid fault settings", path.display()))?
        }
    };
    let config = basalt_apiserver::Config {
        listen,
        seed,
        faults,
        history,
        run_bound_pods,
        ..Default::default()
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let server = basalt_apiserver::ApiServer::start(config).await?;
        if let Some(path) = &write_kubeconfig {
            server.write_kubeconfig(path)?;
        }
        println!("basalt-apiserver serving on {}", server.url());
        if let Some(path) = &write_kubeconfig {
            println!("kubeconfig written to {}", path.display());
        }
        wait_for_signal().await?;
        eprintln!("basalt-apiserver: shutting down");
        server.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
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
        Command::Apiserver { .. } => unreachable!("handled in main"),
    }
}

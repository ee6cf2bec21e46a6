//! `basalt-nodeagent`: discover, mig-plan, run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use basalt_nodeagent::backend::GpuBackend;
use basalt_nodeagent::device_plugin::Owed;
use basalt_nodeagent::discover::discover;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::metrics::{self, Metrics};
use basalt_nodeagent::mig::planner;
use basalt_nodeagent::nvml::NvmlBackend;
use basalt_nodeagent::publish::{self, AgentConfig, ConfigMapRef};
use basalt_nodeagent::round::PluginPods;
use clap::{Parser, Subcommand, ValueEnum};

// The scheduler's text-log fields, which escape control characters: one event, one line.
#[path = "../../scheduler/daemon/src/text_log.rs"]
mod text_log;

/// Basalt's node agent: GPU topology discovery, NodeTopology publishing, MIG and time-slicing.
#[derive(Parser)]
#[command(name = "basalt-nodeagent", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanFormat {
    Text,
    Json,
}

// Parsed once at start: the size of `Run` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Print this node's NodeTopology (or, with --raw, what NVML reported, in fixture format).
    Discover {
        /// Read this fixture instead of NVML.
        #[arg(long, value_name = "FIXTURE")]
        fake: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "yaml")]
        output: Format,
        /// Name of the object; defaults to $NODE_NAME, then the host name.
        #[arg(long)]
        node_name: Option<String>,
        /// Print the backend's raw report (the fixture format), to save a machine as a fixture.
        #[arg(long)]
        raw: bool,
    },
    /// Plan a MIG layout for one GPU. Exit 2 when the layout is impossible.
    MigPlan {
        /// GPU model: A30-24GB, A100-40GB, A100-80GB, H100-80GB, H200-141GB.
        #[arg(long)]
        model: String,
        /// Wanted profiles: `3g.40gb=2,1g.10gb=1`.
        #[arg(long)]
        profiles: String,
        #[arg(long, value_enum, default_value = "text")]
        output: PlanFormat,
    },
    /// Run the agent: reconcile every --interval, serve /healthz and /metrics.
    Run {
        #[arg(long, env = "NODE_NAME")]
        node_name: String,
        #[arg(long, value_name = "FIXTURE")]
        fake: Option<PathBuf>,
        /// Decide and report only: write nothing, change no GPU.
        #[arg(long)]
        dry_run: bool,
        /// Never change MIG instances; the nvidia.com/mig.config label is then ignored (with a
        /// warning). For nodes without MIG and the default, unprivileged DaemonSet.
        #[arg(long)]
        no_mig: bool,
        /// Time between rounds: 30s, 5m, 1h, 500ms.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        interval: Duration,
        /// One round, print its report as JSON, exit: 1 if it could not run (the Node unreadable,
        /// no GPU report); a write that failed is in the report's errors, exit 0.
        #[arg(long)]
        once: bool,
        /// /healthz, for the kubelet's probes.
        #[arg(long, default_value = "0.0.0.0:9400")]
        listen: SocketAddr,
        /// /metrics: loopback by default, so only a sidecar such as kube-rbac-proxy reaches it
        /// (deploy/README.md); the same address as --listen serves both there.
        #[arg(long, default_value = "127.0.0.1:9401")]
        metrics_bind_address: SocketAddr,
        /// The mig-parted config ConfigMap (the layouts `nvidia.com/mig.config` names).
        #[arg(long, default_value = "gpu-operator/default-mig-parted-config")]
        mig_config_map: ConfigMapRef,
        #[arg(long, default_value = "config.yaml")]
        mig_config_key: String,
        /// The device plugin's config ConfigMap, where time-slicing configs are written.
        #[arg(long, default_value = "gpu-operator/basalt-device-plugin-config")]
        device_plugin_config_map: ConfigMapRef,
        /// At most one re-layout per GPU in this time, for the scheduler's wanted MIG layouts
        /// (NodeTopology spec.migLayouts); the scheduler config's `mig.minIntervalSeconds` (300) models it.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        mig_min_interval: Duration,
        /// Restart the device plugin on this node after its MIG instances change, by deleting its
        /// pods here (NAMESPACE/LABEL_SELECTOR, e.g. gpu-operator/app=nvidia-device-plugin-daemonset):
        /// NVIDIA's plugin lists MIG devices only when it starts. Off by default (HAMi's plugin
        /// needs none).
        #[arg(long)]
        restart_device_plugin: Option<PluginPods>,
        /// The kubelet's PodResources socket (/var/lib/kubelet/pod-resources/kubelet.sock): before
        /// re-laying a GPU for the scheduler, refuse when a pod holds one of its MIG devices, even
        /// with no process running. Without it only processes are checked.
        #[arg(long)]
        pod_resources_socket: Option<PathBuf>,
    },
}

const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: want a duration like 30s, 5m, 500ms"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}; use ms, s, m or h")),
    };
    // Bounded so that no clock arithmetic on it can overflow.
    let d = n
        .checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .filter(|d| *d <= MAX_INTERVAL)
        .ok_or_else(|| format!("{s:?}: must be at most 24h"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than zero"));
    }
    Ok(d)
}

fn backend(fake: Option<&Path>) -> Result<Box<dyn GpuBackend>> {
    Ok(match fake {
        Some(path) => Box::new(FakeBackend::from_file(path)?),
        None => Box::new(NvmlBackend::new()?),
    })
}

fn default_node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn print(value: &impl serde::Serialize, format: Format) -> Result<()> {
    let text = match format {
        Format::Yaml => serde_yaml::to_string(value)?,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // Exit 2 means "impossible layout" for mig-plan; usage errors get 64 (EX_USAGE).
            return if e.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::MigPlan {
            model,
            profiles,
            output,
        } => mig_plan(&model, &profiles, output),
        Command::Discover {
            fake,
            output,
            node_name,
            raw,
        } => report_errors(discover_cmd(fake.as_deref(), output, node_name, raw)),
        Command::Run {
            node_name,
            fake,
            dry_run,
            no_mig,
            interval,
            once,
            listen,
            metrics_bind_address,
            mig_config_map,
            mig_config_key,
            device_plugin_config_map,
            mig_min_interval,
            restart_device_plugin,
            pod_resources_socket,
        } => {
            let cfg = AgentConfig {
                node_name,
                dry_run,
                no_mig,
                mig_config_map,
                mig_config_key,
                device_plugin_config_map,
                mig_min_interval,
                restart_device_plugin,
                pod_resources: pod_resources_socket,
            };
            let addrs = (listen, metrics_bind_address);
            report_errors(run(cfg, fake, interval, once, addrs))
        }
    }
}

fn report_errors(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn mig_plan(model: &str, profiles: &str, output: PlanFormat) -> ExitCode {
    match planner::plan_text(model, profiles) {
        Ok(plan) => {
            match output {
                PlanFormat::Text => println!("{plan}"),
                PlanFormat::Json => match serde_json::to_string_pretty(&plan) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if let PlanFormat::Json = output {
                let v =
                    serde_json::json!({ "error": e.to_string(), "impossible": e.is_impossible() });
                println!("{v}");
            }
            eprintln!("error: {e}");
            if e.is_impossible() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn discover_cmd(
    fake: Option<&Path>,
    output: Format,
    node_name: Option<String>,
    raw: bool,
) -> Result<()> {
    let backend = backend(fake)?;
    let report = backend.report()?;
    if raw {
        return print(&report, output);
    }
    let d = discover(&report).with_context(|| backend.describe())?;
    for w in &d.warnings {
        eprintln!("warning: {w}");
    }
    let name = node_name.unwrap_or_else(default_node_name);
    print(&d.node_topology(&name, None), output)
}

fn run(
    cfg: AgentConfig,
    fake: Option<PathBuf>,
    interval: Duration,
    once: bool,
    (listen, metrics_at): (SocketAddr, SocketAddr),
) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .fmt_fields(text_log::EscapedFields)
        .init();
    let backend = backend(fake.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // kube's errors repeat their sources in their own text: print the top one only.
        let client = kube::Client::try_default()
            .await
            .map_err(|e| anyhow!("no Kubernetes client (in-cluster config or KUBECONFIG): {e}"))?;
        if once {
            // Its text already holds its source: printed with `{:#}`, it would repeat.
            let mut report = publish::reconcile_once(&client, backend.as_ref(), &cfg)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            Owed::default().settle(&client, &cfg, &mut report).await;
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(());
        }
        let metrics = Arc::new(Metrics::new());
        let servers = match listen == metrics_at {
            true => vec![(listen, metrics::router(metrics.clone()))],
            false => vec![
                (listen, metrics::health_router()),
                (metrics_at, metrics::metrics_router(metrics.clone())),
            ],
        };
        for (addr, app) in servers {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!("http server on {addr}: {e}");
                }
            });
        }
        tracing::info!(node = %cfg.node_name, backend = %backend.describe(), dry_run = cfg.dry_run, %listen, metrics = %metrics_at, "basalt-nodeagent running");
        let mut owed = Owed::default();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown() => {
                    tracing::info!("shutting down");
                    return Ok(());
                }
            }
            let mut result = publish::reconcile_once(&client, backend.as_ref(), &cfg)
                .await
                .map_err(|e| e.to_string());
            if let Ok(report) = &mut result {
                owed.settle(&client, &cfg, report).await;
            }
            match &result {
                Ok(r) => {
                    for s in &r.mig_steps {
                        tracing::info!(step = %s.step, outcome = ?s.outcome, "mig");
                    }
                    for e in &r.errors {
                        tracing::warn!("{e}");
                    }
                    tracing::info!(gpus = r.gpus, islands = ?r.islands, topology = ?r.topology, labels = ?r.node_labels, "reconciled");
                }
                Err(e) => tracing::error!("reconcile failed: {e}"),
            }
            metrics.record(&result);
        }
    })
    .map_err(|e: anyhow::Error| anyhow!(e))
}

async fn shutdown() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

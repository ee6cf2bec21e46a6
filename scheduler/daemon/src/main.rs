//! `basalt-scheduler`: Basalt's scheduler daemon. Watches the Kubernetes API, runs the engine
//! once per period (and soon after changes), and applies the plan: binds, evictions, nominated
//! nodes, PodGroup status and Events.

// Each cycle converts changed objects, patches a snapshot and runs a session: many short-lived
// allocations; mimalloc serves them faster and holds less memory than the system allocator
// (the figures are in docs/live-scheduler.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod apply;
mod assumed_claims;
mod assumed_pods;
mod changes;
mod config_file;
mod cycle;
mod dra;
mod fence;
mod forecast;
mod grouping;
mod held_pods;
mod http;
mod kept_framework;
mod kept_groups;
mod keys;
mod leader;
mod lenient;
mod metrics;
mod optional_api;
mod overfull;
mod owners;
mod ownership;
mod reflect;
mod refused_evictions;
mod reported;
mod scheduler;
mod scheduler_plugins;
mod settled;
mod stores;
mod stranded;
mod text_log;
mod unbound_pods;
mod usage;
mod view;
mod volcano;
mod wake;
mod writer;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use basalt_plugins::Config;
use clap::Parser;
use tokio::sync::watch;

#[derive(Parser, Debug)]
#[command(
    name = "basalt-scheduler",
    version,
    about = "Basalt's gang scheduler for Kubernetes"
)]
struct Args {
    /// Scheduler config (YAML, as for `basalt-sim plan --config`); absent means the defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Time between scheduling cycles when nothing changes (`1s`, `500ms`).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    period: Duration,
    /// Address of /healthz and /readyz (the kubelet's probes).
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: String,
    /// Address of /metrics: loopback, so only a sidecar such as kube-rbac-proxy reaches it
    /// (deploy/README.md); the same address as --listen serves everything there.
    #[arg(long, default_value = "127.0.0.1:8081")]
    metrics_bind_address: String,
    /// Writes in flight at once: bindings, evictions and status writes in a cycle, and
    /// Events (sent beside the cycles).
    #[arg(long, default_value_t = 64)]
    bind_concurrency: usize,
    /// Client-side limit on the scheduler's writes, in requests a second (0: none). Binds
    /// come first: Events only take tokens while half the burst is left.
    #[arg(long, default_value_t = 5000.0)]
    kube_api_qps: f64,
    /// Writes that may go out at once above --kube-api-qps.
    #[arg(long, default_value_t = 10000)]
    kube_api_burst: u32,
    /// Schedule only while holding a Lease (run two replicas for failover).
    #[arg(long)]
    leader_elect: bool,
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    #[arg(long, default_value = "basalt-scheduler")]
    lease_name: String,
    /// How long a lease holds without renewal (`15s`).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// This replica's name in the Lease and in Events; defaults to HOSTNAME (the pod name)
    /// and the process id.
    #[arg(long)]
    identity: Option<String>,
    /// How long what a pod's owner says (`scheduling.basalt.dev/min-member`, `/queue`) is
    /// trusted before the owner is read again.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    owner_cache_ttl: Duration,
    /// How often to look again whether Volcano's CRDs (scheduling.volcano.sh/v1beta1,
    /// topology.volcano.sh/v1alpha1) and scheduler-plugins' PodGroup
    /// (scheduling.x-k8s.io/v1alpha1) are served, while they are not.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    volcano_discovery_interval: Duration,
    /// How long a gang may stay partly bound (members bound, its minimum not, the others
    /// unplaceable) before its bound members are evicted so it can start whole later.
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    partial_gang_timeout: Duration,
    /// Bound on every ordinary API request (connect, send, each wait for an answer); lease
    /// requests are bounded tighter (a sixth of --lease-duration). Watches have their own
    /// bounds (below).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    kube_api_timeout: Duration,
    /// /healthz fails when no scheduling cycle has finished for this long; default
    /// max(60s, 10 × --period), room for a long cycle on a large cluster.
    #[arg(long, value_parser = parse_duration)]
    max_cycle_gap: Option<Duration>,
    /// How often each waiting gang's start is forecast (`status.forecast`), off the scheduling
    /// path on the last cycle's objects, conversions and plan, on a thread of its own at the
    /// lowest CPU priority; 0 turns the forecast off. A run is bounded in work (nodes plus
    /// pods per forward cycle): at 10,000 nodes and 130,000 pods under 1 s of CPU
    /// (`docs/live-scheduler.md`).
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    forecast_interval: Duration,
    /// Log lines on stderr: `text` for people, `json` (one object a line) for log collectors.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        return Err(format!("{s:?}: expected a duration such as 1s or 500ms"));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected a duration such as 1s or 500ms"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?}: must be positive"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// A duration that may be 0 (off): `0`, or one [`parse_duration`] reads.
fn parse_interval(s: &str) -> Result<Duration, String> {
    match s.trim() {
        "0" | "0s" | "0ms" | "0m" => Ok(Duration::ZERO),
        other => parse_duration(other),
    }
}

/// The liveness limit: the flag, or max(60 s, 10 periods). It must exceed the period, or a
/// follower (which shows progress once a period) would never be live.
fn max_cycle_gap(period: Duration, flag: Option<Duration>) -> Result<Duration, String> {
    match flag {
        None => Ok((period * 10).max(Duration::from_secs(60))),
        Some(gap) if gap > period => Ok(gap),
        Some(gap) => Err(format!(
            "--max-cycle-gap {gap:?}: must be longer than --period ({period:?})"
        )),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        // Values escaped, so that one event is one line whatever users' objects hold.
        LogFormat::Text => logs.fmt_fields(text_log::EscapedFields).init(),
        // Fields at the top level, as log collectors expect (`{"level":..,"message":..}`).
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    let (config, watched) = match config_file::ConfigFile::open(args.config.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("basalt-scheduler: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = max_cycle_gap(args.period, args.max_cycle_gap) {
        eprintln!("basalt-scheduler: {e}");
        return ExitCode::from(2);
    }
    if args.leader_elect {
        if let Err(e) = leader::Timing::new(args.lease_duration) {
            eprintln!("basalt-scheduler: {e}");
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("basalt-scheduler: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, config, watched)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("basalt-scheduler: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A watch's read timeout: longer than kube's watcher waits on an idle stream (the server's
/// 290 s `timeoutSeconds` plus 5 s), so a healthy idle watch is never cut, while a list or a
/// watch start the API never answers fails.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// Two clients on one kubeconfig: one for watches (long-lived streams) and the lease, one for
/// every other request, whose connect, write and read are each bounded by `timeout`, and
/// whose writes are fenced by `leadership` (`fence.rs`). (A read timeout that short on the
/// watch client would cut every watch idle for longer; the elector bounds its own requests.)
/// Both name the replica in their User-Agent, so the API server's audit log tells replicas
/// apart.
async fn clients(
    identity: &str,
    timeout: Duration,
    leadership: &leader::Leadership,
) -> anyhow::Result<(kube::Client, kube::Client)> {
    use axum::http::{header, HeaderValue};
    let mut cfg = kube::Config::infer()
        .await
        .context("no Kubernetes configuration (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    // kube retries 429/503/504 for minutes by default; an eviction refused by a budget is a
    // 429 and bind errors are retried by the scheduler's own cycle, so answers must surface.
    cfg.default_retry = false;
    let version = concat!("basalt-scheduler/", env!("CARGO_PKG_VERSION"));
    let agent = HeaderValue::from_str(&format!("{version} ({identity})"))
        .unwrap_or_else(|_| HeaderValue::from_static(version));
    cfg.headers.push((header::USER_AGENT, agent));
    // Timeouts count from the request, not from when a pooled connection went idle.
    cfg.reset_reader_on_write = true;
    cfg.connect_timeout = Some(timeout);
    cfg.write_timeout = Some(timeout);
    let mut watches = cfg.clone();
    watches.read_timeout = Some(WATCH_READ_TIMEOUT);
    cfg.read_timeout = Some(timeout);
    let context = "cannot build the Kubernetes client";
    let watch_client = kube::Client::try_from(watches).context(context)?;
    let fence = fence::FenceLayer(leadership.clone());
    let client = (kube::client::ClientBuilder::try_from(cfg).context(context)?)
        .with_layer(&fence)
        .build();
    Ok((watch_client, client))
}

/// Waits for every cache's first list; the wait counts as progress for liveness. False when
/// asked to stop meanwhile.
async fn wait_caches(
    stores: &stores::Stores,
    health: &http::Health,
    every: Duration,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<bool> {
    let ready = stores.wait_ready();
    tokio::pin!(ready);
    let mut rx = shutdown.clone();
    loop {
        tokio::select! {
            r = &mut ready => { r?; return Ok(true) }
            _ = tokio::time::sleep(every) => health.progressed(),
            _ = rx.wait_for(|s| *s) => return Ok(false),
        }
    }
}

/// Schedules until shut down, with `config`, read again from `watched` when it changes.
async fn run(
    args: Args,
    config: Config,
    mut watched: config_file::ConfigFile,
) -> anyhow::Result<()> {
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "basalt-scheduler".into());
        format!("{host}_{}", std::process::id())
    });
    let (term_tx, leadership) = if args.leader_elect {
        let (tx, leadership) = leader::Leadership::elected();
        (Some(tx), leadership)
    } else {
        (None, leader::Leadership::unconditional())
    };
    let (watch_client, client) = clients(&identity, args.kube_api_timeout, &leadership).await?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: finishing the cycle in flight");
        let _ = shutdown_tx.send(true);
    });

    let mut stores = stores::Stores::start(watch_client.clone(), args.volcano_discovery_interval);
    // Checked at start (exit 2).
    let max_gap = max_cycle_gap(args.period, args.max_cycle_gap).map_err(anyhow::Error::msg)?;
    let health = Arc::new(http::Health::new(
        max_gap,
        leadership.clone(),
        stores.health.clone(),
    ));
    let metrics = Arc::new(metrics::Metrics::new());
    metrics.max_cycle_gap.set(max_gap.as_secs_f64());
    let server = http::start(
        &args.listen,
        &args.metrics_bind_address,
        metrics.clone(),
        health.clone(),
        shutdown_rx.clone(),
    )
    .await?;

    if !wait_caches(&stores, &health, args.period, &shutdown_rx).await? {
        let _ = server.await;
        return Ok(());
    }
    metrics.ready.store(true, Ordering::Relaxed);
    tracing::info!(schedulers = ?config.scheduler_names, "caches synced; scheduling");

    let (stop_tx, stop_rx) = watch::channel(false);
    let elector = match term_tx {
        Some(term) => {
            let elector = leader::Elector::new(
                watch_client,
                leader::LeaseConfig {
                    namespace: args.lease_namespace.clone(),
                    name: args.lease_name.clone(),
                    identity: identity.clone(),
                    duration: args.lease_duration,
                    write_timeout: args.kube_api_timeout,
                },
                {
                    let health = health.clone();
                    move || health.live()
                },
            )
            .map_err(anyhow::Error::msg)?;
            Some(tokio::spawn(elector.run(term, stop_rx)))
        }
        None => None,
    };

    let settings = scheduler::Settings {
        concurrency: args.bind_concurrency,
        identity,
        owner_ttl: args.owner_cache_ttl,
        partial_gang_timeout: args.partial_gang_timeout,
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
    };
    let mut scheduler =
        scheduler::Scheduler::new(client, config, metrics, settings, leadership.clone());
    scheduler.forecaster = forecast::Forecaster::start(args.forecast_interval, args.period);
    let mut waiting = leadership.clone();
    let min_gap = Duration::from_millis(50);
    'run: loop {
        if !leadership.leading() {
            tracing::info!("not the leader; waiting for the lease");
            // A follower runs no cycles: its wait counts as progress for liveness.
            loop {
                let mut rx = shutdown_rx.clone();
                tokio::select! {
                    led = waiting.wait_leading() => if led { break } else { break 'run },
                    _ = tokio::time::sleep(args.period) => health.progressed(),
                    _ = rx.wait_for(|s| *s) => break 'run,
                }
            }
            // The world moved on while another replica scheduled: nothing assumed is kept and
            // the caches are listed afresh before anything is planned.
            scheduler.forget();
            stores.relist();
            if !wait_caches(&stores, &health, args.period, &shutdown_rx).await? {
                break;
            }
            tracing::info!("leading; scheduling");
            continue;
        }
        reload_config(&mut watched, &mut scheduler);
        let outcome = cycle::run_cycle(&mut scheduler, &stores).await;
        health.progressed();
        if *shutdown_rx.borrow() {
            break;
        }
        // After retryable bind errors, wait out the backoff before trying again.
        let pause = outcome.backoff.max(min_gap);
        let mut rx = shutdown_rx.clone();
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = rx.wait_for(|s| *s) => break,
        }
        // Then sleep until a watch event or the next deadline (`wake.rs`): an idle scheduler
        // runs no cycle. Once a period it looks at what no watch tells it: the lease, the
        // config file; the wait counts as progress (liveness, the last-cycle gauge).
        let due = outcome.deadlines.next(Instant::now(), args.period);
        loop {
            let tick = Instant::now() + args.period;
            let until = due.map_or(tick, |(at, _)| at.min(tick));
            let mut rx = shutdown_rx.clone();
            tokio::select! {
                _ = tokio::time::sleep_until(until.into()) => {}
                _ = stores.changed.notified() => break,
                _ = rx.wait_for(|s| *s) => break 'run,
            }
            if let Some((at, why)) = due.filter(|(at, _)| Instant::now() >= *at) {
                tracing::debug!(?at, why, "deadline due");
                break;
            }
            health.progressed();
            scheduler.metrics.idle_looked(cycle::unix_now());
            if !leadership.leading() || reload_config(&mut watched, &mut scheduler) {
                break;
            }
        }
    }
    // Only now, with no bind in flight, may another replica take over.
    let _ = stop_tx.send(true);
    if let Some(e) = elector {
        let _ = e.await;
    }
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

/// Reads the config file again when its text changed; whether a new config is used now.
fn reload_config(
    watched: &mut config_file::ConfigFile,
    scheduler: &mut scheduler::Scheduler,
) -> bool {
    match watched.poll() {
        Some(Ok(new)) => {
            tracing::info!(schedulers = ?new.scheduler_names, "config file changed; the new config is used from this cycle on");
            scheduler.metrics.config_reloads.inc();
            scheduler.config = new;
            true
        }
        Some(Err(e)) => {
            tracing::error!(error = %format!("{e:#}"), "config file changed but is invalid; the config before is kept");
            scheduler.metrics.config_reload_errors.inc();
            false
        }
        None => false,
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_may_be_zero_a_period_may_not() {
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert_eq!(parse_interval("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert!(parse_interval("-1s").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn the_liveness_limit_defaults_to_ten_periods_or_a_minute_and_exceeds_the_period() {
        let s = Duration::from_secs;
        assert_eq!(max_cycle_gap(s(1), None), Ok(s(60)));
        assert_eq!(max_cycle_gap(s(30), None), Ok(s(300)));
        assert_eq!(max_cycle_gap(s(1), Some(s(2))), Ok(s(2)));
        let err = max_cycle_gap(s(10), Some(s(5))).unwrap_err();
        assert!(
            err.contains("--max-cycle-gap") && err.contains("--period"),
            "{err}"
        );
    }
}

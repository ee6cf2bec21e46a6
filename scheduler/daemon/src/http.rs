//! `/healthz` and `/readyz` on `--listen` (the pod's address: the kubelet probes them) and
//! `/metrics` (OpenMetrics text) on `--metrics-bind-address` (loopback unless exposed on
//! purpose); one server when the two are the same.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::stores::WatchHealth;

/// What the probes look at.
pub struct Health {
    /// Last time the loop showed progress: a cycle finished, or a wait (for the caches, for
    /// the lease) went round.
    progress: Mutex<Instant>,
    /// Liveness fails once progress is older than this.
    pub max_gap: Duration,
    pub leadership: Leadership,
    pub watches: Arc<WatchHealth>,
}

impl Health {
    pub fn new(max_gap: Duration, leadership: Leadership, watches: Arc<WatchHealth>) -> Health {
        Health {
            progress: Mutex::new(Instant::now()),
            max_gap,
            leadership,
            watches,
        }
    }

    pub fn progressed(&self) {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Liveness: some progress within `max_gap`.
    pub fn live(&self) -> bool {
        self.stuck(Instant::now()).is_none()
    }

    /// None while live; else why not.
    fn stuck(&self, now: Instant) -> Option<String> {
        let last = *self.progress.lock().unwrap_or_else(|p| p.into_inner());
        let gap = now.saturating_duration_since(last);
        (gap > self.max_gap).then(|| {
            format!(
                "no scheduling cycle finished for {:.1}s (limit {:?})",
                gap.as_secs_f64(),
                self.max_gap
            )
        })
    }
}

pub struct Metrics {
    /// The caches hold a full list: scheduling has started.
    pub ready: AtomicBool,
    pub cycle_duration: Histogram,
    pub binds: Counter,
    pub bind_errors: Counter,
    pub evictions: Counter,
    pub pending_pods: Gauge,
    /// Nodes whose bound pods hold more than they have (`overfull.rs`).
    pub nodes_over_capacity: Gauge,
    /// Pod creation to its successful bind, observed at the bind.
    pub scheduling_latency: Histogram,
    /// Per `queue`: Basalt pods unbound after the last cycle.
    pub queue_pending_pods: Family<Labels, Gauge>,
    /// Per `queue`: PodGroups the last plan left Pending or Inqueue.
    pub queue_pending_groups: Family<Labels, Gauge>,
    /// Per `queue` and `resource` (cores for cpu, base units otherwise), from the plan.
    pub queue_deserved: Family<Labels, Gauge<f64, AtomicU64>>,
    pub queue_allocated: Family<Labels, Gauge<f64, AtomicU64>>,
    /// Config files read again because they changed, and those refused (the old config kept).
    pub config_reloads: Counter,
    pub config_reload_errors: Counter,
    /// Events not written because the Event queue was full.
    pub events_dropped: Counter,
    registry: Registry,
}

/// Label pairs of a series (`queue`, `resource`).
pub type Labels = Vec<(String, String)>;

impl Metrics {
    pub fn new() -> Metrics {
        let cycle_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let binds = Counter::default();
        let bind_errors = Counter::default();
        let evictions = Counter::default();
        let pending_pods = Gauge::default();
        let nodes_over_capacity = Gauge::default();
        let scheduling_latency = Histogram::new(exponential_buckets(0.005, 2.0, 20));
        let queue_pending_pods = Family::<Labels, Gauge>::default();
        let queue_pending_groups = Family::<Labels, Gauge>::default();
        let queue_deserved = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let queue_allocated = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let config_reloads = Counter::default();
        let config_reload_errors = Counter::default();
        let events_dropped = Counter::default();
        let mut registry = Registry::with_prefix("basalt_scheduler");
        registry.register(
            "events_dropped",
            "Events not written because the Event queue was full",
            events_dropped.clone(),
        );
        registry.register(
            "config_reloads",
            "Changed config files read and taken",
            config_reloads.clone(),
        );
        registry.register(
            "config_reload_errors",
            "Changed config files refused (invalid); the config before is kept",
            config_reload_errors.clone(),
        );
        registry.register(
            "cycle_duration_seconds",
            "Duration of a scheduling cycle (snapshot, engine, apply)",
            cycle_duration.clone(),
        );
        registry.register("binds", "Pods bound", binds.clone());
        registry.register(
            "bind_errors",
            "Bindings refused or failed",
            bind_errors.clone(),
        );
        registry.register("evictions", "Pods evicted", evictions.clone());
        registry.register(
            "nodes_over_capacity",
            "Nodes whose bound pods request more than the node's allocatable; nothing more is bound there",
            nodes_over_capacity.clone(),
        );
        registry.register(
            "pending_pods",
            "Basalt pods waiting for a node after the last cycle",
            pending_pods.clone(),
        );
        registry.register(
            "scheduling_latency_seconds",
            "Time from a pod's creation to its successful bind",
            scheduling_latency.clone(),
        );
        registry.register(
            "queue_pending_pods",
            "Basalt pods waiting for a node after the last cycle, per queue",
            queue_pending_pods.clone(),
        );
        registry.register(
            "queue_pending_podgroups",
            "PodGroups the last cycle left Pending or Inqueue, per queue",
            queue_pending_groups.clone(),
        );
        registry.register(
            "queue_deserved",
            "Queue's deserved share from the last plan (cpu in cores, others in base units)",
            queue_deserved.clone(),
        );
        registry.register(
            "queue_allocated",
            "Queue's allocation from the last plan (cpu in cores, others in base units)",
            queue_allocated.clone(),
        );
        Metrics {
            config_reloads,
            config_reload_errors,
            events_dropped,
            scheduling_latency,
            queue_pending_pods,
            queue_pending_groups,
            queue_deserved,
            queue_allocated,
            ready: AtomicBool::new(false),
            cycle_duration,
            binds,
            bind_errors,
            evictions,
            pending_pods,
            nodes_over_capacity,
            registry,
        }
    }
}

type Probed = (Arc<Metrics>, Arc<Health>);

/// Binds `listen` (probes) and `metrics_at` (`/metrics`), one listener when they are the same
/// address, and serves them until shutdown; the handle ends when every server has stopped.
pub async fn start(
    listen: &str,
    metrics_at: &str,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use anyhow::Context;
    let probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let scrape = Router::new().route("/metrics", get(metrics_text));
    let servers = match listen == metrics_at {
        true => vec![(
            "--listen",
            listen,
            "/healthz, /readyz, /metrics",
            probes.merge(scrape),
        )],
        false => vec![
            ("--listen", listen, "/healthz, /readyz", probes),
            ("--metrics-bind-address", metrics_at, "/metrics", scrape),
        ],
    };
    let mut running = Vec::new();
    for (flag, addr, paths, app) in servers {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("{flag} {addr}: cannot bind"))?;
        tracing::info!(address = %listener.local_addr()?, paths, "serving");
        let app = app.with_state((metrics.clone(), health.clone()));
        running.push(tokio::spawn(serve(listener, app, shutdown.clone())));
    }
    Ok(tokio::spawn(async move {
        for server in running {
            let _ = server.await;
        }
    }))
}

async fn serve(listener: TcpListener, app: Router, shutdown: watch::Receiver<bool>) {
    let mut rx = shutdown;
    let stop = async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "the HTTP server stopped");
    }
}

async fn healthz(State((_, h)): State<Probed>) -> (StatusCode, String) {
    match h.stuck(Instant::now()) {
        None => (StatusCode::OK, "ok".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// Ready: caches synced, leading (a follower is expected NotReady) and no watch stale.
async fn readyz(State((m, h)): State<Probed>) -> (StatusCode, String) {
    let unready = |why: String| (StatusCode::SERVICE_UNAVAILABLE, why);
    if !m.ready.load(Ordering::Relaxed) {
        return unready("caches not synced".into());
    }
    if !h.leadership.leading() {
        return unready("not the leader".into());
    }
    let stale = h.watches.stale(Instant::now());
    if !stale.is_empty() {
        return unready(format!(
            "watches failing for over {:?}: {}",
            crate::stores::STALE_AFTER,
            stale.join(", ")
        ));
    }
    (StatusCode::OK, "ok".into())
}

async fn metrics_text(State((m, _)): State<Probed>) -> impl IntoResponse {
    let mut out = String::new();
    match encode(&mut out, &m.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_fails_once_progress_is_older_than_the_limit() {
        let h = Health::new(
            Duration::from_secs(60),
            Leadership::unconditional(),
            Arc::default(),
        );
        let now = Instant::now();
        assert_eq!(h.stuck(now), None);
        let late = now + Duration::from_secs(61);
        assert!(h.stuck(late).unwrap().contains("limit 60s"));
        h.progressed();
        assert_eq!(h.stuck(Instant::now()), None);
    }
}

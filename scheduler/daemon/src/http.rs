//! `/healthz`, `/readyz` and `/metrics` (OpenMetrics text).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

pub struct Metrics {
    /// The caches hold a full list: scheduling has started.
    pub ready: AtomicBool,
    pub cycle_duration: Histogram,
    pub binds: Counter,
    pub bind_errors: Counter,
    pub evictions: Counter,
    pub pending_pods: Gauge,
    /// Pod creation to its successful bind, observed at the bind.
    pub scheduling_latency: Histogram,
    /// Per `queue`: Basalt pods unbound after the last cycle.
    pub queue_pending_pods: Family<Labels, Gauge>,
    /// Per `queue`: PodGroups the last plan left Pending or Inqueue.
    pub queue_pending_groups: Family<Labels, Gauge>,
    /// Per `queue` and `resource` (cores for cpu, base units otherwise), from the plan.
    pub queue_deserved: Family<Labels, Gauge<f64, AtomicU64>>,
    pub queue_allocated: Family<Labels, Gauge<f64, AtomicU64>>,
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
        let scheduling_latency = Histogram::new(exponential_buckets(0.005, 2.0, 20));
        let queue_pending_pods = Family::<Labels, Gauge>::default();
        let queue_pending_groups = Family::<Labels, Gauge>::default();
        let queue_deserved = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let queue_allocated = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let mut registry = Registry::with_prefix("basalt_scheduler");
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
            registry,
        }
    }
}

pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, shutdown: watch::Receiver<bool>) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(metrics);
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

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
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

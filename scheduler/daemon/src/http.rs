//! `/healthz` and `/readyz` on `--listen` (the pod's address: the kubelet probes them) and
//! `/metrics` (OpenMetrics text) on `--metrics-bind-address` (loopback unless exposed on
//! purpose); one server when the two are the same.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::reflect::WatchHealth;

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
            crate::reflect::STALE_AFTER,
            stale.join(", ")
        ));
    }
    (StatusCode::OK, "ok".into())
}

async fn metrics_text(State((m, h)): State<Probed>) -> impl IntoResponse {
    let leading = h.leadership.leading();
    m.leader.set(i64::from(leading));
    if !leading {
        m.forget_plan();
    }
    match m.encode() {
        Ok(out) => (
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

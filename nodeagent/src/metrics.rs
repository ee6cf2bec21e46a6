//! `/healthz` and `/metrics` of the `run` mode.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::round::Report;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub action: String,
    pub outcome: String,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    pub gpus: Gauge<i64, AtomicI64>,
    pub islands: Gauge<i64, AtomicI64>,
    pub reconciles: Family<OutcomeLabels, Counter<u64, AtomicU64>>,
    pub mig_steps: Family<StepLabels, Counter<u64, AtomicU64>>,
    /// Per `layout` the node names (`nvidia.com/mig.config`): 1 valid, 0 not.
    pub mig_layout_valid: Family<LayoutLabels, Gauge<i64, AtomicI64>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayoutLabels {
    pub layout: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("basalt_nodeagent");
        let gpus = Gauge::<i64, AtomicI64>::default();
        let islands = Gauge::<i64, AtomicI64>::default();
        let reconciles = Family::<OutcomeLabels, Counter<u64, AtomicU64>>::default();
        let mig_steps = Family::<StepLabels, Counter<u64, AtomicU64>>::default();
        let mig_layout_valid = Family::<LayoutLabels, Gauge<i64, AtomicI64>>::default();
        registry.register("gpus", "GPUs found on the node", gpus.clone());
        registry.register(
            "nvlink_islands",
            "NVLink islands on the node",
            islands.clone(),
        );
        registry.register(
            "reconciles",
            "Reconcile rounds by outcome (success, error, partial: wanted state had errors)",
            reconciles.clone(),
        );
        registry.register(
            "mig_steps",
            "MIG applier steps by action and outcome",
            mig_steps.clone(),
        );
        registry.register(
            "mig_layout_valid",
            "1 when the MIG layout the node names (label nvidia.com/mig.config, in the layout label) \
             can be read and fits its GPUs, 0 when not; absent when the node names none",
            mig_layout_valid.clone(),
        );
        // The steps that change GPUs, failed, from the start: an alert on their increase then
        // sees the first failure (a series born at 1 has no increase).
        for action in ["create", "destroy"] {
            let _ = mig_steps.get_or_create(&StepLabels {
                action: action.into(),
                outcome: "failed".into(),
            });
        }
        Metrics {
            registry,
            mig_layout_valid,
            gpus,
            islands,
            reconciles,
            mig_steps,
        }
    }

    /// Records a finished round.
    pub fn record(&self, result: &Result<Report, String>) {
        let outcome = match result {
            Ok(r) => {
                self.gpus.set(r.gpus as i64);
                self.islands.set(r.islands.len() as i64);
                self.mig_layout_valid.clear();
                if let (Some(layout), Some(valid)) = (&r.mig_layout, r.mig_layout_valid) {
                    let labels = LayoutLabels {
                        layout: layout.clone(),
                    };
                    self.mig_layout_valid
                        .get_or_create(&labels)
                        .set(i64::from(valid));
                }
                for s in &r.mig_steps {
                    let outcome = match &s.outcome {
                        crate::mig::applier::Outcome::NotApplied => "not_applied",
                        crate::mig::applier::Outcome::Done => "done",
                        crate::mig::applier::Outcome::Failed(_) => "failed",
                        crate::mig::applier::Outcome::Skipped => "skipped",
                    };
                    self.mig_steps
                        .get_or_create(&StepLabels {
                            action: s.step.kind().into(),
                            outcome: outcome.into(),
                        })
                        .inc();
                }
                if r.errors.is_empty() {
                    "success"
                } else {
                    "partial"
                }
            }
            Err(_) => "error",
        };
        self.reconciles
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// `/healthz` and `/metrics` on one address (`--metrics-bind-address` equal to `--listen`).
pub fn router(metrics: Arc<Metrics>) -> Router {
    health_router().merge(metrics_router(metrics))
}

/// `/healthz`, for the kubelet's probes on the pod's address.
pub fn health_router() -> Router {
    Router::new().route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
}

/// `/metrics`, served on `--metrics-bind-address` (loopback unless exposed on purpose).
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.encode(),
                )
                    .into_response()
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::applier::{AppliedStep, Outcome, Step};

    #[test]
    fn records_rounds_and_steps() {
        let m = Metrics::new();
        let report = Report {
            gpus: 8,
            islands: vec![(0..8).collect()],
            mig_steps: vec![AppliedStep {
                step: Step::Create {
                    gpu: 0,
                    profile: "3g.40gb".into(),
                    start: 0,
                },
                outcome: Outcome::Done,
            }],
            ..Default::default()
        };
        m.record(&Ok(report));
        m.record(&Err("API down".into()));
        let text = m.encode();
        assert!(text.contains("basalt_nodeagent_gpus 8"), "{text}");
        assert!(text.contains("basalt_nodeagent_nvlink_islands 1"), "{text}");
        assert!(
            text.contains("basalt_nodeagent_reconciles_total{outcome=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("basalt_nodeagent_reconciles_total{outcome=\"error\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("basalt_nodeagent_mig_steps_total{action=\"create\",outcome=\"done\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn failed_mig_steps_are_counted_from_zero() {
        let text = Metrics::new().encode();
        for action in ["create", "destroy"] {
            let series = format!(
                "basalt_nodeagent_mig_steps_total{{action=\"{action}\",outcome=\"failed\"}} 0"
            );
            assert!(text.contains(&series), "{text}");
        }
    }

    #[test]
    fn the_mig_layout_gauge_follows_the_last_round() {
        let m = Metrics::new();
        let round = |layout: Option<&str>, valid: Option<bool>| Report {
            mig_layout: layout.map(String::from),
            mig_layout_valid: valid,
            ..Default::default()
        };
        m.record(&Ok(round(Some("all-9g"), Some(false))));
        let text = m.encode();
        assert!(
            text.contains("basalt_nodeagent_mig_layout_valid{layout=\"all-9g\"} 0"),
            "{text}"
        );
        m.record(&Ok(round(Some("all-1g.10gb"), Some(true))));
        let text = m.encode();
        assert!(
            text.contains("basalt_nodeagent_mig_layout_valid{layout=\"all-1g.10gb\"} 1"),
            "{text}"
        );
        assert!(!text.contains("all-9g"), "{text}");
        m.record(&Ok(round(None, None)));
        assert!(
            !m.encode().contains("mig_layout_valid{"),
            "a node naming no layout has none"
        );
    }
}

//! Queue status from the plan: state, deserved, allocated, dominant share, pending demand, a
//! one-line summary of each for `kubectl get queues`, PodGroups by phase, and with a usage
//! half-life the usage and the weight it adjusts (`usage.rs`); written only when it changed,
//! into the API each queue was read from. The `default` queue, implicit in the
//! engine, is made a Basalt Queue object the first cycle a job uses it and none exists.

use std::collections::{BTreeMap, HashMap};

use basalt_crds::types::{QueueState, QueueSummary, QueueUsageStatus};
use basalt_engine::Plan;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::lenient::Lenient;
use crate::scheduler::Scheduler;
use crate::view::Origin;
use crate::volcano::VolcanoQueue;
use crate::writer::classify;

/// The label on the `default` Queue the scheduler made.
pub const MADE_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "basalt-scheduler");

/// `cpu=4, nvidia.com/gpu=8`: a resource list on one line, pod slots left out (every queue
/// may use them all).
fn one_line(list: &BTreeMap<String, String>) -> String {
    (list.iter())
        .filter(|(k, _)| k.as_str() != basalt_engine::PODS_NAME)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn quantities(list: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    (list.iter())
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

/// A merge patch keeps omitted keys: resources gone since `current` are written as null.
fn with_nulls(
    desired: &BTreeMap<String, Quantity>,
    current: Option<&BTreeMap<String, Quantity>>,
) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in desired {
        out.insert(k.clone(), Value::String(v.0.clone()));
    }
    for k in current.into_iter().flat_map(|c| c.keys()) {
        out.entry(k.clone()).or_insert(Value::Null);
    }
    Value::Object(out)
}

/// The queue's usage as its status will say, from the plan (none without a half-life). A
/// record is rewritten only when the holding changes: while it stays, the written record (its
/// instant, usage and holding) says the usage at any later instant exactly, and a usage that
/// only grows or decays with time is no reason to write; a write would come back as a watch
/// event and wake another cycle, whose usage has moved again (issue 36).
fn written_usage(
    plan: &Plan,
    queue: &str,
    current: Option<&basalt_crds::QueueStatus>,
) -> Option<QueueUsageStatus> {
    let usage = plan.usage.iter().find(|u| u.queue == queue)?;
    let status = basalt_crds::convert::usage_status(usage);
    match current.and_then(|c| c.usage.as_ref()) {
        Some(old) if old.held.is_some() && old.held == status.held => Some(old.clone()),
        _ => Some(status),
    }
}

/// The usage record as a merge patch: resources and holdings gone since `old` written as null.
fn usage_patch(desired: Option<&QueueUsageStatus>, old: Option<&QueueUsageStatus>) -> Value {
    let Some(u) = desired else {
        return Value::Null;
    };
    let held = match &u.held {
        Some(held) => with_nulls(held, old.and_then(|o| o.held.as_ref())),
        None => Value::Null,
    };
    json!({
        "takenAt": u.taken_at,
        "resources": with_nulls(&u.resources, old.map(|o| &o.resources)),
        "held": held,
    })
}

impl Scheduler {
    /// Writes each planned queue's status where it changed (see the module docs).
    pub(super) async fn write_queues(&mut self, plan: &Plan) {
        // PodGroups by phase, per planned queue (by its place in the plan: no key made per
        // group).
        let place: HashMap<&str, usize> = (plan.queues.iter().enumerate())
            .map(|(i, q)| (q.name.as_str(), i))
            .collect();
        let mut counts = vec![(0, 0, 0); plan.queues.len()];
        for planned in &plan.pod_groups {
            let Some(entry) = self.view.group(&planned.name) else {
                continue;
            };
            let Some(&i) = place.get(entry.queue.as_str()) else {
                continue;
            };
            let c = &mut counts[i];
            match planned.phase {
                basalt_engine::JobPhase::Running => c.0 += 1,
                basalt_engine::JobPhase::Pending => c.1 += 1,
                basalt_engine::JobPhase::Inqueue => c.2 += 1,
                _ => {}
            }
        }
        for (q, &(running, pending, inqueue)) in plan.queues.iter().zip(&counts) {
            let Some(current) = self.view.queue(&q.name) else {
                if q.name == basalt_engine::DEFAULT_QUEUE {
                    self.make_default_queue().await;
                }
                continue;
            };
            let origin = current.origin;
            let mut desired = basalt_crds::QueueStatus {
                state: match q.state {
                    basalt_engine::QueueState::Open => QueueState::Open,
                    basalt_engine::QueueState::Closing => QueueState::Closing,
                    basalt_engine::QueueState::Closed => QueueState::Closed,
                },
                allocated: quantities(&q.allocated),
                running: Some(running),
                pending: Some(pending),
                inqueue: Some(inqueue),
                deserved: quantities(&q.deserved),
                // Two decimals: a share that moves in the fourth is no news worth a write.
                share: Some((q.share * 100.0).round() / 100.0),
                demand: quantities(&q.demand),
                summary: Some(QueueSummary {
                    deserved: one_line(&q.deserved),
                    allocated: one_line(&q.allocated),
                    pending: one_line(&q.demand),
                }),
                usage: written_usage(plan, &q.name, current.status.as_ref()),
                usage_weight: q.usage_weight.map(|w| (w * 100.0).round() / 100.0),
                usage_effect: (q.usage_effect.as_ref())
                    .map(basalt_crds::convert::usage_effect_message),
            };
            if origin == Origin::Volcano {
                // Volcano's schema has none of Basalt's additions: its server would drop them.
                desired.deserved.clear();
                desired.share = None;
                desired.demand.clear();
                desired.summary = None;
                desired.usage = None;
                desired.usage_weight = None;
                desired.usage_effect = None;
            }
            if current.status.as_ref() == Some(&desired) {
                continue;
            }
            let old = current.status.as_ref();
            let mut body = serde_json::to_value(&desired).unwrap_or(Value::Null);
            body["allocated"] = with_nulls(&desired.allocated, old.map(|s| &s.allocated));
            if origin != Origin::Volcano {
                body["deserved"] = with_nulls(&desired.deserved, old.map(|s| &s.deserved));
                body["demand"] = with_nulls(&desired.demand, old.map(|s| &s.demand));
                body["usage"] =
                    usage_patch(desired.usage.as_ref(), old.and_then(|s| s.usage.as_ref()));
                body["usageWeight"] = json!(desired.usage_weight);
                body["usageEffect"] = json!(desired.usage_effect);
            }
            let patch = Patch::Merge(json!({ "status": body }));
            let params = PatchParams::default();
            if !self.leadership.leading() {
                return;
            }
            let result = match origin {
                Origin::Basalt => Api::<Lenient<basalt_crds::Queue>>::all(self.client.clone())
                    .patch_status(&q.name, &params, &patch)
                    .await
                    .map(drop),
                Origin::Volcano => Api::<VolcanoQueue>::all(self.client.clone())
                    .patch_status(&q.name, &params, &patch)
                    .await
                    .map(drop),
                // scheduler-plugins has no queues.
                Origin::SchedulerPlugins => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(queue = %q.name, api = origin.api_version(), error = %classify(&e).1, "cannot write Queue status");
            }
        }
    }

    /// Makes the `default` queue an object (weight 1, no limits: what the implicit one is), so
    /// that `kubectl get queues` lists it and its status has a home. One that already exists
    /// (made meanwhile) is left as it is.
    async fn make_default_queue(&mut self) {
        if !self.leadership.leading() {
            return;
        }
        let queue = basalt_crds::Queue {
            metadata: ObjectMeta {
                name: Some(basalt_engine::DEFAULT_QUEUE.into()),
                labels: Some(BTreeMap::from([(MADE_BY.0.into(), MADE_BY.1.into())])),
                ..Default::default()
            },
            spec: basalt_crds::QueueSpec::default(),
            status: None,
        };
        self.limiter.acquire().await;
        let api = Api::<basalt_crds::Queue>::all(self.client.clone());
        match api.create(&PostParams::default(), &queue).await {
            Ok(_) => tracing::info!(
                queue = basalt_engine::DEFAULT_QUEUE,
                "made the default Queue"
            ),
            Err(e) => {
                let (code, message) = classify(&e);
                if code != Some(409)
                    && self
                        .reported
                        .is_news("Queue/default".into(), message.clone())
                {
                    tracing::warn!(error = %message, "cannot make the default Queue");
                }
            }
        }
    }
}

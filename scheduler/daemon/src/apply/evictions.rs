//! Evictions through the Eviction API: the plan's (preemption and reclaim) and the rollback of
//! gangs left partly bound past `--partial-gang-timeout`. A pod a disruption budget protects is
//! not asked again for a while; one already gone is not an error.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::EvictParams;
use kube::runtime::reflector::ObjectRef;
use kube::Api;

use super::{classify, member_of, pod_ref, split_key, Scheduler, GANG_ROLLBACK};
use crate::cycle::pod_key;
use crate::stores::Stores;
use crate::stranded::PartialGang;
use basalt_engine::Plan;

/// The metrics' action of a partly bound gang's rollback (the plan's evictions name theirs).
const ROLLBACK: &str = "gang_rollback";

/// How long an eviction refused by a disruption budget is not asked for again.
const REFUSED_EVICTION_HOLD: Duration = Duration::from_secs(30);

/// Pods whose eviction a disruption budget refused, and when: not asked again for
/// [`REFUSED_EVICTION_HOLD`].
#[derive(Default)]
pub(super) struct RefusedEvictions(HashMap<String, Instant>);

impl RefusedEvictions {
    /// Forgets the refusals older than the hold (before a cycle's evictions).
    fn expire(&mut self) {
        self.0.retain(|_, at| at.elapsed() < REFUSED_EVICTION_HOLD);
    }

    fn refused(&mut self, key: String) {
        self.0.insert(key, Instant::now());
    }

    fn is_refused(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

impl Scheduler {
    pub(super) async fn evict(&mut self, plan: &Plan, stores: &Stores) {
        self.refused_evictions.expire();
        for ev in &plan.evictions {
            let uid = self.uid_of(&ev.pod, stores);
            let why = format!("Preempted by {}: {}", ev.for_group, ev.reason);
            let done = ("Normal", "Preempted", why.as_str());
            // The engine's reason starts with its action; the label keeps to the two.
            let action = match ev.reason.starts_with("reclaim") {
                true => "reclaim",
                false => "preempt",
            };
            if self
                .evict_pod(&ev.pod, uid, (action, &ev.for_group), done)
                .await
            {
                tracing::info!(pod = %ev.pod, r#for = %ev.for_group, reason = %ev.reason, "evicted");
            }
        }
    }

    /// Evicts the bound members of each gang left partly bound past the timeout, so that it
    /// can start whole later (the members' controllers make them again).
    pub(super) async fn roll_back(&mut self, partial: &[PartialGang], stores: &Stores) {
        for gang in partial.iter().filter(|g| g.expired) {
            let (ns, group) = split_key(&gang.group);
            let members: Vec<(String, Option<String>)> = stores
                .pods
                .state()
                .into_iter()
                .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == ns)
                .filter(|p| member_of(p) == Some(group))
                .filter(|p| holds_a_node(p) || self.assumed.is_assumed(&pod_key(p)))
                .map(|p| (pod_key(&p), p.metadata.uid.clone()))
                .collect();
            let timeout = humantime(self.partial_gangs.timeout());
            let why = format!(
                "{} of the minimum {} members of {} stayed bound for {timeout} while the others \
                 could not be placed; evicted so that the gang can start whole",
                gang.bound, gang.min_member, gang.group
            );
            tracing::warn!(group = %gang.group, bound = gang.bound, min_member = gang.min_member, "rolling back a partly bound gang");
            let mut evicted = 0;
            for (key, uid) in members {
                if self
                    .evict_pod(
                        &key,
                        uid,
                        (ROLLBACK, &gang.group),
                        ("Warning", GANG_ROLLBACK, &why),
                    )
                    .await
                {
                    evicted += 1;
                }
            }
            if evicted > 0 {
                if let Some(g) = self.view.group(&gang.group) {
                    let reference = ObjectReference {
                        api_version: Some(g.origin.api_version().into()),
                        kind: Some("PodGroup".into()),
                        namespace: Some(ns.into()),
                        name: Some(group.into()),
                        uid: g.group.metadata.uid.clone(),
                        ..Default::default()
                    };
                    let text = format!("Evicted {evicted} bound member(s): {why}");
                    self.event(reference, "Warning", GANG_ROLLBACK, &text);
                }
            }
        }
    }

    fn uid_of(&self, key: &str, stores: &Stores) -> Option<String> {
        let (ns, name) = split_key(key);
        stores
            .pods
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|p| p.metadata.uid.clone())
    }

    /// Evicts one pod through the Eviction API for `action` (the metrics' label) and the
    /// PodGroup `for_group`; on success writes the Event `done` (type, reason, message) on it
    /// and returns true. A pod a disruption budget protects is not asked again for a while;
    /// one already gone is not an error.
    async fn evict_pod(
        &mut self,
        key: &str,
        uid: Option<String>,
        (action, for_group): (&str, &str),
        done: (&str, &str, &str),
    ) -> bool {
        if self.refused_evictions.is_refused(key) {
            return false;
        }
        if !self.leadership.leading() {
            return false;
        }
        let (ns, name) = split_key(key);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        self.limiter.acquire().await;
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => {
                self.metrics.evicted(action);
                let (type_, reason, message) = done;
                self.event(pod_ref(ns, name, uid), type_, reason, message);
                true
            }
            Err(e) => {
                let (code, msg) = classify(&e);
                if code == Some(429) {
                    self.metrics.eviction_failed(action, "disruption_budget");
                    self.refused_evictions.refused(key.to_string());
                    tracing::warn!(pod = %key, error = %msg, "eviction refused by a disruption budget");
                    let text = format!("Eviction for {for_group} refused: {msg}");
                    self.event(pod_ref(ns, name, uid), "Warning", "EvictionRefused", &text);
                } else if code != Some(404) {
                    self.metrics.eviction_failed(action, "api_error");
                    tracing::warn!(pod = %key, error = %msg, "eviction failed");
                }
                false
            }
        }
    }
}

/// Bound to a node and not finished: it holds what it asked for there.
fn holds_a_node(p: &Pod) -> bool {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// `3m0s`, `45s`, `1.5s`: a duration as people read it in Events.
fn humantime(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs / 60, secs % 60, d.subsec_millis()) {
        (0, s, 0) => format!("{s}s"),
        (0, s, ms) => format!("{s}.{ms:03}s"),
        (m, s, _) => format!("{m}m{s}s"),
    }
}

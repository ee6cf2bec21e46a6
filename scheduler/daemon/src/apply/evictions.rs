//! Evictions through the Eviction API: the plan's (preemption and reclaim) and the rollback of
//! gangs left partly bound past `--partial-gang-timeout`. A pod a disruption budget protects is
//! not asked again for a while; one already gone is not an error.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::EvictParams;
use kube::runtime::reflector::ObjectRef;
use kube::Api;

use super::GANG_ROLLBACK;
use crate::keys::pod_key;
use crate::keys::{group_key, split_key};
use crate::scheduler::{pod_ref, Scheduler};
use crate::stores::Stores;
use crate::stranded::PartialGang;
use crate::writer::classify;
use basalt_crds::convert::explicit_group;
use basalt_engine::{Eviction, Plan};

/// The metrics' action of a partly bound gang's rollback (the plan's evictions name theirs).
const ROLLBACK: &str = "gang_rollback";

impl Scheduler {
    /// Evicts the plan's victims; each says who preempted it, on which node and how (on the
    /// pod: "Preempted by ml/hotfix on node g-3 (reclaim)"), and both sides' groups are told
    /// which pods went (see [`Self::tell_groups`]).
    pub(super) async fn evict(&mut self, plan: &Plan, stores: &Stores) {
        self.refused_evictions.expire();
        let mut done: Vec<(&Eviction, Option<String>)> = Vec::new();
        for ev in &plan.evictions {
            // Its uid and group, read once and before the pod goes from the store.
            let pod = stores.pod(&ev.pod);
            let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
            let group = pod.as_deref().and_then(group_key);
            let why = format!(
                "Preempted by {} on node {} ({})",
                ev.for_group, ev.node, ev.reason
            );
            let said = ("Normal", "Preempted", why.as_str());
            // The engine's reason starts with its action; the label keeps to the two.
            let action = match ev.reason.starts_with("reclaim") {
                true => "reclaim",
                false => "preempt",
            };
            if self
                .evict_pod(&ev.pod, uid, (action, &ev.for_group), said)
                .await
            {
                tracing::info!(pod = %ev.pod, r#for = %ev.for_group, node = %ev.node, reason = %ev.reason, "evicted");
                done.push((ev, group));
            }
        }
        self.tell_groups(&done, stores);
    }

    /// One Event per preemptor naming the pods evicted for it and their nodes ("Preempting":
    /// on its PodGroup, or on the pod itself without one), and one per victim group naming
    /// its pods that went and who took their place ("Preempted").
    fn tell_groups(&self, done: &[(&Eviction, Option<String>)], stores: &Stores) {
        let mut by_preemptor: BTreeMap<&str, Vec<&Eviction>> = BTreeMap::new();
        let mut by_victim: BTreeMap<&str, Vec<&Eviction>> = BTreeMap::new();
        for (ev, group) in done {
            by_preemptor.entry(&ev.for_group).or_default().push(ev);
            if let Some(group) = group {
                by_victim.entry(group).or_default().push(ev);
            }
        }
        let listed = |evs: &[&Eviction], side: fn(&Eviction) -> &str| {
            (evs.iter())
                .map(|e| format!("{} on {}", side(e), e.node))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let how = |evs: &[&Eviction]| {
            let mut hows: Vec<&str> = evs.iter().map(|e| e.reason.as_str()).collect();
            hows.dedup();
            hows.join(", ")
        };
        for (preemptor, evs) in by_preemptor {
            let text = format!(
                "Evicting {} ({})",
                listed(&evs, |e| e.pod.as_str()),
                how(&evs)
            );
            if let Some(reference) = self.about(preemptor, stores) {
                self.event(reference, "Normal", "Preempting", &text);
            }
        }
        for (victim, evs) in by_victim {
            let mut preemptors: Vec<&str> = evs.iter().map(|e| e.for_group.as_str()).collect();
            preemptors.dedup();
            let text = format!(
                "{} preempted by {} ({})",
                listed(&evs, |e| e.pod.as_str()),
                preemptors.join(", "),
                how(&evs)
            );
            if let Some(reference) = self.about(victim, stores) {
                self.event(reference, "Normal", "Preempted", &text);
            }
        }
    }

    /// The PodGroup `key` names, or the pod of that name (a pod without a group is its own).
    fn about(&self, key: &str, stores: &Stores) -> Option<ObjectReference> {
        let (ns, name) = split_key(key);
        if let Some(g) = self.view.group(key) {
            return Some(ObjectReference {
                api_version: Some(g.origin.api_version().into()),
                kind: Some("PodGroup".into()),
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: g.group.metadata.uid.clone(),
                ..Default::default()
            });
        }
        let uid = self.uid_of(key, stores);
        uid.is_some().then(|| pod_ref(ns, name, uid))
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
                .filter(|p| explicit_group(&p.metadata) == Some(group))
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

//! What the plan says about PodGroups, written to their status (only when it changed, into the
//! API each was read from), and FailedScheduling Events on groups that cannot start and their
//! waiting pods. Queues are `queues.rs`'s.

use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use basalt_crds::PodGroup;
use basalt_engine::{Plan, PodGroupStatus as PlannedGroup};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use super::binds::{Unbound, NODE_OVER_CAPACITY, WAITING_FOR_NODE_LOCK};
use super::PARTIALLY_BOUND;
use crate::forecast;
use crate::keys::split_key;
use crate::lenient::Lenient;
use crate::scheduler::{pod_ref, Scheduler};
use crate::stranded::PartialGang;
use crate::view::Origin;
use crate::volcano::VolcanoPodGroup;
use crate::writer::classify;
use basalt_crds::convert::explicit_group;

impl Scheduler {
    pub(super) async fn write_groups(
        &mut self,
        plan: &Plan,
        unbound: &Unbound,
        partial: &[PartialGang],
    ) {
        let now = jiff::Timestamp::now().to_string();
        let forecasts = self.forecaster.as_ref().and_then(|f| f.latest());
        let mut writes = Vec::new();
        // A group whose preemption is under way is told so ("Preempting"), not that it failed.
        let preempting: std::collections::HashSet<&str> = (plan.evictions.iter())
            .map(|e| e.for_group.as_str())
            .collect();
        // The waiting members of the groups told FailedScheduling, from one walk of the pods
        // (not one per group: with thousands of waiting gangs that was 10^8 pod visits).
        let told: Vec<&str> = (plan.pod_groups.iter())
            .filter(|g| unschedulable(g).is_some() && !preempting.contains(&*g.name))
            .map(|g| &*g.name)
            .collect();
        let waiting = WaitingMembers::of(self.unbound.iter(), &told);
        (self.settled_groups).prune(plan.pod_groups.iter().map(|g| &*g.name));
        let mut compared = 0;
        for planned in &plan.pod_groups {
            let (ns, name) = split_key(&planned.name);
            // Pods without a PodGroup are planned under an implicit one with nothing to write.
            let Some((group, origin)) =
                (self.view.group(&planned.name)).map(|g| (g.group.clone(), g.origin))
            else {
                continue;
            };
            let failed = unbound.get(&*planned.name);
            let partly = (partial.iter()).find(|p| p.group == planned.name && !p.expired);
            // Its status said what the plan says, and neither moved since: nothing to compare,
            // and when quiet nothing to report (the cost of a group that did not move).
            let plain = failed.is_none() && partly.is_none();
            let preempts = preempting.contains(&*planned.name);
            match plain.then(|| self.settled_groups.holds(planned, &group, &forecasts)) {
                Some(Some(true)) => continue,
                Some(Some(false)) => {
                    if !preempts {
                        self.report_unschedulable(planned, &group, origin, &waiting);
                    }
                    continue;
                }
                _ => {}
            }
            compared += 1;
            let mut desired = desired_status(planned, group.status.as_ref(), &now);
            if let Some(why) = failed {
                not_landed(&mut desired, planned.min_member, why, &now);
            }
            if let Some(p) = partly {
                let held = group.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == PARTIALLY_BOUND && c.status == "True")
                        .and_then(|c| c.last_transition_time.clone())
                });
                desired
                    .conditions
                    .push(basalt_crds::types::PodGroupCondition {
                        type_: PARTIALLY_BOUND.into(),
                        status: "True".into(),
                        reason: Some(PARTIALLY_BOUND.into()),
                        message: Some(p.message()),
                        last_transition_time: Some(held.unwrap_or_else(|| now.clone())),
                    });
            }
            let current = group.status.clone().unwrap_or_default();
            settle_explanation(
                &mut desired,
                &current,
                planned,
                origin,
                jiff::Timestamp::now(),
            );
            // Volcano's schema has no forecast.
            if origin == Origin::Basalt {
                let waiting = matches!(
                    planned.phase,
                    basalt_engine::JobPhase::Pending | basalt_engine::JobPhase::Inqueue
                );
                desired.forecast = forecast::settled(
                    current.forecast.as_ref(),
                    forecasts.as_deref(),
                    &planned.name,
                    waiting,
                );
            }
            let settled = same_status(&desired, &current);
            // Quiet: the report below only forgets what was said of it.
            let quiet = !preempts && unschedulable(planned).is_none();
            match settled && plain {
                true => (self.settled_groups).settle(planned, &group, &forecasts, quiet),
                false => self.settled_groups.unsettle(&planned.name),
            }
            if !settled {
                let mut body = serde_json::to_value(&desired).unwrap_or(Value::Null);
                // A merge patch keeps an omitted list: write an empty one to clear conditions.
                body["conditions"] = serde_json::to_value(&desired.conditions)
                    .unwrap_or_else(|_| Value::Array(vec![]));
                // ... and omitted keys: write null to clear what no longer holds.
                for (key, gone) in [
                    ("explanation", desired.explanation.is_none()),
                    ("explainedAt", desired.explained_at.is_none()),
                    ("forecast", desired.forecast.is_none()),
                ] {
                    if gone && origin != Origin::Volcano {
                        body[key] = Value::Null;
                    }
                }
                let patch = Patch::Merge(json!({ "status": body }));
                writes.push((&*planned.name, ns, name, origin, patch));
            }
            if !preempts {
                self.report_unschedulable(planned, &group, origin, &waiting);
            }
        }
        tracing::debug!(compared, planned = plan.pod_groups.len(), "PodGroup status");
        // Written side by side, each behind the rate limit.
        let this = &*self;
        futures::stream::iter(writes)
            .for_each_concurrent(self.concurrency, |(key, ns, name, origin, patch)| async move {
                this.limiter.acquire().await;
                if !this.leadership.leading() {
                    return;
                }
                if let Err(e) = this.patch_group_status(ns, name, origin, &patch).await {
                    tracing::warn!(group = %key, api = origin.api_version(), error = %classify(&e).1, "cannot write PodGroup status");
                }
            })
            .await;
    }

    /// Patches a PodGroup's status in the object it was read from: Volcano's status
    /// subresource for a Volcano PodGroup (same fields).
    pub(crate) async fn patch_group_status(
        &self,
        ns: &str,
        name: &str,
        origin: Origin,
        patch: &Patch<Value>,
    ) -> kube::Result<()> {
        // Another scheduler's group, or one several share: not Basalt's to write.
        if !self.ownership.allows(&format!("{ns}/{name}"), origin) {
            return Ok(());
        }
        let params = PatchParams::default();
        match origin {
            // Answers read leniently: a group that does not decode is marked invalid all the same.
            Origin::Basalt => Api::<Lenient<PodGroup>>::namespaced(self.client.clone(), ns)
                .patch_status(name, &params, patch)
                .await
                .map(drop),
            Origin::Volcano => Api::<VolcanoPodGroup>::namespaced(self.client.clone(), ns)
                .patch_status(name, &params, patch)
                .await
                .map(drop),
            // scheduler-plugins' controller owns that status (its own phases and counts).
            Origin::SchedulerPlugins => Ok(()),
        }
    }

    /// FailedScheduling Events on a group that cannot start and its waiting pods, once per
    /// distinct reason.
    fn report_unschedulable(
        &mut self,
        planned: &PlannedGroup,
        group: &PodGroup,
        origin: Origin,
        waiting: &WaitingMembers,
    ) {
        let group_key = format!("PodGroup/{}", planned.name);
        let Some(cond) = unschedulable(planned) else {
            self.reported.forget(&group_key);
            return;
        };
        let message = format!("{}: {}", cond.reason, cond.message);
        let (ns, name) = split_key(&planned.name);
        let mut targets = vec![(
            group_key,
            ObjectReference {
                api_version: Some(origin.api_version().into()),
                kind: Some("PodGroup".into()),
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: group.metadata.uid.clone(),
                ..Default::default()
            },
        )];
        for (pname, uid) in waiting.of_group(&planned.name) {
            let key = format!("{ns}/{pname}");
            if self.held.contains(&key) {
                // Told why it is held instead ([`Self::report_held`]).
                continue;
            }
            let reference = pod_ref(ns, pname, uid.clone());
            targets.push((format!("Pod/{key}"), reference));
        }
        for (key, reference) in targets {
            self.event_once(key, reference, "Warning", "FailedScheduling", &message);
        }
    }
}

/// The plan's `Unschedulable` condition of a group, if it has one.
fn unschedulable(planned: &PlannedGroup) -> Option<&basalt_engine::Condition> {
    (planned.conditions.iter()).find(|c| c.kind == "Unschedulable")
}

/// The unbound pods naming each of some groups (`ns/name`): name and uid, in the store's order.
#[derive(Debug, Default, PartialEq)]
struct WaitingMembers(HashMap<String, Vec<(String, Option<String>)>>);

impl WaitingMembers {
    /// One walk of the pods without a node, and none when no group is asked for.
    fn of<'p>(unbound: impl Iterator<Item = &'p Arc<Pod>>, groups: &[&str]) -> Self {
        let mut out: HashMap<String, Vec<_>> = HashMap::new();
        if groups.is_empty() {
            return WaitingMembers(out);
        }
        for g in groups {
            out.insert((*g).to_string(), Vec::new());
        }
        for p in unbound {
            let Some(group) = explicit_group(&p.metadata) else {
                continue;
            };
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                continue;
            }
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            if let Some(members) = out.get_mut(&format!("{ns}/{group}")) {
                let name = p.metadata.name.clone().unwrap_or_default();
                members.push((name, p.metadata.uid.clone()));
            }
        }
        WaitingMembers(out)
    }

    fn of_group(&self, group: &str) -> &[(String, Option<String>)] {
        self.0.get(group).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// The status to write: the plan's phase, conditions and counts; a condition keeps its
/// `lastTransitionTime` while it holds.
/// The status counts only pods that are bound: binds of this cycle that did not land (failed,
/// waiting for HAMi's node lock, held for a node over capacity) are taken off `running`, and
/// each cause is a condition until a cycle binds the rest.
fn not_landed(
    desired: &mut basalt_crds::PodGroupStatus,
    min_member: u32,
    why: &BTreeMap<&'static str, (u32, String)>,
    now: &str,
) {
    use basalt_crds::types::{PodGroupCondition, PodGroupPhase};
    let missing: u32 = why.values().map(|(n, _)| n).sum();
    desired.running = desired.running.saturating_sub(missing as i32);
    let below = (desired.running + desired.succeeded) < min_member as i32;
    if desired.phase == PodGroupPhase::Running && below {
        desired.phase = PodGroupPhase::Inqueue;
    }
    for (kind, (n, last)) in why {
        let message = match *kind {
            WAITING_FOR_NODE_LOCK => format!(
                "{n} pod(s) wait for HAMi's node lock; tried again with backoff (last: {last})"
            ),
            NODE_OVER_CAPACITY => format!("{n} bind(s) held: {last}"),
            _ => format!("{n} bind(s) failed this cycle; retried next cycle (last: {last})"),
        };
        desired.conditions.push(PodGroupCondition {
            type_: kind.to_string(),
            status: "True".into(),
            reason: Some(kind.to_string()),
            message: Some(message),
            last_transition_time: Some(now.to_string()),
        });
    }
}

fn desired_status(
    planned: &PlannedGroup,
    current: Option<&basalt_crds::PodGroupStatus>,
    now: &str,
) -> basalt_crds::PodGroupStatus {
    use basalt_crds::types::{PodGroupCondition, PodGroupPhase};
    let phase = match planned.phase {
        basalt_engine::JobPhase::Pending => PodGroupPhase::Pending,
        basalt_engine::JobPhase::Inqueue => PodGroupPhase::Inqueue,
        basalt_engine::JobPhase::Running => PodGroupPhase::Running,
        basalt_engine::JobPhase::Unknown => PodGroupPhase::Unknown,
        basalt_engine::JobPhase::Completed => PodGroupPhase::Completed,
    };
    let conditions = planned
        .conditions
        .iter()
        .map(|c| {
            let held = current
                .and_then(|s| s.conditions.iter().find(|o| o.type_ == c.kind))
                .filter(|o| o.status == "True")
                .and_then(|o| o.last_transition_time.clone());
            PodGroupCondition {
                type_: c.kind.clone(),
                status: "True".into(),
                reason: Some(c.reason.clone()),
                message: Some(c.message.clone()),
                last_transition_time: Some(held.unwrap_or_else(|| now.to_string())),
            }
        })
        .collect();
    let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    basalt_crds::PodGroupStatus {
        phase,
        conditions,
        running: count(planned.running),
        succeeded: count(planned.succeeded),
        failed: count(planned.failed),
        ..Default::default()
    }
}

/// How often a change of the explanation alone (holders, place in line) is written: each
/// write of a long queue's explanations would otherwise follow every start ahead of them.
const EXPLAIN_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// The plan's explanation in `desired` (none for a Volcano PodGroup, whose schema would drop
/// it), unless only it changed and the current one is younger than [`EXPLAIN_EVERY`].
fn settle_explanation(
    desired: &mut basalt_crds::PodGroupStatus,
    current: &basalt_crds::PodGroupStatus,
    planned: &PlannedGroup,
    origin: Origin,
    now: jiff::Timestamp,
) {
    if origin == Origin::Volcano {
        return;
    }
    desired.explanation = (planned.explanation.as_ref()).and_then(|e| serde_json::to_value(e).ok());
    if desired.explanation == current.explanation {
        desired.explained_at = current.explained_at.clone();
        return;
    }
    let written = (current.explained_at.as_deref()).and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let recent = written.is_some_and(|at| now.duration_since(at) < EXPLAIN_EVERY);
    let mut without = desired.clone();
    without.explanation = current.explanation.clone();
    without.explained_at = current.explained_at.clone();
    if desired.explanation.is_some() && recent && same_status(&without, current) {
        *desired = without;
    } else {
        desired.explained_at = desired.explanation.as_ref().map(|_| now.to_string());
    }
}

/// Equal but for condition times.
fn same_status(a: &basalt_crds::PodGroupStatus, b: &basalt_crds::PodGroupStatus) -> bool {
    let strip = |s: &basalt_crds::PodGroupStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod waiting_tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ns: &str, name: &str, group: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                labels: Some([("scheduling.basalt.dev/pod-group".into(), group.into())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn the_waiting_members_of_the_groups_asked_for_in_one_walk() {
        let pods = [
            pod("a", "p1", "g", None),
            pod("a", "p2", "g", Some("n1")),
            pod("b", "p3", "g", None),
            pod("a", "p4", "h", None),
            pod("a", "p5", "g", None),
        ];
        let w = WaitingMembers::of(pods.iter(), &["a/g"]);
        let names: Vec<_> = w.of_group("a/g").iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["p1", "p5"], "unbound members of a/g only");
        assert_eq!(w.of_group("a/g")[0].1.as_deref(), Some("uid-p1"));
        assert!(w.of_group("a/h").is_empty(), "not asked for");
        assert_eq!(
            WaitingMembers::of(pods.iter(), &[]),
            WaitingMembers::default()
        );
    }
}

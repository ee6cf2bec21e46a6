//! What the plan says about PodGroups and Queues, written to their status (only when it
//! changed, into the API each was read from), and FailedScheduling Events on groups that cannot
//! start and their waiting pods.

use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};

use basalt_crds::PodGroup;
use basalt_engine::{Plan, PodGroupStatus as PlannedGroup};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use super::binds::{Unbound, NODE_OVER_CAPACITY, WAITING_FOR_NODE_LOCK};
use super::{classify, member_of, pod_ref, split_key, Scheduler, PARTIALLY_BOUND};
use crate::cycle::pod_key;
use crate::lenient::Lenient;
use crate::stores::Stores;
use crate::stranded::PartialGang;
use crate::view::Origin;
use crate::volcano::{VolcanoPodGroup, VolcanoQueue};

impl Scheduler {
    pub(super) async fn write_groups(
        &mut self,
        plan: &Plan,
        stores: &Stores,
        unbound: &Unbound,
        partial: &[PartialGang],
    ) {
        let now = jiff::Timestamp::now().to_string();
        let mut writes = Vec::new();
        for planned in &plan.pod_groups {
            let (ns, name) = split_key(&planned.name);
            // Pods without a PodGroup are planned under an implicit one with nothing to write.
            let Some((group, origin)) =
                (self.view.group(&planned.name)).map(|g| (g.group.clone(), g.origin))
            else {
                continue;
            };
            let mut desired = desired_status(planned, group.status.as_ref(), &now);
            if let Some(why) = unbound.get(&*planned.name) {
                not_landed(&mut desired, planned.min_member, why, &now);
            }
            if let Some(p) = partial
                .iter()
                .find(|p| p.group == planned.name && !p.expired)
            {
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
            if !same_status(&desired, &current) {
                let mut body = serde_json::to_value(&desired).unwrap_or(Value::Null);
                // A merge patch keeps an omitted list: write an empty one to clear conditions.
                body["conditions"] = serde_json::to_value(&desired.conditions)
                    .unwrap_or_else(|_| Value::Array(vec![]));
                let patch = Patch::Merge(json!({ "status": body }));
                writes.push((&*planned.name, ns, name, origin, patch));
            }
            self.report_unschedulable(planned, &group, origin, stores)
                .await;
        }
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

    /// Queue status: state, what its pods hold, and its PodGroups by phase (those with a
    /// PodGroup object; pods without one are not counted), written only when it changed.
    pub(super) async fn write_queues(&mut self, plan: &Plan) {
        use basalt_crds::types::QueueState;
        let mut counts: HashMap<String, (i32, i32, i32)> = HashMap::new();
        for planned in &plan.pod_groups {
            let Some(entry) = self.view.group(&planned.name) else {
                continue;
            };
            let queue = entry.queue.clone();
            let c = counts.entry(queue).or_default();
            match planned.phase {
                basalt_engine::JobPhase::Running => c.0 += 1,
                basalt_engine::JobPhase::Pending => c.1 += 1,
                basalt_engine::JobPhase::Inqueue => c.2 += 1,
                _ => {}
            }
        }
        for q in &plan.queues {
            let Some(current) = self.view.queue(&q.name) else {
                continue;
            };
            let (running, pending, inqueue) = counts.get(&q.name).copied().unwrap_or_default();
            let desired = basalt_crds::QueueStatus {
                state: match q.state {
                    basalt_engine::QueueState::Open => QueueState::Open,
                    basalt_engine::QueueState::Closing => QueueState::Closing,
                    basalt_engine::QueueState::Closed => QueueState::Closed,
                },
                allocated: q
                    .allocated
                    .iter()
                    .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                    .collect(),
                running: Some(running),
                pending: Some(pending),
                inqueue: Some(inqueue),
            };
            if current.status.as_ref() == Some(&desired) {
                continue;
            }
            let origin = current.origin;
            let mut body = serde_json::to_value(&desired).unwrap_or(Value::Null);
            // A merge patch keeps omitted keys: resources no longer held are written as null.
            let mut allocated = serde_json::Map::new();
            for (k, v) in &desired.allocated {
                allocated.insert(k.clone(), Value::String(v.0.clone()));
            }
            for k in current.status.iter().flat_map(|s| s.allocated.keys()) {
                allocated.entry(k.clone()).or_insert(Value::Null);
            }
            body["allocated"] = Value::Object(allocated);
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

    /// FailedScheduling Events on a group that cannot start and its waiting pods, once per
    /// distinct reason.
    async fn report_unschedulable(
        &mut self,
        planned: &PlannedGroup,
        group: &PodGroup,
        origin: Origin,
        stores: &Stores,
    ) {
        let group_key = format!("PodGroup/{}", planned.name);
        let Some(cond) = planned
            .conditions
            .iter()
            .find(|c| c.kind == "Unschedulable")
        else {
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
        for p in stores.pods.state() {
            if p.metadata.namespace.as_deref().unwrap_or("default") != ns
                || member_of(&p) != Some(name)
                || p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            {
                continue;
            }
            let key = pod_key(&p);
            if self.held.contains(&key) {
                // Told why it is held instead ([`Self::report_held`]).
                continue;
            }
            let (_, pname) = split_key(&key);
            let reference = pod_ref(ns, pname, p.metadata.uid.clone());
            targets.push((format!("Pod/{key}"), reference));
        }
        for (key, reference) in targets {
            self.event_once(key, reference, "Warning", "FailedScheduling", &message);
        }
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

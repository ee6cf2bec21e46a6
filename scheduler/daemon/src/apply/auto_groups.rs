//! Auto PodGroups: a PodGroup of one for each pending Basalt pod without a group, or its
//! owner's PodGroup when the owner asks for a gang (`scheduling.basalt.dev/min-member`), made
//! before the cycle reads the stores.

use std::sync::Arc;

use basalt_crds::convert::{POD_GROUP, SCHEDULER_PLUGINS_POD_GROUP};
use basalt_crds::workloads;
use basalt_crds::PodGroup;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::json;

use crate::keys::pod_key;
use crate::keys::split_key;
use crate::owners::{self, OwnerGroup};
use crate::scheduler::{pod_ref, Scheduler};
use crate::stores::Stores;
use crate::writer::classify;
use basalt_crds::convert::{explicit_group, QUEUE};

/// A pending pod of ours in no PodGroup yet (no Basalt, Volcano or scheduler-plugins group),
/// not being deleted: one `auto_groups` makes or finds a group for before it is scheduled.
pub fn awaits_group(p: &Pod, scheduler_names: &[String]) -> bool {
    let spec = p.spec.as_ref();
    // Most pods are bound: the cheapest test first.
    if spec.and_then(|s| s.node_name.as_deref()).is_some() {
        return false;
    }
    let ours = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .is_some_and(|n| scheduler_names.iter().any(|s| s == n));
    let pending = (p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|ph| ph == "Pending");
    let grouped = explicit_group(&p.metadata).is_some()
        || (p.metadata.labels.as_ref())
            .is_some_and(|l| l.contains_key(SCHEDULER_PLUGINS_POD_GROUP));
    ours && pending && !grouped && p.metadata.deletion_timestamp.is_none()
}

impl Scheduler {
    /// Gives every pending Basalt pod without a group a PodGroup of one, owned by the pod (so
    /// it goes with it): `<pod>-pg`, queue from the pod's `scheduling.basalt.dev/queue`
    /// annotation. The group is created first, then the pod annotated to name it.
    ///
    /// A pod whose owner (see [`owners::gang_owner`]) carries
    /// `scheduling.basalt.dev/min-member: N`, or is a workload whose spec states a gang,
    /// instead joins the owner's PodGroup `<owner>-pg` (minMember N or the spec's, per-role
    /// minimums and priority class from the spec, queue from the spec or the owner's
    /// `scheduling.basalt.dev/queue`, owned by the owner).
    ///
    /// Owners are cached by uid for `owner_ttl`: an owner deleted and made again under the same
    /// name is another uid, so it is read afresh; one whose annotations change is read again
    /// once its entry expires, and its PodGroup, while not all of it runs, follows the new
    /// min-member and queue ([`Self::follow_owners`]).
    pub async fn auto_groups(&mut self, stores: &Stores) {
        self.grouping.start();
        self.owners.expire();
        self.follow_owners(stores).await;
        // Only pods without a node can await a group: the kept few, not every pod.
        let awaiting: Vec<Arc<Pod>> = (self.unbound.iter())
            .filter(|p| awaits_group(p, &self.config.scheduler_names))
            .cloned()
            .collect();
        for p in awaiting {
            let key = pod_key(&p);
            let (ns, name) = split_key(&key);
            if self.grouping.in_flight(&key) {
                continue;
            }
            let owner_ref = owners::gang_owner(&p.metadata);
            let lws = workloads::lws_gang(&p.metadata);
            let decision = match (lws, owner_ref) {
                // A LeaderWorkerSet group: its pods say its size; the group goes with the
                // first member's controller.
                (Some(Ok((group, gang))), Some(r)) => OwnerGroup::Gang {
                    group,
                    gang,
                    owner: (r.api_version, r.kind, r.name, r.uid),
                },
                (Some(Err(e)), _) => OwnerGroup::Invalid(format!("pod {key}: {e}")),
                (_, None) => OwnerGroup::None,
                (_, Some(r)) => {
                    let mut decision = self.owner_decision(ns, &r).await;
                    // A JobSet's earlier stage: a gang of its own child Job.
                    if let Ok(OwnerGroup::Gang { gang, .. }) = &decision {
                        if workloads::runs_before_its_jobset(&p.metadata, gang) {
                            decision = match owners::controller(&p.metadata) {
                                Some(job) => self.owner_decision(ns, &job).await,
                                None => Ok(OwnerGroup::None),
                            };
                        }
                    }
                    match decision {
                        Ok(d) => d,
                        Err(e) => {
                            tracing::warn!(pod = %key, error = %e, "cannot read the pod's owner; retried next cycle");
                            self.grouping.hold(key);
                            continue;
                        }
                    }
                }
            };
            // A workload whose spec makes no sense: a gang of the pods it has.
            let decision = match decision {
                OwnerGroup::Unreadable {
                    reason,
                    group,
                    owner,
                } => {
                    let members = (stores.pods.state().iter())
                        .filter(|o| {
                            owners::gang_owner(&o.metadata)
                                .is_some_and(|r| r.name == owner.2 && r.kind == owner.1)
                        })
                        .filter(|o| o.metadata.namespace == p.metadata.namespace)
                        .count()
                        .max(1) as u32;
                    let msg = format!("{reason}; scheduled as a gang of the {members} pods it has");
                    tracing::warn!(pod = %key, reason = %reason, members, "owner's spec gives no gang size");
                    let pod = pod_ref(ns, name, p.metadata.uid.clone());
                    self.event(pod, "Warning", "OwnerSpecInvalid", &msg);
                    OwnerGroup::Gang {
                        group,
                        gang: workloads::WorkloadGang {
                            min_member: members,
                            ..Default::default()
                        },
                        owner,
                    }
                }
                other => other,
            };
            let pod_queue = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(QUEUE))
                .cloned();
            let pod_uid = p.metadata.uid.clone().unwrap_or_default();
            // The uid the group's ownerReference must name, and what an owner's group should say.
            let (expected_owner, wanted) = match &decision {
                OwnerGroup::Gang { gang, owner, .. } => {
                    (owner.3.clone(), Some((gang.min_member, gang.queue.clone())))
                }
                _ => (pod_uid.clone(), None),
            };
            let mut placement_warnings = Vec::new();
            let (group_name, group) = match decision {
                OwnerGroup::Gang {
                    group,
                    gang,
                    owner: (api_version, kind, owner_name, uid),
                } => {
                    let placement = gang.placement(&self.config.topology.tiers);
                    placement_warnings = placement.warnings;
                    let mut body = json!({
                        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": group, "namespace": ns,
                            "labels": {"scheduling.basalt.dev/auto": "true"},
                            "ownerReferences": [{"apiVersion": api_version, "kind": kind,
                                "name": owner_name, "uid": uid, "controller": true}]},
                        "spec": {"minMember": gang.min_member, "queue": gang.queue.or(pod_queue)},
                    });
                    if !gang.roles.is_empty() {
                        body["spec"]["minTaskMember"] = json!(gang.roles);
                    }
                    if let Some(class) = gang.priority_class {
                        body["spec"]["priorityClassName"] = json!(class);
                    }
                    if !placement.topology.is_empty() {
                        body["spec"]["topology"] = json!(placement.topology);
                    }
                    if !placement.sub_groups.is_empty() {
                        body["spec"]["subGroups"] = json!(placement.sub_groups);
                    }
                    // Held out of the snapshot from now until the group and the pod's
                    // annotation are both watched.
                    self.grouping.join(key.clone(), format!("{ns}/{group}"));
                    (group, body)
                }
                other => {
                    if let OwnerGroup::Invalid(reason) = other {
                        tracing::warn!(pod = %key, reason = %reason, "owner gives no PodGroup; a group of one instead");
                        let msg = format!("{reason}; scheduled as a PodGroup of one");
                        self.event(
                            pod_ref(ns, name, p.metadata.uid.clone()),
                            "Warning",
                            "OwnerGroupInvalid",
                            &msg,
                        );
                    }
                    let group_name = format!("{name}-pg");
                    if group_name.len() > 253 {
                        continue;
                    }
                    let body = json!({
                        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": group_name, "namespace": ns,
                            "labels": {"scheduling.basalt.dev/auto": "true"},
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                "uid": p.metadata.uid.clone().unwrap_or_default(), "controller": true}]},
                        "spec": {"minMember": 1, "queue": pod_queue},
                    });
                    (group_name, body)
                }
            };
            let gang = self.grouping.is_joining(&key);
            // A failure below leaves the pod for the next cycle, held if it is a gang member
            // (`Grouping::give_up`); a group made before and no longer right to join waits
            // for the next cycle (`Grouping::retry`).
            let group: PodGroup = match serde_json::from_value(group) {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(pod = %key, error = %e, "cannot build an auto PodGroup");
                    self.grouping.give_up(key);
                    continue;
                }
            };
            if !self.leadership.leading() {
                return;
            }
            let groups: Api<PodGroup> = Api::namespaced(self.client.clone(), ns);
            match groups.create(&PostParams::default(), &group).await {
                Ok(_) => {
                    // Said once, by the member that made the group.
                    for (field, message) in placement_warnings {
                        let msg = format!("PodGroup {ns}/{group_name}: {field}: {message}");
                        tracing::warn!(pod = %key, "{msg}");
                        let pod = pod_ref(ns, name, p.metadata.uid.clone());
                        self.event(pod, "Warning", "TopologyNotATier", &msg);
                    }
                }
                // Made before: by another member of the same owner, an earlier cycle, or for an
                // owner (or pod) of the same name that was deleted since.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let existing = match stores
                        .pod_groups
                        .get(&ObjectRef::new(&group_name).within(ns))
                        .and_then(|g| g.decoded.clone().ok())
                    {
                        Some(g) => Some(g),
                        None => groups
                            .get_opt(&group_name)
                            .await
                            .ok()
                            .flatten()
                            .map(Arc::new),
                    };
                    let Some(existing) = existing else {
                        // Deleted meanwhile: made again next cycle.
                        self.grouping.retry(key);
                        continue;
                    };
                    if self
                        .stale_auto_group(&existing, &expected_owner, stores)
                        .await
                    {
                        self.grouping.retry(key);
                        continue;
                    }
                    if let Some((min_member, queue)) = wanted {
                        self.follow_owner(&existing, min_member, queue).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(pod = %key, error = %classify(&e).1, "cannot create an auto PodGroup");
                    self.grouping.give_up(key);
                    continue;
                }
            }
            if !self.leadership.leading() {
                return;
            }
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let patch = json!({"metadata": {"annotations": {POD_GROUP: group_name}}});
            match pods
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(pod = %key, group = %group_name, "auto PodGroup");
                    if !gang {
                        self.grouping.made_auto_group(key, group_name);
                    }
                }
                Err(e) => {
                    tracing::warn!(pod = %key, error = %classify(&e).1, "cannot name the auto PodGroup on the pod");
                    self.grouping.give_up(key);
                }
            }
        }
    }

    /// What the owner says, from the cache while its entry is fresh, else read through the API.
    async fn owner_decision(
        &mut self,
        ns: &str,
        r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Result<OwnerGroup, String> {
        self.owners.decision(&self.client, ns, r).await
    }

    /// Owner PodGroups not all of whose members run follow their owner: once the owner's
    /// cache entry has expired it is read again, and a changed min-member or queue is written
    /// to the group (so lowering min-member on a waiting Job lets its gang start).
    async fn follow_owners(&mut self, stores: &Stores) {
        use basalt_crds::types::PodGroupPhase;
        for g in stores.pod_groups.state() {
            let Ok(g) = &g.decoded else { continue };
            if !owners::is_auto(&g.metadata) || g.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(r) = owners::controller(&g.metadata) else {
                continue;
            };
            if r.kind == "Pod" && r.api_version == "v1" {
                continue;
            }
            let phase = g.status.as_ref().map(|s| s.phase).unwrap_or_default();
            if matches!(phase, PodGroupPhase::Running | PodGroupPhase::Completed) {
                continue;
            }
            let ns = g
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let decision = match self.owner_decision(&ns, &r).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read a PodGroup's owner; read again next cycle");
                    continue;
                }
            };
            if let OwnerGroup::Gang { group, gang, .. } = decision {
                if g.metadata.name.as_deref() == Some(group.as_str()) {
                    self.follow_owner(g, gang.min_member, gang.queue).await;
                }
            }
        }
    }

    /// Writes the owner's min-member (and queue, when the owner names one) to its PodGroup
    /// when they differ.
    async fn follow_owner(&self, g: &PodGroup, min_member: u32, queue: Option<String>) {
        let min = i32::try_from(min_member).unwrap_or(i32::MAX);
        let queue = queue.filter(|q| g.spec.queue.as_ref() != Some(q));
        if g.spec.min_member == min && queue.is_none() {
            return;
        }
        let ns = g.metadata.namespace.as_deref().unwrap_or("default");
        let name = g.metadata.name.as_deref().unwrap_or("");
        let mut spec = json!({ "minMember": min });
        if let Some(q) = &queue {
            spec["queue"] = json!(q);
        }
        if !self.leadership.leading() {
            return;
        }
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), ns);
        match api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(group = %format!("{ns}/{name}"), min_member = min, queue = ?queue, "PodGroup follows its owner's annotations")
            }
            Err(e) => {
                tracing::warn!(group = %format!("{ns}/{name}"), error = %classify(&e).1, "cannot update a PodGroup to its owner's annotations")
            }
        }
    }

    /// An auto PodGroup left by an earlier owner (or pod) of the same name, which the garbage
    /// collector has not removed yet: deleted here (only that object: its uid is a
    /// precondition), so the new owner gets a group of its own. True when the group must not
    /// be joined (this cycle). A group whose owner still exists is another object's that
    /// happens to have the name: joined, as before.
    async fn stale_auto_group(&self, g: &PodGroup, expected_owner: &str, stores: &Stores) -> bool {
        let Some(owner) = owners::controller(&g.metadata) else {
            return false;
        };
        if owner.uid == expected_owner || !owners::is_auto(&g.metadata) {
            return false;
        }
        if g.metadata.deletion_timestamp.is_some() {
            return true;
        }
        let ns = g.metadata.namespace.as_deref().unwrap_or("default");
        let name = g.metadata.name.as_deref().unwrap_or("");
        let alive = if owner.kind == "Pod" && owner.api_version == "v1" {
            Ok(stores
                .pods
                .get(&ObjectRef::new(&owner.name).within(ns))
                .is_some_and(|p| p.metadata.uid.as_deref() == Some(owner.uid.as_str())))
        } else {
            owners::alive(&self.client, ns, &owner).await
        };
        match alive {
            Ok(true) => return false,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(group = %format!("{ns}/{name}"), error = %e, "cannot tell whether an auto PodGroup's owner still exists; retried next cycle");
                return true;
            }
        }
        if !self.leadership.leading() {
            return true;
        }
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), ns);
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: g.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::info!(group = %format!("{ns}/{name}"), previous_owner = %format!("{} {} ({})", owner.kind, owner.name, owner.uid), "deleted an auto PodGroup left by an owner that is gone")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(group = %format!("{ns}/{name}"), error = %classify(&e).1, "cannot delete an auto PodGroup left by an owner that is gone")
            }
        }
        true
    }
}

//! Claims before binds, as kube-scheduler's VolumeBinding PreBind: a pod's unbound claims whose
//! StorageClass waits for the first consumer are settled for the pod's node before the pod is
//! bound: the smallest available static volume that fits there is reserved for the claim
//! (`spec.claimRef`, `volumes.rs`; the PV controller binds no such claim by itself), else the
//! claim gets `volume.kubernetes.io/selected-node` so the provisioner makes the volume there. A
//! pod whose claim cannot be settled is not bound this cycle, and neither is the rest of its gang
//! in this plan (never a pod bound whose claim points elsewhere, never a gang bound in part for
//! it).
//!
//! Unlike kube-scheduler, Basalt does not wait for the PV controller to bind the claim before
//! binding the pod: the kubelet waits for the volume.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::json;

use super::volumes;
use super::{BindJob, BindResult};
use crate::keys::{group_key, split_key};
use crate::scheduler::{pod_ref, Scheduler};
use crate::stores::Stores;
use crate::writer::classify;

/// The annotation the scheduler sets on a claim to have it provisioned for a node.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The class of a claim written before `spec.storageClassName` existed (still honoured).
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
/// kube-scheduler's mark on a volume it reserved for a claim.
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// What a claim needs before its pod binds to `node`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selection {
    pub namespace: String,
    pub claim: String,
    pub node: String,
    /// A static volume that fits it there, to reserve (`spec.claimRef`); none: the claim is
    /// annotated with the node, for the provisioner.
    pub volume: Option<Reservation>,
}

/// A static PersistentVolume reserved for a claim, written with the version it was read at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reservation {
    pub volume: String,
    pub resource_version: String,
    pub claim_uid: String,
}

/// Where claims, classes and nodes are read from: the stores, a map in tests.
pub trait Volumes {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
    fn node_labels(&self, name: &str) -> BTreeMap<String, String>;
}

impl Volumes for Stores {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.storage_classes.get(&ObjectRef::new(name))
    }

    fn node_labels(&self, name: &str) -> BTreeMap<String, String> {
        (self.nodes.get(&ObjectRef::new(name)))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }
}

/// What this cycle has decided so far: per waiting claim, its node, the pod that decided it and
/// what it needs written (shared by every pod of the cycle using the claim, so each of them
/// waits for that write); and the static volumes reserved.
#[derive(Default)]
pub struct Decided {
    claims: HashMap<(String, String), (String, String, Option<Selection>)>,
    reserved: HashSet<String>,
}

/// What `pod`'s claims need before it binds to `node`: its unbound claims of a
/// `WaitForFirstConsumer` class get the smallest available static volume that fits them there,
/// else the node annotation (unless they say that node already); a claim with a volume reserved
/// for it (`claimRef`) needs nothing, the PV controller binds it. Err says why the pod may not
/// bind now: a claim is missing or being deleted, an ephemeral volume's claim is another's, a
/// claim's reserved volume does not admit the node, or another pod of this cycle wants the claim
/// on another node. Decisions are added to `decided` only when the pod may bind.
pub fn selections(
    pod: &Pod,
    node: &str,
    volumes: &impl Volumes,
    static_volumes: &[Arc<PersistentVolume>],
    decided: &mut Decided,
) -> Result<Vec<Selection>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let pod_key = format!("{ns}/{pod_name}");
    let labels = volumes.node_labels(node);
    let at = volumes::Node {
        name: node,
        labels: &labels,
    };
    let mut out = Vec::new();
    let mut decisions = Vec::new();
    let mut reserved = HashSet::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let (name, ephemeral) = match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => (c.claim_name.clone(), false),
            // The ephemeral volume controller names the claim `<pod>-<volume>`.
            (None, Some(_)) => (format!("{pod_name}-{}", v.name), true),
            (None, None) => continue,
        };
        let Some(claim) = volumes.claim(ns, &name) else {
            return Err(format!(
                "persistentvolumeclaim \"{name}\" not found (volume {})",
                v.name
            ));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
        }
        if ephemeral && !owned_by(&claim, pod) {
            return Err(format!(
                "persistentvolumeclaim \"{name}\" was not created for pod {pod_key} (pod is not owner)"
            ));
        }
        let spec = claim.spec.as_ref();
        if spec
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
        {
            continue;
        }
        let class = spec
            .and_then(|s| s.storage_class_name.clone())
            .or_else(|| annotation(&claim, BETA_STORAGE_CLASS).map(str::to_string))
            .unwrap_or_default();
        let waits = !class.is_empty()
            && volumes
                .class(&class)
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER));
        if !waits {
            continue;
        }
        let key = (ns.to_string(), name.clone());
        if decisions.iter().any(|(k, _)| *k == key) {
            // Two volumes of the pod on one claim.
            continue;
        }
        if let Some((other_node, other, write)) = decided.claims.get(&key) {
            if other_node != node {
                return Err(format!(
                    "persistentvolumeclaim \"{name}\" is selected for node {other_node} by pod {other} in this cycle"
                ));
            }
            out.extend(write.clone());
            continue;
        }
        let write = if let Some(v) = volumes::prebound(&claim, static_volumes) {
            let volume = v.metadata.name.as_deref().unwrap_or("");
            if !volumes::admits(v, &at) {
                return Err(format!(
                    "persistentvolume \"{volume}\" reserved for persistentvolumeclaim \"{name}\" does not admit node {node}"
                ));
            }
            None
        } else {
            let taken: HashSet<String> = decided.reserved.union(&reserved).cloned().collect();
            let fit = volumes::best_fit(&claim, &class, &at, static_volumes, &taken);
            let reservation = fit.map(|v| Reservation {
                volume: v.metadata.name.clone().unwrap_or_default(),
                resource_version: v.metadata.resource_version.clone().unwrap_or_default(),
                claim_uid: claim.metadata.uid.clone().unwrap_or_default(),
            });
            reserved.extend(reservation.iter().map(|r| r.volume.clone()));
            let annotated = annotation(&claim, SELECTED_NODE) == Some(node);
            (reservation.is_some() || !annotated).then(|| Selection {
                namespace: ns.to_string(),
                claim: name.clone(),
                node: node.to_string(),
                volume: reservation,
            })
        };
        out.extend(write.clone());
        decisions.push((key, write));
    }
    for (key, write) in decisions {
        (decided.claims).insert(key, (node.to_string(), pod_key.clone(), write));
    }
    decided.reserved.extend(reserved);
    Ok(out)
}

fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// An ephemeral volume's claim belongs to its pod: its controller is that pod (by uid).
fn owned_by(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    claim.metadata.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true) && r.kind == "Pod" && Some(&r.uid) == pod.metadata.uid.as_ref()
    })
}

impl Scheduler {
    /// Points the claims of the plan's pods at their nodes; returns the jobs to bind and those
    /// refused this cycle with why. A refused pod's whole gang waits with it; the pod whose
    /// claim failed gets a FailedScheduling Event.
    pub(super) async fn select_claims(
        &mut self,
        jobs: Vec<BindJob>,
        stores: &Stores,
    ) -> (Vec<BindJob>, Vec<(BindJob, BindResult)>) {
        if jobs.is_empty() {
            return (jobs, Vec::new());
        }
        let mut refused: HashMap<String, BindResult> = HashMap::new();
        let mut wanted: Vec<(String, Vec<Selection>)> = Vec::new();
        let mut decided = Decided::default();
        let static_volumes = stores.volumes.state();
        for job in &jobs {
            let Some(pod) = &job.pod else {
                continue;
            };
            match selections(pod, &job.node, stores, &static_volumes, &mut decided) {
                Ok(list) if !list.is_empty() => wanted.push((job.key.clone(), list)),
                Ok(_) => {}
                Err(m) => {
                    refused.insert(job.key.clone(), BindResult::Failed(m));
                }
            }
        }
        // Claims of a gang that does not bind now are left as they are.
        let mut withheld = gangs_of(refused.keys(), stores);
        let patches: HashSet<Selection> = wanted
            .iter()
            .filter(|(key, _)| !refused.contains_key(key) && !withheld.contains(&gang(key, stores)))
            .flat_map(|(_, list)| list.iter().cloned())
            .collect();
        let client = self.client.clone();
        let leadership = self.leadership.clone();
        let answers: HashMap<Selection, Result<(), BindResult>> = futures::stream::iter(patches)
            .map(|s| {
                let (client, leadership) = (client.clone(), leadership.clone());
                async move {
                    if !leadership.leading() {
                        let why = crate::leader::Fenced::NotLeader.to_string();
                        return (s, Err(BindResult::Failed(why)));
                    }
                    let answer = settle(&client, &s).await;
                    (s, answer)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for (key, list) in &wanted {
            for s in list {
                match answers.get(s) {
                    Some(Ok(())) => match &s.volume {
                        None => {
                            tracing::info!(pod = %key, claim = %format!("{}/{}", s.namespace, s.claim), node = %s.node, "claim selected for the pod's node")
                        }
                        Some(r) => {
                            tracing::info!(pod = %key, claim = %format!("{}/{}", s.namespace, s.claim), volume = %r.volume, node = %s.node, "static volume reserved for the claim")
                        }
                    },
                    Some(Err(e)) => {
                        let what = match &s.volume {
                            None => format!(
                                "cannot select node {} on persistentvolumeclaim \"{}\"",
                                s.node, s.claim
                            ),
                            Some(r) => format!(
                                "cannot reserve persistentvolume \"{}\" for persistentvolumeclaim \"{}\"",
                                r.volume, s.claim
                            ),
                        };
                        let why = match e {
                            BindResult::Retry(m) => BindResult::Retry(format!("{what}: {m}")),
                            other => BindResult::Failed(format!("{what}: {}", other.message())),
                        };
                        refused.entry(key.clone()).or_insert(why);
                    }
                    None => {}
                }
            }
        }
        let mut told: Vec<_> = refused.iter().collect();
        told.sort_by(|a, b| a.0.cmp(b.0));
        for (key, why) in told {
            let (ns, name) = split_key(key);
            let uid = jobs
                .iter()
                .find(|j| j.key == *key)
                .and_then(|j| j.uid.clone());
            self.event_once(
                // Its own key: the group's FailedScheduling on the pod is another story.
                format!("PodClaims/{key}"),
                pod_ref(ns, name, uid),
                "Warning",
                "FailedScheduling",
                why.message(),
            );
        }
        withheld.extend(gangs_of(refused.keys(), stores));
        let mut ready = Vec::new();
        let mut out = Vec::new();
        for job in jobs {
            if let Some(why) = refused.remove(&job.key) {
                out.push((job, why));
            } else if withheld.contains(&gang(&job.key, stores)) {
                let why = BindResult::Failed(
                    "not bound: a member of its gang cannot bind this cycle (its claim)".into(),
                );
                out.push((job, why));
            } else {
                ready.push(job);
            }
        }
        (ready, out)
    }
}

/// Writes what the claim needs; a 5xx, 429 or transport error is retried with backoff.
async fn settle(client: &kube::Client, s: &Selection) -> Result<(), BindResult> {
    let params = PatchParams::default();
    let answer = match &s.volume {
        None => {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &s.namespace);
            let body = json!({"metadata": {"annotations": {SELECTED_NODE: s.node}}});
            api.patch(&s.claim, &params, &Patch::Merge(&body))
                .await
                .map(drop)
        }
        // As kube-scheduler: the claim named on the volume, marked as the controller's
        // binding; the version read makes a volume taken meanwhile a 409.
        Some(r) => {
            let api: Api<PersistentVolume> = Api::all(client.clone());
            let body = json!({
                "metadata": {"resourceVersion": r.resource_version,
                    "annotations": {BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "namespace": s.namespace, "name": s.claim, "uid": r.claim_uid}},
            });
            api.patch(&r.volume, &params, &Patch::Merge(&body))
                .await
                .map(drop)
        }
    };
    answer.map_err(|e| match classify(&e) {
        (Some(code), m) if code >= 500 || code == 429 => BindResult::Retry(m),
        (None, m) => BindResult::Retry(m),
        (Some(_), m) => BindResult::Failed(m),
    })
}

/// The gangs (`ns/group`, or the pod key for a pod without one) of these pods.
fn gangs_of<'a>(keys: impl Iterator<Item = &'a String>, stores: &Stores) -> HashSet<String> {
    keys.map(|k| gang(k, stores)).collect()
}

/// A pod's gang: `ns/group` when it names a PodGroup, else the pod key itself.
fn gang(key: &str, stores: &Stores) -> String {
    (stores.pod(key).as_deref().and_then(group_key)).unwrap_or_else(|| key.to_string())
}

#[cfg(test)]
mod tests;

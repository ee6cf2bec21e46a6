//! Claims before binds, as kube-scheduler's VolumeBinding PreBind: a pod's unbound claims whose
//! StorageClass waits for the first consumer get `volume.kubernetes.io/selected-node` set to the
//! pod's node before the pod is bound, so the provisioner makes the volume where the pod runs. A
//! pod whose claim cannot be pointed at its node is not bound this cycle, and neither is the rest
//! of its gang in this plan (never a pod bound whose claim points elsewhere, never a gang bound in
//! part for it).
//!
//! Unlike kube-scheduler, Basalt does not wait for the PV controller to bind the claim before
//! binding the pod: the kubelet waits for the volume. Static PersistentVolumes of a
//! `WaitForFirstConsumer` class are not reserved here (`spec.claimRef` is not set): the PV
//! controller binds the annotated claim to one that fits, or the provisioner makes one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::json;

use super::{classify, member_of, pod_ref, split_key, BindJob, BindResult, Scheduler};
use crate::stores::Stores;

/// The annotation the scheduler sets on a claim to have it provisioned for a node.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The class of a claim written before `spec.storageClassName` existed (still honoured).
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// A claim to point at the node its pod binds to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selection {
    pub namespace: String,
    pub claim: String,
    pub node: String,
}

/// Where claims and classes are read from: the stores, a map in tests.
pub trait Volumes {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

impl Volumes for Stores {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.storage_classes.get(&ObjectRef::new(name))
    }
}

/// The claims to point at `node` before `pod` binds there: its unbound claims of a
/// `WaitForFirstConsumer` class not already selected for `node`. Err says why the pod may not
/// bind now: a claim is missing or being deleted, or an ephemeral volume's claim is another's.
pub fn selections(pod: &Pod, node: &str, volumes: &impl Volumes) -> Result<Vec<Selection>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let mut out = Vec::new();
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
                "persistentvolumeclaim \"{name}\" was not created for pod {ns}/{pod_name} (pod is not owner)"
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
        if waits && annotation(&claim, SELECTED_NODE) != Some(node) {
            out.push(Selection {
                namespace: ns.to_string(),
                claim: name,
                node: node.to_string(),
            });
        }
    }
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
        let mut refused: HashMap<String, BindResult> = HashMap::new();
        let mut wanted: Vec<(String, Vec<Selection>)> = Vec::new();
        // The node each claim is selected for this cycle, and by which pod.
        let mut chosen: HashMap<(String, String), (String, String)> = HashMap::new();
        for job in &jobs {
            let (ns, name) = split_key(&job.key);
            let Some(pod) = stores.pods.get(&ObjectRef::new(name).within(ns)) else {
                continue;
            };
            let found = selections(&pod, &job.node, stores).and_then(|list| {
                for s in &list {
                    let at = (s.namespace.clone(), s.claim.clone());
                    match chosen.get(&at) {
                        Some((node, other)) if *node != s.node => {
                            return Err(format!(
                                "persistentvolumeclaim \"{}\" is selected for node {node} by pod {other} in this cycle",
                                s.claim
                            ))
                        }
                        _ => {
                            chosen.insert(at, (s.node.clone(), job.key.clone()));
                        }
                    }
                }
                Ok(list)
            });
            match found {
                Ok(list) if !list.is_empty() => wanted.push((job.key.clone(), list)),
                Ok(_) => {}
                Err(m) => {
                    refused.insert(job.key.clone(), BindResult::Failed(m));
                }
            }
        }
        // Claims of a gang that does not bind now are left as they are.
        let mut withheld = self.gangs_of(refused.keys(), stores);
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
                        let why = "not sent: this replica is not the leader".to_string();
                        return (s, Err(BindResult::Failed(why)));
                    }
                    let api: Api<PersistentVolumeClaim> = Api::namespaced(client, &s.namespace);
                    let body = json!({"metadata": {"annotations": {SELECTED_NODE: s.node}}});
                    let answer = api
                        .patch(&s.claim, &PatchParams::default(), &Patch::Merge(&body))
                        .await;
                    let answer = answer.map(drop).map_err(|e| match classify(&e) {
                        (Some(code), m) if code >= 500 || code == 429 => BindResult::Retry(m),
                        (None, m) => BindResult::Retry(m),
                        (Some(_), m) => BindResult::Failed(m),
                    });
                    (s, answer)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for (key, list) in &wanted {
            for s in list {
                match answers.get(s) {
                    Some(Ok(())) => {
                        tracing::info!(pod = %key, claim = %format!("{}/{}", s.namespace, s.claim), node = %s.node, "claim selected for the pod's node");
                    }
                    Some(Err(e)) => {
                        let why = match e {
                            BindResult::Retry(m) => BindResult::Retry(format!(
                                "cannot select node {} on persistentvolumeclaim \"{}\": {m}",
                                s.node, s.claim
                            )),
                            other => BindResult::Failed(format!(
                                "cannot select node {} on persistentvolumeclaim \"{}\": {}",
                                s.node,
                                s.claim,
                                other.message()
                            )),
                        };
                        refused.entry(key.clone()).or_insert(why);
                    }
                    None => {}
                }
            }
        }
        for (key, why) in &refused {
            let (ns, name) = split_key(key);
            let uid = jobs
                .iter()
                .find(|j| j.key == *key)
                .and_then(|j| j.uid.clone());
            self.event_once(
                format!("Pod/{key}"),
                pod_ref(ns, name, uid),
                "Warning",
                "FailedScheduling",
                why.message(),
            )
            .await;
        }
        withheld.extend(self.gangs_of(refused.keys(), stores));
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

    /// The gangs (`ns/group`, or the pod key for a pod without one) of these pods.
    fn gangs_of<'a>(
        &self,
        keys: impl Iterator<Item = &'a String>,
        stores: &Stores,
    ) -> HashSet<String> {
        keys.map(|k| gang(k, stores)).collect()
    }
}

/// A pod's gang: `ns/group` when it names a PodGroup, else the pod key itself.
fn gang(key: &str, stores: &Stores) -> String {
    let (ns, name) = split_key(key);
    stores
        .pods
        .get(&ObjectRef::new(name).within(ns))
        .and_then(|p| member_of(&p).map(|g| format!("{ns}/{g}")))
        .unwrap_or_else(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[derive(Default)]
    struct Map {
        claims: HashMap<(String, String), Arc<PersistentVolumeClaim>>,
        classes: HashMap<String, Arc<StorageClass>>,
    }

    impl Volumes for Map {
        fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
        }
        fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.classes.get(name).cloned()
        }
    }

    impl Map {
        fn claim_of(mut self, v: Value) -> Self {
            let c: PersistentVolumeClaim = serde_json::from_value(v).unwrap();
            let key = (
                c.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                c.metadata.name.clone().unwrap(),
            );
            self.claims.insert(key, Arc::new(c));
            self
        }
        fn class_of(mut self, name: &str, mode: &str) -> Self {
            let c: StorageClass = serde_json::from_value(json!({"metadata": {"name": name},
                "provisioner": "example.com/p", "volumeBindingMode": mode}))
            .unwrap();
            self.classes.insert(name.into(), Arc::new(c));
            self
        }
    }

    fn claim(name: &str, class: &str, extra: Value) -> Value {
        let mut c = json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": class}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                if k == "spec" {
                    for (sk, sv) in v.as_object().unwrap() {
                        c["spec"]
                            .as_object_mut()
                            .unwrap()
                            .insert(sk.clone(), sv.clone());
                    }
                } else {
                    c["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .insert(k.clone(), v.clone());
                }
            }
        }
        c
    }

    fn pod(volumes: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
            "spec": {"containers": [{"name": "main"}], "volumes": volumes}}),
        )
        .unwrap()
    }

    fn on(claim: &str) -> Value {
        json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
    }

    fn selected(claims: &[&str]) -> Vec<Selection> {
        claims
            .iter()
            .map(|c| Selection {
                namespace: "default".into(),
                claim: c.to_string(),
                node: "n1".into(),
            })
            .collect()
    }

    #[test]
    fn only_unbound_claims_of_a_waiting_class_not_yet_on_the_node_are_selected() {
        let map = Map::default()
            .class_of("wfc", "WaitForFirstConsumer")
            .class_of("now", "Immediate")
            .claim_of(claim("a", "wfc", json!({})))
            .claim_of(claim(
                "bound",
                "wfc",
                json!({"spec": {"volumeName": "pv-1"}}),
            ))
            .claim_of(claim("immediate", "now", json!({})))
            .claim_of(claim(
                "there",
                "wfc",
                json!({"annotations": {SELECTED_NODE: "n1"}}),
            ))
            .claim_of(claim(
                "elsewhere",
                "wfc",
                json!({"annotations": {SELECTED_NODE: "n2"}}),
            ))
            .claim_of(claim("no-class", "", json!({})))
            .claim_of(claim("unknown-class", "gone", json!({})));
        let p = pod(
            json!([on("a"), on("bound"), on("immediate"), on("there"), on("elsewhere"),
            on("no-class"), on("unknown-class"), {"name": "scratch", "emptyDir": {}}]),
        );
        assert_eq!(
            selections(&p, "n1", &map).unwrap(),
            selected(&["a", "elsewhere"])
        );
    }

    #[test]
    fn the_beta_class_annotation_names_the_class_when_the_field_is_unset() {
        let mut c = claim("a", "", json!({"annotations": {BETA_STORAGE_CLASS: "wfc"}}));
        c["spec"]
            .as_object_mut()
            .unwrap()
            .remove("storageClassName");
        let map = Map::default()
            .class_of("wfc", "WaitForFirstConsumer")
            .claim_of(c);
        assert_eq!(
            selections(&pod(json!([on("a")])), "n1", &map).unwrap(),
            selected(&["a"])
        );
    }

    #[test]
    fn a_missing_or_deleted_claim_or_another_pods_ephemeral_claim_refuses_the_bind() {
        let map = Map::default().class_of("wfc", "WaitForFirstConsumer");
        let e = selections(&pod(json!([on("a")])), "n1", &map).unwrap_err();
        assert_eq!(e, "persistentvolumeclaim \"a\" not found (volume a)");

        let map = map.claim_of(claim(
            "a",
            "wfc",
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        ));
        let e = selections(&pod(json!([on("a")])), "n1", &map).unwrap_err();
        assert_eq!(e, "persistentvolumeclaim \"a\" is being deleted");

        let ephemeral =
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let owner = |uid: &str| {
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                "uid": uid, "controller": true}]})
        };
        let map = Map::default()
            .class_of("wfc", "WaitForFirstConsumer")
            .claim_of(claim("p-scratch", "wfc", owner("u-other")));
        let e = selections(&pod(ephemeral.clone()), "n1", &map).unwrap_err();
        assert_eq!(
            e,
            "persistentvolumeclaim \"p-scratch\" was not created for pod default/p (pod is not owner)"
        );
        let map = map.claim_of(claim("p-scratch", "wfc", owner("u-p")));
        assert_eq!(
            selections(&pod(ephemeral), "n1", &map).unwrap(),
            selected(&["p-scratch"])
        );
    }
}

//! Auto PodGroups per owner: a groupless Basalt pod whose owner carries
//! `scheduling.basalt.dev/min-member` (any kind), or is a workload whose spec states a gang
//! (batch Job, Kubeflow job, JobSet, Volcano Job: `basalt_crds::workloads`), joins one
//! PodGroup made for that owner. A JobSet's pods (labelled with its name) join the JobSet's.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use basalt_crds::convert::QUEUE;
use basalt_crds::workloads;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};

/// Owner annotation: the gang size of the owner's pods.
pub const MIN_MEMBER: &str = "scheduling.basalt.dev/min-member";
/// Label on the PodGroups the scheduler makes itself.
pub const AUTO_LABEL: &str = "scheduling.basalt.dev/auto";

/// Whether the scheduler made this PodGroup (groups of one, owner groups).
pub fn is_auto(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(AUTO_LABEL))
        .is_some_and(|v| v == "true")
}

/// What a pod's owner says about grouping, cached per owner uid.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnerGroup {
    /// One PodGroup for all the owner's pods: its size, per-role minimums, queue, priority
    /// class and placement.
    Gang {
        group: String,
        gang: workloads::WorkloadGang,
        /// The ownerReference the PodGroup gets (apiVersion, kind, name, uid).
        owner: (String, String, String, String),
    },
    /// A workload whose spec makes no sense (the reason names the field): a gang of the pods
    /// it has, and a Warning Event.
    Unreadable {
        reason: String,
        group: String,
        owner: (String, String, String, String),
    },
    /// The owner carries no min-member annotation: a group of one, silently.
    None,
    /// The owner is gone or its annotation is bad: a group of one and a Warning Event.
    Invalid(String),
}

pub use workloads::{controller, gang_owner};

/// What each owner says about grouping, and when it was read: re-read once older than the TTL
/// (`--owner-cache-ttl`), so an annotation changed on the owner is seen. Keyed by uid: an owner
/// deleted and made again under the same name is another uid, so it is read afresh.
pub struct OwnerCache {
    ttl: Duration,
    read: HashMap<String, (OwnerGroup, Instant)>,
}

impl OwnerCache {
    pub fn new(ttl: Duration) -> Self {
        OwnerCache {
            ttl,
            read: HashMap::new(),
        }
    }

    /// Forgets what was read longer than the TTL ago (before a cycle's groups are made).
    pub fn expire(&mut self) {
        let ttl = self.ttl;
        self.read.retain(|_, (_, read)| read.elapsed() < ttl);
    }

    /// What the owner says, from the cache while its entry is fresh, else read through the API.
    pub async fn decision(
        &mut self,
        client: &Client,
        ns: &str,
        r: &OwnerReference,
    ) -> Result<OwnerGroup, String> {
        // An owner known by name alone (a JobSet its pods' label names) is cached by name.
        let cache_key = match r.uid.is_empty() {
            true => format!("{}/{ns}/{}", r.kind, r.name),
            false => r.uid.clone(),
        };
        if let Some((d, _)) = self.read.get(&cache_key) {
            return Ok(d.clone());
        }
        let d = resolve(client, ns, &r.api_version, &r.kind, &r.name, &r.uid).await?;
        self.read.insert(cache_key, (d.clone(), Instant::now()));
        Ok(d)
    }
}

/// Fetches the owner through discovery and reads its annotations and spec. An empty `uid`
/// takes the object of that name, whatever its uid. `Err` is a transient failure (5xx,
/// transport): the pod waits for the next cycle.
pub async fn resolve(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
) -> Result<OwnerGroup, String> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let what = format!("owner {kind} {ns}/{name}");
    let resource = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, _)) => ar,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Ok(OwnerGroup::Invalid(format!(
                "{what}: kind {api_version} {kind} not served"
            )))
        }
        Err(kube::Error::Discovery(e)) => return Ok(OwnerGroup::Invalid(format!("{what}: {e}"))),
        Err(e) => return Err(format!("{what}: discovery: {e}")),
    };
    owner_object(client, ns, &resource, &what, name, uid).await
}

/// Whether the object an ownerReference names still exists with that uid. `Err` is a transient
/// failure.
pub async fn alive(client: &Client, ns: &str, r: &OwnerReference) -> Result<bool, String> {
    let (group, version) = r
        .api_version
        .split_once('/')
        .unwrap_or(("", &r.api_version));
    let gvk = GroupVersionKind::gvk(group, version, &r.kind);
    let what = format!("{} {ns}/{}", r.kind, r.name);
    let resource = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, _)) => ar,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
        Err(kube::Error::Discovery(_)) => return Ok(false),
        Err(e) => return Err(format!("{what}: discovery: {e}")),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    match api.get_opt(&r.name).await {
        Ok(Some(o)) => Ok(o.metadata.uid.as_deref().is_none_or(|u| u == r.uid)),
        Ok(None) => Ok(false),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

async fn owner_object(
    client: &Client,
    ns: &str,
    resource: &ApiResource,
    what: &str,
    name: &str,
    uid: &str,
) -> Result<OwnerGroup, String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let obj = match api.get(name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Ok(OwnerGroup::Invalid(format!("{what}: not found")))
        }
        Err(e) => return Err(format!("{what}: {e}")),
    };
    if !uid.is_empty() && obj.metadata.uid.as_deref().is_some_and(|u| u != uid) {
        return Ok(OwnerGroup::Invalid(format!(
            "{what}: replaced (uid {} is not the pod's owner {uid})",
            obj.metadata.uid.as_deref().unwrap_or("")
        )));
    }
    let annotations = obj.metadata.annotations.unwrap_or_default();
    let uid = obj.metadata.uid.clone().unwrap_or_else(|| uid.to_string());
    let spec = obj.data.get("spec").unwrap_or(&serde_json::Value::Null);
    Ok(decide(
        &annotations,
        spec,
        (
            resource.api_version.clone(),
            resource.kind.clone(),
            name.to_string(),
            uid,
        ),
        what,
    ))
}

/// The decision from an owner's annotations (`min-member` wins) and else its spec, when it is
/// a workload whose spec states a gang.
pub fn decide(
    annotations: &BTreeMap<String, String>,
    spec: &serde_json::Value,
    owner: (String, String, String, String),
    what: &str,
) -> OwnerGroup {
    let group = format!("{}-pg", owner.2);
    let annotated_queue = annotations.get(QUEUE).cloned();
    let gang = match annotations.get(MIN_MEMBER) {
        Some(raw) => match raw.trim().parse::<u32>() {
            Ok(n) if n >= 1 => workloads::WorkloadGang {
                min_member: n,
                ..Default::default()
            },
            _ => {
                return OwnerGroup::Invalid(format!(
                    "{what}: annotation {MIN_MEMBER}: {raw:?} is not a positive integer"
                ))
            }
        },
        None => match workloads::gang(&owner.0, &owner.1, annotations, spec) {
            Ok(Some(g)) => g,
            Ok(None) => return OwnerGroup::None,
            Err(e) if group.len() <= 253 => {
                return OwnerGroup::Unreadable {
                    reason: format!("{what}: {e}"),
                    group,
                    owner,
                }
            }
            Err(e) => return OwnerGroup::Invalid(format!("{what}: {e}")),
        },
    };
    if group.len() > 253 {
        return OwnerGroup::Invalid(format!("{what}: name too long for a PodGroup name"));
    }
    OwnerGroup::Gang {
        group,
        gang: workloads::WorkloadGang {
            // The annotation names the queue where the operator's spec names none.
            queue: gang.queue.clone().or(annotated_queue),
            ..gang
        },
        owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> (String, String, String, String) {
        ("batch/v1".into(), "Job".into(), "train".into(), "u1".into())
    }

    #[test]
    fn annotations_decide_the_group() {
        let mut a = BTreeMap::new();
        let none = serde_json::Value::Null;
        assert_eq!(decide(&a, &none, owner(), "Job"), OwnerGroup::None);
        a.insert(MIN_MEMBER.to_string(), "3".to_string());
        a.insert(QUEUE.to_string(), "research".to_string());
        assert_eq!(
            decide(&a, &none, owner(), "Job"),
            OwnerGroup::Gang {
                group: "train-pg".into(),
                gang: workloads::WorkloadGang {
                    min_member: 3,
                    queue: Some("research".into()),
                    ..Default::default()
                },
                owner: owner()
            }
        );
        for bad in ["0", "-1", "three", ""] {
            a.insert(MIN_MEMBER.to_string(), bad.to_string());
            let d = decide(&a, &none, owner(), "owner Job default/train");
            assert!(
                matches!(&d, OwnerGroup::Invalid(m) if m.contains(MIN_MEMBER) && m.contains("default/train")),
                "{bad}: {d:?}"
            );
        }
    }

    #[test]
    fn a_workload_spec_decides_the_group_when_no_annotation_does() {
        let a = BTreeMap::new();
        let spec = serde_json::json!({"parallelism": 4});
        let d = decide(&a, &spec, owner(), "owner Job default/train");
        assert!(
            matches!(&d, OwnerGroup::Gang { gang, .. } if gang.min_member == 4),
            "{d:?}"
        );
        let spec = serde_json::json!({"parallelism": -4});
        let d = decide(&a, &spec, owner(), "owner Job default/train");
        assert!(
            matches!(&d, OwnerGroup::Unreadable { reason, .. } if reason.contains("spec.parallelism")),
            "{d:?}"
        );
    }
}

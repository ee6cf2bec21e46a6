//! The handoff of shared devices to the node's device plugin, so it gives each container the
//! devices and shares Basalt chose (`docs/protocols.md`, sections 1 and 2):
//! - HAMi's device plugin: HAMi's pod annotations and its bind sequence, below;
//! - Volcano's vGPU device plugin: Volcano's annotations, which ride on the Binding (Basalt
//!   takes no `hamivgpu` node lock for it: Volcano's own is optional).
//!
//! HAMi's sequence:
//! 1. The node lock: `hami.io/mutex.lock=<RFC3339>,<ns>,<pod>` on the Node, written with its
//!    resourceVersion as a precondition. A lock another pod holds stops this bind until the
//!    plugin releases it (after its Allocate), it expires (5 minutes) or its pod is gone: one
//!    HAMi pod per node in flight, as the plugin finds its pod by that lock.
//! 2. The pod's annotations: `hami.io/vgpu-node` (also a label), `vgpu-time`, the devices
//!    (`vgpu-devices-to-allocate` and `vgpu-devices-allocated`, identical),
//!    `bind-phase: allocating` and `bind-time`.
//! 3. The binding. When it fails, the lock is released and the phase set to `failed`.

use std::collections::BTreeMap;

use basalt_crds::convert::device_names::share_vocabulary;
use basalt_engine::plan::BoundDevice;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::BindResult;
use crate::keys::split_key;
use crate::writer::classify;

/// The node annotation HAMi's device plugin registers its devices in.
pub const NODE_REGISTER: &str = "hami.io/node-nvidia-register";
pub const NODE_LOCK: &str = "hami.io/mutex.lock";
pub const VGPU_NODE: &str = "hami.io/vgpu-node";
pub const VGPU_TIME: &str = "hami.io/vgpu-time";
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
pub const DEVICES_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
pub const BIND_PHASE: &str = "hami.io/bind-phase";
pub const BIND_TIME: &str = "hami.io/bind-time";
/// HAMi's node lock expires after this long (`pkg/util/nodelock/nodelock.go`).
const LOCK_EXPIRY_S: i64 = 300;
/// The resource a container's device count is read from.
const GPU: &str = "nvidia.com/gpu";

/// Volcano vGPU's device plugin registers its devices here.
pub const VGPU_NODE_REGISTER: &str = "volcano.sh/node-vgpu-register";
const VGPU_NUMBER: &str = "volcano.sh/vgpu-number";

/// Whether HAMi's device plugin runs on the node.
pub fn runs_hami(node: &Node) -> bool {
    (node.metadata.annotations.as_ref()).is_some_and(|a| a.contains_key(NODE_REGISTER))
}

/// Whether Volcano's vGPU device plugin runs on the node.
pub fn runs_vgpu(node: &Node) -> bool {
    (node.metadata.annotations.as_ref()).is_some_and(|a| a.contains_key(VGPU_NODE_REGISTER))
}

/// Whether `name` is one of HAMi's or Volcano vGPU's share names: a container asking one of
/// them without a device count takes one device (HAMi's webhook adds the count; Volcano reads
/// memory alone so).
fn is_share(name: &str) -> bool {
    let vocabulary = share_vocabulary();
    let sharing = [&vocabulary.hami, &vocabulary.vgpu];
    sharing
        .iter()
        .any(|s| [&s.memory, &s.percent, &s.cores].iter().any(|n| *n == name))
}

/// Per container of `containers`, its devices as `UUID,NVIDIA,<memMiB>,<cores>:` (empty for a
/// container without any). Containers take the pod's devices in order (the plan lists them
/// container by container), as many as they ask for of `resource` (limits, else requests; one
/// for a share without a count); devices left over go to the last container that asks for any.
fn per_container<'c>(
    containers: impl Iterator<Item = &'c Container>,
    resource: &str,
    devices: &[BoundDevice],
) -> Vec<String> {
    let count = |m: Option<&BTreeMap<String, Quantity>>| {
        (m.and_then(|m| m.get(resource))).and_then(|q| q.0.parse::<usize>().ok())
    };
    let shares =
        |m: Option<&BTreeMap<String, Quantity>>| m.is_some_and(|m| m.keys().any(|k| is_share(k)));
    let wants: Vec<usize> = containers
        .map(|c| {
            let r = c.resources.as_ref();
            let (limits, requests) = (
                r.and_then(|r| r.limits.as_ref()),
                r.and_then(|r| r.requests.as_ref()),
            );
            (count(limits).or_else(|| count(requests)))
                .unwrap_or_else(|| (shares(limits) || shares(requests)) as usize)
        })
        .collect();
    let last_asking = wants.iter().rposition(|&w| w > 0);
    let mut rest = devices;
    let mut out = Vec::with_capacity(wants.len());
    for (i, &want) in wants.iter().enumerate() {
        let take = match Some(i) == last_asking {
            true => rest.len(),
            false => want.min(rest.len()),
        };
        let (mine, left) = rest.split_at(take);
        rest = left;
        let mut entry = String::new();
        for d in mine {
            let uuid = d.uuid.as_deref().unwrap_or("");
            let memory = d.memory_mib.unwrap_or(0);
            let cores = d.cores.unwrap_or(0);
            entry.push_str(&format!("{uuid},NVIDIA,{memory},{cores}:"));
        }
        out.push(entry);
    }
    out
}

/// HAMi's device list for a pod: per container, init containers first, each container closed
/// by `;` (a container without GPUs keeps its place, empty).
pub fn encode_devices(pod: &Pod, devices: &[BoundDevice]) -> String {
    let spec = pod.spec.as_ref();
    let init = spec.and_then(|s| s.init_containers.as_ref());
    let containers =
        (init.into_iter().flatten()).chain(spec.map(|s| &s.containers).into_iter().flatten());
    (per_container(containers, GPU, devices).into_iter())
        .map(|c| c + ";")
        .collect()
}

/// What Volcano's scheduler puts on the Binding of a vGPU pod (its `vgpu` device's Allocate;
/// the API server copies a Binding's annotations onto the pod as it binds): the node, the
/// time, the devices of its containers (`spec.containers` only, joined by `;` with no
/// trailing `;`) as `vgpu-ids-new` and `devices-to-allocate`, and the bind phase.
pub fn vgpu_annotations(
    node: &str,
    pod: &Pod,
    devices: &[BoundDevice],
) -> BTreeMap<String, String> {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| &s.containers)
        .into_iter()
        .flatten();
    let list = per_container(containers, VGPU_NUMBER, devices).join(";");
    let now = jiff::Timestamp::now().as_second().to_string();
    [
        ("volcano.sh/vgpu-node", node.to_string()),
        ("volcano.sh/vgpu-time", now.clone()),
        ("volcano.sh/vgpu-ids-new", list.clone()),
        ("volcano.sh/devices-to-allocate", list),
        ("volcano.sh/bind-phase", "allocating".to_string()),
        ("volcano.sh/bind-time", now),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The index of the first device without a UUID, if any: the conversion closes a node whose
/// register names none, so this is a last guard against writing an empty one.
fn unnamed(devices: &[BoundDevice]) -> Option<u32> {
    (devices.iter())
        .find(|d| d.uuid.as_deref().is_none_or(str::is_empty))
        .map(|d| d.index)
}

/// Who holds a node's HAMi lock, when someone does and the lock has not expired:
/// (namespace, pod).
fn lock_holder(node: &Node, now: jiff::Timestamp) -> Option<(String, String)> {
    let value = node.metadata.annotations.as_ref()?.get(NODE_LOCK)?;
    let mut parts = value.splitn(3, ',');
    let (at, ns, pod) = (parts.next()?, parts.next()?, parts.next()?);
    let at: jiff::Timestamp = at.parse().ok()?;
    (now.duration_since(at).as_secs() < LOCK_EXPIRY_S).then(|| (ns.to_string(), pod.to_string()))
}

/// Takes the node's HAMi lock for the pod and writes the pod's HAMi annotations; an error is
/// what the bind reports (a lock held by another live pod is a wait: tried again with backoff).
pub async fn prepare(
    client: &Client,
    key: &str,
    node: &str,
    pod: &Pod,
    devices: &[BoundDevice],
) -> Result<(), BindResult> {
    let (ns, name) = split_key(key);
    let nodes: Api<Node> = Api::all(client.clone());
    let failed = |e: kube::Error| match classify(&e) {
        (Some(409), m) => BindResult::Conflict(m),
        (Some(code), m) if code >= 500 || code == 429 => BindResult::Retry(m),
        (Some(_), m) => BindResult::Failed(m),
        (None, m) => BindResult::Retry(m),
    };
    // HAMi's plugin finds a pod's devices by UUID: without one, nothing is worth writing.
    if let Some(index) = unnamed(devices) {
        return Err(BindResult::Failed(format!(
            "GPU {index} of node {node} has no UUID to hand HAMi's device plugin; nothing written"
        )));
    }
    let current = nodes.get(node).await.map_err(failed)?;
    let now = jiff::Timestamp::now();
    if let Some((holder_ns, holder)) = lock_holder(&current, now) {
        let ours = holder_ns == ns && holder == name;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &holder_ns);
        let alive = ours || pods.get_opt(&holder).await.map_err(failed)?.is_some();
        if alive && !ours {
            return Err(BindResult::Wait(format!(
                "node {node} is locked by HAMi pod {holder_ns}/{holder} (one HAMi pod per node \
                 binds at a time)"
            )));
        }
    }
    let lock = format!("{},{ns},{name}", now.strftime("%Y-%m-%dT%H:%M:%SZ"));
    let patch = json!({"metadata": {
        "resourceVersion": current.metadata.resource_version,
        "annotations": {NODE_LOCK: lock},
    }});
    (nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await)
        .map_err(failed)?;
    let list = encode_devices(pod, devices);
    let patch = json!({"metadata": {
        "labels": {VGPU_NODE: node},
        "annotations": {
            VGPU_NODE: node,
            VGPU_TIME: now.as_second().to_string(),
            DEVICES_TO_ALLOCATE: list,
            DEVICES_ALLOCATED: list,
            BIND_PHASE: "allocating",
            BIND_TIME: now.as_second().to_string(),
        },
    }});
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    if let Err(e) = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        release(client, key, node).await;
        return Err(failed(e));
    }
    Ok(())
}

/// After a failed bind: the lock is released (if still ours) and the pod's phase is `failed`,
/// as HAMi's own scheduler leaves it. Best effort: the lock expires anyway.
pub async fn release(client: &Client, key: &str, node: &str) {
    let (ns, name) = split_key(key);
    let nodes: Api<Node> = Api::all(client.clone());
    if let Ok(current) = nodes.get(node).await {
        let ours = lock_holder(&current, jiff::Timestamp::now())
            .is_some_and(|(holder_ns, holder)| holder_ns == ns && holder == name);
        if ours {
            let patch = json!({"metadata": {
                "resourceVersion": current.metadata.resource_version,
                "annotations": {NODE_LOCK: null},
            }});
            let _ = nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {BIND_PHASE: "failed"}}});
    let _ = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn device(uuid: &str, memory: u32, cores: u32) -> BoundDevice {
        BoundDevice {
            index: 0,
            uuid: Some(uuid.into()),
            memory_mib: Some(memory),
            cores: Some(cores),
            mig: None,
        }
    }

    #[test]
    fn devices_are_listed_per_container_init_containers_first() {
        let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: init}
  containers:
  - name: a
    resources: {limits: {nvidia.com/gpu: "1"}}
  - name: sidecar
  - name: b
    resources: {requests: {nvidia.com/gpu: "1"}}
"#);
        let list = encode_devices(&p, &[device("GPU-a", 30000, 0), device("GPU-b", 30000, 0)]);
        assert_eq!(list, ";GPU-a,NVIDIA,30000,0:;;GPU-b,NVIDIA,30000,0:;");
    }

    #[test]
    fn a_container_asking_a_share_without_a_count_takes_one_device() {
        let p = pod(r#"
metadata: {name: p}
spec:
  containers:
  - name: a
    resources: {limits: {nvidia.com/gpumem: "8000"}}
  - name: b
    resources: {limits: {nvidia.com/gpumem: "1000"}}
"#);
        let list = encode_devices(&p, &[device("GPU-a", 8000, 0), device("GPU-b", 1000, 0)]);
        assert_eq!(list, "GPU-a,NVIDIA,8000,0:;GPU-b,NVIDIA,1000,0:;");
    }

    #[test]
    fn volcano_lists_only_containers_and_ends_without_a_separator() {
        let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: init}
  containers:
  - name: a
    resources: {limits: {volcano.sh/vgpu-number: "2"}}
  - name: sidecar
"#);
        let devices = [device("GPU-a", 3000, 25), device("GPU-b", 3000, 25)];
        let a = vgpu_annotations("n1", &p, &devices);
        let list = "GPU-a,NVIDIA,3000,25:GPU-b,NVIDIA,3000,25:;";
        assert_eq!(a["volcano.sh/vgpu-ids-new"], list);
        assert_eq!(a["volcano.sh/devices-to-allocate"], list);
        assert_eq!(a["volcano.sh/vgpu-node"], "n1");
        assert_eq!(a["volcano.sh/bind-phase"], "allocating");
    }

    #[test]
    fn a_device_without_a_uuid_is_never_handed_off() {
        let mut nameless = device("", 1000, 0);
        nameless.index = 3;
        assert_eq!(unnamed(&[device("GPU-a", 1000, 0)]), None);
        assert_eq!(
            unnamed(&[device("GPU-a", 1000, 0), nameless.clone()]),
            Some(3)
        );
        nameless.uuid = None;
        assert_eq!(unnamed(&[nameless]), Some(3));
    }

    #[test]
    fn an_expired_lock_is_nobody_s() {
        let mut n = Node::default();
        let at = jiff::Timestamp::from_second(1_000_000).unwrap();
        n.metadata.annotations = Some(BTreeMap::from([(
            NODE_LOCK.to_string(),
            format!("{},ns,p", at.strftime("%Y-%m-%dT%H:%M:%SZ")),
        )]));
        let soon = jiff::Timestamp::from_second(1_000_060).unwrap();
        assert_eq!(lock_holder(&n, soon), Some(("ns".into(), "p".into())));
        let late = jiff::Timestamp::from_second(1_000_400).unwrap();
        assert_eq!(lock_holder(&n, late), None);
    }
}

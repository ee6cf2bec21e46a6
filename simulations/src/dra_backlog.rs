//! `basalt-sim bench --dra`: a cluster whose GPUs are published as DRA ResourceSlices (NVIDIA's
//! DRA driver's layout: `gpu-<i>` devices with `productName` and memory, one pool per node)
//! and a backlog of pods each with its own claim (made from a template, as the resourceclaim
//! controller would) for 1–8 GPUs with a `productName` selector. It goes through conversion
//! (CEL included), so the bench times what a cycle of the live scheduler pays.

use std::sync::Arc;

use basalt_crds::Object;
use serde_json::{json, Value};

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("a well-formed synthetic object"))
}

/// Nodes (every fourth of A100s, the rest H100s), their slices, the class, and `pods` pending
/// pods with their claims.
pub fn objects(nodes: usize, pods: usize, gpus_per_node: u32) -> Vec<(String, Object)> {
    let src = || "bench".to_string();
    let mut out = vec![(
        src(),
        Object::DeviceClass(typed(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.nvidia.com\""}}]}
        }))),
    )];
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        out.push((
            src(),
            Object::Node(typed(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"}}
            }))),
        ));
        let product = if n % 4 == 3 { A100 } else { H100 };
        let devices: Vec<Value> = (0..gpus_per_node)
            .map(|i| {
                json!({"name": format!("gpu-{i}"),
                "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                    "uuid": {"string": format!("GPU-{n}-{i}")}},
                "capacity": {"memory": {"value": "80Gi"}}})
            })
            .collect();
        out.push((
            src(),
            Object::ResourceSlice(typed(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{name}-gpu.nvidia.com")},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices}
            }))),
        ));
    }
    let selector = format!("device.attributes[\"gpu.nvidia.com\"].productName == \"{H100}\"");
    for p in 0..pods {
        let pod = format!("train-{p:06}");
        let claim = format!("{pod}-gpus-x7k2p");
        let count = (p as u32 % gpus_per_node.max(1)) + 1;
        out.push((
            src(),
            Object::ResourceClaim(typed(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": claim, "namespace": "bench"},
                "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "count": count,
                    "selectors": [{"cel": {"expression": selector}}]}}]}}
            }))),
        ));
        out.push((
            src(),
            Object::Pod(typed(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "bench",
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"schedulerName": "basalt",
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}],
                    "containers": [{"name": "c", "image": "x",
                        "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}}]},
                "status": {"phase": "Pending",
                    "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim}]}
            }))),
        ));
    }
    out
}

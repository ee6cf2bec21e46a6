//! What a ResourceClaim's writes say: which claims a pod has, and the allocation a plan made
//! for one, as kube-scheduler's allocator writes it.

use std::sync::Arc;

use basalt_engine::plan::ClaimAllocation;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceClass,
    DeviceRequestAllocationResult, ResourceClaim,
};

/// The `ns/name` of each of `pod`'s claims, in its order (a claim named twice once). Err: a
/// template's claim not made yet.
pub(super) fn pod_claim_keys(pod: &Pod) -> Result<Vec<(String, bool)>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let mut out: Vec<(String, bool)> = Vec::new();
    let entries = pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten());
    for (i, e) in entries.enumerate() {
        let (name, from_template) = match (&e.resource_claim_name, &e.resource_claim_template_name)
        {
            (Some(n), _) => (n.clone(), false),
            (None, Some(t)) => {
                let made = (statuses.into_iter().flatten())
                    .find(|s| s.name == e.name)
                    .and_then(|s| s.resource_claim_name.clone());
                let Some(n) = made else {
                    return Err(format!(
                        "spec.resourceClaims[{i}]: the claim of template {ns}/{t} is not made yet"
                    ));
                };
                (n, true)
            }
            (None, None) => {
                return Err(format!(
                    "spec.resourceClaims[{i}]: names neither a claim nor a template"
                ))
            }
        };
        let key = format!("{ns}/{name}");
        if !out.iter().any(|(k, _)| *k == key) {
            out.push((key, from_template));
        }
    }
    Ok(out)
}

/// The allocation to write for `plan`'s allocation of `claim`: its devices, the node selector,
/// and the opaque config of the classes of the requests allocated (`FromClass`, for every
/// request) and of the claim (`FromClaim`, those naming no request or an allocated one).
pub(super) fn allocation_result(
    planned: &ClaimAllocation,
    claim: &ResourceClaim,
    class: impl Fn(&str) -> Option<Arc<DeviceClass>>,
) -> AllocationResult {
    let results = (planned.results.iter())
        .map(|r| DeviceRequestAllocationResult {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access.then_some(true),
            ..Default::default()
        })
        .collect::<Vec<_>>();
    let devices = claim.spec.devices.as_ref();
    let requests = devices
        .into_iter()
        .flat_map(|d| d.requests.iter().flatten());
    let mut config = Vec::new();
    let mut allocated_names = Vec::new();
    for request in requests {
        // The class of the request, or of the alternative the plan chose.
        let chosen = results.iter().find_map(|r| {
            let (req, sub) = r.request.split_once('/').unwrap_or((&r.request, ""));
            (req == request.name).then_some(sub)
        });
        let class_name = match chosen {
            None => None,
            Some("") => request
                .exactly
                .as_ref()
                .map(|x| x.device_class_name.clone()),
            Some(sub) => (request.first_available.iter().flatten())
                .find(|s| s.name == sub)
                .map(|s| s.device_class_name.clone()),
        };
        if let Some(sub) = chosen {
            allocated_names.push(request.name.clone());
            if !sub.is_empty() {
                allocated_names.push(format!("{}/{sub}", request.name));
            }
        }
        for c in (class_name.and_then(|n| class(&n)).iter())
            .flat_map(|c| c.spec.config.clone().unwrap_or_default())
        {
            config.push(DeviceAllocationConfiguration {
                source: "FromClass".into(),
                requests: None,
                opaque: c.opaque,
            });
        }
    }
    for c in devices.into_iter().flat_map(|d| d.config.iter().flatten()) {
        let named = c.requests.as_deref().unwrap_or_default();
        if named.is_empty() || named.iter().any(|n| allocated_names.contains(n)) {
            config.push(DeviceAllocationConfiguration {
                source: "FromClaim".into(),
                requests: c.requests.clone(),
                opaque: c.opaque.clone(),
            });
        }
    }
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(results),
            config: (!config.is_empty()).then_some(config),
        }),
        node_selector: planned.node_selector.as_ref().map(|node| NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![node.clone()]),
                }]),
                match_expressions: None,
            }],
        }),
        allocation_timestamp: None,
    }
}

/// The devices an allocation holds, in a fixed order.
pub(super) fn devices_of(a: &AllocationResult) -> Vec<(&str, &str, &str, &str)> {
    let mut out: Vec<_> = (a.devices.iter().flat_map(|d| d.results.iter().flatten()))
        .map(|r| (&*r.request, &*r.driver, &*r.pool, &*r.device))
        .collect();
    out.sort_unstable();
    out
}

/// A template's claim belongs to its pod: the pod is its controller (by uid).
pub(super) fn controlled_by(claim: &ResourceClaim, pod: &Pod) -> bool {
    claim.metadata.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true) && r.kind == "Pod" && Some(&r.uid) == pod.metadata.uid.as_ref()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_engine::plan::ClaimResult;
    use serde_json::json;
    use serde_json::Value;

    fn claim(spec: Value) -> ResourceClaim {
        serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ml"}, "spec": spec}))
            .unwrap()
    }

    fn planned(results: &[(&str, &str)], node: Option<&str>) -> ClaimAllocation {
        ClaimAllocation {
            claim: "ml/c".into(),
            pod: "ml/p".into(),
            node: "n1".into(),
            node_selector: node.map(str::to_string),
            results: (results.iter())
                .map(|(request, device)| ClaimResult {
                    request: request.to_string(),
                    driver: "gpu.nvidia.com".into(),
                    pool: "n1".into(),
                    device: device.to_string(),
                    admin_access: false,
                })
                .collect(),
        }
    }

    fn class(name: &str, parameters: Value) -> Arc<DeviceClass> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"config": [
                {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn an_allocation_names_its_devices_and_node_and_copies_the_config_that_applies() {
        let c = claim(json!({"devices": {
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu"}},
            {"name": "alt", "firstAvailable": [
                {"name": "big", "deviceClassName": "big"},
                {"name": "small", "deviceClassName": "small"}]},
        ],
        "config": [
            {"opaque": {"driver": "gpu.nvidia.com", "parameters": {"all": true}}},
            {"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"gpu": 1}}},
            {"requests": ["alt/big"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"big": 1}}},
            {"requests": ["alt/small"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"small": 1}}},
        ]}}));
        let classes = [
            class("gpu", json!({"class": "gpu"})),
            class("big", json!({"class": "big"})),
            class("small", json!({"class": "small"})),
        ];
        let lookup = |n: &str| {
            classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(n))
                .cloned()
        };
        let a = allocation_result(
            &planned(&[("gpu", "gpu-0"), ("alt/small", "gpu-1")], Some("n1")),
            &c,
            lookup,
        );
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(
            v["devices"]["results"],
            json!([
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
                {"request": "alt/small", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
            ])
        );
        assert_eq!(
            v["nodeSelector"],
            json!({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
        );
        assert!(v.get("allocationTimestamp").is_none());
        let params: Vec<(String, Value)> = (v["devices"]["config"].as_array().unwrap().iter())
            .map(|c| {
                (
                    c["source"].as_str().unwrap().to_string(),
                    c["opaque"]["parameters"].clone(),
                )
            })
            .collect();
        // The classes of the requests as allocated (the chosen alternative's), then the claim's
        // config naming no request or one allocated (not the alternative left unused).
        assert_eq!(
            params,
            vec![
                ("FromClass".into(), json!({"class": "gpu"})),
                ("FromClass".into(), json!({"class": "small"})),
                ("FromClaim".into(), json!({"all": true})),
                ("FromClaim".into(), json!({"gpu": 1})),
                ("FromClaim".into(), json!({"small": 1})),
            ]
        );
        // Devices every node sees: no node selector; admin access said only when true.
        let mut p = planned(&[("gpu", "gpu-0")], None);
        p.results[0].admin_access = true;
        let v = serde_json::to_value(allocation_result(&p, &c, |_| None)).unwrap();
        assert!(v.get("nodeSelector").is_none());
        assert_eq!(v["devices"]["results"][0]["adminAccess"], true);
    }

    #[test]
    fn a_pod_s_claims_are_named_directly_or_through_its_status() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "shared", "resourceClaimName": "team-gpus"},
                {"name": "gpus", "resourceClaimTemplateName": "one-gpu"},
                {"name": "again", "resourceClaimName": "team-gpus"}]},
            "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x1"}]},
        }))
        .unwrap();
        assert_eq!(
            pod_claim_keys(&pod).unwrap(),
            vec![
                ("ml/team-gpus".to_string(), false),
                ("ml/p-gpus-x1".to_string(), true)
            ]
        );
        let mut waiting = pod.clone();
        waiting.status = None;
        assert_eq!(
            pod_claim_keys(&waiting).unwrap_err(),
            "spec.resourceClaims[1]: the claim of template ml/one-gpu is not made yet"
        );
    }

    #[test]
    fn only_the_same_devices_count_as_the_same_allocation() {
        let c = claim(json!({}));
        let a = allocation_result(
            &planned(&[("gpu", "gpu-0"), ("gpu", "gpu-1")], Some("n1")),
            &c,
            |_| None,
        );
        let b = allocation_result(
            &planned(&[("gpu", "gpu-1"), ("gpu", "gpu-0")], Some("n1")),
            &c,
            |_| None,
        );
        let other = allocation_result(
            &planned(&[("gpu", "gpu-0"), ("gpu", "gpu-3")], Some("n1")),
            &c,
            |_| None,
        );
        assert_eq!(devices_of(&a), devices_of(&b));
        assert_ne!(devices_of(&a), devices_of(&other));
    }
}

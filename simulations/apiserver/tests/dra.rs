//! Dynamic Resource Allocation (`resource.k8s.io/v1`, Kubernetes 1.34) through kube-rs typed
//! clients: device classes, slices, claim templates and claims with their defaults, list and
//! watch; a claim's status subresource as kube-scheduler writes it (allocation and reservedFor
//! in one PUT, retried on conflict); spec immutability; the delete-protection finalizer.
//! Discovery, a server without DRA, pods' claim statuses and kubectl: `tests/dra_discovery.rs`.

use basalt_apiserver::{Config, PatchKind};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimStatus, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::ResourceExt;
use serde_json::{json, Value};

const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

mod common;
use common::{start, status_of, typed};

fn slice(name: &str, node: &str) -> ResourceSlice {
    let devices: Vec<Value> = (0..2)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {
                    "gpu.example.com/model": {"string": "h100"},
                    "gpu.example.com/index": {"int": i},
                    "gpu.example.com/driverVersion": {"version": "550.54.15"},
                },
                "capacity": {"gpu.example.com/memory": {"value": "80Gi"}},
            })
        })
        .collect();
    typed(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }))
}

fn claim(name: &str) -> ResourceClaim {
    typed(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
        ]}},
    }))
}

/// What kube-scheduler's DRA plugin writes in one UpdateStatus: the allocation and the pod
/// it is reserved for.
fn allocated(mut c: ResourceClaim, pod: &str, uid: &str) -> ResourceClaim {
    c.status = Some(typed(json!({
        "allocation": {
            "devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"},
            ]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-1"]},
            ]}]},
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}],
    })));
    c
}

fn reserved(c: &ResourceClaim) -> Vec<String> {
    c.status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .map(|r| r.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn classes_slices_templates_and_claims_are_served_with_their_defaults() {
    let (server, client) = start(Config::default()).await;
    let pp = PostParams::default();
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let class = classes
        .create(
            &pp,
            &typed(json!({"metadata": {"name": "gpu.example.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}})),
        )
        .await
        .unwrap();
    assert_eq!(class.metadata.generation, Some(1));

    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mut with_taint = slice("node-1-gpus", "node-1");
    with_taint.spec.devices.as_mut().unwrap()[1].taints = Some(vec![typed(
        json!({"key": "broken", "effect": "NoSchedule"}),
    )]);
    let created = slices.create(&pp, &with_taint).await.unwrap();
    let devices = created.spec.devices.unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(
        devices[0].capacity.as_ref().unwrap()["gpu.example.com/memory"]
            .value
            .0,
        "80Gi"
    );
    assert_eq!(
        devices[1].attributes.as_ref().unwrap()["gpu.example.com/index"].int,
        Some(1)
    );
    assert!(
        devices[1].taints.as_ref().unwrap()[0].time_added.is_some(),
        "a taint's timeAdded is defaulted"
    );
    slices
        .create(&pp, &slice("node-2-gpus", "node-2"))
        .await
        .unwrap();
    let on_node_1 = slices
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    assert_eq!(
        on_node_1
            .items
            .iter()
            .map(|s| s.name_any())
            .collect::<Vec<_>>(),
        ["node-1-gpus"]
    );
    // A slice must say which nodes it serves.
    let mut nowhere = slice("nowhere", "node-3");
    nowhere.spec.node_name = None;
    let s = status_of(slices.create(&pp, &nowhere).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "ResourceSlice.resource.k8s.io \"nowhere\" is invalid: spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    );
    // Its driver, pool and node are fixed; its devices may change.
    let mut moved = slices.get("node-2-gpus").await.unwrap();
    moved.spec.node_name = Some("node-9".into());
    let s = status_of(
        slices
            .replace("node-2-gpus", &pp, &moved)
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with("spec.nodeName: Invalid value: \"node-9\": field is immutable"),
        "{}",
        s.message
    );
    let shrunk = slices
        .patch(
            "node-2-gpus",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"pool": {"generation": 2}, "devices": [{"name": "gpu-0"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(shrunk.metadata.generation, Some(2));

    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), "default");
    let template = templates
        .create(
            &pp,
            &typed(
                json!({"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}),
            ),
        )
        .await
        .unwrap();
    let exact = template.spec.spec.devices.unwrap().requests.unwrap()[0]
        .exactly
        .clone()
        .unwrap();
    assert_eq!(
        (exact.allocation_mode.as_deref(), exact.count),
        (Some("ExactCount"), Some(1))
    );

    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let mut c = claim("train-0-gpu");
    c.status = Some(ResourceClaimStatus {
        reserved_for: Some(vec![typed(
            json!({"resource": "pods", "name": "p", "uid": "u"}),
        )]),
        ..Default::default()
    });
    let created = claims.create(&pp, &c).await.unwrap();
    assert!(created.status.is_none(), "a create does not set status");
    let exact = created.spec.devices.unwrap().requests.unwrap()[0]
        .exactly
        .clone()
        .unwrap();
    assert_eq!(
        (exact.allocation_mode.as_deref(), exact.count),
        (Some("ExactCount"), Some(1))
    );
    assert_eq!(
        server
            .list("resource.k8s.io/v1", "ResourceClaim")
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["train-0-gpu"]
    );

    // A watch from the list's version sees the scheduler's status write.
    let list = claims.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut events = claims
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let got = claims.get("train-0-gpu").await.unwrap();
    claims
        .replace_status("train-0-gpu", &pp, &allocated(got, "trainer-0", "uid-0"))
        .await
        .unwrap();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Modified(c)) => assert_eq!(reserved(&c), ["trainer-0"]),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // Invalid requests are refused with kube-apiserver's words.
    let s = status_of(
        claims
            .create(
                &pp,
                &typed(json!({"metadata": {"name": "bad"}, "spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": -1}}]}}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "ResourceClaim.resource.k8s.io \"bad\" is invalid: spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"
    );
}

#[tokio::test]
async fn a_claims_status_is_written_through_its_subresource_with_conflicts() {
    let (_server, client) = start(Config::default()).await;
    let pp = PostParams::default();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let read = claims.create(&pp, &claim("c")).await.unwrap();

    // reservedFor without an allocation, then too many consumers: 422.
    let mut early = read.clone();
    early.status = Some(typed(
        json!({"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}),
    ));
    let s = status_of(claims.replace_status("c", &pp, &early).await.unwrap_err());
    assert_eq!(
        s.message,
        "ResourceClaim.resource.k8s.io \"c\" is invalid: status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
    );
    let mut crowded = allocated(read.clone(), "p", "u");
    crowded.status.as_mut().unwrap().reserved_for = Some(
        (0..257)
            .map(|i| {
                typed(json!({"resource": "pods", "name": format!("p{i}"), "uid": format!("u{i}")}))
            })
            .collect(),
    );
    let s = status_of(claims.replace_status("c", &pp, &crowded).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "ResourceClaim.resource.k8s.io \"c\" is invalid: status.reservedFor: Too many: 257: must have at most 256 items"
    );
    let mut full = allocated(read.clone(), "p", "u");
    full.status.as_mut().unwrap().reserved_for =
        crowded.status.unwrap().reserved_for.map(|mut r| {
            r.truncate(256);
            r
        });
    let at_limit = claims.replace_status("c", &pp, &full).await.unwrap();
    assert_eq!(reserved(&at_limit).len(), 256);
    // Deallocate (both fields cleared in one write), as the claim controller does.
    let mut cleared = at_limit.clone();
    cleared.status = None;
    let read = claims.replace_status("c", &pp, &cleared).await.unwrap();
    assert!(read.status.is_none());

    // The scheduler's write: allocation and reservedFor in one PUT to the status subresource.
    let written = claims
        .replace_status("c", &pp, &allocated(read.clone(), "trainer-0", "uid-0"))
        .await
        .unwrap();
    assert_eq!(reserved(&written), ["trainer-0"]);
    assert_eq!(
        written.metadata.generation,
        Some(1),
        "status writes keep generation"
    );
    assert_ne!(written.resource_version(), read.resource_version());

    // A second scheduler working from the same read: 409, then it re-reads and retries.
    let s = status_of(
        claims
            .replace_status("c", &pp, &allocated(read.clone(), "trainer-1", "uid-1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on resourceclaims.resource.k8s.io \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let mut fresh = claims.get("c").await.unwrap();
    let mut consumers = fresh.status.as_ref().unwrap().reserved_for.clone().unwrap();
    consumers.push(typed(
        json!({"resource": "pods", "name": "trainer-1", "uid": "uid-1"}),
    ));
    fresh.status.as_mut().unwrap().reserved_for = Some(consumers);
    let shared = claims.replace_status("c", &pp, &fresh).await.unwrap();
    assert_eq!(reserved(&shared), ["trainer-0", "trainer-1"]);

    // Once set, the allocation may only be cleared, not changed.
    let mut other = shared.clone();
    other
        .status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .results
        .as_mut()
        .unwrap()[0]
        .device = "gpu-1".into();
    let s = status_of(claims.replace_status("c", &pp, &other).await.unwrap_err());
    assert!(
        s.message.contains("status.allocation: Invalid value: ")
            && s.message.ends_with(": field is immutable"),
        "{}",
        s.message
    );

    // Main-resource writes keep the stored status: a PUT without status, a label patch.
    let mut labelled = shared.clone();
    labelled.labels_mut().insert("team".into(), "vision".into());
    labelled.status = None;
    let kept = claims.replace("c", &pp, &labelled).await.unwrap();
    assert_eq!(reserved(&kept), ["trainer-0", "trainer-1"]);
    let kept = claims
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"stage": "train"}}, "status": null})),
        )
        .await
        .unwrap();
    assert_eq!(reserved(&kept), ["trainer-0", "trainer-1"]);

    // The spec is immutable, by PUT or by patch.
    let mut changed = kept.clone();
    changed
        .spec
        .devices
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()[0]
        .exactly
        .as_mut()
        .unwrap()
        .count = Some(2);
    let s = status_of(claims.replace("c", &pp, &changed).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        s.message
            .starts_with("ResourceClaim.resource.k8s.io \"c\" is invalid: spec: Invalid value: ")
            && s.message.ends_with(": field is immutable"),
        "{}",
        s.message
    );
    let details = s.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("resource.k8s.io", "ResourceClaim")
    );
    assert_eq!(details.causes[0].field, "spec");
    let e = claims
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 422);
    // A spec that differs only in what kube-apiserver defaults is the same spec.
    let mut undefaulted = kept.clone();
    let exact = undefaulted
        .spec
        .devices
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()[0]
        .exactly
        .as_mut()
        .unwrap();
    (exact.count, exact.allocation_mode) = (None, None);
    let same = claims.replace("c", &pp, &undefaulted).await.unwrap();
    assert_eq!(
        same.resource_version(),
        kept.resource_version(),
        "a no-op write"
    );
}

#[tokio::test]
async fn delete_protection_holds_a_claim_until_the_finalizer_is_removed() {
    let (server, client) = start(Config::default()).await;
    let pp = PostParams::default();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let mut c = claim("held");
    c.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let c = claims.create(&pp, &c).await.unwrap();
    claims
        .replace_status("held", &pp, &allocated(c, "trainer-0", "uid-0"))
        .await
        .unwrap();

    let marked = claims
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a claim with a finalizer is only marked");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(claims.get("held").await.is_ok());

    // While it is being deleted: no new consumer, no new finalizer.
    let mut more = claims.get("held").await.unwrap();
    let mut consumers = more.status.as_ref().unwrap().reserved_for.clone().unwrap();
    consumers.push(typed(
        json!({"resource": "pods", "name": "late", "uid": "uid-late"}),
    ));
    more.status.as_mut().unwrap().reserved_for = Some(consumers);
    let s = status_of(claims.replace_status("held", &pp, &more).await.unwrap_err());
    assert_eq!(
        s.message,
        "ResourceClaim.resource.k8s.io \"held\" is invalid: status.reservedFor: Forbidden: new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"
    );
    let e = claims
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER, "example.com/other"]}})),
        )
        .await
        .unwrap_err();
    assert!(status_of(e)
        .message
        .ends_with("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/other\"}"));

    // The pod is gone: the scheduler drops the reservation and deallocates; the claim stays.
    let released = claims
        .patch_status(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"reservedFor": null, "allocation": null}})),
        )
        .await
        .unwrap();
    assert!(released.status.is_none_or(|s| s.allocation.is_none()));
    assert!(server
        .get("resource.k8s.io/v1", "ResourceClaim", "default", "held")
        .is_some());
    // Removing the finalizer deletes it.
    server
        .patch(
            "resource.k8s.io/v1",
            "ResourceClaim",
            "default",
            "held",
            PatchKind::Json,
            &json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        )
        .unwrap();
    assert_eq!(status_of(claims.get("held").await.unwrap_err()).code, 404);
}

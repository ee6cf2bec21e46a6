//! DRA ResourceClaims end to end, as kube-scheduler's DynamicResources plugin writes them: a
//! pod whose template's claim is not made yet waits; once the claim exists it gets the
//! delete-protection finalizer, then its allocation (devices of the pod's node, a nodeSelector
//! naming it) and the pod in `reservedFor` in one status write, all before the binding; a gang
//! whose claims do not all fit allocates nothing until a node's devices are added; a claim
//! another writer allocates while the scheduler's status write is in flight is never
//! overwritten (the write meets a 409, the pod is not bound then, and later goes where that
//! allocation says); a binding that fails releases the claim (Unreserve) before the pod is
//! tried again; on a cluster without `resource.k8s.io` nothing is said about it, plain
//! pods bind and a pod with claims waits.

mod common;

use basalt_apiserver::{Config, FaultRule, PatchKind, Verb};
use common::*;
use serde_json::{json, Value};

const RESOURCE: &str = "resource.k8s.io/v1";
const DRIVER: &str = "gpu.nvidia.com";

fn device_class() -> Value {
    json!({"apiVersion": RESOURCE, "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.nvidia.com\""}}]}})
}

/// The slice of a node's 4 GPUs, its pool named after the node.
fn slice(node: &str) -> Value {
    let devices: Vec<Value> = (0..4)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
            "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}}})
        })
        .collect();
    json!({"apiVersion": RESOURCE, "kind": "ResourceSlice", "metadata": {"name": format!("{node}-gpus")},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}})
}

fn claim_spec(gpus: u32) -> Value {
    json!({"devices": {"requests": [{"name": "gpu",
        "exactly": {"deviceClassName": DRIVER, "count": gpus}}]}})
}

fn template(name: &str, gpus: u32) -> Value {
    json!({"apiVersion": RESOURCE, "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": claim_spec(gpus)}})
}

/// A gang member whose claim `gpus` comes from `template`; no extended resources.
fn claiming_pod(name: &str, group: &str, template: &str) -> Value {
    let mut p = pod(name, group, 0);
    p["spec"]["resourceClaims"] = json!([{"name": "gpus", "resourceClaimTemplateName": template}]);
    p["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]});
    p
}

/// What the resourceclaim controller does for a pod's template claim: the claim, owned by
/// the pod, and its name in the pod's status. Returns the claim's name.
fn make_claim(c: &Cluster, pod: &str, template: &str) -> String {
    let name = format!("{pod}-gpus-abcde");
    let spec = c
        .server
        .get(RESOURCE, "ResourceClaimTemplate", "default", template)
        .expect("template")["spec"]["spec"]
        .clone();
    let pod_uid = uid(c, "v1", "Pod", pod);
    c.create(json!({"apiVersion": RESOURCE, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid,
                                 "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec}));
    let status =
        json!({"status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": name}]}});
    c.server
        .patch_status("v1", "Pod", "default", pod, PatchKind::Merge, &status)
        .expect("pod status");
    name
}

fn claim(c: &Cluster, name: &str) -> Value {
    c.server
        .get(RESOURCE, "ResourceClaim", "default", name)
        .unwrap_or_else(|| panic!("claim {name} exists"))
}

fn condition(c: &Cluster, group: &str, reason: &str) -> Option<Value> {
    c.group(group)["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|k| k["reason"] == reason)
        .cloned()
}

/// Sequence number of the first 2xx write of `verb` on `resource` named `name`.
fn first_write(c: &Cluster, verb: Verb, resource: &str, name: &str) -> Option<u64> {
    c.server
        .requests()
        .iter()
        .find(|r| {
            r.verb == verb
                && r.resource == resource
                && r.name.as_deref() == Some(name)
                && r.code / 100 == 2
        })
        .map(|r| r.seq)
}

/// The node an allocation's nodeSelector names (matchFields metadata.name In [node]).
fn selected_node(allocation: &Value) -> Option<String> {
    let field = &allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0];
    (field["key"] == "metadata.name" && field["operator"] == "In")
        .then(|| field["values"][0].as_str().map(str::to_string))
        .flatten()
}

async fn gpu_cluster(nodes: &[&str]) -> Cluster {
    let c = cluster(Config::default()).await;
    c.create(queue("q"));
    c.create(device_class());
    for n in nodes {
        c.create(node(n, 0));
        c.create(slice(n));
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_claim_is_allocated_and_reserved_before_the_pod_is_bound() {
    let c = gpu_cluster(&["n1", "n2"]).await;
    c.create(template("one-gpu", 1));
    c.create(group("a", 1, "q"));
    c.create(claiming_pod("a-0", "a", "one-gpu"));

    let _s = c.start_scheduler();
    eventually("the PodGroup says the pod waits for its claim", || {
        condition(&c, "a", "ResourceClaimNotReady").is_some_and(|k| {
            k["message"]
                == "1 pod(s) wait for ResourceClaims: default/a-0 (spec.resourceClaims[0]: the \
                    claim of template default/one-gpu is not made yet)"
        })
    })
    .await;
    assert_eq!(c.node_of("a-0"), None);
    assert_eq!(first_write(&c, Verb::Create, "pods/binding", "a-0"), None);

    let name = make_claim(&c, "a-0", "one-gpu");
    eventually("the pod is bound", || c.node_of("a-0").is_some()).await;
    let node = c.node_of("a-0").unwrap();
    let cl = claim(&c, &name);
    assert_eq!(
        cl["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    let allocation = &cl["status"]["allocation"];
    let results = allocation["devices"]["results"]
        .as_array()
        .expect("results");
    assert_eq!(results.len(), 1, "{allocation}");
    assert_eq!(results[0]["request"], "gpu");
    assert_eq!(results[0]["driver"], DRIVER);
    assert_eq!(
        results[0]["pool"],
        json!(node),
        "a device of the pod's node"
    );
    assert!(results[0]["device"]
        .as_str()
        .is_some_and(|d| d.starts_with("gpu-")));
    assert_eq!(selected_node(allocation), Some(node.clone()));
    assert_eq!(
        cl["status"]["reservedFor"],
        json!([{"resource": "pods", "name": "a-0", "uid": uid(&c, "v1", "Pod", "a-0")}])
    );
    // The finalizer, then allocation and reservation in one status write, then the binding.
    let finalized = first_write(&c, Verb::Patch, "resourceclaims", &name).expect("finalizer");
    let reserved =
        first_write(&c, Verb::Update, "resourceclaims/status", &name).expect("status written");
    let bound = first_write(&c, Verb::Create, "pods/binding", "a-0").expect("bound");
    assert!(
        finalized < reserved && reserved < bound,
        "finalizer {finalized}, status {reserved}, binding {bound}"
    );
    let status_writes = (c.server.requests().iter())
        .filter(|r| r.resource == "resourceclaims/status")
        .count();
    assert_eq!(
        status_writes, 1,
        "one status write: allocation and reservedFor together"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_whose_claims_do_not_all_fit_allocates_nothing_until_a_node_is_added() {
    let c = gpu_cluster(&["n1", "n2", "n3"]).await;
    c.create(template("four-gpus", 4));
    c.create(group("g", 4, "q"));
    let mut claims = Vec::new();
    for i in 0..4 {
        let p = format!("g-{i}");
        c.create(claiming_pod(&p, "g", "four-gpus"));
        claims.push((p.clone(), make_claim(&c, &p, "four-gpus")));
    }
    // A plain pod created after the gang, to know a cycle has passed over both.
    c.create(group("plain", 1, "q"));
    c.create(pod("plain-0", "plain", 0));

    let _s = c.start_scheduler();
    eventually("the plain pod is bound", || c.node_of("plain-0").is_some()).await;
    eventually("the gang is Unschedulable", || {
        (c.group("g")["status"]["conditions"].as_array())
            .is_some_and(|cs| cs.iter().any(|k| k["type"] == "Unschedulable"))
    })
    .await;
    let written = |c: &Cluster| {
        (c.server.requests().iter())
            .filter(|r| r.resource.starts_with("resourceclaims") || r.resource == "pods/binding")
            .filter(|r| r.name.as_deref() != Some("plain-0"))
            .count()
    };
    assert_eq!(written(&c), 0, "no claim written and no member bound");
    for (p, name) in &claims {
        assert_eq!(c.node_of(p), None);
        assert!(claim(&c, name)["status"]["allocation"].is_null());
    }

    c.create(node("n4", 0));
    c.create(slice("n4"));
    eventually("the gang is bound", || {
        claims.iter().all(|(p, _)| c.node_of(p).is_some())
    })
    .await;
    let mut nodes = Vec::new();
    for (p, name) in &claims {
        let node = c.node_of(p).unwrap();
        let cl = claim(&c, name);
        let allocation = &cl["status"]["allocation"];
        assert_eq!(selected_node(allocation), Some(node.clone()), "{p}");
        let results = allocation["devices"]["results"].as_array().unwrap();
        assert_eq!(results.len(), 4, "{p}: {allocation}");
        assert!(results.iter().all(|r| r["pool"] == json!(node)), "{p}");
        assert_eq!(cl["status"]["reservedFor"][0]["name"], json!(p));
        let reserved = first_write(&c, Verb::Update, "resourceclaims/status", name).unwrap();
        assert!(reserved < first_write(&c, Verb::Create, "pods/binding", p).unwrap());
        nodes.push(node);
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 4, "one member per node: {nodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_another_writer_allocates_meanwhile_is_never_overwritten() {
    let c = gpu_cluster(&["n1", "n2"]).await;
    c.create(template("one-gpu", 1));
    c.create(group("a", 1, "q"));
    c.create(claiming_pod("a-0", "a", "one-gpu"));
    let name = make_claim(&c, "a-0", "one-gpu");
    // The scheduler's first status write of the claim is held in flight...
    c.server
        .add_fault(
            FaultRule::stall(Some(Verb::Update), "resourceclaims/status")
                .from_client("basalt-scheduler")
                .times(1),
        )
        .unwrap();

    let (_s, logs) = c.start_logged(&[]);
    eventually("the scheduler's status write is in flight", || {
        c.server.faults().rules[0].remaining == Some(0)
    })
    .await;
    // ... while another writer allocates the claim (n2's last GPU) ...
    let theirs = json!({"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-3"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}});
    c.server
        .patch_status(
            RESOURCE,
            "ResourceClaim",
            "default",
            &name,
            PatchKind::Merge,
            &json!({"status": {"allocation": theirs}}),
        )
        .expect("another writer allocates");
    // ... then the held write goes on, with the version it read: a conflict.
    c.server.clear_faults();
    eventually("the pod is bound", || c.node_of("a-0").is_some()).await;
    let conflicts = (c.server.requests().iter())
        .filter(|r| r.resource == "resourceclaims/status" && r.code == 409)
        .count();
    assert_eq!(conflicts, 1, "the held write met a conflict");
    let cl = claim(&c, &name);
    assert_eq!(
        cl["status"]["allocation"], theirs,
        "their allocation stands"
    );
    assert_eq!(c.node_of("a-0").as_deref(), Some("n2"), "where it says");
    assert_eq!(cl["status"]["reservedFor"][0]["name"], "a-0");
    // The bind that met the conflict was not sent: one binding only.
    let bindings = (c.server.requests().iter())
        .filter(|r| r.resource == "pods/binding")
        .count();
    assert_eq!(bindings, 1);
    assert!(
        logs.any(|l| l["level"] == "WARN"
            && l["message"] == "bind failed"
            && l["error"].as_str().is_some_and(|e| e
                == format!(
                    "cannot reserve ResourceClaim default/{name} for the pod: it was allocated by \
                     another writer meanwhile"
                ))),
        "the failure names the claim: {:#?}",
        logs.problems()
    );
    eventually("the PodGroup's BindFailed condition is cleared", || {
        condition(&c, "a", "BindFailed").is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_that_fails_releases_the_claim_and_the_pod_is_bound_later() {
    let c = gpu_cluster(&["n1"]).await;
    c.create(template("one-gpu", 1));
    c.create(group("a", 1, "q"));
    c.create(claiming_pod("a-0", "a", "one-gpu"));
    let name = make_claim(&c, "a-0", "one-gpu");
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 1.0, 500).times(1))
        .unwrap();

    let _s = c.start_scheduler();
    eventually("the pod is bound", || c.node_of("a-0").is_some()).await;
    let log: Vec<(String, u16)> = (c.server.requests().iter())
        .filter(|r| r.resource.starts_with("resourceclaims") || r.resource == "pods/binding")
        .map(|r| (r.resource.clone(), r.code))
        .collect();
    let expected: Vec<(String, u16)> = [
        ("resourceclaims", 200),
        // Allocated and reserved; the binding fails; released (deallocated, nobody else uses
        // it); then allocated and reserved again, and bound.
        ("resourceclaims/status", 200),
        ("pods/binding", 500),
        ("resourceclaims/status", 200),
        ("resourceclaims/status", 200),
        ("pods/binding", 201),
    ]
    .iter()
    .map(|(r, code)| (r.to_string(), *code))
    .collect();
    assert_eq!(log, expected);
    let cl = claim(&c, &name);
    assert_eq!(
        selected_node(&cl["status"]["allocation"]).as_deref(),
        Some("n1")
    );
    assert_eq!(cl["status"]["reservedFor"][0]["name"], "a-0");
    assert_eq!(cl["status"]["reservedFor"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_dra_nothing_is_said_plain_pods_bind_and_pods_with_claims_wait() {
    let c = cluster(Config {
        serve_dra: false,
        ..Config::default()
    })
    .await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(group("a", 1, "q"));
    c.create(claiming_pod("a-0", "a", "one-gpu"));
    c.create(group("plain", 1, "q"));
    c.create(pod("plain-0", "plain", 1));

    let (_s, logs) = c.start_logged(&[]);
    eventually("the plain pod is bound", || c.node_of("plain-0").is_some()).await;
    eventually("the PodGroup says the pod waits for its claim", || {
        condition(&c, "a", "ResourceClaimNotReady").is_some()
    })
    .await;
    assert_eq!(c.node_of("a-0"), None);
    assert_eq!(first_write(&c, Verb::Create, "pods/binding", "a-0"), None);
    // A few more cycles: still nothing said about the missing group.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let problems = logs.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        !logs.any(|l| l.to_string().contains("resource.k8s.io")),
        "nothing said about resource.k8s.io"
    );
}

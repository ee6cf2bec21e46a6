//! Claims before binds, end to end: an unbound claim of a `WaitForFirstConsumer` class is
//! pointed at the pod's node (`volume.kubernetes.io/selected-node`) before the pod is bound, as
//! kube-scheduler's VolumeBinding does; a claim that cannot be annotated keeps its pod (and its
//! gang) unbound with an Event; a bound claim, or one of an `Immediate` class, is left alone.

mod common;

use basalt_apiserver::{Config, FaultRule, PatchKind, Verb};
use common::*;
use serde_json::{json, Value};

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

fn class(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "example.com/local", "volumeBindingMode": mode})
}

fn claim(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}})
}

/// A gang member mounting `claims`.
fn pod_with(name: &str, group: &str, claims: &[&str]) -> Value {
    let mut p = pod(name, group, 1);
    p["spec"]["volumes"] = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    p
}

fn selected_node(c: &Cluster, claim: &str) -> Option<String> {
    c.server
        .get("v1", "PersistentVolumeClaim", "default", claim)
        .and_then(|v| {
            v["metadata"]["annotations"][SELECTED_NODE]
                .as_str()
                .map(str::to_string)
        })
}

/// Sequence number of the first answered write of `resource` on `name` with `code` 2xx.
fn first_write(c: &Cluster, resource: &str, name: &str) -> Option<u64> {
    c.server
        .requests()
        .iter()
        .find(|r| r.resource == resource && r.name.as_deref() == Some(name) && r.code / 100 == 2)
        .map(|r| r.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claim_is_pointed_at_the_node_before_the_bind_and_a_bound_one_is_left_alone() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(class("wfc", "WaitForFirstConsumer"));
    c.create(claim("data", "wfc"));
    // A claim the PV controller has bound already (volume and claim point at each other).
    let mut bound = claim("ready", "wfc");
    bound["spec"]["volumeName"] = json!("pv-ready");
    c.create(bound);
    c.create(
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-ready"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "wfc", "hostPath": {"path": "/tmp/pv-ready"},
                 "claimRef": {"namespace": "default", "name": "ready"}}}),
    );
    let phase = json!({"status": {"phase": "Bound"}});
    for (kind, ns, name) in [
        ("PersistentVolume", "", "pv-ready"),
        ("PersistentVolumeClaim", "default", "ready"),
    ] {
        c.server
            .patch_status("v1", kind, ns, name, PatchKind::Merge, &phase)
            .unwrap();
    }
    c.create(group("g", 1, "q"));
    c.create(pod_with("g-0", "g", &["data"]));
    c.create(group("h", 1, "q"));
    c.create(pod_with("h-0", "h", &["ready"]));

    let _s = c.start_scheduler();
    eventually("both pods are bound", || {
        c.node_of("g-0").is_some() && c.node_of("h-0").is_some()
    })
    .await;
    assert_eq!(selected_node(&c, "data").as_deref(), Some("n1"));
    let annotated = first_write(&c, "persistentvolumeclaims", "data").expect("claim patched");
    let bound_at = first_write(&c, "pods/binding", "g-0").expect("pod bound");
    assert!(
        annotated < bound_at,
        "the claim is annotated (write {annotated}) before the binding (write {bound_at})"
    );
    // A bound claim gets no annotation, and no patch at all.
    assert_eq!(selected_node(&c, "ready"), None);
    assert!(
        !c.server
            .requests()
            .iter()
            .any(|r| r.resource == "persistentvolumeclaims" && r.name.as_deref() != Some("data")),
        "only the waiting claim is written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_cannot_be_annotated_keeps_its_gang_unbound_with_an_event() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(class("wfc", "WaitForFirstConsumer"));
    c.create(claim("data-0", "wfc"));
    c.create(claim("data-1", "wfc"));
    // The scheduler may not patch claims (as under an RBAC that does not allow it).
    c.server
        .add_fault(
            FaultRule::error(Verb::Patch, "persistentvolumeclaims", 1.0, 403)
                .from_client("basalt-scheduler"),
        )
        .unwrap();
    c.create(group("g", 2, "q"));
    c.create(pod_with("g-0", "g", &["data-0"]));
    c.create(pod_with("g-1", "g", &["data-1"]));
    // A pod without claims, created after them, to know a cycle has passed over the gang.
    c.create(group("plain", 1, "q"));
    c.create(pod("plain-0", "plain", 1));

    let _s = c.start_scheduler();
    eventually("the plain pod is bound", || c.node_of("plain-0").is_some()).await;
    eventually(
        "an Event on a gang member says its claim was refused",
        || {
            c.events("FailedScheduling", "g-0").iter().any(|e| {
                e["message"].as_str().is_some_and(|m| {
                    m.starts_with("cannot select node n1 on persistentvolumeclaim \"data-0\": ")
                        && m.contains("(403)")
                })
            })
        },
    )
    .await;
    assert_eq!(c.node_of("g-0"), None);
    assert_eq!(c.node_of("g-1"), None, "the gang waits whole");
    assert!(
        !c.server
            .requests()
            .iter()
            .any(|r| r.resource == "pods/binding" && r.name.as_deref() != Some("plain-0")),
        "no member's binding is sent while a claim cannot point at its node"
    );

    // Allowed again: the gang binds whole, each claim pointed at its pod's node first.
    c.server.set_faults(Default::default()).unwrap();
    eventually("the gang is bound", || {
        c.node_of("g-0").is_some() && c.node_of("g-1").is_some()
    })
    .await;
    for (p, claim) in [("g-0", "data-0"), ("g-1", "data-1")] {
        assert_eq!(selected_node(&c, claim), c.node_of(p));
        let annotated = first_write(&c, "persistentvolumeclaims", claim).unwrap();
        assert!(annotated < first_write(&c, "pods/binding", p).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_claim_is_missing_is_not_bound() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(group("g", 1, "q"));
    c.create(pod_with("g-0", "g", &["gone"]));
    c.create(group("plain", 1, "q"));
    c.create(pod("plain-0", "plain", 1));

    let _s = c.start_scheduler();
    eventually("the plain pod is bound", || c.node_of("plain-0").is_some()).await;
    // Refused at the bind, or held by the engine before it (VolumeNotReady): either way an
    // Event names the claim.
    eventually("an Event names the missing claim", || {
        ["FailedScheduling", "VolumeNotReady"].iter().any(|reason| {
            c.events(reason, "g-0")
                .iter()
                .any(|e| e["message"].as_str().is_some_and(|m| m.contains("gone\"")))
        })
    })
    .await;
    assert_eq!(c.node_of("g-0"), None);
    assert!(first_write(&c, "pods/binding", "g-0").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_goes_on_while_the_volume_watches_fail() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(group("first", 1, "q"));
    c.create(pod("first-0", "first", 1));
    let _s = c.start_scheduler();
    eventually("the first pod is bound", || c.node_of("first-0").is_some()).await;

    // From now on every list and watch of claims, volumes and classes fails.
    for resource in [
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
    ] {
        for verb in [Verb::List, Verb::Watch] {
            c.server
                .add_fault(FaultRule::error(verb, resource, 1.0, 500))
                .unwrap();
        }
    }
    c.server.drop_watches();
    c.create(group("next", 1, "q"));
    c.create(pod("next-0", "next", 1));
    eventually("a pod without claims is still bound", || {
        c.node_of("next-0").is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_volume_that_fits_on_the_node_is_reserved_for_a_waiting_claim_before_the_bind() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(class("local", "WaitForFirstConsumer"));
    let local_pv = |name: &str, size: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "local", "local": {"path": "/mnt/disk"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchFields": [
                         {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}})
    };
    for (name, size) in [("pv-big", "100Gi"), ("pv-small", "2Gi")] {
        c.create(local_pv(name, size));
        c.server
            .patch_status(
                "v1",
                "PersistentVolume",
                "",
                name,
                PatchKind::Merge,
                &json!({"status": {"phase": "Available"}}),
            )
            .unwrap();
    }
    c.create(claim("data", "local"));
    c.create(group("g", 1, "q"));
    c.create(pod_with("g-0", "g", &["data"]));

    let _s = c.start_scheduler();
    eventually("the pod is bound", || c.node_of("g-0").is_some()).await;
    let pv = c
        .server
        .get("v1", "PersistentVolume", "", "pv-small")
        .unwrap();
    let claim_uid = c
        .server
        .get("v1", "PersistentVolumeClaim", "default", "data")
        .unwrap()["metadata"]["uid"]
        .clone();
    assert_eq!(
        pv["spec"]["claimRef"],
        json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default",
               "name": "data", "uid": claim_uid}),
        "the smallest volume that fits is reserved for the claim"
    );
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    let big = c
        .server
        .get("v1", "PersistentVolume", "", "pv-big")
        .unwrap();
    assert!(big["spec"].get("claimRef").is_none());
    // A claim given a static volume is not sent to the provisioner.
    assert_eq!(selected_node(&c, "data"), None);
    let reserved = first_write(&c, "persistentvolumes", "pv-small").expect("volume patched");
    assert!(reserved < first_write(&c, "pods/binding", "g-0").unwrap());
}

//! Claims, volumes and storage classes are served as a real API server serves them (kube-rs
//! typed clients and kubectl), and scheduling gates may only be removed from an existing pod.

use basalt_apiserver::{ApiServer, Config, Handle, PatchKind};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

mod common;
use common::{kubectl, kubectl_installed, status_of, typed};

async fn start() -> (Handle, Client) {
    common::start(Config::default()).await
}

#[tokio::test]
async fn claims_volumes_and_classes_are_served_with_their_defaults_and_status() {
    let (server, client) = start().await;
    let classes: Api<StorageClass> = Api::all(client.clone());
    let class = classes
        .create(
            &PostParams::default(),
            &typed(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "local"}, "provisioner": "example.com/local"}),
            ),
        )
        .await
        .unwrap();
    // Defaulted as kube-apiserver does.
    assert_eq!(class.volume_binding_mode.as_deref(), Some("Immediate"));
    assert_eq!(class.reclaim_policy.as_deref(), Some("Delete"));
    let refused = classes
        .create(
            &PostParams::default(),
            &typed(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "none"}, "provisioner": ""}),
            ),
        )
        .await
        .unwrap_err();
    let s = status_of(refused);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "StorageClass \"none\" is invalid: provisioner: Required value"
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = claims
        .create(
            &PostParams::default(),
            &typed(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
                // Ignored on create: a claim starts Pending.
                "status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    assert_eq!(claim.namespace().as_deref(), Some("default"));
    assert_eq!(
        claim.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    // Claims live in namespaces: one that does not exist is 404.
    let elsewhere: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "nowhere");
    let e = elsewhere
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "x"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 404);

    // The annotation the scheduler writes, then the status the PV controller writes.
    let patched = claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.annotations()["volume.kubernetes.io/selected-node"],
        "n1"
    );
    let bound = claims
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    assert_eq!(bound.status.and_then(|s| s.phase).as_deref(), Some("Bound"));

    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes
        .create(
            &PostParams::default(),
            &typed(json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pv-1", "namespace": "default"},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": "local", "local": {"path": "/mnt/disk"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}})),
        )
        .await
        .unwrap();
    // Cluster scoped: a namespace in the body is dropped.
    assert_eq!(pv.namespace(), None);
    assert_eq!(pv.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    assert_eq!(
        volumes.list(&Default::default()).await.unwrap().items.len(),
        1
    );
    assert_eq!(
        server.get("v1", "PersistentVolume", "", "pv-1").unwrap()["spec"]["local"]["path"],
        "/mnt/disk"
    );
}

fn gated_pod(name: &str, gates: &[&str]) -> Value {
    let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingGates": gates, "containers": [{"name": "main", "image": "trainer:1"}]}})
}

#[tokio::test]
async fn scheduling_gates_may_only_be_removed_from_an_existing_pod() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    server.create(gated_pod("p", &["a", "b"])).unwrap();

    // Adding a gate, by merge patch or by PUT: 422, kube-apiserver's words.
    let e = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}, {"name": "x"}]}}),
            ),
        )
        .await
        .unwrap_err();
    let s = status_of(e);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "Pod \"p\" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate 'x'"
    );
    let mut replaced = pods.get("p").await.unwrap();
    replaced.spec.as_mut().unwrap().scheduling_gates = Some(vec![
        typed(json!({"name": "a"})),
        typed(json!({"name": "y"})),
    ]);
    let e = pods
        .replace("p", &PostParams::default(), &replaced)
        .await
        .unwrap_err();
    assert!(
        status_of(e)
            .message
            .ends_with("found new scheduling gate 'y'"),
        "a PUT that swaps a gate for another adds one"
    );

    // Removing is allowed, one gate or all of them; adding one back is not.
    server
        .patch(
            "v1",
            "Pod",
            "default",
            "p",
            PatchKind::Merge,
            &json!({"spec": {"schedulingGates": [{"name": "b"}]}}),
        )
        .expect("one gate removed");
    server
        .patch(
            "v1",
            "Pod",
            "default",
            "p",
            PatchKind::Merge,
            &json!({"spec": {"schedulingGates": null}}),
        )
        .expect("the last gate removed");
    let e = server
        .patch(
            "v1",
            "Pod",
            "default",
            "p",
            PatchKind::Merge,
            &json!({"spec": {"schedulingGates": [{"name": "b"}]}}),
        )
        .unwrap_err();
    assert_eq!(e.code, 422);

    // A pod created bound may not carry gates.
    let mut bound = gated_pod("q", &["a"]);
    bound["spec"]["nodeName"] = json!("n1");
    let e = server.create(bound).unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Pod \"q\" is invalid: spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
    );
}

const STORAGE: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: wfc}
provisioner: example.com/local
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: wfc
  hostPath: {path: /tmp/pv-1}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: wfc
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_gets_claims_volumes_and_classes_by_their_short_names() {
    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    let server = ApiServer::start(Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kc).unwrap();
    let file = dir.path().join("storage.yaml");
    std::fs::write(&file, STORAGE).unwrap();
    let kc2 = kc.clone();
    let file = file.to_str().unwrap().to_string();
    let created = tokio::task::spawn_blocking(move || kubectl(&kc2, &["create", "-f", &file]))
        .await
        .unwrap();
    for line in [
        "storageclass.storage.k8s.io/wfc created",
        "persistentvolume/pv-1 created",
        "persistentvolumeclaim/data created",
    ] {
        assert!(created.contains(line), "{created}");
    }
    let listed =
        tokio::task::spawn_blocking(move || kubectl(&kc, &["get", "sc,pv,pvc", "-o", "json"]))
            .await
            .unwrap();
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let kinds: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["StorageClass", "PersistentVolume", "PersistentVolumeClaim"]
    );
    assert_eq!(
        listed["items"][0]["volumeBindingMode"],
        "WaitForFirstConsumer"
    );
}

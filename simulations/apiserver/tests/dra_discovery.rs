//! Dynamic Resource Allocation around the claims themselves: discovery of `resource.k8s.io/v1`
//! (kube-rs raw and `Discovery`), a server without it (`Config::serve_dra = false`), pods'
//! `status.resourceClaimStatuses` across status writes, and kubectl on the DRA kinds.

use basalt_apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};

use serde_json::{json, Value};

mod common;
use common::{kubectl, kubectl_installed, start, status_of, typed};

#[tokio::test]
async fn pod_status_writes_keep_resource_claim_statuses() {
    let (_server, client) = start(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": "trainer-0"}, "spec": {
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}})),
    )
    .await
    .unwrap();
    let claim_names = |p: &Pod| -> Vec<String> {
        p.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.resource_claim_name.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    // The resourceclaim controller links the pod to its generated claim...
    let linked = pods
        .patch_status(
            "trainer-0",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "trainer-0-gpu-x7k2q"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(claim_names(&linked), ["trainer-0-gpu-x7k2q"]);
    // ...and later status writes (a kubelet's), main-resource writes and a status PUT keep it.
    let p = pods
        .patch_status(
            "trainer-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(claim_names(&p), ["trainer-0-gpu-x7k2q"]);
    let p = pods
        .patch(
            "trainer-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(claim_names(&p), ["trainer-0-gpu-x7k2q"]);
    let p = pods
        .replace_status("trainer-0", &PostParams::default(), &p)
        .await
        .unwrap();
    assert_eq!(claim_names(&p), ["trainer-0-gpu-x7k2q"]);
    assert_eq!(
        p.spec.unwrap().resource_claims.unwrap()[0]
            .resource_claim_template_name
            .as_deref(),
        Some("one-gpu")
    );
}

#[tokio::test]
async fn discovery_serves_the_group_unless_dra_is_off() {
    let (server, client) = start(Config::default()).await;
    let groups = client.list_api_groups().await.unwrap();
    let group = groups
        .groups
        .iter()
        .find(|g| g.name == "resource.k8s.io")
        .expect("resource.k8s.io in /apis");
    assert_eq!(
        group.preferred_version.as_ref().unwrap().group_version,
        "resource.k8s.io/v1"
    );
    let resources = client
        .list_api_group_resources("resource.k8s.io/v1")
        .await
        .unwrap();
    let mut names: Vec<(String, bool)> = resources
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.namespaced))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("deviceclasses".to_string(), false),
            ("resourceclaims".to_string(), true),
            ("resourceclaims/status".to_string(), true),
            ("resourceclaimtemplates".to_string(), true),
            ("resourceslices".to_string(), false),
        ]
    );
    assert!(resources.resources.iter().all(|r| r.short_names.is_none()));

    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "resource.k8s.io",
            "v1",
            "ResourceClaim",
        ))
        .expect("kube-rs discovery resolves ResourceClaim");
    assert_eq!(ar.plural, "resourceclaims");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    let (_, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "resource.k8s.io",
            "v1",
            "ResourceSlice",
        ))
        .unwrap();
    assert_eq!(caps.scope, Scope::Cluster);
    server.shutdown().await;

    let (server, client) = start(Config {
        serve_dra: false,
        ..Config::default()
    })
    .await;
    let groups = client.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().all(|g| g.name != "resource.k8s.io"));
    assert!(groups.groups.iter().any(|g| g.name == "storage.k8s.io"));
    let e = client
        .list_api_group_resources("resource.k8s.io/v1")
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 404);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        status_of(claims.list(&ListParams::default()).await.unwrap_err()).code,
        404
    );
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    assert_eq!(
        status_of(
            slices
                .create(&PostParams::default(), &typed::<ResourceSlice>(json!({"metadata": {"name": "s"},
                    "spec": {"driver": "d", "pool": {"name": "n", "resourceSliceCount": 1}, "allNodes": true}})),)
                .await
                .unwrap_err()
        )
        .code,
        404
    );
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert!(!discovery.has_group("resource.k8s.io"));
    assert!(server
        .resources()
        .iter()
        .all(|r| r.group != "resource.k8s.io"));
    assert!(server
        .create(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "x"}})
        )
        .is_err());
}

const DRA_OBJECTS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-1-gpus}
spec:
  driver: gpu.example.com
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  nodeName: node-1
  devices:
  - name: gpu-0
    attributes: {gpu.example.com/model: {string: h100}}
    capacity: {gpu.example.com/memory: {value: 80Gi}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_gets_the_dra_kinds() {
    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    let server = ApiServer::start(Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kc).unwrap();
    let file = dir.path().join("dra.yaml");
    std::fs::write(&file, DRA_OBJECTS).unwrap();
    let file = file.to_str().unwrap().to_string();
    let (created, listed, claims) = tokio::task::spawn_blocking(move || {
        (
            kubectl(&kc, &["create", "-f", &file]),
            kubectl(
                &kc,
                &[
                    "get",
                    "deviceclasses,resourceslices,resourceclaimtemplates,resourceclaims",
                    "-o",
                    "json",
                ],
            ),
            kubectl(&kc, &["get", "resourceclaims"]),
        )
    })
    .await
    .unwrap();
    for line in [
        "deviceclass.resource.k8s.io/gpu.example.com created",
        "resourceslice.resource.k8s.io/node-1-gpus created",
        "resourceclaimtemplate.resource.k8s.io/one-gpu created",
        "resourceclaim.resource.k8s.io/shared-gpu created",
    ] {
        assert!(created.contains(line), "{created}");
    }
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let kinds: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "DeviceClass",
            "ResourceSlice",
            "ResourceClaimTemplate",
            "ResourceClaim"
        ]
    );
    assert_eq!(
        listed["items"][3]["spec"]["devices"]["requests"][0]["exactly"]["count"],
        1
    );
    assert!(claims.contains("shared-gpu"), "{claims}");
}

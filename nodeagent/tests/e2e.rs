//! End to end: `reconcile_once` and the `basalt-nodeagent` binary against the in-memory API
//! server (basalt-apiserver) over loopback, with the fake GPU backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, Handle};
use basalt_crd_types::NodeTopology;
use basalt_nodeagent::backend::GpuBackend;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::mig::applier::{Outcome, Step};
use basalt_nodeagent::publish::{
    reconcile_once, AgentConfig, Report, Write, CLIQUE_LABEL, CLIQUE_OWNER_ANNOTATION,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const GB200_CLIQUE: &str = "c9d4b6a2-3f1e-4b8a-9d2c-7e5f1a0b3c4d.32766";
const MIG_LABEL: &str = "nvidia.com/mig.config";
const REPLICAS_LABEL: &str = "scheduling.basalt.dev/time-slicing-replicas";
const DP_LABEL: &str = "nvidia.com/device-plugin.config";

async fn start() -> (Handle, Client) {
    let server = ApiServer::start(Config::default())
        .await
        .expect("server starts");
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    // kube 5 retries 429/503/504 for minutes by default; a test wants each answer at once.
    cfg.default_retry = false;
    let client = Client::try_from(cfg).expect("client");
    // The ConfigMaps the agent reads and writes live in the GPU operator's namespace.
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    (server, client)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn backend(name: &str) -> FakeBackend {
    FakeBackend::from_file(&fixture(name)).expect("fixture loads")
}

fn agent(node: &str) -> AgentConfig {
    AgentConfig {
        node_name: node.into(),
        dry_run: false,
        no_mig: false,
        mig_config_map: "gpu-operator/default-mig-parted-config".parse().unwrap(),
        mig_config_key: "config.yaml".into(),
        device_plugin_config_map: "gpu-operator/basalt-device-plugin-config".parse().unwrap(),
        mig_min_interval: std::time::Duration::from_secs(600),
        restart_device_plugin: None,
        pod_resources: None,
    }
}

async fn create_node(client: &Client, name: &str, labels: Value) -> Node {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("node created")
}

async fn get_node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
}

async fn label_node(client: &Client, name: &str, labels: Value) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .expect("node labelled");
}

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn annotations(node: &Node) -> BTreeMap<String, String> {
    node.metadata.annotations.clone().unwrap_or_default()
}

async fn topology(client: &Client, name: &str) -> Option<NodeTopology> {
    Api::<NodeTopology>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

/// (status, message) of the NodeTopology's `MigLayoutValid` condition.
async fn layout_condition(client: &Client, name: &str) -> (String, String) {
    let t = topology(client, name).await.expect("NodeTopology");
    let c = t
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "MigLayoutValid")
        .unwrap_or_else(|| panic!("no MigLayoutValid condition on NodeTopology {name}"));
    (c.status, c.message.unwrap_or_default())
}

/// The Events about Node `name`, as (type, reason, message).
async fn node_events(client: &Client, name: &str) -> Vec<(String, String, String)> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Node")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

async fn reconcile(client: &Client, b: &FakeBackend, cfg: &AgentConfig) -> Report {
    reconcile_once(client, b, cfg)
        .await
        .unwrap_or_else(|e| panic!("reconcile of {} failed: {e}", cfg.node_name))
}

/// (profile, start) of each MIG instance of `gpu`, as the backend has them now.
fn instances(b: &FakeBackend, gpu: usize) -> Vec<(String, u32)> {
    let raw = b.report().unwrap();
    raw.gpus[gpu]
        .mig
        .as_ref()
        .map(|m| {
            let mut v: Vec<_> = m
                .instances
                .iter()
                .map(|i| (i.profile.clone(), i.start))
                .collect();
            v.sort_by_key(|(_, s)| *s);
            v
        })
        .unwrap_or_default()
}

/// (profile, start) of each MIG device of `gpu` in the published NodeTopology.
fn published_instances(t: &NodeTopology, gpu: usize) -> Vec<(String, u32)> {
    let mut v: Vec<_> = t.spec.gpus[gpu]
        .mig
        .as_ref()
        .map(|m| {
            m.devices
                .iter()
                .map(|d| (d.profile.clone(), d.start))
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|(_, s)| *s);
    v
}

fn all(profile: &str, starts: &[u32]) -> Vec<(String, u32)> {
    starts.iter().map(|s| (profile.to_string(), *s)).collect()
}

#[tokio::test]
async fn node_topology_is_published_and_updated_and_the_clique_label_set_when_absent() {
    let (server, client) = start().await;

    // An HGX H100 node: one NVSwitch island of 8, no fabric clique.
    let node = create_node(
        &client,
        "hgx-1",
        json!({"node.kubernetes.io/instance-type": "p5.48xlarge"}),
    )
    .await;
    let h100 = backend("h100-hgx.yaml");
    let r = reconcile(&client, &h100, &agent("hgx-1")).await;
    assert_eq!(r.topology, Some(Write::Created));
    assert_eq!((r.gpus, r.islands.clone()), (8, vec![(0..8).collect()]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let t = topology(&client, "hgx-1")
        .await
        .expect("NodeTopology hgx-1");
    assert_eq!(t.spec.gpus.len(), 8);
    assert_eq!(t.spec.islands, vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(t.spec.link_matrix.len(), 8);
    assert!(t.spec.link_matrix[0][1..].iter().all(|l| l == "NV18"));
    assert_eq!(t.spec.clique_id, None);
    let owner = &t.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("Node", "hgx-1", node.metadata.uid.as_ref())
    );
    // The stored object is the CRD kind the scheduler reads.
    let stored = server
        .get(
            "scheduling.basalt.dev/v1alpha1",
            "NodeTopology",
            "",
            "hgx-1",
        )
        .expect("stored NodeTopology");
    assert_eq!(stored["spec"]["gpus"].as_array().map(Vec::len), Some(8));
    // No fabric: no clique label; the node's own labels are kept.
    let n = get_node(&client, "hgx-1").await;
    assert_eq!(
        labels(&n).get("node.kubernetes.io/instance-type"),
        Some(&"p5.48xlarge".to_string())
    );
    assert!(!labels(&n).contains_key(CLIQUE_LABEL));

    // A second round with nothing changed writes nothing.
    let version = server.resource_version();
    let r = reconcile(&client, &h100, &agent("hgx-1")).await;
    assert_eq!(
        (r.topology, r.node_labels),
        (Some(Write::Unchanged), Some(Write::Unchanged))
    );
    assert_eq!(server.resource_version(), version);

    // The GPUs change (another board on the same node): the object is replaced.
    let pcie = backend("pcie-nvlink-pairs.yaml");
    let r = reconcile(&client, &pcie, &agent("hgx-1")).await;
    assert_eq!(r.topology, Some(Write::Updated));
    let t = topology(&client, "hgx-1").await.unwrap();
    assert_eq!(t.spec.gpus.len(), 4);
    assert_eq!(t.spec.islands, vec![vec![0, 1], vec![2, 3]]);

    // A GB200 tray without the operator's clique label: the agent sets it and marks it its own.
    create_node(&client, "tray-1", json!({"rack": "r7"})).await;
    let gb200 = backend("gb200-nvl72-tray.yaml");
    let r = reconcile(&client, &gb200, &agent("tray-1")).await;
    assert_eq!(r.clique_id.as_deref(), Some(GB200_CLIQUE));
    assert_eq!(r.node_labels, Some(Write::Updated));
    let n = get_node(&client, "tray-1").await;
    assert_eq!(
        labels(&n).get(CLIQUE_LABEL).map(String::as_str),
        Some(GB200_CLIQUE)
    );
    assert_eq!(labels(&n).get("rack").map(String::as_str), Some("r7"));
    assert_eq!(
        annotations(&n)
            .get(CLIQUE_OWNER_ANNOTATION)
            .map(String::as_str),
        Some("basalt-nodeagent")
    );
    let t = topology(&client, "tray-1").await.unwrap();
    assert_eq!(t.spec.clique_id.as_deref(), Some(GB200_CLIQUE));
    assert_eq!(t.spec.islands, vec![vec![0, 1, 2, 3]]);
    let r = reconcile(&client, &gb200, &agent("tray-1")).await;
    assert_eq!(r.node_labels, Some(Write::Unchanged));
    // The fabric goes away (the tray is replaced by a board without one): our label goes too.
    let r = reconcile(&client, &h100, &agent("tray-1")).await;
    assert_eq!((r.clique_id, r.node_labels), (None, Some(Write::Updated)));
    let n = get_node(&client, "tray-1").await;
    assert!(!labels(&n).contains_key(CLIQUE_LABEL), "{:?}", labels(&n));
    assert!(!annotations(&n).contains_key(CLIQUE_OWNER_ANNOTATION));
    assert_eq!(labels(&n).get("rack").map(String::as_str), Some("r7"));
    reconcile(&client, &gb200, &agent("tray-1")).await;

    // A tray whose clique label the GPU operator set: left alone, even though it differs.
    create_node(&client, "tray-2", json!({CLIQUE_LABEL: "operator-uuid.5"})).await;
    let r = reconcile(&client, &gb200, &agent("tray-2")).await;
    assert_eq!(r.node_labels, Some(Write::Unchanged));
    let n = get_node(&client, "tray-2").await;
    assert_eq!(
        labels(&n).get(CLIQUE_LABEL).map(String::as_str),
        Some("operator-uuid.5")
    );
    assert!(!annotations(&n).contains_key(CLIQUE_OWNER_ANNOTATION));
    // The NodeTopology still reports what the GPUs say.
    let t = topology(&client, "tray-2").await.unwrap();
    assert_eq!(t.spec.clique_id.as_deref(), Some(GB200_CLIQUE));

    // A node without GPUs gets an empty NodeTopology, not an error.
    create_node(&client, "cpu-1", json!({})).await;
    let r = reconcile(&client, &backend("no-gpu.yaml"), &agent("cpu-1")).await;
    assert_eq!((r.gpus, r.topology), (0, Some(Write::Created)));
    assert!(topology(&client, "cpu-1")
        .await
        .unwrap()
        .spec
        .gpus
        .is_empty());

    // An unknown node is an error naming it.
    let e = reconcile_once(&client, &h100, &agent("ghost"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("Node ghost"), "{e}");
    server.shutdown().await;
}

const LAYOUTS: &str = r#"version: v1
mig-configs:
  small:
    - devices: [1, 3]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  half:
    - devices: [1, 3]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  three-halves:
    - devices: [1, 3]
      mig-enabled: true
      mig-devices: {"3g.20gb": 3}
"#;

async fn create_mig_config(client: &Client) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": LAYOUTS},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &cm)
        .await
        .expect("mig-parted ConfigMap");
}

#[tokio::test]
async fn a_mig_layout_label_change_is_reconciled_and_a_busy_instance_survives() {
    let (server, client) = start().await;
    let a100 = backend("a100-mig.yaml");
    let before_gpu0 = instances(&a100, 0);
    let before_gpu2 = instances(&a100, 2);

    // The label names a layout, but the ConfigMap is not there yet: reported, the round goes on.
    create_node(&client, "a100-1", json!({MIG_LABEL: "small"})).await;
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("default-mig-parted-config") && e.contains("does not exist")),
        "{:?}",
        r.errors
    );
    assert_eq!(r.topology, Some(Write::Created));
    assert!(r.mig_steps.is_empty());
    assert_eq!(layout_condition(&client, "a100-1").await.0, "False");
    assert_eq!(node_events(&client, "a100-1").await.len(), 1);

    // Layout "small": GPU 1 already has seven 1g.5gb (kept), GPU 3 gets seven.
    create_mig_config(&client).await;
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.mig_layout.as_deref(), Some("small"));
    let on = |gpu: u32, kind: &str, outcome: &Outcome| {
        r.mig_steps
            .iter()
            .filter(|s| s.step.gpu() == gpu && s.step.kind() == kind && &s.outcome == outcome)
            .count()
    };
    assert_eq!(on(1, "keep", &Outcome::NotApplied), 7);
    assert_eq!(on(3, "create", &Outcome::Done), 7);
    assert_eq!(instances(&a100, 1), all("1g.5gb", &[0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(instances(&a100, 3), all("1g.5gb", &[0, 1, 2, 3, 4, 5, 6]));
    // GPUs the layout does not name are untouched.
    assert_eq!(instances(&a100, 0), before_gpu0);
    assert_eq!(instances(&a100, 2), before_gpu2);
    // The published topology shows the new instances.
    let t = topology(&client, "a100-1").await.unwrap();
    assert_eq!(
        published_instances(&t, 3),
        all("1g.5gb", &[0, 1, 2, 3, 4, 5, 6])
    );

    assert_eq!(
        layout_condition(&client, "a100-1").await,
        (
            "True".to_string(),
            "MIG layout \"small\" (node label nvidia.com/mig.config) was read and fits every GPU it selects".to_string()
        )
    );

    // Reconciling again changes nothing.
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(r
        .mig_steps
        .iter()
        .all(|s| s.step.kind() == "keep" && s.outcome == Outcome::NotApplied));
    assert_eq!(r.topology, Some(Write::Unchanged));

    // A workload starts on GPU 1's instance at slice 0, then the layout label changes to "half".
    let gi = a100.report().unwrap().gpus[1]
        .mig
        .as_ref()
        .unwrap()
        .instances
        .iter()
        .find(|i| i.start == 0)
        .unwrap()
        .id;
    assert!(a100.set_processes(1, gi, 2));
    label_node(&client, "a100-1", json!({MIG_LABEL: "half"})).await;

    // A dry run decides but changes neither the GPUs nor the API objects.
    let version = server.resource_version();
    let dry = AgentConfig {
        dry_run: true,
        ..agent("a100-1")
    };
    let r = reconcile(&client, &a100, &dry).await;
    assert!(r.mig_steps.iter().any(|s| s.step.kind() == "create"));
    assert!(r.mig_steps.iter().all(|s| s.outcome == Outcome::NotApplied));
    assert_eq!(instances(&a100, 3), all("1g.5gb", &[0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(server.resource_version(), version);

    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.mig_layout.as_deref(), Some("half"));
    // GPU 3 (idle): seven destroyed, two 3g.20gb created.
    assert_eq!(instances(&a100, 3), all("3g.20gb", &[0, 4]));
    let g3: Vec<_> = r.mig_steps.iter().filter(|s| s.step.gpu() == 3).collect();
    assert_eq!(
        g3.iter()
            .filter(|s| s.step.kind() == "destroy" && s.outcome == Outcome::Done)
            .count(),
        7
    );
    assert_eq!(
        g3.iter()
            .filter(|s| s.step.kind() == "create" && s.outcome == Outcome::Done)
            .count(),
        2
    );
    // GPU 1: its busy instance at slice 0 rules out a 3g.20gb at 0, so nothing is destroyed
    // there and the report says why.
    assert_eq!(instances(&a100, 1), all("1g.5gb", &[0, 1, 2, 3, 4, 5, 6]));
    let blocked: Vec<String> = r
        .mig_steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::Blocked { gpu: 1, reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert!(!blocked.is_empty(), "{:?}", r.mig_steps);
    assert!(
        blocked.iter().any(|b| b.contains("running process")),
        "{blocked:?}"
    );
    assert!(!r
        .mig_steps
        .iter()
        .any(|s| s.step.gpu() == 1 && s.step.kind() == "destroy"));
    let t = topology(&client, "a100-1").await.unwrap();
    assert_eq!(r.topology, Some(Write::Updated));
    assert_eq!(published_instances(&t, 3), all("3g.20gb", &[0, 4]));
    let busy = t.spec.gpus[1].mig.as_ref().unwrap();
    assert!(busy.devices.iter().any(|d| d.start == 0 && d.busy));

    // The workload ends: the next round completes the layout on GPU 1.
    assert!(a100.set_processes(1, gi, 0));
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(instances(&a100, 1), all("3g.20gb", &[0, 4]));
    assert_eq!(instances(&a100, 3), all("3g.20gb", &[0, 4]));
    assert!(!r.mig_steps.iter().any(|s| s.step.kind() == "blocked"));

    // An unknown layout is reported, the rest of the round still runs.
    label_node(&client, "a100-1", json!({MIG_LABEL: "nope"})).await;
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    assert!(
        r.errors.iter().any(|e| e.contains("\"nope\"")),
        "{:?}",
        r.errors
    );
    assert_eq!(r.topology, Some(Write::Unchanged));
    assert_eq!(instances(&a100, 3), all("3g.20gb", &[0, 4]));

    // A layout no A100-40GB can hold is a bad layout too: condition False naming the GPUs and
    // the rule, an Event; the GPUs are left as they are.
    label_node(&client, "a100-1", json!({MIG_LABEL: "three-halves"})).await;
    let events = node_events(&client, "a100-1").await.len();
    let r = reconcile(&client, &a100, &agent("a100-1")).await;
    let (status, message) = layout_condition(&client, "a100-1").await;
    assert_eq!(status, "False");
    assert!(
        message.contains("GPU 1, 3: no MIG layout on A100-40GB gives 3g.20gb=3: A100-40GB allows at most 2 3g.20gb instance(s), 3 wanted"),
        "{message}"
    );
    assert_eq!(r.events, vec![message]);
    assert_eq!(node_events(&client, "a100-1").await.len(), events + 1);
    assert_eq!(instances(&a100, 3), all("3g.20gb", &[0, 4]));
    server.shutdown().await;
}

/// The device plugin's config for `key`, parsed.
async fn plugin_config(client: &Client, key: &str) -> Option<serde_json::Value> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .get_opt("basalt-device-plugin-config")
        .await
        .unwrap()?;
    let text = cm.data?.get(key)?.clone();
    Some(serde_yaml::from_str(&text).expect("device plugin config is YAML"))
}

#[tokio::test]
async fn time_slicing_label_writes_the_device_plugin_config_and_off_cleans_up() {
    let (server, client) = start().await;
    let h100 = backend("h100-hgx.yaml");
    create_node(&client, "ts-1", json!({REPLICAS_LABEL: "4"})).await;
    let r = reconcile(&client, &h100, &agent("ts-1")).await;
    assert_eq!(r.time_slice_replicas, Some(4));
    assert_eq!(r.time_slicing_config, Some(Write::Created));
    // The node's own key, so an admission policy can hold each agent to it.
    let cfg = plugin_config(&client, "basalt-ts-ts-1")
        .await
        .expect("config key written");
    assert_eq!(
        cfg,
        json!({"version": "v1", "sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 4}
        ]}}})
    );
    let n = get_node(&client, "ts-1").await;
    assert_eq!(
        labels(&n).get(DP_LABEL).map(String::as_str),
        Some("basalt-ts-ts-1")
    );
    let t = topology(&client, "ts-1").await.unwrap();
    assert_eq!(t.spec.time_slice_replicas, Some(4));

    // Another node adds its key next to the first.
    create_node(&client, "ts-2", json!({REPLICAS_LABEL: "2"})).await;
    let r = reconcile(&client, &h100, &agent("ts-2")).await;
    assert_eq!(r.time_slicing_config, Some(Write::Updated));
    assert!(plugin_config(&client, "basalt-ts-ts-1").await.is_some());
    assert_eq!(
        plugin_config(&client, "basalt-ts-ts-2").await.unwrap()["sharing"]["timeSlicing"]
            ["resources"][0]["replicas"],
        json!(2)
    );
    // A third with the same count writes its own key; then nothing more to write.
    create_node(&client, "ts-3", json!({REPLICAS_LABEL: "4"})).await;
    let r = reconcile(&client, &h100, &agent("ts-3")).await;
    assert_eq!(r.time_slicing_config, Some(Write::Updated));
    let r = reconcile(&client, &h100, &agent("ts-3")).await;
    assert_eq!(r.time_slicing_config, Some(Write::Unchanged));

    // Agents on two nodes racing to create the ConfigMap: both keys end up in it (the loser
    // of the create gets 409 and patches its key in).
    Api::<ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .delete("basalt-device-plugin-config", &Default::default())
        .await
        .unwrap();
    create_node(&client, "ts-6", json!({REPLICAS_LABEL: "6"})).await;
    create_node(&client, "ts-8", json!({REPLICAS_LABEL: "8"})).await;
    let (cfg6, cfg8) = (agent("ts-6"), agent("ts-8"));
    let (a, b) = tokio::join!(
        reconcile(&client, &h100, &cfg6),
        reconcile(&client, &h100, &cfg8)
    );
    let writes = [a.time_slicing_config, b.time_slicing_config];
    assert!(
        writes.contains(&Some(Write::Created)),
        "one of them created it: {writes:?}"
    );
    for n in [6, 8] {
        assert!(
            plugin_config(&client, &format!("basalt-ts-ts-{n}"))
                .await
                .is_some(),
            "key for ts-{n} missing"
        );
    }

    // The ConfigMap was deleted under ts-1 too: its next round puts its key back.
    let r = reconcile(&client, &h100, &agent("ts-1")).await;
    assert_eq!(r.time_slicing_config, Some(Write::Updated));
    assert!(plugin_config(&client, "basalt-ts-ts-1").await.is_some());

    // The label goes: the node label and the node's key are removed, NodeTopology drops the
    // count; other nodes' keys stay.
    Api::<Node>::all(client.clone())
        .patch(
            "ts-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {REPLICAS_LABEL: null}}})),
        )
        .await
        .unwrap();
    let r = reconcile(&client, &h100, &agent("ts-1")).await;
    assert_eq!(
        (r.time_slice_replicas, r.time_slicing_config),
        (None, Some(Write::Updated))
    );
    assert_eq!(r.node_labels, Some(Write::Updated));
    let n = get_node(&client, "ts-1").await;
    assert!(!labels(&n).contains_key(DP_LABEL), "{:?}", labels(&n));
    assert_eq!(
        topology(&client, "ts-1")
            .await
            .unwrap()
            .spec
            .time_slice_replicas,
        None
    );
    assert!(plugin_config(&client, "basalt-ts-ts-1").await.is_none());
    assert!(plugin_config(&client, "basalt-ts-ts-6").await.is_some());
    let r = reconcile(&client, &h100, &agent("ts-1")).await;
    assert_eq!(r.time_slicing_config, None);

    // A node name too long for a label value with the prefix: reported, nothing written.
    let long = format!("ts-{}", "x".repeat(51));
    create_node(&client, &long, json!({REPLICAS_LABEL: "2"})).await;
    let r = reconcile(&client, &h100, &agent(&long)).await;
    assert!(
        r.errors.iter().any(|e| e.contains("at most 53 characters")),
        "{:?}",
        r.errors
    );
    assert!(!labels(&get_node(&client, &long).await).contains_key(DP_LABEL));

    // A device-plugin config the operator chose (not ours) is never removed.
    create_node(&client, "ts-4", json!({DP_LABEL: "custom"})).await;
    let r = reconcile(&client, &h100, &agent("ts-4")).await;
    assert_eq!(r.node_labels, Some(Write::Unchanged));
    assert_eq!(
        labels(&get_node(&client, "ts-4").await)
            .get(DP_LABEL)
            .map(String::as_str),
        Some("custom")
    );

    // A bad count is reported naming the label; the round goes on and nothing is labelled.
    create_node(&client, "ts-5", json!({REPLICAS_LABEL: "many"})).await;
    let r = reconcile(&client, &h100, &agent("ts-5")).await;
    assert!(
        r.errors.iter().any(|e| e.contains(REPLICAS_LABEL)),
        "{:?}",
        r.errors
    );
    assert_eq!(r.topology, Some(Write::Created));
    assert!(!labels(&get_node(&client, "ts-5").await).contains_key(DP_LABEL));
    server.shutdown().await;
}

/// Runs the binary with KUBECONFIG pointing at the server, waiting at most a minute (the bound
/// only stops a hung test; the server keeps serving on the test's runtime meanwhile).
async fn run_agent(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt-nodeagent"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("NODE_NAME")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "basalt-nodeagent {args:?} did not finish in 60 s; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_publishes_once_and_a_dry_run_writes_nothing() {
    let (server, client) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let h100 = fixture("h100-hgx.yaml");
    let h100 = h100.to_str().unwrap();

    create_node(&client, "bin-1", json!({})).await;
    let out = run_agent(
        &kubeconfig,
        &["run", "--once", "--fake", h100, "--node-name", "bin-1"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    assert_eq!(report["topology"], json!("created"));
    assert_eq!(report["gpus"], json!(8));
    let t = topology(&client, "bin-1")
        .await
        .expect("NodeTopology bin-1");
    assert_eq!(t.spec.islands, vec![(0..8).collect::<Vec<u32>>()]);

    // Dry run on a node that wants time-slicing and has no NodeTopology yet: decides, writes
    // nothing (the server's resourceVersion does not move).
    create_node(&client, "bin-2", json!({REPLICAS_LABEL: "3"})).await;
    let version = server.resource_version();
    let out = run_agent(
        &kubeconfig,
        &[
            "run",
            "--once",
            "--dry-run",
            "--fake",
            h100,
            "--node-name",
            "bin-2",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["topology"], json!("dryRun"));
    assert_eq!(report["timeSlicingConfig"], json!("dryRun"));
    assert_eq!(report["nodeLabels"], json!("dryRun"));
    assert_eq!(server.resource_version(), version);
    assert!(topology(&client, "bin-2").await.is_none());
    assert!(plugin_config(&client, "basalt-ts-bin-2").await.is_none());
    assert!(!labels(&get_node(&client, "bin-2").await).contains_key(DP_LABEL));

    // A node that does not exist: non-zero exit, the message names it.
    let out = run_agent(
        &kubeconfig,
        &["run", "--once", "--fake", h100, "--node-name", "ghost"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("ghost"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    server.shutdown().await;
}

/// Polls `check` every 50 ms for at most 60 s (a bound for a hung test, not a timing claim).
async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "gave up after 60 s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[path = "../../scheduler/daemon/tests/prom/mod.rs"]
mod prom;

/// `deploy/components/monitoring`'s node agent half, on an agent whose MIG layout is invalid:
/// every metric its panels and alerts read is exported; a real Prometheus scraping the agent
/// gets data for every panel and every metric the alerts read, evaluates every alert, and
/// holds BasaltNodeAgentMigLayoutFailed active (pending its `for`).
fn monitoring_reads_the_agent(scrape: &str, metrics_at: &str) {
    let ours = |(_, e): &(String, String)| prom::reads_node_agent(e);
    let exprs: Vec<(String, String)> = (prom::panels().into_iter())
        .chain(prom::alerts())
        .filter(ours)
        .collect();
    assert!(exprs.len() >= 4, "{exprs:?}");
    for (what, expr) in &exprs {
        for name in prom::metric_names(expr).into_iter().filter(|n| n != "up") {
            let family = ["_total", ""]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap();
            assert!(
                scrape.contains(&format!("# TYPE {family} ")),
                "{what}: {name} is not exported:\n{scrape}"
            );
        }
    }
    let Some(p) = prom::Prometheus::start(&[prom::Target {
        job: "basalt-nodeagent",
        addr: metrics_at,
        labels: &[("node", "huge-1")],
    }]) else {
        return;
    };
    p.wait("two scrapes of the agent", || {
        !(p.query(r#"rate(basalt_nodeagent_reconciles_total{job="basalt-nodeagent"}[1m])"#))
            .is_empty()
    });
    for (what, expr) in &exprs {
        if prom::panels().iter().any(|(_, e)| e == expr) {
            p.wait(&format!("panel {what:?}: {expr}"), || {
                !p.query(expr).is_empty()
            });
        }
    }
    p.assert_rules_evaluate();
    p.wait("the alert on the invalid layout", || {
        let alert =
            r#"ALERTS{alertname="BasaltNodeAgentMigLayoutFailed",node="huge-1",layout="huge"}"#;
        !p.query(alert).is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_of_4294967295_instances_is_reported_and_the_agent_keeps_running() {
    let (server, client) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let layouts = "version: v1\nmig-configs:\n  huge:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 4294967295}\n";
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": layouts},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    create_node(&client, "huge-1", json!({MIG_LABEL: "huge"})).await;

    // The real agent in `run` mode, a round every 100 ms. Before the fix it aborted in its first
    // round (a 32 GB allocation), so nothing was ever published.
    let free = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let (listen, metrics_at) = (free(), free());
    let a100 = fixture("a100-mig.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt-nodeagent"))
        .args(["run", "--interval", "100ms", "--node-name", "huge-1"])
        .args(["--listen", &listen, "--metrics-bind-address", &metrics_at])
        .arg("--fake")
        .arg(&a100)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");

    wait_for(
        "the NodeTopology with a MigLayoutValid condition",
        || async {
            topology(&client, "huge-1")
                .await
                .and_then(|t| t.status)
                .is_some_and(|s| !s.conditions.is_empty())
        },
    )
    .await;
    let (status, message) = layout_condition(&client, "huge-1").await;
    assert_eq!(status, "False");
    let reason = "MIG layout \"huge\" (node label nvidia.com/mig.config): ConfigMap gpu-operator/default-mig-parted-config key config.yaml: mig-configs.huge[0].mig-devices.\"1g.5gb\": 4294967295 instances; no GPU holds more than 7 of one profile";
    assert_eq!(message, reason);
    let t = topology(&client, "huge-1").await.unwrap();
    assert_eq!(t.spec.gpus.len(), 8, "the topology is still published");
    wait_for("the Warning Event on the Node", || async {
        !node_events(&client, "huge-1").await.is_empty()
    })
    .await;

    // Still reconciling: a time-slicing label set now is acted on by a later round.
    label_node(&client, "huge-1", json!({REPLICAS_LABEL: "2"})).await;
    wait_for(
        "the agent to act on a label set after the bad layout",
        || async {
            topology(&client, "huge-1")
                .await
                .is_some_and(|t| t.spec.time_slice_replicas == Some(2))
        },
    )
    .await;
    assert!(child.try_wait().unwrap().is_none(), "the agent exited");
    // The probe on --listen, /metrics on its own address only.
    let get = |addr: &str, path: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get(&listen, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(get(&listen, "/metrics").starts_with("HTTP/1.1 404"));
    assert!(get(&metrics_at, "/healthz").starts_with("HTTP/1.1 404"));
    let metrics = get(&metrics_at, "/metrics");
    assert!(metrics.contains("basalt_nodeagent_gpus"), "{metrics}");
    // The bad layout, as the alert BasaltNodeAgentMigLayoutFailed reads it.
    let invalid = r#"basalt_nodeagent_mig_layout_valid{layout="huge"} 0"#;
    assert!(metrics.contains(invalid), "{metrics}");
    monitoring_reads_the_agent(&metrics, &metrics_at);
    // Many rounds, one Event: the unchanged problem is not reported again.
    assert_eq!(
        node_events(&client, "huge-1").await,
        vec![(
            "Warning".to_string(),
            "MigLayoutInvalid".to_string(),
            reason.to_string()
        )]
    );
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("4294967295 instances"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_status_that_cannot_be_written_does_not_stop_the_round() {
    use basalt_apiserver::{FaultRule, Verb};
    let (server, client) = start().await;
    let gb200 = backend("gb200-nvl72-tray.yaml");
    // A bad layout (no ConfigMap), and an install whose RBAC lacks nodetopologies/status.
    create_node(&client, "st-1", json!({MIG_LABEL: "small"})).await;
    server
        .add_fault(FaultRule::error(
            Verb::Patch,
            "nodetopologies/status",
            1.0,
            403,
        ))
        .unwrap();
    let r = reconcile(&client, &gb200, &agent("st-1")).await;
    assert!(
        r.warnings.iter().any(|w| w
            .contains("cannot write the MigLayoutValid condition of NodeTopology st-1")
            && w.ends_with("(403 Forbidden)")
            && !w.contains("Status {")),
        "{:?}",
        r.warnings
    );
    // The rest of the round happened: topology published, clique label set; no Event without
    // the condition that keeps it from repeating.
    assert_eq!(r.topology, Some(Write::Created));
    assert_eq!(r.node_labels, Some(Write::Updated));
    assert_eq!(
        labels(&get_node(&client, "st-1").await)
            .get(CLIQUE_LABEL)
            .map(String::as_str),
        Some(GB200_CLIQUE)
    );
    assert!(node_events(&client, "st-1").await.is_empty());

    server.clear_faults();
    let r = reconcile(&client, &gb200, &agent("st-1")).await;
    assert_eq!(r.mig_layout_condition, Some(Write::Updated));
    assert_eq!(r.events.len(), 1, "{:?}", r.events);
    assert_eq!(layout_condition(&client, "st-1").await.0, "False");
    let r = reconcile(&client, &gb200, &agent("st-1")).await;
    assert_eq!((r.mig_layout_condition, r.events.len()), (None, 0));
    assert_eq!(node_events(&client, "st-1").await.len(), 1);

    // With --no-mig the label is not read: a warning, no steps, no condition.
    create_node(&client, "st-2", json!({MIG_LABEL: "small"})).await;
    let no_mig = AgentConfig {
        no_mig: true,
        ..agent("st-2")
    };
    let r = reconcile(&client, &gb200, &no_mig).await;
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("ignored: MIG changes are off (--no-mig)")),
        "{:?}",
        r.warnings
    );
    assert!(r.errors.is_empty() && r.mig_steps.is_empty() && r.mig_layout.is_none());
    assert!(topology(&client, "st-2").await.unwrap().status.is_none());
    server.shutdown().await;
}

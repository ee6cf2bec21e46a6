//! One write that fails (a missing namespace, a 403, a 500) is reported in words and the rest
//! of the round goes on; only start-up errors end the binary, each printed once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, FaultRule, Handle, Verb};
use basalt_crd_types::NodeTopology;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::publish::{reconcile_once, AgentConfig, Report, Write};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

const REPLICAS_LABEL: &str = "scheduling.basalt.dev/time-slicing-replicas";
const DP_LABEL: &str = "nvidia.com/device-plugin.config";
const CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";

async fn start() -> (Handle, Client) {
    let server = ApiServer::start(Config::default())
        .await
        .expect("server starts");
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    // Each injected error answered at once, not retried.
    cfg.default_retry = false;
    (server, Client::try_from(cfg).expect("client"))
}

async fn create_gpu_operator_namespace(client: &Client) {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
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

async fn create_node(client: &Client, name: &str, labels: Value) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
}

async fn node_labels(client: &Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    node.metadata.labels.unwrap_or_default()
}

async fn topology(client: &Client, name: &str) -> Option<NodeTopology> {
    Api::<NodeTopology>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

async fn reconcile(client: &Client, fixture_name: &str, node: &str) -> Report {
    let b = FakeBackend::from_file(&fixture(fixture_name)).unwrap();
    reconcile_once(client, &b, &agent(node))
        .await
        .expect("the round completes")
}

fn has(errors: &[String], parts: &[&str]) -> bool {
    errors.iter().any(|e| parts.iter().all(|p| e.contains(p)))
}

/// Runs the binary with KUBECONFIG pointing at the server, at most a minute (a hung test bound).
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
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("basalt-nodeagent {args:?} did not finish in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.wait_with_output().expect("output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_gpu_operator_namespace_is_reported_and_the_round_goes_on() {
    let (server, client) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    create_node(&client, "ns-1", json!({REPLICAS_LABEL: "4"})).await;
    let h100 = fixture("h100-hgx.yaml");

    let out = run_agent(
        &kubeconfig,
        &[
            "run",
            "--once",
            "--node-name",
            "ns-1",
            "--fake",
            h100.to_str().unwrap(),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    let errors: Vec<String> = serde_json::from_value(report["errors"].clone()).unwrap();
    assert!(
        has(
            &errors,
            &[
                "ConfigMap gpu-operator/basalt-device-plugin-config",
                "basalt-ts-ns-1",
                "namespaces \"gpu-operator\" not found",
            ]
        ),
        "{errors:?}"
    );
    assert!(!errors.iter().any(|e| e.contains("Status {")), "{errors:?}");
    // The rest of the round: the topology is published, without replicas the plugin does not
    // advertise, and the node is not pointed at a config that was never written.
    assert_eq!(report["topology"], json!("created"));
    let t = topology(&client, "ns-1").await.expect("NodeTopology ns-1");
    assert_eq!(t.spec.time_slice_replicas, None);
    assert!(!node_labels(&client, "ns-1").await.contains_key(DP_LABEL));
    server.shutdown().await;
}

#[tokio::test]
async fn a_403_or_500_on_one_write_is_reported_and_the_others_happen() {
    let (server, client) = start().await;
    create_gpu_operator_namespace(&client).await;
    // The time-slicing ConfigMap refused (403), the Node's labels failing (500).
    create_node(&client, "w-1", json!({REPLICAS_LABEL: "2"})).await;
    server
        .add_fault(FaultRule::error(Verb::Create, "configmaps", 1.0, 403))
        .unwrap();
    server
        .add_fault(FaultRule::error(Verb::Patch, "nodes", 1.0, 500))
        .unwrap();
    let r = reconcile(&client, "gb200-nvl72-tray.yaml", "w-1").await;
    assert!(
        has(
            &r.errors,
            &["ConfigMap gpu-operator/basalt-device-plugin-config", "403"]
        ),
        "{:?}",
        r.errors
    );
    assert!(
        has(&r.errors, &["labelling Node w-1", "500"]),
        "{:?}",
        r.errors
    );
    assert_eq!(r.topology, Some(Write::Created));
    assert!(topology(&client, "w-1").await.is_some());
    assert!(!node_labels(&client, "w-1").await.contains_key(CLIQUE_LABEL));

    // The NodeTopology refused (500): the Node is still labelled, the ConfigMap written.
    server.clear_faults();
    create_node(&client, "w-2", json!({REPLICAS_LABEL: "2"})).await;
    server
        .add_fault(FaultRule::error(Verb::Create, "nodetopologies", 1.0, 500))
        .unwrap();
    let r = reconcile(&client, "gb200-nvl72-tray.yaml", "w-2").await;
    assert!(
        has(&r.errors, &["NodeTopology w-2", "500"]),
        "{:?}",
        r.errors
    );
    assert_eq!(r.topology, None);
    assert_eq!(r.time_slicing_config, Some(Write::Created));
    let labels = node_labels(&client, "w-2").await;
    assert!(labels.contains_key(CLIQUE_LABEL), "{labels:?}");
    assert_eq!(
        labels.get(DP_LABEL).map(String::as_str),
        Some("basalt-ts-w-2")
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_cannot_start_is_printed_once_in_words() {
    let (server, _client) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let h100 = fixture("h100-hgx.yaml");
    let out = run_agent(
        &kubeconfig,
        &[
            "run",
            "--once",
            "--node-name",
            "ghost",
            "--fake",
            h100.to_str().unwrap(),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "error: reading Node ghost: nodes \"ghost\" not found (404 NotFound)\n"
    );
    server.shutdown().await;
}

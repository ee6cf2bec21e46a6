//! The device plugin is restarted on the node after the agent changes its MIG instances, and
//! only then: `Owed::settle` after `reconcile_once`, and the `basalt-nodeagent` binary, against
//! the in-memory API server with the fake GPU backend.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, Handle};
use basalt_nodeagent::device_plugin::Owed;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::publish::{reconcile_once, AgentConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

const PLUGIN: &str = "gpu-operator/app=nvidia-device-plugin-daemonset";
const LAYOUTS: &str = r#"version: v1
mig-configs:
  small:
    - devices: [1, 3]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
"#;

async fn start() -> (Handle, Client) {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    cfg.default_retry = false;
    let client = Client::try_from(cfg).unwrap();
    let ns: Namespace = object(json!({"metadata": {"name": "gpu-operator"}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cm: ConfigMap = object(json!({
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": LAYOUTS},
    }));
    Api::<ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let node: Node = object(json!({
        "metadata": {"name": "a100-1", "labels": {"nvidia.com/mig.config": "small"}}
    }));
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    (server, client)
}

fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/a100-mig.yaml")
}

fn agent(restart: Option<&str>) -> AgentConfig {
    AgentConfig {
        node_name: "a100-1".into(),
        dry_run: false,
        no_mig: false,
        mig_config_map: "gpu-operator/default-mig-parted-config".parse().unwrap(),
        mig_config_key: "config.yaml".into(),
        device_plugin_config_map: "gpu-operator/basalt-device-plugin-config".parse().unwrap(),
        mig_min_interval: Duration::from_secs(600),
        restart_device_plugin: restart.map(|r| r.parse().unwrap()),
        pod_resources: None,
    }
}

/// A pod in `gpu-operator` on `node`, with the device plugin's label or without.
async fn pod(client: &Client, name: &str, node: &str, plugin: bool) {
    let labels = match plugin {
        true => json!({"app": "nvidia-device-plugin-daemonset"}),
        false => json!({"app": "dcgm-exporter"}),
    };
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

async fn pods(client: &Client) -> Vec<String> {
    let list = Api::<Pod>::namespaced(client.clone(), "gpu-operator")
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_plugin_on_the_node_restarts_after_a_mig_change_and_only_then() {
    let (server, client) = start().await;
    pod(&client, "plugin-a100-1", "a100-1", true).await;
    pod(&client, "plugin-a100-2", "a100-2", true).await;
    pod(&client, "exporter-a100-1", "a100-1", false).await;
    let gpus = FakeBackend::from_file(&fixture()).unwrap();
    let cfg = agent(Some(PLUGIN));
    let mut owed = Owed::default();

    // Layout "small" creates seven instances on GPU 3: the plugin on this node is restarted.
    let mut r = reconcile_once(&client, &gpus, &cfg).await.unwrap();
    assert!(r.mig_instances_changed);
    owed.settle(&client, &cfg, &mut r).await;
    assert_eq!(r.device_plugin_restarted, ["plugin-a100-1"]);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(pods(&client).await, ["exporter-a100-1", "plugin-a100-2"]);

    // Its DaemonSet starts another; the next round changes nothing and leaves it alone.
    pod(&client, "plugin-a100-1-new", "a100-1", true).await;
    let mut r = reconcile_once(&client, &gpus, &cfg).await.unwrap();
    assert!(!r.mig_instances_changed);
    owed.settle(&client, &cfg, &mut r).await;
    assert!(r.device_plugin_restarted.is_empty());
    assert_eq!(pods(&client).await.len(), 3);
    server.shutdown().await;
}

#[tokio::test]
async fn a_restart_that_fails_is_owed_until_one_succeeds_and_off_means_off() {
    let (server, client) = start().await;
    pod(&client, "plugin-a100-1", "a100-1", true).await;
    let gpus = FakeBackend::from_file(&fixture()).unwrap();

    // Off: instances change, nothing is restarted.
    let off = agent(None);
    let mut r = reconcile_once(&client, &gpus, &off).await.unwrap();
    assert!(r.mig_instances_changed);
    Owed::default().settle(&client, &off, &mut r).await;
    assert!(r.device_plugin_restarted.is_empty());
    assert_eq!(pods(&client).await, ["plugin-a100-1"]);

    // A selector the API server refuses: the round says so, and the restart stays owed.
    let bad = agent(Some("gpu-operator/app in (unclosed"));
    let mut owed = Owed::default();
    let mut r = reconcile_once(&client, &gpus, &bad).await.unwrap();
    r.mig_instances_changed = true;
    owed.settle(&client, &bad, &mut r).await;
    let said = r.errors.join("\n");
    assert!(said.contains("restarting the device plugin"), "{said}");
    assert!(said.contains("tried again next round"), "{said}");
    assert_eq!(pods(&client).await, ["plugin-a100-1"]);
    // A later round with nothing changed still pays what is owed.
    let good = agent(Some(PLUGIN));
    let mut r = reconcile_once(&client, &gpus, &good).await.unwrap();
    assert!(!r.mig_instances_changed);
    owed.settle(&client, &good, &mut r).await;
    assert_eq!(r.device_plugin_restarted, ["plugin-a100-1"]);
    assert!(pods(&client).await.is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_restarts_the_plugin_after_applying_a_layout() {
    let (server, client) = start().await;
    pod(&client, "plugin-a100-1", "a100-1", true).await;
    pod(&client, "plugin-a100-2", "a100-2", true).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt-nodeagent"))
        .args(["run", "--interval", "100ms", "--node-name", "a100-1"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-bind-address",
            "127.0.0.1:0",
        ])
        .args(["--restart-device-plugin", PLUGIN])
        .arg("--fake")
        .arg(fixture())
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while pods(&client).await != ["plugin-a100-2"] {
        assert!(Instant::now() < deadline, "still {:?}", pods(&client).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The DaemonSet's next pod survives the rounds that change nothing.
    pod(&client, "plugin-a100-1-new", "a100-1", true).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pods(&client).await, ["plugin-a100-1-new", "plugin-a100-2"]);
    assert!(child.try_wait().unwrap().is_none(), "the agent exited");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    server.shutdown().await;
}

/// A round can run as a spawned task (a multi-threaded runtime's): its future is `Send`.
#[allow(dead_code)]
fn a_round_is_send(client: &Client, backend: &FakeBackend, cfg: &AgentConfig) {
    fn send<T: Send>(_: T) {}
    send(reconcile_once(client, backend, cfg));
    send(Owed::default().settle(client, cfg, &mut Default::default()));
}

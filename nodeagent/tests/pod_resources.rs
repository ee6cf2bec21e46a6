//! The kubelet's PodResources decides whether a GPU is busy before a re-layout: a pod holding
//! one of its MIG devices (no process running yet) refuses it, an unreadable socket makes the
//! round wait, and once nobody holds it the layout is applied. A fake kubelet serves the gRPC
//! call on a Unix socket; the in-memory API server and the fake GPUs do the rest.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use basalt_apiserver::{ApiServer, Config, Handle};
use basalt_crd_types::{MigLayoutPhase, NodeTopology};
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::publish::{reconcile_once, AgentConfig};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

const HELD: &str = "MIG-a100a100-0001-4000-8000-000000000007";

async fn start() -> (Handle, Client) {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    cfg.default_retry = false;
    let client = Client::try_from(cfg).unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "a100-1"}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    (server, client)
}

fn agent(socket: &Path) -> AgentConfig {
    AgentConfig {
        node_name: "a100-1".into(),
        dry_run: false,
        no_mig: false,
        mig_config_map: "gpu-operator/default-mig-parted-config".parse().unwrap(),
        mig_config_key: "config.yaml".into(),
        device_plugin_config_map: "gpu-operator/basalt-device-plugin-config".parse().unwrap(),
        mig_min_interval: Duration::from_secs(600),
        restart_device_plugin: None,
        pod_resources: Some(socket.to_path_buf()),
    }
}

fn delimited(field: u32, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    [
        vec![(field << 3 | 2) as u8, bytes.len() as u8],
        bytes.to_vec(),
    ]
    .concat()
}

/// `ListPodResourcesResponse` with pod `ml/p-0` holding `devices`.
fn answer(devices: &[&str]) -> Vec<u8> {
    let ids: Vec<u8> = devices
        .iter()
        .flat_map(|d| delimited(2, d.as_bytes()))
        .collect();
    let devices = [delimited(1, b"nvidia.com/mig-1g.5gb"), ids].concat();
    let container = [delimited(1, b"c"), delimited(2, &devices)].concat();
    let pod = [
        delimited(1, b"p-0"),
        delimited(2, b"ml"),
        delimited(3, &container),
    ]
    .concat();
    delimited(1, &pod)
}

/// A kubelet answering `List` with what `holding` says at the time of each call.
fn kubelet(socket: PathBuf, holding: Arc<Mutex<Vec<&'static str>>>) {
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let holding = holding.clone();
            let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                assert_eq!(req.uri().path(), "/v1.PodResourcesLister/List");
                let message = answer(&holding.lock().unwrap());
                let mut framed = vec![0, 0, 0, 0, message.len() as u8];
                framed.extend(message);
                let mut trailers = hyper::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let body =
                    Full::new(Bytes::from(framed)).with_trailers(async move { Some(Ok(trailers)) });
                let response = hyper::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(body)
                    .unwrap();
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
}

#[tokio::test]
async fn a_gpu_a_pod_holds_is_refused_until_it_lets_go() {
    let (server, client) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let gpus = FakeBackend::from_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/a100-mig.yaml"),
    )
    .unwrap();
    let cfg = agent(&socket);

    // No kubelet yet: the NodeTopology is published, and a re-layout waits, said so.
    reconcile_once(&client, &gpus, &cfg).await.unwrap();
    let topologies: Api<NodeTopology> = Api::all(client.clone());
    let want = json!({"spec": {"migLayouts": [{"gpu": 1, "generation": 1,
        "layout": [{"profile": "3g.20gb", "start": 0}, {"profile": "3g.20gb", "start": 4}]}]}});
    topologies
        .patch("a100-1", &PatchParams::default(), &Patch::Merge(&want))
        .await
        .unwrap();
    let r = reconcile_once(&client, &gpus, &cfg).await.unwrap();
    let said = r.errors.join("\n");
    assert!(
        said.contains("MIG re-layouts wait: cannot tell which pods hold MIG devices"),
        "{said}"
    );
    assert!(r.mig_relayouts.is_empty());
    assert!(!r.mig_instances_changed);

    // A pod holds GPU 1's instance at slice 0, with no process on it: refused, by name.
    let holding = Arc::new(Mutex::new(vec![HELD]));
    kubelet(socket.clone(), holding.clone());
    let r = reconcile_once(&client, &gpus, &cfg).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.mig_relayouts.len(), 1);
    assert_eq!(r.mig_relayouts[0].phase, MigLayoutPhase::Refused);
    let reason = r.mig_relayouts[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("is held by pod ml/p-0"), "{reason}");
    assert!(!r.mig_instances_changed);

    // It lets go: the layout is applied.
    holding.lock().unwrap().clear();
    let r = reconcile_once(&client, &gpus, &cfg).await.unwrap();
    assert_eq!(
        r.mig_relayouts[0].phase,
        MigLayoutPhase::Applied,
        "{:?}",
        r.mig_relayouts
    );
    assert!(r.mig_instances_changed);
    server.shutdown().await;
}

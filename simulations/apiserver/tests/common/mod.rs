//! What the API server's kube-rs tests share: a server on loopback with a client for it.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use basalt_apiserver::{ApiServer, Config, Handle};
use kube::Client;
use serde_json::Value;

/// A server started with `config`, and a kube-rs client for it. kube 5 retries 429, 503 and
/// 504 by default (up to 15 times, backing off to minutes); these tests look at each answer, as
/// a scheduler handling evictions and faults must, so retries are off.
pub async fn start(config: Config) -> (Handle, Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    cfg.default_retry = false;
    (server, Client::try_from(cfg).expect("client"))
}

pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("typed object")
}

/// The API's Status of a failed request.
pub fn status_of(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Whether `kubectl` can be run here (the kubectl tests are skipped otherwise).
pub fn kubectl_installed() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok()
}

/// kubectl's output for `args` against the server of `kubeconfig`; it must succeed.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

//! What the API server's kube-rs tests share: a server on loopback with a client for it.

#![allow(dead_code)]

use basalt_apiserver::{ApiServer, Config, Handle};
use kube::Client;
use serde_json::Value;

/// A server started with `config`, and a kube-rs client for it (kube's retries off, so every
/// answer is seen as the server gave it).
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

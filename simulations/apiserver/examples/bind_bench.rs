//! Binds per second through the in-memory API server with a kube-rs client.
//!
//! `cargo run --release -p basalt-apiserver --example bind_bench -- [PODS] [CONCURRENCY]`
//! (defaults 5000 and 32). Creates the pods first, then binds them all through `pods/binding`
//! with at most CONCURRENCY requests in flight, and prints the rate.

use std::time::Instant;

use basalt_apiserver::{ApiServer, Config};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let concurrency: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    anyhow::ensure!(concurrency >= 1, "CONCURRENCY must be at least 1");

    let server = ApiServer::start(Config::default()).await?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig())?;
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = Client::try_from(cfg)?;
    let api: Api<Pod> = Api::namespaced(client, "default");

    let started = Instant::now();
    futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}")},
                    "spec": {"schedulerName": "basalt", "containers": [{"name": "m", "image": "i"}]},
                }))?;
                api.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    let created = started.elapsed();

    let started = Instant::now();
    let results = futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("p{i}");
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": format!("node-{}", i % 100)},
                });
                api.create_subresource::<_, kube::core::Status>("binding", &name, &PostParams::default(), &binding)
                    .await
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    let bound = started.elapsed();
    let failed = results.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} of {pods} binds failed: {:?}",
        results.into_iter().find_map(Result::err)
    );
    let unbound = server
        .list("v1", "Pod")
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str().is_none())
        .count();
    anyhow::ensure!(unbound == 0, "{unbound} pods are unbound after the run");
    println!(
        "pods {pods}, concurrency {concurrency}: created {:.0}/s, bound {:.0}/s ({:.2}s for the binds)",
        pods as f64 / created.as_secs_f64(),
        pods as f64 / bound.as_secs_f64(),
        bound.as_secs_f64()
    );
    server.shutdown().await;
    Ok(())
}

//! Watches and their reflector stores: the scheduler's view of the cluster.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use basalt_crds::{NodeTopology, PodGroup, Queue};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

pub struct Stores {
    pub nodes: Store<Node>,
    /// Every pod: Basalt's to schedule, everyone's bound ones for node usage.
    pub pods: Store<Pod>,
    pub pod_groups: Store<PodGroup>,
    pub queues: Store<Queue>,
    pub priority_classes: Store<PriorityClass>,
    pub topologies: Store<NodeTopology>,
    /// Woken on every change, so a cycle runs soon after it.
    pub changed: Arc<Notify>,
}

impl Stores {
    pub fn start(client: Client) -> Stores {
        let changed = Arc::new(Notify::new());
        Stores {
            nodes: reflect(Api::all(client.clone()), "nodes", &changed),
            pods: reflect(Api::all(client.clone()), "pods", &changed),
            pod_groups: reflect(Api::all(client.clone()), "podgroups", &changed),
            queues: reflect(Api::all(client.clone()), "queues", &changed),
            priority_classes: reflect(Api::all(client.clone()), "priorityclasses", &changed),
            topologies: reflect(Api::all(client), "nodetopologies", &changed),
            changed,
        }
    }

    /// Returns once every store holds a full list.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        let e = |what: &str| anyhow::anyhow!("the {what} watch stopped before its first list");
        self.nodes
            .wait_until_ready()
            .await
            .map_err(|_| e("nodes"))?;
        self.pods.wait_until_ready().await.map_err(|_| e("pods"))?;
        self.pod_groups
            .wait_until_ready()
            .await
            .map_err(|_| e("podgroups"))?;
        self.queues
            .wait_until_ready()
            .await
            .map_err(|_| e("queues"))?;
        self.priority_classes
            .wait_until_ready()
            .await
            .map_err(|_| e("priorityclasses"))?;
        self.topologies
            .wait_until_ready()
            .await
            .map_err(|_| e("nodetopologies"))?;
        Ok(())
    }
}

fn reflect<K>(api: Api<K>, what: &'static str, changed: &Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, writer) = reflector::store();
    let changed = changed.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(_) => changed.notify_one(),
                // The watcher backs off and re-lists by itself; say why it had to.
                Err(e) => tracing::warn!(resource = what, error = %e, "watch error"),
            }
        }
    });
    store
}

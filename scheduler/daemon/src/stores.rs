//! Watches and their reflector stores: the scheduler's view of the cluster.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use basalt_crds::{NodeTopology, PodGroup, Queue};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::volcano::{HyperNodes, Volcano};

pub struct Stores {
    pub nodes: Store<Node>,
    /// Every pod: Basalt's to schedule, everyone's bound ones for node usage.
    pub pods: Store<Pod>,
    pub pod_groups: Store<PodGroup>,
    pub queues: Store<Queue>,
    pub priority_classes: Store<PriorityClass>,
    pub topologies: Store<NodeTopology>,
    /// Volcano's PodGroups and Queues, while the cluster serves them.
    pub volcano: Arc<Volcano>,
    /// Volcano's HyperNodes, while the cluster serves them.
    pub hyper_nodes: Arc<HyperNodes>,
    /// Woken on every change, so a cycle runs soon after it.
    pub changed: Arc<Notify>,
}

impl Stores {
    /// Starts every watch; Volcano's kinds (its scheduling group and its HyperNodes, each on
    /// its own) are looked up now and every `volcano_every` while they are not served.
    pub fn start(client: Client, volcano_every: Duration) -> Stores {
        let changed = Arc::new(Notify::new());
        let volcano = Arc::new(Volcano::new());
        tokio::spawn(
            volcano
                .clone()
                .supervise(client.clone(), volcano_every, changed.clone()),
        );
        let hyper_nodes = Arc::new(HyperNodes::new());
        tokio::spawn(
            hyper_nodes
                .clone()
                .supervise(client.clone(), volcano_every, changed.clone()),
        );
        Stores {
            volcano,
            hyper_nodes,
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
        self.volcano.wait_decided().await;
        self.hyper_nodes.wait_decided().await;
        Ok(())
    }
}

fn reflect<K>(api: Api<K>, what: &'static str, changed: &Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    reflect_task(api, what, changed, None).0
}

/// Where a watch reports that its resource is not served (404).
#[derive(Clone)]
pub struct OnNotFound {
    pub flag: Arc<AtomicBool>,
    pub notify: Arc<Notify>,
}

/// A reflector in its own task (abort the handle to stop it). With `on_404`, a 404 from the
/// watch is not logged as a warning but raised on `on_404`, whose owner decides.
pub fn reflect_task<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    on_404: Option<OnNotFound>,
) -> (Store<K>, JoinHandle<()>)
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
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(_) => changed.notify_one(),
                Err(e) => match &on_404 {
                    Some(hook) if not_found(&e) => {
                        tracing::debug!(resource = what, error = %e, "not served");
                        hook.flag.store(true, Ordering::Relaxed);
                        hook.notify.notify_one();
                    }
                    // The watcher backs off and re-lists by itself; say why it had to.
                    _ => tracing::warn!(resource = what, error = %e, "watch error"),
                },
            }
        }
    });
    (store, task)
}

fn not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

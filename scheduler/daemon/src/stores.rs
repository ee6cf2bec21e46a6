//! Watches and their reflector stores: the scheduler's view of the cluster.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use basalt_crds::{NodeTopology, PodGroup, Queue};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::changes::ChangeLog;
use crate::dra::Dra;
use crate::lenient::Lenient;
use crate::scheduler_plugins::SchedulerPlugins;
use crate::volcano::{HyperNodes, Volcano};

pub struct Stores {
    pub nodes: Store<Node>,
    /// Every pod: Basalt's to schedule, everyone's bound ones for node usage.
    pub pods: Store<Pod>,
    /// Basalt's own kinds, each object decoded on its own (`lenient.rs`).
    pub pod_groups: Store<Lenient<PodGroup>>,
    pub queues: Store<Lenient<Queue>>,
    pub priority_classes: Store<PriorityClass>,
    pub topologies: Store<Lenient<NodeTopology>>,
    /// Read for their labels (`namespaceSelector` of pod affinity terms).
    pub namespaces: Store<Namespace>,
    /// Claims, volumes and classes: where a pod's volumes let it go, and which claims need
    /// the selected node before the bind.
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub storage_classes: Store<StorageClass>,
    /// Volcano's PodGroups and Queues, while the cluster serves them.
    pub volcano: Arc<Volcano>,
    /// scheduler-plugins' PodGroups, while the cluster serves them.
    pub scheduler_plugins: Arc<SchedulerPlugins>,
    /// Volcano's HyperNodes, while the cluster serves them.
    pub hyper_nodes: Arc<HyperNodes>,
    /// DRA's DeviceClasses, ResourceSlices and ResourceClaims, while the cluster serves them.
    pub dra: Arc<Dra>,
    /// Woken on every change, so a cycle runs soon after it.
    pub changed: Arc<Notify>,
    /// What the core watches changed since the last cycle took it (`changes.rs`).
    pub changes: Arc<ChangeLog>,
    /// Which of the watches above keep failing (readiness).
    pub health: Arc<WatchHealth>,
    client: Client,
    tasks: Vec<JoinHandle<()>>,
}

/// A watch fails for this long without one good answer: its cache is stale.
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// kube's watcher retries at least every 30 s (its backoff's cap): a watch that has said no
/// error for longer has recovered, even when no object changed since (a resumed watch that
/// sees no change says nothing).
const QUIET: Duration = Duration::from_secs(45);

/// Failing streaks of the watches, by resource: the first and the last error since the last
/// good answer (an event of any kind).
#[derive(Default)]
pub struct WatchHealth(Mutex<HashMap<&'static str, (Instant, Instant)>>);

impl WatchHealth {
    fn streaks(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, (Instant, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn answered(&self, what: &'static str) {
        self.streaks().remove(what);
    }

    fn failed(&self, what: &'static str, now: Instant) {
        self.streaks().entry(what).or_insert((now, now)).1 = now;
    }

    /// The watches failing for longer than `STALE_AFTER` and failing still, sorted.
    pub fn stale(&self, now: Instant) -> Vec<&'static str> {
        let mut out: Vec<_> = self
            .streaks()
            .iter()
            .filter(|(_, (first, last))| {
                now.duration_since(*first) >= STALE_AFTER && now.duration_since(*last) < QUIET
            })
            .map(|(what, _)| *what)
            .collect();
        out.sort_unstable();
        out
    }
}

impl Stores {
    /// Starts every watch; Volcano's kinds (its scheduling group and its HyperNodes, each on
    /// its own), scheduler-plugins' PodGroups and DRA's kinds are looked up now and every
    /// `volcano_every` while they are not served.
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
        let scheduler_plugins = Arc::new(SchedulerPlugins::new());
        tokio::spawn(scheduler_plugins.clone().supervise(
            client.clone(),
            volcano_every,
            changed.clone(),
        ));
        let dra = Arc::new(Dra::new());
        tokio::spawn(
            dra.clone()
                .supervise(client.clone(), volcano_every, changed.clone()),
        );
        let mut stores = Stores {
            dra,
            volcano,
            scheduler_plugins,
            hyper_nodes,
            nodes: reflector::store().0,
            pods: reflector::store().0,
            pod_groups: reflector::store().0,
            queues: reflector::store().0,
            priority_classes: reflector::store().0,
            topologies: reflector::store().0,
            namespaces: reflector::store().0,
            claims: reflector::store().0,
            volumes: reflector::store().0,
            storage_classes: reflector::store().0,
            changed,
            changes: Arc::default(),
            health: Arc::default(),
            client,
            tasks: Vec::new(),
        };
        stores.relist();
        stores
    }

    /// Starts the core watches afresh, each with a new list (the old ones stopped, their
    /// caches dropped): a replica that has just become leader acts on what the API says now,
    /// not on a cache it kept while another replica wrote. DRA's are listed afresh too (the
    /// devices another replica allocated); Volcano's and scheduler-plugins' watches are kept.
    pub fn relist(&mut self) {
        self.dra.relist();
        for t in self.tasks.drain(..) {
            t.abort();
        }
        let c = &self.client;
        let (changed, health) = (&self.changed, &(self.health.clone(), self.changes.clone()));
        let (nodes, t) = reflect(Api::all(c.clone()), "nodes", changed, health);
        self.tasks.push(t);
        let (pods, t) = reflect(Api::all(c.clone()), "pods", changed, health);
        self.tasks.push(t);
        let (pod_groups, t) = reflect(Api::all(c.clone()), "podgroups", changed, health);
        self.tasks.push(t);
        let (queues, t) = reflect(Api::all(c.clone()), "queues", changed, health);
        self.tasks.push(t);
        let (priority_classes, t) =
            reflect(Api::all(c.clone()), "priorityclasses", changed, health);
        self.tasks.push(t);
        let (topologies, t) = reflect(Api::all(c.clone()), "nodetopologies", changed, health);
        self.tasks.push(t);
        let (namespaces, t) = reflect(Api::all(c.clone()), "namespaces", changed, health);
        self.tasks.push(t);
        let (claims, t) = reflect(
            Api::all(c.clone()),
            "persistentvolumeclaims",
            changed,
            health,
        );
        self.tasks.push(t);
        let (volumes, t) = reflect(Api::all(c.clone()), "persistentvolumes", changed, health);
        self.tasks.push(t);
        let (storage_classes, t) = reflect(Api::all(c.clone()), "storageclasses", changed, health);
        self.tasks.push(t);
        (self.nodes, self.pods, self.pod_groups) = (nodes, pods, pod_groups);
        (self.namespaces, self.claims) = (namespaces, claims);
        (self.volumes, self.storage_classes) = (volumes, storage_classes);
        (self.queues, self.priority_classes, self.topologies) =
            (queues, priority_classes, topologies);
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
        self.namespaces
            .wait_until_ready()
            .await
            .map_err(|_| e("namespaces"))?;
        self.claims
            .wait_until_ready()
            .await
            .map_err(|_| e("persistentvolumeclaims"))?;
        self.volumes
            .wait_until_ready()
            .await
            .map_err(|_| e("persistentvolumes"))?;
        self.storage_classes
            .wait_until_ready()
            .await
            .map_err(|_| e("storageclasses"))?;
        self.volcano.wait_decided().await;
        self.hyper_nodes.wait_decided().await;
        self.scheduler_plugins.wait_decided().await;
        self.dra.wait_decided().await;
        Ok(())
    }
}

/// A core watch: its health counted, its changes logged.
fn reflect<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    (health, changes): &(Arc<WatchHealth>, Arc<ChangeLog>),
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let core = Core {
        health: health.clone(),
        changes: changes.clone(),
    };
    spawn_reflector(api, what, changed, None, Some(core))
}

/// What a core watch reports besides its objects.
struct Core {
    health: Arc<WatchHealth>,
    changes: Arc<ChangeLog>,
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
    spawn_reflector(api, what, changed, on_404, None)
}

/// The reflector task; with `core`, its errors and answers are counted there and its changes
/// logged.
fn spawn_reflector<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    on_404: Option<OnNotFound>,
    core: Option<Core>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, writer) = reflector::store();
    let changed = changed.clone();
    // Every event, list pages and their end included: each one is a good answer. The
    // objects are kept without `managedFields`, which the scheduler never reads (it sends only
    // merge patches and creates, never a whole object back) and which is often a third of an
    // object's size.
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.meta_mut().managed_fields = None)
        .reflect(writer);
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if let Some(core) = &core {
                match &item {
                    Ok(event) => {
                        core.health.answered(what);
                        log_change(&core.changes, what, event);
                    }
                    Err(_) => core.health.failed(what, Instant::now()),
                }
            }
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

/// Marks what a watch event changed: an object, or everything while a list comes in.
fn log_change<K: Resource>(changes: &ChangeLog, what: &'static str, event: &watcher::Event<K>) {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
            let meta = o.meta();
            let key = (meta.namespace.clone(), meta.name.clone().unwrap_or_default());
            changes.object(what, key);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
            changes.everything(what)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_is_stale_after_failing_a_minute_and_fresh_again_once_answered_or_quiet() {
        let h = WatchHealth::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        h.failed("pods", t0);
        h.failed("pods", at(30));
        assert!(h.stale(at(59)).is_empty(), "not yet a minute");
        h.failed("pods", at(60));
        assert_eq!(h.stale(at(61)), vec!["pods"]);
        // No error for longer than the watcher's longest backoff: it recovered quietly.
        assert!(h.stale(at(60 + 46)).is_empty());
        h.answered("pods");
        h.failed("nodes", at(0));
        h.failed("nodes", at(70));
        assert_eq!(h.stale(at(71)), vec!["nodes"]);
        h.answered("nodes");
        assert!(h.stale(at(71)).is_empty());
    }
}

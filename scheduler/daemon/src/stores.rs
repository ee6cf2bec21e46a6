//! Watches and their reflector stores: the scheduler's view of the cluster.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use basalt_crds::{NodeTopology, PodGroup, Queue};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::changes::ChangeLog;
use crate::dra::Dra;
use crate::keys::split_key;
use crate::lenient::Lenient;
use crate::reflect::{spawn_reflector, Core, WatchHealth};
use crate::scheduler_plugins::SchedulerPlugins;
use crate::volcano::{HyperNodes, Volcano};

/// Source label of every object (errors say `cluster: Pod ns/name: field: message`).
pub const SOURCE: &str = "cluster";

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
        self.nodes = self.watch("nodes");
        self.pods = self.watch("pods");
        self.pod_groups = self.watch("podgroups");
        self.queues = self.watch("queues");
        self.priority_classes = self.watch("priorityclasses");
        self.topologies = self.watch("nodetopologies");
        self.namespaces = self.watch("namespaces");
        self.claims = self.watch("persistentvolumeclaims");
        self.volumes = self.watch("persistentvolumes");
        self.storage_classes = self.watch("storageclasses");
    }

    /// Starts the core watch of `what` (its resource name, as the change log and the health
    /// name it): its health counted, its changes logged.
    fn watch<K>(&mut self, what: &'static str) -> Store<K>
    where
        K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone,
    {
        let core = Core {
            health: self.health.clone(),
            changes: self.changes.clone(),
        };
        let api = Api::all(self.client.clone());
        let (store, task) = spawn_reflector(api, what, &self.changed, None, Some(core));
        self.tasks.push(task);
        store
    }

    /// The pod of `key` (`keys.rs`), as the cache has it.
    pub fn pod(&self, key: &str) -> Option<Arc<Pod>> {
        let (ns, name) = split_key(key);
        self.pods.get(&ObjectRef::new(name).within(ns))
    }

    /// Returns once every store holds a full list.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        ready(&self.nodes, "nodes").await?;
        ready(&self.pods, "pods").await?;
        ready(&self.pod_groups, "podgroups").await?;
        ready(&self.queues, "queues").await?;
        ready(&self.priority_classes, "priorityclasses").await?;
        ready(&self.topologies, "nodetopologies").await?;
        ready(&self.namespaces, "namespaces").await?;
        ready(&self.claims, "persistentvolumeclaims").await?;
        ready(&self.volumes, "persistentvolumes").await?;
        ready(&self.storage_classes, "storageclasses").await?;
        self.volcano.wait_decided().await;
        self.hyper_nodes.wait_decided().await;
        self.scheduler_plugins.wait_decided().await;
        self.dra.wait_decided().await;
        Ok(())
    }
}

/// Returns once `store` holds its first full list.
async fn ready<K>(store: &Store<K>, what: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    (store.wait_until_ready().await)
        .map_err(|_| anyhow::anyhow!("the {what} watch stopped before its first list"))
}

//! Volcano's PodGroups and Queues (`scheduling.volcano.sh/v1beta1`), watched when the cluster
//! serves them: a cluster moving from Volcano keeps its objects and Basalt schedules them.
//!
//! Discovery decides: at start, and again every `--volcano-discovery-interval` while the group
//! is not served (so installing Volcano's CRDs later is noticed without a restart and without a
//! failing watch logging every few seconds). When a watch of them answers 404 the group is
//! looked up again at once and, if gone, its watches stop and its objects leave the snapshot.
//!
//! The objects are kept raw (`spec` and `status` as JSON) and converted per object each cycle,
//! so one malformed Volcano object is reported on its own instead of failing the whole list.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use basalt_crds::types::{volcano as vc, PodGroupStatus, QueueState, QueueStatus};
use basalt_crds::{ConvertError, PodGroup, PodGroupSpec, Queue};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

pub const GROUP: &str = "scheduling.volcano.sh";
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`.
pub const API_VERSION: &str = vc::API_VERSION;
/// The origin Volcano objects carry in conversion errors, so messages and Events say which
/// API the object is in.
pub const ORIGIN: &str = "cluster (scheduling.volcano.sh/v1beta1)";

/// A Volcano PodGroup as stored: its spec and status read per object when converted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VolcanoPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Value,
}

/// A Volcano Queue as stored.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VolcanoQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Value,
}

macro_rules! volcano_resource {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

volcano_resource!(
    VolcanoPodGroup,
    "PodGroup",
    "podgroups",
    NamespaceResourceScope
);
volcano_resource!(VolcanoQueue, "Queue", "queues", ClusterResourceScope);

fn key(meta: &ObjectMeta, namespaced: bool) -> String {
    let name = meta.name.clone().unwrap_or_default();
    if namespaced {
        format!("{}/{name}", meta.namespace.as_deref().unwrap_or("default"))
    } else {
        name
    }
}

fn convert_error(kind: &str, object: String, field: &str, message: String) -> ConvertError {
    ConvertError {
        origin: Some(ORIGIN.to_string()),
        kind: kind.to_string(),
        object,
        field: field.to_string(),
        message,
    }
}

fn null_to_empty(v: &Value) -> Value {
    if v.is_null() {
        Value::Object(Default::default())
    } else {
        v.clone()
    }
}

impl VolcanoPodGroup {
    /// The Basalt form: Volcano's PodGroup fields are Basalt's. Status is read leniently (a
    /// field Basalt does not know, or an odd one, reads as absent: the scheduler rewrites it).
    pub fn to_basalt(&self) -> Result<PodGroup, ConvertError> {
        let spec: PodGroupSpec =
            serde_json::from_value(null_to_empty(&self.spec)).map_err(|e| {
                convert_error("PodGroup", key(&self.metadata, true), "spec", e.to_string())
            })?;
        Ok(PodGroup {
            metadata: self.metadata.clone(),
            spec,
            status: self.current_status(),
        })
    }

    /// The status as Basalt reads it; `None` when absent or not readable.
    pub fn current_status(&self) -> Option<PodGroupStatus> {
        if self.status.is_null() {
            return None;
        }
        serde_json::from_value(self.status.clone()).ok()
    }
}

impl VolcanoQueue {
    /// The Basalt form, through the crds crate's Volcano conversion (`guarantee.resource`
    /// flattened, `Unknown` state read as `Open`).
    pub fn to_basalt(&self) -> Result<Queue, ConvertError> {
        let name = key(&self.metadata, false);
        let spec: vc::QueueSpec = serde_json::from_value(null_to_empty(&self.spec))
            .map_err(|e| convert_error("Queue", name.clone(), "spec", e.to_string()))?;
        let status = match &self.status {
            Value::Null => None,
            s => serde_json::from_value::<vc::QueueStatus>(s.clone()).ok(),
        };
        vc::Queue {
            metadata: self.metadata.clone(),
            spec,
            status,
        }
        .into_basalt()
        .map_err(|(field, message)| convert_error("Queue", name, field, message))
    }

    /// What the scheduler writes of the status, as it stands now (for "changed?").
    pub fn current_status(&self) -> Option<QueueStatus> {
        let s = self.status.as_object()?;
        let state = s
            .get("state")
            .and_then(|v| serde_json::from_value::<vc::QueueState>(v.clone()).ok())
            .map(QueueState::from)
            .unwrap_or_default();
        let allocated = s
            .get("allocated")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), Quantity(v.to_string()))))
                    .collect()
            })
            .unwrap_or_default();
        let count = |k: &str| {
            s.get(k)
                .and_then(Value::as_i64)
                .and_then(|n| i32::try_from(n).ok())
        };
        Some(QueueStatus {
            state,
            allocated,
            running: count("running"),
            pending: count("pending"),
            inqueue: count("inqueue"),
        })
    }
}

/// The Volcano watches, when the cluster serves Volcano's kinds.
pub struct VolcanoStores {
    pub pod_groups: Option<Store<VolcanoPodGroup>>,
    pub queues: Option<Store<VolcanoQueue>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for VolcanoStores {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Which of Volcano's kinds the cluster serves, watched while it does.
pub struct Volcano {
    current: RwLock<Option<Arc<VolcanoStores>>>,
    /// True once discovery has answered (served or not) for the first time.
    decided: watch::Sender<bool>,
    /// Set by a Volcano watch that got a 404: look the group up again now.
    gone: Arc<AtomicBool>,
    gone_notify: Arc<Notify>,
}

/// Served kinds of the group, or `None` when the group is not served.
async fn discover(client: &Client) -> Result<Option<(bool, bool)>, kube::Error> {
    match client.list_api_group_resources(API_VERSION).await {
        Ok(list) => {
            let has = |plural: &str| list.resources.iter().any(|r| r.name == plural);
            let served = (has("podgroups"), has("queues"));
            Ok((served.0 || served.1).then_some(served))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

impl Volcano {
    pub fn new() -> Volcano {
        Volcano {
            current: RwLock::new(None),
            decided: watch::channel(false).0,
            gone: Arc::new(AtomicBool::new(false)),
            gone_notify: Arc::new(Notify::new()),
        }
    }

    /// The watches in effect now (full lists in hand), if Volcano's kinds are served.
    pub fn current(&self) -> Option<Arc<VolcanoStores>> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    /// Returns once discovery has answered and, when Volcano's kinds are served, their first
    /// lists are in.
    pub async fn wait_decided(&self) {
        let mut rx = self.decided.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    fn set(&self, stores: Option<Arc<VolcanoStores>>) {
        if let Ok(mut c) = self.current.write() {
            *c = stores;
        }
    }

    /// Runs forever: discovery, then watches while the kinds are served.
    pub async fn supervise(self: Arc<Self>, client: Client, every: Duration, changed: Arc<Notify>) {
        let mut failing = false;
        loop {
            let watching = self.current().is_some();
            let gone = self.gone.swap(false, Ordering::Relaxed);
            if !watching || gone {
                match discover(&client).await {
                    Ok(Some((groups, queues))) => {
                        failing = false;
                        if !watching {
                            tracing::info!(
                                podgroups = groups,
                                queues = queues,
                                "{API_VERSION} is served; watching Volcano's PodGroups and Queues"
                            );
                            let stores = self.start(&client, groups, queues, &changed).await;
                            self.set(Some(Arc::new(stores)));
                            changed.notify_one();
                        }
                        self.decided.send_replace(true);
                    }
                    Ok(None) => {
                        failing = false;
                        if watching {
                            tracing::info!(
                                "{API_VERSION} is no longer served; Volcano's PodGroups and Queues left out"
                            );
                            self.set(None);
                            changed.notify_one();
                        } else if !*self.decided.borrow() {
                            tracing::debug!("{API_VERSION} is not served");
                        }
                        self.decided.send_replace(true);
                    }
                    Err(e) => {
                        // Said once per outage; the check is repeated.
                        if !failing {
                            tracing::warn!(error = %e, "cannot look up {API_VERSION}; retrying");
                        }
                        failing = true;
                        if gone {
                            self.gone.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            if self.gone.load(Ordering::Relaxed) && !failing {
                continue;
            }
            let pause = if failing {
                every.min(Duration::from_secs(5))
            } else {
                every
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.gone_notify.notified() => {}
            }
        }
    }

    /// Starts the watches and waits for their first lists, so a cycle never sees a Volcano
    /// PodGroup missing that is only not listed yet.
    async fn start(
        &self,
        client: &Client,
        groups: bool,
        queues: bool,
        changed: &Arc<Notify>,
    ) -> VolcanoStores {
        let on_404 = crate::stores::OnNotFound {
            flag: self.gone.clone(),
            notify: self.gone_notify.clone(),
        };
        let mut tasks = Vec::new();
        let pod_groups = if groups {
            let (store, task) = crate::stores::reflect_task(
                kube::Api::<VolcanoPodGroup>::all(client.clone()),
                "podgroups.scheduling.volcano.sh",
                changed,
                Some(on_404.clone()),
            );
            tasks.push(task);
            Some(store)
        } else {
            None
        };
        let queues = if queues {
            let (store, task) = crate::stores::reflect_task(
                kube::Api::<VolcanoQueue>::all(client.clone()),
                "queues.scheduling.volcano.sh",
                changed,
                Some(on_404),
            );
            tasks.push(task);
            Some(store)
        } else {
            None
        };
        let ready = async {
            if let Some(s) = &pod_groups {
                let _ = s.wait_until_ready().await;
            }
            if let Some(s) = &queues {
                let _ = s.wait_until_ready().await;
            }
        };
        // A 404 meanwhile (the CRDs removed again) ends the wait; the caller looks again.
        tokio::select! {
            _ = ready => {}
            _ = self.gone_notify.notified() => {}
        }
        VolcanoStores {
            pod_groups,
            queues,
            tasks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_volcano_podgroup_reads_as_basalt_s_and_a_bad_one_names_its_field() {
        let g: VolcanoPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"minMember": 2, "queue": "q", "minResources": {"nvidia.com/gpu": "8"}},
            "status": {"phase": "Inqueue", "conditions": [{"type": "Unschedulable",
                "status": "True", "transitionID": "abc", "reason": "NotEnoughResources"}]},
        }))
        .unwrap();
        let b = g.to_basalt().unwrap();
        assert_eq!(b.spec.min_member, 2);
        assert_eq!(b.spec.queue.as_deref(), Some("q"));
        let st = b.status.unwrap();
        assert_eq!(st.phase, basalt_crds::types::PodGroupPhase::Inqueue);
        assert_eq!(st.conditions[0].type_, "Unschedulable");

        let bad: VolcanoPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "ml"},
            "spec": {"minMember": "two"},
        }))
        .unwrap();
        let e = bad.to_basalt().unwrap_err();
        assert_eq!((e.kind.as_str(), e.object.as_str()), ("PodGroup", "ml/bad"));
        assert!(e.to_string().contains("scheduling.volcano.sh"), "{e}");
    }

    #[test]
    fn a_volcano_queue_converts_and_its_status_is_read_leniently() {
        let q: VolcanoQueue = serde_json::from_value(json!({
            "metadata": {"name": "q"},
            "spec": {"weight": 3, "guarantee": {"resource": {"cpu": "4"}}},
            "status": {"state": "Unknown", "running": 2, "allocated": {"cpu": "2"},
                       "reservation": {}},
        }))
        .unwrap();
        let b = q.to_basalt().unwrap();
        assert_eq!(b.spec.weight, 3);
        assert_eq!(b.spec.guarantee["cpu"], Quantity("4".into()));
        let st = q.current_status().unwrap();
        assert_eq!(st.state, QueueState::Open);
        assert_eq!(st.running, Some(2));
        assert_eq!(st.pending, None);
        assert_eq!(st.allocated["cpu"], Quantity("2".into()));

        let neg: VolcanoQueue = serde_json::from_value(json!({
            "metadata": {"name": "neg"}, "spec": {"weight": -1},
        }))
        .unwrap();
        let e = neg.to_basalt().unwrap_err();
        assert_eq!(e.field, "spec.weight");
    }
}

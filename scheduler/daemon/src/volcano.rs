//! Volcano's kinds, watched when the cluster serves them, so a cluster moving from Volcano keeps
//! its objects and Basalt schedules them: PodGroups and Queues (`scheduling.volcano.sh/v1beta1`)
//! and HyperNodes (`topology.volcano.sh/v1alpha1`, turned into node labels by the crds
//! conversion).
//!
//! Discovery decides, per group version, whether they are watched (`optional_api.rs`; every
//! `--volcano-discovery-interval` while not served).
//!
//! The objects are kept raw (`spec` and `status` as JSON) and converted per object, so one
//! malformed Volcano object is reported on its own instead of failing the whole list. Each
//! stored object is converted once (`lenient::Converted`): every watch event stores a new object (a
//! new resourceVersion), so an unchanged one keeps its conversion and, for a PodGroup, the
//! very `Arc` the incremental snapshot recognises it by.

use std::borrow::Cow;
use std::sync::Arc;

use basalt_crds::types::{volcano as vc, PodGroupStatus, QueueState, QueueStatus};
use basalt_crds::{ConvertError, HyperNode, PodGroup, Queue};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::lenient::{spec_of, Converted};
use crate::optional_api::{watch, Kinds, Optional};
use crate::reflect::{reflect_task, OnNotFound};

/// `scheduling.volcano.sh/v1beta1`.
pub const API_VERSION: &str = vc::API_VERSION;
/// The origin Volcano objects carry in conversion errors, so messages and Events say which
/// API the object is in.
pub const ORIGIN: &str = "cluster (scheduling.volcano.sh/v1beta1)";
/// The same for HyperNodes.
pub const TOPOLOGY_ORIGIN: &str = "cluster (topology.volcano.sh/v1alpha1)";

/// A Volcano PodGroup as stored: its spec and status read per object when converted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VolcanoPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Value,
    #[serde(skip)]
    converted: Converted<(Arc<PodGroup>, Vec<String>)>,
}

/// A Volcano HyperNode as stored: its spec read per object when converted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RawHyperNode {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(skip)]
    converted: Converted<HyperNode>,
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
    #[serde(skip)]
    converted: Converted<Queue>,
}

macro_rules! volcano_resource {
    ($ty:ty, $group:literal, $version:literal, $kind:literal, $plural:literal, $scope:ty) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
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
    "scheduling.volcano.sh",
    "v1beta1",
    "PodGroup",
    "podgroups",
    NamespaceResourceScope
);
volcano_resource!(
    VolcanoQueue,
    "scheduling.volcano.sh",
    "v1beta1",
    "Queue",
    "queues",
    ClusterResourceScope
);
volcano_resource!(
    RawHyperNode,
    "topology.volcano.sh",
    "v1alpha1",
    "HyperNode",
    "hypernodes",
    ClusterResourceScope
);

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

impl VolcanoPodGroup {
    /// The Basalt form, through the crds crate's Volcano conversion (`networkTopology` and
    /// `subGroupPolicy` mapped to `topology` and `subGroups`), with warnings about fields Basalt
    /// does not honour (`ORIGIN: PodGroup ns/name: field: message`). Status is read leniently (a
    /// field Basalt does not know, or an odd one, reads as absent: the scheduler rewrites it).
    pub fn to_basalt(&self) -> Result<(Arc<PodGroup>, Vec<String>), ConvertError> {
        self.converted.get(|| self.convert())
    }

    fn convert(&self) -> Result<(Arc<PodGroup>, Vec<String>), ConvertError> {
        let name = key(&self.metadata, true);
        let spec: vc::PodGroupSpec = spec_of(&self.spec)
            .map_err(|u| convert_error("PodGroup", name.clone(), &u.field, u.message))?;
        let (group, issues) = vc::PodGroup {
            metadata: self.metadata.clone(),
            spec,
            status: self.current_status(),
        }
        .into_basalt()
        .map_err(|(field, message)| convert_error("PodGroup", name.clone(), &field, message))?;
        let warnings = issues
            .into_iter()
            .map(|(field, message)| format!("{ORIGIN}: PodGroup {name}: {field}: {message}"))
            .collect();
        Ok((Arc::new(group), warnings))
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
        self.converted.get(|| self.convert())
    }

    fn convert(&self) -> Result<Queue, ConvertError> {
        let name = key(&self.metadata, false);
        let spec: vc::QueueSpec = spec_of(&self.spec)
            .map_err(|u| convert_error("Queue", name.clone(), &u.field, u.message))?;
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
            ..Default::default()
        })
    }
}

impl RawHyperNode {
    /// The typed HyperNode the crds conversion reads; a spec that does not read (an unknown
    /// member type, say) is an error naming the HyperNode.
    pub fn to_basalt(&self) -> Result<HyperNode, ConvertError> {
        self.converted.get(|| self.convert())
    }

    fn convert(&self) -> Result<HyperNode, ConvertError> {
        let name = key(&self.metadata, false);
        let spec: vc::HyperNodeSpec = spec_of(&self.spec).map_err(|u| ConvertError {
            origin: Some(TOPOLOGY_ORIGIN.to_string()),
            kind: "HyperNode".into(),
            object: name.clone(),
            field: u.field,
            message: u.message,
        })?;
        let mut h = HyperNode::new(&name, spec);
        h.metadata = self.metadata.clone();
        Ok(h)
    }
}

/// Volcano's PodGroups and Queues (`scheduling.volcano.sh/v1beta1`).
pub struct VolcanoStores {
    pub pod_groups: Option<Store<VolcanoPodGroup>>,
    pub queues: Option<Store<VolcanoQueue>>,
}

impl Kinds for VolcanoStores {
    const API_VERSION: &'static str = API_VERSION;
    const PLURALS: &'static [&'static str] = &["podgroups", "queues"];
    const WHAT: &'static str = "Volcano's PodGroups and Queues";

    fn start(
        client: &Client,
        served: &[bool],
        changed: &Arc<Notify>,
        on_404: OnNotFound,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let mut tasks = Vec::new();
        let what = "podgroups.scheduling.volcano.sh";
        let pod_groups = watch(client, served[0], what, changed, &on_404, &mut tasks);
        let what = "queues.scheduling.volcano.sh";
        let queues = watch(client, served[1], what, changed, &on_404, &mut tasks);
        (VolcanoStores { pod_groups, queues }, tasks)
    }

    async fn ready(&self) {
        if let Some(s) = &self.pod_groups {
            let _ = s.wait_until_ready().await;
        }
        if let Some(s) = &self.queues {
            let _ = s.wait_until_ready().await;
        }
    }
}

/// Volcano's HyperNodes (`topology.volcano.sh/v1alpha1`): turned into node labels
/// `topology.volcano.sh/tier-N` by the crds conversion.
pub struct HyperNodeStores {
    pub hyper_nodes: Store<RawHyperNode>,
}

impl Kinds for HyperNodeStores {
    const API_VERSION: &'static str = vc::TOPOLOGY_API_VERSION;
    const PLURALS: &'static [&'static str] = &["hypernodes"];
    const WHAT: &'static str = "Volcano's HyperNodes";

    fn start(
        client: &Client,
        _served: &[bool],
        changed: &Arc<Notify>,
        on_404: OnNotFound,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let (hyper_nodes, task) = reflect_task(
            kube::Api::<RawHyperNode>::all(client.clone()),
            "hypernodes.topology.volcano.sh",
            changed,
            Some(on_404),
        );
        (HyperNodeStores { hyper_nodes }, vec![task])
    }

    async fn ready(&self) {
        let _ = self.hyper_nodes.wait_until_ready().await;
    }
}

/// Volcano's PodGroups and Queues, watched while served.
pub type Volcano = Optional<VolcanoStores>;
/// Volcano's HyperNodes, watched while served.
pub type HyperNodes = Optional<HyperNodeStores>;

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
        let (b, warnings) = g.to_basalt().unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(b.spec.min_member, 2);
        assert_eq!(b.spec.queue.as_deref(), Some("q"));
        let st = b.status.clone().unwrap();
        assert_eq!(st.phase, basalt_crds::types::PodGroupPhase::Inqueue);
        assert_eq!(st.conditions[0].type_, "Unschedulable");

        let bad: VolcanoPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "ml"},
            "spec": {"minMember": "two"},
        }))
        .unwrap();
        let e = bad.to_basalt().unwrap_err();
        assert_eq!((e.kind.as_str(), e.object.as_str()), ("PodGroup", "ml/bad"));
        assert_eq!(e.field, "spec.minMember");
        assert!(e.to_string().contains("scheduling.volcano.sh"), "{e}");
    }

    #[test]
    fn a_volcano_podgroup_s_network_topology_and_sub_groups_become_basalt_s() {
        let g: VolcanoPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"minMember": 8, "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
                     "subGroupPolicy": [{"name": "tp", "subGroupSize": 4, "minSubGroups": 1,
                                         "networkTopology": {"mode": "soft"}}]},
        }))
        .unwrap();
        let (b, warnings) = g.to_basalt().unwrap();
        assert_eq!(b.spec.topology.required.as_deref(), Some("volcano-tier-2"));
        assert_eq!(b.spec.sub_groups[0].size, 4);
        assert_eq!(
            b.spec.sub_groups[0].topology.preferred.as_deref(),
            Some("volcano-tier-1")
        );
        // minSubGroups is honoured: no warning.
        assert_eq!(b.spec.sub_groups[0].min_sub_groups, 1);
        assert!(warnings.is_empty(), "{warnings:?}");

        let hard_without_tier: VolcanoPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"networkTopology": {"mode": "hard"}},
        }))
        .unwrap();
        let e = hard_without_tier.to_basalt().unwrap_err();
        assert_eq!(e.field, "spec.networkTopology.highestTierAllowed");
        assert!(e.to_string().starts_with(ORIGIN), "{e}");
    }

    #[test]
    fn a_hypernode_reads_and_a_bad_one_names_itself() {
        let h: RawHyperNode = serde_json::from_value(json!({
            "metadata": {"name": "rack-a"},
            "spec": {"tier": "1", "members": [{"type": "Node",
                     "selector": {"exactMatch": {"name": "n1"}}}]},
        }))
        .unwrap();
        let typed = h.to_basalt().unwrap();
        assert_eq!(typed.metadata.name.as_deref(), Some("rack-a"));
        assert_eq!(typed.spec.tier.unwrap().value(), Ok(1));
        assert_eq!(typed.spec.members.len(), 1);

        let bad: RawHyperNode = serde_json::from_value(json!({
            "metadata": {"name": "odd"},
            "spec": {"tier": 1, "members": [{"type": "Switch"}]},
        }))
        .unwrap();
        let e = bad.to_basalt().unwrap_err();
        assert_eq!((e.kind.as_str(), e.object.as_str()), ("HyperNode", "odd"));
        assert!(e.to_string().starts_with(TOPOLOGY_ORIGIN), "{e}");
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

    /// Into an `Arc`, whether the conversion gives one (now) or a plain group (before).
    fn shared(g: impl Into<Arc<PodGroup>>) -> Arc<PodGroup> {
        g.into()
    }

    #[test]
    fn an_unchanged_volcano_group_is_the_same_object_to_the_incremental_snapshot() {
        use basalt_crds::{ConvertOptions, IncrementalSnapshot, Object};
        // Each cycle converts what the store holds. A group converted afresh each time (a new
        // `Arc`) looked changed to the incremental snapshot, so every idle cycle was a rebuild.
        let stored = |version: &str, min: u32| -> VolcanoPodGroup {
            serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ml", "uid": "u1",
                             "resourceVersion": version},
                "spec": {"minMember": min},
            }))
            .unwrap()
        };
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}},
        }))
        .unwrap();
        let node = Arc::new(node);
        let cycle = |g: &VolcanoPodGroup| {
            let (group, _) = g.to_basalt().unwrap();
            vec![
                ("cluster".to_string(), Object::Node(node.clone())),
                (ORIGIN.to_string(), Object::PodGroup(shared(group))),
            ]
        };
        let options = ConvertOptions::default();
        let mut snapshots = IncrementalSnapshot::new();
        let g = stored("7", 2);
        assert!(!snapshots.update(cycle(&g), &options).unchanged);
        for _ in 0..3 {
            let update = snapshots.update(cycle(&g), &options);
            assert!(update.unchanged, "an idle cycle rebuilt the snapshot");
        }
        // A watch event stores a new version: converted again, and seen as changed.
        let g = stored("8", 3);
        assert!(!snapshots.update(cycle(&g), &options).unchanged);
        let group = &snapshots.snapshot().unwrap().jobs;
        assert!(group.iter().any(|j| j.min_member == 3), "{group:?}");
        // A clone is not served the original's conversion.
        let copy = g.clone();
        let (a, b) = (g.to_basalt().unwrap().0, copy.to_basalt().unwrap().0);
        let (a, b) = (shared(a), shared(b));
        assert!(!Arc::ptr_eq(&a, &b) && a == b);
    }
}

//! Basalt's custom resources, API group `scheduling.basalt.dev`, version `v1alpha1`.
//!
//! Field names follow Volcano's where the meaning is the same, so a Volcano manifest moves over
//! by changing its `apiVersion` (Queue's `guarantee` is the one difference: Basalt writes it as a
//! flat resource list, Volcano nests it under `guarantee.resource`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// The API group of Basalt's resources.
pub const GROUP: &str = "scheduling.basalt.dev";
/// The version of Basalt's resources.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects write it in `apiVersion`.
pub const API_VERSION: &str = "scheduling.basalt.dev/v1alpha1";

/// The pattern the API server's own resource lists enforce on quantities.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Schema of a resource list (`cpu: 500m`, `nvidia.com/gpu: 8`): int-or-string values with the
/// quantity pattern, as controller-gen writes `corev1.ResourceList`. k8s-openapi's own
/// `Quantity` schema would do too but repeats a two-kilobyte description at every use.
fn resource_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        }
    })
}

fn one_i32() -> i32 {
    1
}

fn one_u32() -> u32 {
    1
}

fn yes() -> bool {
    true
}

// ---------------------------------------------------------------------------------------------
// PodGroup
// ---------------------------------------------------------------------------------------------

/// The desired state of a PodGroup: a gang of pods placed all together or not at all.
// Each `printcolumn(type_ = ...)` looks like a repeated attribute to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.basalt.dev",
    version = "v1alpha1",
    kind = "PodGroup",
    namespaced,
    shortname = "pg",
    status = "PodGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A gang of pods that are scheduled all together or not at all.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "MinMember", type_ = "integer", json_path = ".spec.minMember"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.running"),
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queue"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many pods must be placed together before any of them starts.
    #[serde(default = "one_i32")]
    pub min_member: i32,
    /// Per-role minimums (role from the pod's `scheduling.basalt.dev/role` label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_task_member: BTreeMap<String, i32>,
    /// Resources the whole gang needs before it is admitted from its queue.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub min_resources: BTreeMap<String, Quantity>,
    /// The queue the group is admitted through; absent means `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority of the whole group; absent means the highest priority among its pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// Where a PodGroup stands; the names are Volcano's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PodGroupPhase {
    #[default]
    Pending,
    Inqueue,
    Running,
    Unknown,
    Completed,
}

impl From<PodGroupPhase> for basalt_engine::JobPhase {
    fn from(p: PodGroupPhase) -> Self {
        use basalt_engine::JobPhase as J;
        match p {
            PodGroupPhase::Pending => J::Pending,
            PodGroupPhase::Inqueue => J::Inqueue,
            PodGroupPhase::Running => J::Running,
            PodGroupPhase::Unknown => J::Unknown,
            PodGroupPhase::Completed => J::Completed,
        }
    }
}

/// A condition in the Kubernetes style (`Unschedulable`, `Scheduled`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last change of `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    #[serde(default)]
    pub phase: PodGroupPhase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodGroupCondition>,
    #[serde(default)]
    pub running: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
}

// ---------------------------------------------------------------------------------------------
// Queue
// ---------------------------------------------------------------------------------------------

/// The desired state of a Queue: a share of the cluster that PodGroups are admitted through.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.basalt.dev",
    version = "v1alpha1",
    kind = "Queue",
    status = "QueueStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A share of the cluster that PodGroups are admitted through.",
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight"),
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Relative share among sibling queues; at least 1.
    #[serde(default = "one_u32")]
    #[schemars(with = "i32", range(min = 1))]
    pub weight: u32,
    /// Upper limit on what the queue may use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub capability: BTreeMap<String, Quantity>,
    /// Resources reserved for the queue and never lent to others. A flat resource list; the
    /// Volcano reader converts Volcano's `guarantee.resource`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub guarantee: BTreeMap<String, Quantity>,
    /// The queue's fair share; more may be borrowed while others leave it idle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub deserved: BTreeMap<String, Quantity>,
    /// Whether what the queue borrowed beyond `deserved` may be reclaimed by other queues.
    #[serde(default = "yes")]
    pub reclaimable: bool,
    /// The parent queue; absent or `root` means a top-level queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default)]
    pub priority: i32,
    /// The state an administrator asks for (`Closed` stops admission). When set it wins over
    /// `status.state`, which the scheduler reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "queue_state_schema")]
    pub state: Option<QueueState>,
}

/// A plain string enum: schemars would write `Option<QueueState>` with a `null` enum member,
/// which not every API server version accepts. Absent means "not set"; null is never written.
fn queue_state_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Open", "Closing", "Closed"] })
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            weight: 1,
            capability: BTreeMap::new(),
            guarantee: BTreeMap::new(),
            deserved: BTreeMap::new(),
            reclaimable: true,
            parent: None,
            priority: 0,
            state: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum QueueState {
    #[default]
    Open,
    Closing,
    Closed,
}

impl From<QueueState> for basalt_engine::QueueState {
    fn from(s: QueueState) -> Self {
        match s {
            QueueState::Open => basalt_engine::QueueState::Open,
            QueueState::Closing => basalt_engine::QueueState::Closing,
            QueueState::Closed => basalt_engine::QueueState::Closed,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    #[serde(default)]
    pub state: QueueState,
    /// What the queue's running pods hold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub allocated: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inqueue: Option<i32>,
}

// ---------------------------------------------------------------------------------------------
// NodeTopology
// ---------------------------------------------------------------------------------------------

/// What the node agent found inside one node: its GPUs and their NVLink islands.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.basalt.dev",
    version = "v1alpha1",
    kind = "NodeTopology",
    derive = "PartialEq",
    derive = "Default",
    doc = "The GPUs of one node and their NVLink islands, published by Basalt's node agent. Named like the node.",
    printcolumn(name = "Clique", type_ = "string", json_path = ".spec.cliqueId"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopologySpec {
    /// The node's GPUs, by device index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuInfo>,
    /// NVLink / NVSwitch islands inside the node, each a list of GPU indices. GPUs in no
    /// island are islands of their own; an empty list means all GPUs share one island.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Vec<i32>>")]
    pub islands: Vec<Vec<u32>>,
    /// The multi-node NVLink clique (NVL72 rack) the node belongs to, as the GPU operator's
    /// `nvidia.com/gpu.clique` label names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clique_id: Option<String>,
    /// How many time-sliced replicas each GPU is advertised as, when time-slicing is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 1))]
    pub time_slice_replicas: Option<u32>,
    /// How each pair of GPUs is connected, rows and columns in `gpus` order, in `nvidia-smi topo
    /// -m` notation: `X` (itself), `NV<n>` (n NVLinks, directly or through NVSwitches), else the
    /// closest common PCIe ancestor: `BRD` (same board), `PIX` (one PCIe switch), `PXB` (several
    /// switches), `PHB` (host bridge), `NODE` (same NUMA node), `SYS` (across NUMA nodes), `?`
    /// (unknown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_matrix: Vec<Vec<String>>,
    /// The multi-node NVLink fabric (NVL72 rack) cluster UUID the GPUs report, when they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_cluster_uuid: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// Device index, as `nvidia-smi` and the device plugin number it.
    #[schemars(with = "i32", range(min = 0))]
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>", range(min = 0))]
    pub memory_mib: Option<u64>,
    /// PCI bus id as NVML writes it (`00000000:18:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// The NUMA node the GPU is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 0))]
    pub numa_node: Option<u32>,
    /// Active NVLinks of this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 0))]
    pub nvlinks: Option<u32>,
    /// The NVLink fabric clique the GPU belongs to (NVL72 racks), when its fabric is up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>", range(min = 0))]
    pub fabric_clique_id: Option<u32>,
    /// MIG mode and instances; absent when the GPU does not support MIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigInfo>,
}

/// MIG state of one GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigInfo {
    /// Whether MIG mode is on now.
    #[serde(default)]
    pub enabled: bool,
    /// Whether MIG mode is set to be on after the next GPU reset, when it differs from `enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_enabled: Option<bool>,
    /// The GPU instances, by placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<MigDeviceInfo>,
}

/// One MIG GPU instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigDeviceInfo {
    /// Profile name as the device plugin advertises it (`3g.40gb`, `1g.10gb+me`).
    pub profile: String,
    /// First memory slice of the placement.
    #[schemars(with = "i32", range(min = 0))]
    pub start: u32,
    /// Memory slices the placement spans.
    #[schemars(with = "i32", range(min = 1))]
    pub size: u32,
    /// The GPU instance id NVML gave it.
    #[schemars(with = "i32", range(min = 0))]
    pub gpu_instance_id: u32,
    /// Whether processes run on it.
    #[serde(default)]
    pub busy: bool,
}

// ---------------------------------------------------------------------------------------------
// Volcano's scheduling.volcano.sh/v1beta1 Queue
// ---------------------------------------------------------------------------------------------

/// Volcano's spelling of the Basalt Queue types, read from manifests and converted on read.
/// Volcano's PodGroup needs no type of its own: its fields are Basalt's.
pub mod volcano {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    pub struct Queue {
        #[serde(default)]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: QueueSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<QueueStatus>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct QueueSpec {
        #[serde(default = "one_i32")]
        pub weight: i32,
        #[serde(default)]
        pub capability: BTreeMap<String, Quantity>,
        #[serde(default)]
        pub guarantee: Guarantee,
        #[serde(default)]
        pub deserved: BTreeMap<String, Quantity>,
        #[serde(default = "yes")]
        pub reclaimable: bool,
        #[serde(default)]
        pub parent: Option<String>,
        #[serde(default)]
        pub priority: i32,
        /// Not in Volcano's v1beta1 API, honoured when present (see the crate README).
        #[serde(default)]
        pub state: Option<QueueState>,
    }

    impl Default for QueueSpec {
        fn default() -> Self {
            QueueSpec {
                weight: 1,
                capability: BTreeMap::new(),
                guarantee: Guarantee::default(),
                deserved: BTreeMap::new(),
                reclaimable: true,
                parent: None,
                priority: 0,
                state: None,
            }
        }
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    pub struct Guarantee {
        #[serde(default)]
        pub resource: BTreeMap<String, Quantity>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    pub struct QueueStatus {
        #[serde(default)]
        pub state: QueueState,
    }

    /// Volcano's queue states, which add `Unknown`.
    #[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum QueueState {
        #[default]
        Open,
        Closing,
        Closed,
        Unknown,
    }

    impl From<QueueState> for super::QueueState {
        /// `Unknown` is read as `Open`: Volcano reports it while its controller has not yet
        /// synced the queue, which is not a request to stop admission.
        fn from(s: QueueState) -> Self {
            match s {
                QueueState::Open | QueueState::Unknown => super::QueueState::Open,
                QueueState::Closing => super::QueueState::Closing,
                QueueState::Closed => super::QueueState::Closed,
            }
        }
    }

    impl Queue {
        /// The Basalt form of this queue. Fails (with the field path) only on a negative weight.
        pub fn into_basalt(self) -> Result<super::Queue, (&'static str, String)> {
            let s = self.spec;
            let weight = u32::try_from(s.weight).map_err(|_| {
                (
                    "spec.weight",
                    format!("must not be negative, got {}", s.weight),
                )
            })?;
            Ok(super::Queue {
                metadata: self.metadata,
                spec: super::QueueSpec {
                    weight,
                    capability: s.capability,
                    guarantee: s.guarantee.resource,
                    deserved: s.deserved,
                    reclaimable: s.reclaimable,
                    parent: s.parent,
                    priority: s.priority,
                    state: s.state.map(Into::into),
                },
                status: self.status.map(|st| super::QueueStatus {
                    state: st.state.into(),
                    ..Default::default()
                }),
            })
        }
    }
}

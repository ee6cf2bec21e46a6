//! Basalt's custom resources, API group `scheduling.basalt.dev`, version `v1alpha1`, and the
//! peers' objects Basalt reads (Volcano's Queue, PodGroup and HyperNode, scheduler-plugins'
//! PodGroup), as types only: what the node agent publishes and `basalt-crds` reads and converts.
//!
//! Field names follow Volcano's where the meaning is the same, so a Volcano manifest moves over
//! by changing its `apiVersion` (Queue's `guarantee` is the one difference: Basalt writes it as a
//! flat resource list, Volcano nests it under `guarantee.resource`).
//!
//! Dependency rule: k8s-openapi types, kube's derive, serde and schemars only; no Basalt crate,
//! no client, no runtime.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

mod mig_layouts;
mod queue_usage;
pub mod scheduler_plugins;

pub use mig_layouts::{MigLayoutPhase, MigLayoutPlacement, MigLayoutStatus, WantedMigLayout};
pub use queue_usage::QueueUsageStatus;

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

fn is_zero(v: &i32) -> bool {
    *v == 0
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
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Unschedulable\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many pods must be placed together before any of them starts; 0: no gang minimum.
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
    /// The topology tier one domain of which must (`required`) or should (`preferred`) hold
    /// the whole gang, e.g. `{required: rack}`.
    #[serde(default, skip_serializing_if = "TopologyConstraint::is_empty")]
    pub topology: TopologyConstraint,
    /// Parts of the gang that need a closer domain than the whole, e.g. tensor-parallel groups
    /// of 8 pods each inside one NVLink domain. Each pod belongs to the first entry that claims
    /// it; pods no entry claims are constrained by `topology` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub sub_groups: Vec<SubGroup>,
    /// Seconds the gang may wait without starting; then it is marked Unschedulable
    /// (`ScheduleTimeout`), holds nothing and sits out the scheduler's backoff before it is
    /// tried again (scheduler-plugins' field of the same name). Absent: it waits until it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Where a gang or a sub-group must or should land. Values are tier names from the scheduler's
/// topology configuration (`spine`, `rack`, `nvlink`, ...), which lists the tiers coarse to
/// fine, each read from a node label.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// A hard limit: all the pods go inside one domain of this tier, or none is placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub required: Option<String>,
    /// A wish: one domain of this tier when one has room, else the scheduler falls back to
    /// `required` (or anywhere, without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub preferred: Option<String>,
}

impl TopologyConstraint {
    pub fn is_empty(&self) -> bool {
        self.required.is_none() && self.preferred.is_none()
    }
}

/// Pods of a gang that must share a domain, e.g. a tensor-parallel group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroup {
    /// Unique within the PodGroup; the sub-groups formed are named `<name>-<i>` (rank blocks)
    /// or `<name>-<label values>`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Pods per sub-group, at least 1. Without `matchLabelKeys` the pods are cut into blocks of
    /// this many in rank order (the workload's index label: Job completion index, StatefulSet
    /// or JobSet pod index, Kubeflow replica index, ...).
    #[schemars(range(min = 1))]
    pub size: i32,
    /// Pod label keys: pods with equal values of all of them form one sub-group. Pods lacking
    /// one of the keys are left to later entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_label_keys: Vec<String>,
    /// Only pods matching this selector belong to the entry; the others are left to later
    /// entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// The gang starts only when at least this many of the entry's sub-groups are complete
    /// (hold `size` pods each); 0, the default, gates nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub min_sub_groups: i32,
    /// The tier one domain of which must (or should) hold each sub-group.
    #[serde(default, skip_serializing_if = "TopologyConstraint::is_empty")]
    pub topology: TopologyConstraint,
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
    /// Why the group waits, while it does: the engine's explanation as the plan carries it
    /// (`basalt_engine::Explanation`: verdict `NeverFits` or `Waiting`, what is short, node
    /// counts, who holds the capacity, what would free it, its place in line). Kept as JSON so
    /// that a status written by another version still reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub explanation: Option<serde_json::Value>,
    /// When `explanation` was last written (RFC 3339): a change of the explanation alone is
    /// written at most every 30 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explained_at: Option<String>,
    /// When the gang is expected to start, from running the scheduler forward on the
    /// cluster as it is (written by the daemon's forecast, off the scheduling path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<PodGroupForecast>,
}

/// A waiting gang's forecast start (`status.forecast`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupForecast {
    /// The estimated start (RFC 3339); absent when it cannot be bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// `exact` (every end it depends on is stated: `activeDeadlineSeconds`, the
    /// `scheduling.basalt.dev/expected-runtime` annotation), `estimate` (some end is learned
    /// from finished jobs of the same owner and queue) or `unknown`.
    pub method: String,
    /// When the forecast was computed (RFC 3339).
    pub computed_at: String,
}

/// Any JSON object, kept as written (`x-kubernetes-preserve-unknown-fields`).
fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
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
        name = "Deserved",
        type_ = "string",
        json_path = ".status.summary.deserved"
    ),
    printcolumn(
        name = "Allocated",
        type_ = "string",
        json_path = ".status.summary.allocated"
    ),
    printcolumn(name = "Share", type_ = "number", json_path = ".status.share"),
    printcolumn(
        name = "UsageWeight",
        type_ = "number",
        priority = 1,
        json_path = ".status.usageWeight"
    ),
    printcolumn(
        name = "Pending",
        type_ = "string",
        json_path = ".status.summary.pending"
    ),
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
    /// The queue's fair share this cycle (its `deserved`, else what weighted water-filling
    /// gives it of what its parent has).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub deserved: BTreeMap<String, Quantity>,
    /// Dominant share: allocated / deserved in the resource where it is largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// What the queue's pending pods ask for (its subtree's, for a parent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub demand: BTreeMap<String, Quantity>,
    /// The same as one line each, for `kubectl get queues` (pod slots left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<QueueSummary>,
    /// What the queue used over the usage half-life, when `fairness.usage.halfLife` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<QueueUsageStatus>,
    /// Its weight adjusted by usage, as a part of its siblings' (itself included): what it
    /// divides their over-quota capacity by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_weight: Option<f64>,
    /// What usage does to its order among its siblings: "ordered before `b`: used 0.25 of the
    /// cluster over the half-life against 0.5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_effect: Option<String>,
}

/// Deserved, allocated and pending resources, each as `cpu=4, nvidia.com/gpu=8`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    #[serde(default)]
    pub deserved: String,
    #[serde(default)]
    pub allocated: String,
    #[serde(default)]
    pub pending: String,
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
    status = "NodeTopologyStatus",
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
    /// MIG layouts the scheduler wants, per GPU: written by the scheduler only, applied by the
    /// node agent when the GPU is idle (its progress is `status.migLayouts`). The agent keeps
    /// this field as it is when it publishes the rest of the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_layouts: Vec<WantedMigLayout>,
}

/// What the node agent reports on the node besides its topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopologyStatus {
    /// `MigLayoutValid`: whether the MIG layout the node's `nvidia.com/mig.config` label names
    /// could be read and fits the GPUs it selects (absent when the node names none). Kubernetes-style conditions, as
    /// PodGroups have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodGroupCondition>,
    /// Per GPU with a wanted layout in `spec.migLayouts`: what the node agent did with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_layouts: Vec<MigLayoutStatus>,
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
// Volcano's scheduling.volcano.sh/v1beta1 Queue and PodGroup, topology.volcano.sh/v1alpha1 HyperNode
// ---------------------------------------------------------------------------------------------

/// A field path and a message: a problem with one field of a peer's object (Volcano's,
/// scheduler-plugins').
pub type Issue = (String, String);

/// Volcano's spelling of the Basalt Queue and PodGroup, read from manifests and converted to
/// Basalt's on read; and Volcano's HyperNode, read as is (see `convert` for the node labels it
/// becomes).
pub mod volcano;

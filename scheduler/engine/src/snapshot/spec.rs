//! What a snapshot is built from: nodes, pods, PodGroups and queues as the readers give
//! them (names and resource lists, not yet interned or checked).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::constraints::{NamespaceSpec, PodConstraints};
use crate::model::*;
use crate::resources::ResourceList;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: ResourceList,
    /// Per-GPU detail (from NodeTopology or a device plugin's register annotation). When
    /// absent, GPUs `0..n` are assumed in one island.
    pub gpus: Option<Vec<Gpu>>,
    /// How the GPUs are shared (see [`crate::devices::Sharing`]).
    pub sharing: crate::devices::Sharing,
    /// The resource its devices are advertised as, when not the cluster's whole-device one
    /// ([`ClusterSpec::device_resource`]): another vendor's, or a sharing plugin's, as its
    /// reader names it.
    pub device_resource: Option<String>,
    /// The vendors' share resources (see [`crate::devices::ShareVocabulary`]): a node that
    /// shares its devices with memory and compute needs them. Its reader gives every node the
    /// same.
    pub shares: Option<Arc<crate::devices::ShareVocabulary>>,
    /// MIG instances advertised on their own (NVIDIA's mixed strategy), each on a GPU of
    /// `gpus` in MIG mode.
    pub slices: Vec<crate::devices::MigSlice>,
    /// Why the node's devices take no pod, when its device plugin's register cannot be
    /// trusted (unreadable, or naming a device twice): its device count and share totals read
    /// 0, and pods asking for them are refused with this reason. Its other resources schedule.
    pub devices_closed: Option<String>,
    /// mig-manager's `nvidia.com/mig.config.state` while a MIG reconfiguration has not
    /// succeeded (`pending`, `rebooting`, `failed`): no MIG re-layout is proposed for the node.
    pub mig_reconfiguring: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    /// Scheduled by this scheduler (its `schedulerName` is one of ours).
    pub ours: bool,
    /// The PodGroup it belongs to (same namespace), if any.
    pub group: Option<String>,
    /// Without a PodGroup: the queue of its own job (`None`: the default queue).
    pub queue: Option<String>,
    pub role: Option<String>,
    /// Sum of container requests (max with init containers), without the pod slot.
    pub request: ResourceList,
    pub rules: PlacementRules,
    pub priority: i32,
    pub created_ms: i64,
    pub phase: PodPhase,
    pub node: Option<String>,
    /// `metadata.deletionTimestamp` is set: a bound pod still holds its node, but topology
    /// spread no longer counts it (see [`PodMeta::terminating`]).
    pub terminating: bool,
    pub gpu_ids: Vec<u32>,
    /// The devices a bound pod holds by UUID with its share of each, as HAMi's
    /// `hami.io/vgpu-devices-allocated` records them (wins over `gpu_ids`).
    pub held_devices: Vec<crate::devices::HeldDevice>,
    /// What it asks of the devices it shares, per pod and per container, as its reader read
    /// it from the vendor's names (see [`crate::devices::DeviceAsk`]).
    pub devices: crate::devices::DeviceAsk,
    /// `status.nominatedNodeName` of a pending pod.
    pub nominated_node: Option<String>,
    /// Annotated `preemptable: "false"`.
    pub non_preemptable: bool,
    /// `preemptionPolicy: Never` (pod or PriorityClass).
    pub preemption_never: bool,
    pub started_ms: Option<i64>,
    pub active_deadline_s: Option<i64>,
    /// The pod's labels (sub-groups may be formed by label values).
    pub labels: BTreeMap<String, String>,
    /// The pod's index in its workload (Job completion index, JobSet / StatefulSet / training
    /// operator replica index): sub-groups are cut from consecutive ranks.
    pub rank: Option<u32>,
    /// Set on a bound pod that stands for running work of this (leaf) queue which the cycle
    /// must leave where it is, such as a replay's sum of fully placed gangs: it counts on its
    /// node and on its queue like a bound pod of ours (its request may state `pods`, the pods it
    /// stands for), but it is no task of any job, so it is never moved, evicted or reported.
    /// `ours`, `group` and the placement fields do not apply.
    pub pinned_queue: Option<String>,
    /// `spec.schedulingGates` names: while any is left the pod is not ready for scheduling.
    pub scheduling_gates: Vec<String>,
    /// Its DRA ResourceClaims (`ns/name`), in the order of `rules.claims`.
    pub claims: Vec<String>,
    /// Inter-pod affinity, topology spread, host ports and preferences; `None` when it states
    /// none (shared: the members of a gang usually state the same).
    pub constraints: Option<Arc<PodConstraints>>,
    /// Why the pod must wait whatever the nodes offer, as its reader found (a pending pod of
    /// ours with any is held, see [`Hold`]).
    pub waits: Vec<Wait>,
}

/// A reason a pending pod must wait whatever the nodes offer, found by the reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A volume is not ready: its claim is missing, bound to a volume that does not exist, or
    /// a `ReadWriteOncePod` claim another pod uses. The message names the claim.
    Volume(String),
    /// A scheduling-relevant field Basalt does not understand: the field's path and why.
    Unsupported { field: String, message: String },
    /// A ResourceClaim is not ready: a template's claim not made yet, missing, or being
    /// deleted. The message names the claim.
    Claim(String),
}

impl PodSpec {
    /// A pod of ours that is a member of a job (not pinned).
    pub(super) fn is_member(&self) -> bool {
        self.ours && self.pinned_queue.is_none()
    }
}

/// Pods of a gang that must share a domain, e.g. a tensor-parallel group of `size` pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubGroupSpec {
    pub name: String,
    /// Pods per sub-group.
    pub size: u32,
    /// Pods with equal values of these labels form one sub-group; without keys, sub-groups are
    /// contiguous blocks of `size` pods in rank order.
    pub match_label_keys: Vec<String>,
    /// Only pods whose labels satisfy all of these belong to the spec (Volcano's
    /// `labelSelector`); empty: every pod.
    pub selector: Vec<SelectorRequirement>,
    /// The job starts only with this many of the spec's sub-groups complete (Volcano's
    /// `minSubGroups`); 0 gates nothing.
    pub min_sub_groups: u32,
    pub topology: TopologySpec,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    pub namespace: String,
    pub name: String,
    pub queue: Option<String>,
    pub min_member: i64,
    pub min_task_member: BTreeMap<String, i64>,
    pub min_resources: Option<ResourceList>,
    /// From the group's PriorityClass; when absent the highest priority of its pods is used.
    pub priority: Option<i32>,
    pub created_ms: i64,
    pub phase: JobPhase,
    /// The domain the whole gang must (or should) fit in.
    pub topology: TopologySpec,
    pub sub_groups: Vec<SubGroupSpec>,
    /// How long the gang may wait without starting before it backs off
    /// (`scheduleTimeoutSeconds`; see [`crate::Framework::gang_backoff_ms`]).
    pub schedule_timeout_ms: Option<i64>,
}

impl GroupSpec {
    /// A gang of `min_member` in the default queue, admitted (`Inqueue`), with nothing else
    /// stated.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, min_member: i64) -> Self {
        GroupSpec {
            namespace: namespace.into(),
            name: name.into(),
            queue: None,
            min_member,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: None,
            created_ms: 0,
            phase: JobPhase::Inqueue,
            topology: TopologySpec::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    pub name: String,
    pub parent: Option<String>,
    pub weight: u32,
    pub capability: Option<ResourceList>,
    pub guarantee: Option<ResourceList>,
    pub deserved: Option<ResourceList>,
    pub reclaimable: bool,
    pub priority: i32,
    pub state: QueueState,
}

impl QueueSpec {
    pub fn new(name: impl Into<String>) -> Self {
        QueueSpec {
            name: name.into(),
            parent: None,
            weight: 1,
            capability: None,
            guarantee: None,
            deserved: None,
            reclaimable: true,
            priority: 0,
            state: QueueState::Open,
        }
    }
}

/// Everything a snapshot is built from.
#[derive(Clone, Debug, Default)]
pub struct ClusterSpec {
    /// The instant of the snapshot, in milliseconds since the Unix epoch (time is an argument).
    pub now_ms: i64,
    pub nodes: Vec<NodeSpec>,
    pub pods: Vec<PodSpec>,
    pub groups: Vec<GroupSpec>,
    pub queues: Vec<QueueSpec>,
    /// Namespaces with their labels, for `namespaceSelector` (see [`NamespaceSpec`]).
    pub namespaces: Vec<NamespaceSpec>,
    /// DRA devices, the sets requests match and what is allocated (see [`crate::dra`]).
    pub dra: crate::dra::DraSpec,
    /// What each queue used, as of the instant each was taken (see [`crate::usage`]); read
    /// only when the framework has a usage half-life.
    pub usage: Vec<crate::QueueUsage>,
    /// The resource whole devices are advertised as on a node that names no other
    /// ([`NodeSpec::device_resource`]), interned as [`crate::resources::GPU`]: a vendor's name,
    /// given by the reader (`crds`: NVIDIA's).
    pub device_resource: String,
}

//! The scheduling model: nodes with their GPUs, tasks (pods), jobs (gangs) and queues.
//!
//! These are the resolved, id-based forms held by a [`crate::Snapshot`]. Callers describe a
//! cluster with the name-based specs of [`crate::snapshot`] and let the snapshot resolve them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resources::{Limits, Resources};

macro_rules! typed_id {
    ($($(#[$m:meta])* $name:ident),*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize { self.0 as usize }
        }
    )*};
}

typed_id!(
    /// A node's position in the snapshot (nodes are sorted by name).
    NodeId,
    /// A task's position in the snapshot (tasks are sorted by `namespace/name`).
    TaskId,
    /// A job's position in the snapshot (jobs are sorted by `namespace/name`).
    JobId,
    /// A queue's position in the snapshot (queues are sorted by name).
    QueueId
);

/// One physical GPU of a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// GPUs with the same value share an NVLink / NVSwitch island inside the node.
    #[serde(default)]
    pub nvlink_domain: u32,
    /// Pods it takes at once on a node that shares devices: HAMi's split count, or the
    /// time-slice replicas (1: one pod, the whole device).
    #[serde(default = "one")]
    pub slots: u32,
    /// Compute it has to share, in percent of one device (HAMi's `devcore`, 100 unless scaled).
    #[serde(default = "hundred")]
    pub cores: u32,
    /// False for a device its plugin reports unhealthy or HAMi's `hami.io/device-cordon`
    /// names: it takes no new pods.
    #[serde(default = "yes")]
    pub healthy: bool,
    /// In MIG mode under NVIDIA's mixed strategy: no whole device (it counts as taken); its
    /// instances are the node's [`Node::slices`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mig: bool,
}

fn one() -> u32 {
    1
}

fn hundred() -> u32 {
    100
}

fn yes() -> bool {
    true
}

impl Gpu {
    /// A healthy, unshared device known only by its index, in island 0.
    pub fn new(index: u32) -> Self {
        Gpu {
            index,
            uuid: None,
            model: None,
            memory_mib: None,
            nvlink_domain: 0,
            slots: 1,
            cores: 100,
            healthy: true,
            mig: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

/// A pod toleration. An empty key with `Exists` tolerates every taint; a missing effect
/// matches every effect.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Toleration {
    #[serde(default)]
    pub key: String,
    pub operator: TolerationOperator,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One `matchExpressions` / `matchFields` entry of a node selector term.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

impl SelectorRequirement {
    /// Whether a label (or field) `value`, `None` when absent, satisfies the requirement, as
    /// Kubernetes reads it (`Gt` / `Lt` compare integers).
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(v), [bound]) = (value, self.values.as_slice()) else {
                    return false;
                };
                match (v.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(v), Ok(b)) if self.operator == SelectorOperator::Gt => v > b,
                    (Ok(v), Ok(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

/// A node selector term: all of its requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeSelectorTerm {
    #[serde(default)]
    pub match_expressions: Vec<SelectorRequirement>,
    /// Only `metadata.name` is a supported field, as in Kubernetes.
    #[serde(default)]
    pub match_fields: Vec<SelectorRequirement>,
}

impl NodeSelectorTerm {
    /// Whether the node satisfies every requirement. A term with no requirements matches
    /// nothing, as in Kubernetes; `metadata.name` is the only node field it supports.
    pub fn matches(&self, node: &Node) -> bool {
        self.matches_labels(&node.name, &node.labels)
    }

    /// [`NodeSelectorTerm::matches`] for a node known by its name and labels.
    pub fn matches_labels(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        (self.match_expressions.iter()).all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && (self.match_fields.iter()).all(|r| r.key == "metadata.name" && r.matches(Some(name)))
    }
}

/// `requiredDuringSchedulingIgnoredDuringExecution`: the terms are ORed.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequiredNodeAffinity {
    pub terms: Vec<NodeSelectorTerm>,
}

/// The part of a pod that decides, without looking at free capacity, which nodes it may use.
/// Pods with equal placement rules share feasibility results within a session.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacementRules {
    pub node_selector: BTreeMap<String, String>,
    pub affinity: Option<RequiredNodeAffinity>,
    pub tolerations: Vec<Toleration>,
    /// What the pod's volumes allow: each rule must hold.
    pub volumes: Vec<VolumeNodeRule>,
    /// Which devices it accepts, when it says (HAMi's type and UUID filters).
    pub devices: Option<std::sync::Arc<crate::devices::DeviceFilters>>,
    /// What its DRA ResourceClaims ask (see [`crate::dra`]).
    pub claims: Option<std::sync::Arc<crate::dra::ClaimNeed>>,
}

/// A node restriction from one of the pod's volumes (kube-scheduler's VolumeBinding): the node
/// must match one of `terms` (ORed, as in a node selector). Free of the claim's name, so pods
/// whose volumes allow the same nodes share feasibility results.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeNodeRule {
    /// A bound PersistentVolume's `nodeAffinity` (refused: "had volume node affinity
    /// conflict"); else where an unbound `WaitForFirstConsumer` claim can bind to an available
    /// volume or be provisioned (refused: "didn't find available persistent volumes to bind").
    pub bound: bool,
    pub terms: Vec<NodeSelectorTerm>,
}

/// Index into [`crate::Snapshot::rules`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RulesId(pub u32);

/// Index into [`crate::Snapshot::shapes`]: equal rules and equal request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShapeId(pub u32);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    /// The node's physical GPUs by index. Unshared, their number equals its device resource's
    /// allocatable; shared, that allocatable counts their slots.
    pub gpus: Vec<Gpu>,
    /// How the GPUs are shared between pods.
    pub sharing: crate::devices::Sharing,
    /// The resource its devices are advertised as (the cluster's whole-device resource,
    /// [`crate::resources::GPU`], unless the node says).
    pub device_kind: crate::resources::ResourceId,
    /// Where the node's devices start in [`crate::Snapshot::device_use`] (shared nodes only).
    pub device_base: u32,
    /// MIG instances advertised on their own (`nvidia.com/mig-<profile>`), at most 64.
    pub slices: Vec<crate::devices::Slice>,
    /// Why its devices take no pod ([`crate::NodeSpec::devices_closed`]).
    pub devices_closed: Option<std::sync::Arc<str>>,
    /// mig-manager's state while a MIG reconfiguration of the node has not succeeded
    /// ([`crate::NodeSpec::mig_reconfiguring`]).
    pub mig_reconfiguring: Option<std::sync::Arc<str>>,
}

impl Node {
    /// The GPUs in MIG mode: never whole devices, so always taken in the free-device mask.
    pub fn mig_gpus(&self) -> u64 {
        (self.gpus.iter().enumerate())
            .filter(|(_, g)| g.mig)
            .fold(0, |m, (p, _)| m | 1 << p)
    }
}

/// Where a task stands when the snapshot is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for a node.
    Pending,
    /// Bound to a node (running or about to run).
    Bound(NodeId),
    Succeeded,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    /// `namespace/name` (shared: snapshots of a builder reuse it cycle after cycle).
    pub name: std::sync::Arc<str>,
    pub job: JobId,
    /// The pod's role inside its gang, for per-role minimums (see [`Task::role`]).
    pub role: Option<String>,
    pub request: Resources,
    pub rules: RulesId,
    pub shape: ShapeId,
    pub priority: i32,
    pub state: TaskState,
    /// GPUs held on the node when bound, one bit per position in the node's GPU list (a mask,
    /// not a list: snapshots are rebuilt every cycle, and a list per bound pod is an allocation).
    /// On a node that shares devices, the distinct devices it holds a share of.
    pub gpus: u64,
    /// What it takes of each device it shares: its request's HAMi share, or for a bound pod
    /// what HAMi's annotation records; `None` asks for whole devices (see
    /// [`crate::devices::ShareAsk::WHOLE`]).
    pub share: Option<crate::devices::ShareAsk>,
    /// A pending pod whose containers (two or more) ask for devices separately: each
    /// container's ask, in container order. Placed on a node that shares its devices, the
    /// containers are allocated one after the other (see `Session::container_takes`); elsewhere
    /// and for bound pods the pod-level `share` counts.
    pub containers: Option<std::sync::Arc<[crate::devices::ContainerAsk]>>,
    /// A bound pod whose devices hold different amounts (its containers asked apart): what it
    /// holds of each, by UUID, as HAMi's annotation records it; its usage is charged device by
    /// device from this (`share` is the largest amount). `None` for every other pod.
    pub held: Option<std::sync::Arc<[crate::devices::HeldDevice]>>,
    /// The node's MIG slices a bound pod holds (positions in [`Node::slices`]).
    pub slices: u64,
    /// A pending pod's `status.nominatedNodeName`: capacity freed for it by evictions, held for
    /// it until its gang's turn comes.
    pub nominated: Option<NodeId>,
    /// Annotated `preemptable: "false"`: never evicted by preempt or reclaim.
    pub non_preemptable: bool,
    /// Its PriorityClass (or the pod) says `preemptionPolicy: Never`: it never evicts others.
    pub preemption_never: bool,
    pub created_ms: i64,
    /// When a bound pod started (`status.startTime`).
    pub started_ms: Option<i64>,
    /// `activeDeadlineSeconds`: the pod ends at most this long after it starts.
    pub active_deadline_s: Option<i64>,
    /// Index in its workload, when the pod carries one.
    pub rank: Option<u32>,
    /// Its ResourceClaims (`ns/name`), in the order of [`PlacementRules::claims`].
    pub claims: Vec<std::sync::Arc<str>>,
    /// Index into its job's `sub_groups`.
    pub sub_group: Option<u32>,
    /// Set on a pending pod of ours that may not be placed at all, whatever the nodes offer.
    pub hold: Option<Hold>,
    /// What the pod states about other pods and its preferences, as its reader gave them
    /// (namespaces not yet resolved); `None` when it states none.
    pub constraints: Option<std::sync::Arc<crate::constraints::PodConstraints>>,
    /// Its namespace and labels, which other pods' affinity terms and spread constraints match.
    pub meta: std::sync::Arc<PodMeta>,
}

/// What pod affinity terms and spread constraints select a pod by (shared: converted once
/// per pod spec).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodMeta {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Being deleted (`deletionTimestamp` set): spread constraints do not count it, as
    /// kube-scheduler's PodTopologySpread skips it; pod affinity still does.
    pub terminating: bool,
}

/// A bound pod of another scheduler, as far as inter-pod rules see it: where it runs, what
/// selects it and what it states (its anti-affinity repels, its host ports are taken).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignPod {
    pub node: NodeId,
    pub meta: std::sync::Arc<PodMeta>,
    pub constraints: Option<std::sync::Arc<crate::constraints::PodConstraints>>,
}

/// Why a pending pod is never placed: it is not ready for scheduling, or it needs what Basalt
/// does not allocate. It stays pending (and counts as pending) but is no candidate for a node,
/// a nomination or its queue's demand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// `spec.schedulingGates`, by name: the API server refuses its binding until every gate is
    /// removed.
    Gated(Vec<String>),
    /// Its ResourceClaims are not ready (a template's claim not made yet, a claim missing or
    /// being deleted), one message per claim.
    Claims(Vec<String>),
    /// Its volumes are not ready ([`crate::Wait::Volume`]), one message per claim.
    Volumes(Vec<String>),
    /// It states what Basalt does not understand ([`crate::Wait::Unsupported`]), one message
    /// per field.
    Unsupported(Vec<String>),
}

impl Task {
    /// The role counted against `minTaskMember`: a pod without a role label belongs to role
    /// `""`, as in Volcano.
    pub fn role(&self) -> &str {
        self.role.as_deref().unwrap_or("")
    }

    /// The latest time a bound task can still be running, when its deadline says so.
    pub fn ends_by_ms(&self) -> Option<i64> {
        Some((self.started_ms?).saturating_add(self.active_deadline_s?.saturating_mul(1000)))
    }
}

/// A PodGroup's phase, as Volcano and Basalt write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobPhase {
    Pending,
    Inqueue,
    Running,
    Unknown,
    Completed,
}

impl JobPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Pending => "Pending",
            JobPhase::Inqueue => "Inqueue",
            JobPhase::Running => "Running",
            JobPhase::Unknown => "Unknown",
            JobPhase::Completed => "Completed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    /// `namespace/name` of the PodGroup (or of the pod, for a pod without a group).
    pub name: std::sync::Arc<str>,
    pub queue: QueueId,
    pub min_member: u32,
    pub min_task_member: BTreeMap<String, u32>,
    pub min_resources: Option<Resources>,
    pub priority: i32,
    /// Creation time in milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// The phase recorded in the PodGroup's status before this cycle.
    pub phase: JobPhase,
    /// Tasks of the job in rank order (pods without a rank last, by name).
    pub tasks: Vec<TaskId>,
    /// True for a pod without a PodGroup (a group of one).
    pub implicit: bool,
    /// The domain the whole gang must (or should) fit in.
    pub topology: TopologySpec,
    /// Members that must share a tighter domain (e.g. tensor-parallel groups).
    pub sub_groups: Vec<SubGroup>,
    /// The sub-group specs (Volcano's `subGroupPolicy` entries) in spec order; a sub-group's
    /// `policy` indexes this.
    pub sub_group_policies: Vec<SubGroupPolicy>,
    /// How long it may wait without starting (see [`crate::Framework::timed_out`]).
    pub schedule_timeout_ms: Option<i64>,
}

/// One sub-group spec's gang rule: the job starts only with `min_sub_groups` of its sub-groups
/// complete (Volcano's `minSubGroups`; 0 gates nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubGroupPolicy {
    pub name: String,
    pub min_sub_groups: u32,
}

impl Job {
    /// Whether `members` members (those holding a node or done), `by_role` of them in each
    /// role, meet every minimum of the gang: `minMember`, and each role's `minTaskMember` where
    /// those gate (Volcano's elastic rule: not when `minMember` is below their sum, which its
    /// job controller sets to every task's replica count). The one rule readiness, evictions
    /// and the reported phase share.
    pub fn meets_minimums(&self, members: u32, by_role: impl Fn(&str) -> u32) -> bool {
        members >= self.min_member
            && (!self.roles_gate()
                || (self.min_task_member.iter()).all(|(role, &min)| by_role(role) >= min))
    }

    /// Whether the per-role minimums gate the job: not when `minMember` is below their sum.
    pub fn roles_gate(&self) -> bool {
        let role_sum = (self.min_task_member.values()).fold(0u32, |s, &m| s.saturating_add(m));
        self.min_member >= role_sum
    }
}

/// Members of a gang that must share a domain, in rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubGroup {
    /// The spec's name, then the block number or the label values that formed it.
    pub name: String,
    pub topology: TopologySpec,
    pub tasks: Vec<TaskId>,
    /// Index of the spec that formed it in its job's `sub_group_policies`.
    pub policy: u32,
    /// Members it must hold to be complete: the spec's size (a short last rank block, all of
    /// its members).
    pub min_member: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QueueState {
    Open,
    Closing,
    Closed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    pub id: QueueId,
    pub name: String,
    pub parent: Option<QueueId>,
    pub weight: u32,
    /// Hard ceiling per named resource.
    pub capability: Limits,
    /// Reserved per named resource: never lent out, never reclaimed below.
    pub guarantee: Limits,
    /// Explicit entitlement per named resource; the others are computed.
    pub deserved: Limits,
    pub reclaimable: bool,
    pub priority: i32,
    pub state: QueueState,
}

/// Where a gang or one of its sub-groups must (`required`, a hard limit) or should
/// (`preferred`) land: tier names from the scheduler's topology config, e.g. `rack`, `nvlink`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TopologySpec {
    pub required: Option<String>,
    pub preferred: Option<String>,
}

impl TopologySpec {
    pub fn is_empty(&self) -> bool {
        self.required.is_none() && self.preferred.is_none()
    }
}

//! Kubernetes objects to the engine's name-based specs ([`ClusterSpec`]), and on to a
//! [`Snapshot`].
//!
//! The rules follow Kubernetes where it has one (pod requests, limits standing in for missing
//! requests, init containers, priority classes) and Volcano where Basalt reads its objects.
//! Every error names the source (file and document), the object and the field.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use basalt_engine::{
    ClusterSpec, Gpu, GroupSpec, JobPhase, NamespaceSpec, NodeSpec, PodConstraints, PodSpec,
    QueueSpec, QueueUsage, ResourceList, Snapshot, SnapshotError, Taint, TaintEffect,
    MAX_GPUS_PER_NODE,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use thiserror::Error;

use crate::quantity;
use crate::read::Object;
use crate::types::{NodeTopology, PodGroup, PodGroupPhase, Queue, TopologyConstraint};

mod assembly;
mod constraints;
pub mod device_names;
mod devices;
mod dra;
mod groups;
mod hypernode;
mod mig;
mod namespaces;
mod nodes;
mod owners;
pub(crate) use owners::missing_owners;
mod pod;
mod selectors;
mod unsupported;
mod usage;
pub(crate) mod volumes;

use groups::{group, queue};

pub(crate) use assembly::Assembly;
pub use assembly::SharedSpec;
pub use devices::{
    GPU_MEMORY_LABEL, GPU_REPLICAS_LABEL, HAMI_DEVICES_ALLOCATED, HAMI_DEVICE_CORDON,
    HAMI_GPU_POLICY, HAMI_NODE_POLICY, HAMI_NODE_REGISTER, NOUSE_GPU_TYPE, NOUSE_GPU_UUID,
    USE_GPU_TYPE, USE_GPU_UUID, VGPU_IDS, VGPU_NODE_REGISTER, VGPU_NOUSE_UUID, VGPU_USE_UUID,
};
use hypernode::hypernode_labels;
pub use mig::{MIG_CONFIG_STATE_LABEL, MIG_STRATEGY_LABEL};
pub use namespaces::namespace_queue;
use namespaces::{namespace_queues, namespace_spec};
pub(crate) use nodes::taint_effect;
use nodes::{collect_topologies, node};
pub use pod::{device_ask, explicit_group, RANK_LABELS};
use selectors::{label_selector, selector_requirements};
use usage::queue_usage;
pub use usage::{read_usage, usage_effect_message, usage_status};
pub use volumes::{volume_admits_node, volume_can_bind};

/// The implicit top of the queue tree: a parent of `root` (or none) means the top, and no
/// Queue may take the name.
pub const ROOT_QUEUE: &str = "root";
/// Label or annotation naming a pod's PodGroup (same namespace).
pub const POD_GROUP: &str = "scheduling.basalt.dev/pod-group";
/// Annotation (or label) naming a queue: on a pod without a PodGroup, its own job's; on a
/// Namespace, the queue of its PodGroups and groupless pods that name none.
pub const QUEUE: &str = "scheduling.basalt.dev/queue";
/// Volcano's annotation naming a pod's PodGroup.
pub const VOLCANO_GROUP_NAME: &str = "scheduling.k8s.io/group-name";
/// scheduler-plugins' (coscheduling) label naming a pod's PodGroup.
pub const SCHEDULER_PLUGINS_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Label or annotation naming a pod's role inside its gang.
pub const ROLE: &str = "scheduling.basalt.dev/role";
/// Volcano's label / annotation naming a pod's task inside its job.
pub const VOLCANO_TASK_SPEC: &str = "volcano.sh/task-spec";
/// Annotation listing the GPU indices a bound pod holds (`0,1,2,3`).
pub const GPU_IDS: &str = "scheduling.basalt.dev/gpu-ids";
/// Label or annotation; `"false"` protects a pod from preemption and reclaim.
pub const PREEMPTABLE: &str = "scheduling.basalt.dev/preemptable";
/// Volcano's spelling of [`PREEMPTABLE`].
pub const VOLCANO_PREEMPTABLE: &str = "volcano.sh/preemptable";

/// Kubernetes' built-in priority classes, which exist in every cluster without a manifest.
const BUILTIN_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertOptions {
    /// `spec.schedulerName` values that mean "scheduled by Basalt".
    pub scheduler_names: Vec<String>,
    /// The snapshot's instant (milliseconds since the Unix epoch): time is an argument.
    pub now_ms: i64,
    /// Resources that name devices, in order: a node's devices are the first it advertises.
    pub device_resources: Vec<String>,
    /// The scheduler's topology tiers: the node labels a workload's exclusive topology may
    /// name (JobSet, LeaderWorkerSet).
    pub tiers: Vec<basalt_topology::TierSpec>,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            scheduler_names: vec!["basalt".to_string()],
            now_ms: 0,
            device_resources: device_names::DEFAULT_DEVICE_RESOURCES
                .map(String::from)
                .to_vec(),
            tiers: Vec::new(),
        }
    }
}

/// An object that cannot be converted or that the engine rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct ConvertError {
    /// Where the object came from (`cluster.yaml: document 3`); unknown for objects the engine
    /// made itself, such as the implicit `default` queue.
    pub origin: Option<String>,
    pub kind: String,
    /// `namespace/name` or `name`.
    pub object: String,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.origin {
            write!(f, "{o}: ")?;
        }
        write!(
            f,
            "{} {}: {}: {}",
            self.kind, self.object, self.field, self.message
        )
    }
}

/// Builds the engine's cluster description. `objects` pairs each object with its source label.
/// Warnings (see [`cluster_spec_with_warnings`]) are dropped.
pub fn cluster_spec(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> Result<ClusterSpec, ConvertError> {
    cluster_spec_with_warnings(objects, options).map(|(spec, _)| spec)
}

/// [`cluster_spec`], with warnings about input that was used only in part (a node in two
/// HyperNodes of one tier, a node label a HyperNode would have set differently, a HyperNode
/// member that does not exist), each naming the source, the object and the field.
pub fn cluster_spec_with_warnings(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> Result<(ClusterSpec, Vec<String>), ConvertError> {
    let mut warnings = Vec::new();
    let context = Context::collect(objects, &mut warnings)?;
    let mut spec = Assembly::new(options.now_ms);
    for (origin, object) in objects {
        if let Some(one) = context.convert(origin, object, options, &mut warnings)? {
            spec.add(origin, object, one, &mut warnings);
        }
    }
    let spec = spec.finish(&context, options, &mut warnings)?.into_spec();
    Ok((spec, warnings))
}

/// What converting one object may look up in the others: priority classes, NodeTopologies'
/// per-GPU detail, the labels HyperNodes give nodes, the claims, volumes and classes pods'
/// volumes need, and which pods use each claim.
pub(crate) struct Context {
    priorities: Priorities,
    topologies: HashMap<String, devices::Topology>,
    hyper_labels: HashMap<String, BTreeMap<String, String>>,
    volumes: volumes::Volumes,
    /// One `Arc` per distinct pod constraints: a gang's members usually state the same.
    shared: Mutex<HashSet<Arc<PodConstraints>>>,
    /// Per namespace, the queue its label or annotation [`QUEUE`] names.
    namespace_queues: HashMap<String, String>,
    /// The workloads pods belong to (see `owners.rs`).
    workload_groups: owners::WorkloadGroups,
    /// DRA classes, devices and claims (see `dra.rs`).
    pub(crate) dra: dra::Dra,
}

/// One object's part of a [`ClusterSpec`].
#[derive(Clone)]
pub(crate) enum Converted {
    Node(NodeSpec),
    /// Shared with the snapshot builder that is told of it (one copy of each pod).
    Pod(Arc<PodSpec>),
    Group(GroupSpec),
    /// A queue and the usage its status records (see `usage.rs`).
    Queue(QueueSpec, Option<QueueUsage>),
    Namespace(NamespaceSpec),
}

impl Converted {
    pub(crate) fn add_to(self, spec: &mut ClusterSpec) {
        match self {
            Converted::Node(n) => spec.nodes.push(n),
            Converted::Pod(p) => spec.pods.push(Arc::unwrap_or_clone(p)),
            Converted::Group(g) => spec.groups.push(g),
            Converted::Queue(q, usage) => {
                spec.queues.push(q);
                spec.usage.extend(usage);
            }
            Converted::Namespace(n) => spec.namespaces.push(n),
        }
    }
}

impl Context {
    /// Fails at the first PriorityClass, NodeTopology or HyperNode that cannot be read.
    pub(crate) fn collect(
        objects: &[(String, Object)],
        warnings: &mut Vec<String>,
    ) -> Result<Context, ConvertError> {
        Ok(Context {
            priorities: Priorities::collect(objects)?,
            topologies: collect_topologies(objects)?,
            hyper_labels: hypernode_labels(objects, warnings)?,
            volumes: volumes::Volumes::collect(objects),
            shared: Mutex::default(),
            namespace_queues: namespace_queues(objects),
            workload_groups: owners::WorkloadGroups::collect(objects),
            dra: dra::Dra::collect(objects, warnings),
        })
    }

    /// The queue a job of the namespace goes to when it names none (see [`QUEUE`]).
    pub(crate) fn namespace_queue(&self, namespace: &str) -> Option<&str> {
        self.namespace_queues.get(namespace).map(String::as_str)
    }

    /// The shared `Arc` of constraints equal to `c`.
    fn share(&self, c: PodConstraints) -> Arc<PodConstraints> {
        // A poisoned lock only means another conversion panicked: the set is still valid.
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = shared.get(&c) {
            return existing.clone();
        }
        let c = Arc::new(c);
        shared.insert(c.clone());
        c
    }

    /// Converts one object; `None` for the kinds that only inform others (PriorityClass,
    /// NodeTopology, HyperNode, PersistentVolumeClaim, PersistentVolume, StorageClass).
    pub(crate) fn convert(
        &self,
        origin: &str,
        object: &Object,
        options: &ConvertOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Converted>, ConvertError> {
        let cx = Cx {
            origin,
            kind: object.kind(),
            object: Named::Of(object),
        };
        Ok(Some(match object {
            Object::Node(n) => {
                let mut spec = node(
                    &cx,
                    n,
                    &self.topologies,
                    &self.hyper_labels,
                    &options.device_resources,
                    warnings,
                )?;
                self.dra.add_to_node(&mut spec, &options.tiers);
                Converted::Node(spec)
            }
            Object::Pod(p) => Converted::Pod(Arc::new(pod::pod(&cx, p, self, options, warnings)?)),
            Object::PodGroup(g) => Converted::Group(group(&cx, g, self, warnings)?),
            Object::Queue(q) => {
                let spec = queue(&cx, q)?;
                let usage = queue_usage(&cx, &spec.name, q, warnings);
                Converted::Queue(spec, usage)
            }
            Object::Namespace(n) => Converted::Namespace(namespace_spec(&cx, n)?),
            Object::PriorityClass(_)
            | Object::NodeTopology(_)
            | Object::HyperNode(_)
            | Object::PersistentVolumeClaim(_)
            | Object::PersistentVolume(_)
            | Object::StorageClass(_)
            | Object::DeviceClass(_)
            | Object::ResourceSlice(_)
            | Object::ResourceClaim(_)
            | Object::ResourceClaimTemplate(_) => return Ok(None),
            Object::Workload(w) => match self.workload_pod_group(&cx, w, options, warnings)? {
                Some(g) => Converted::Group(g),
                None => return Ok(None),
            },
        }))
    }
}

/// [`cluster_spec`] then [`Snapshot::build`]; the engine's errors gain the source of the
/// object they name. Warnings are dropped (see [`build_snapshot_with_warnings`]).
pub fn build_snapshot(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> Result<Snapshot, ConvertError> {
    build_snapshot_with_warnings(objects, options).map(|(snapshot, _)| snapshot)
}

/// [`build_snapshot`] with the warnings of [`cluster_spec_with_warnings`].
pub fn build_snapshot_with_warnings(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> Result<(Snapshot, Vec<String>), ConvertError> {
    let (spec, warnings) = cluster_spec_with_warnings(objects, options)?;
    let snapshot = Snapshot::build(spec).map_err(|e| locate(objects, e))?;
    Ok((snapshot, warnings))
}

pub(crate) fn locate(objects: &[(String, Object)], e: SnapshotError) -> ConvertError {
    // Later objects win, so a duplicate is reported where the second copy is.
    let origins: HashMap<(&str, String), &str> = objects
        .iter()
        .map(|(origin, o)| ((o.kind(), o.key()), origin.as_str()))
        .collect();
    let find = |kind: &'static str| origins.get(&(kind, e.object.clone())).copied();
    // The engine reports a pod without a PodGroup under its implicit group's name.
    let origin = find(e.kind).or_else(|| (e.kind == "PodGroup").then(|| find("Pod")).flatten());
    ConvertError {
        origin: origin.map(str::to_string),
        kind: e.kind.to_string(),
        object: e.object,
        field: e.field.to_string(),
        message: e.message,
    }
}

/// The object being converted, for errors.
struct Cx<'a> {
    origin: &'a str,
    kind: &'static str,
    object: Named<'a>,
}

/// An object's `ns/name` key, made only for a message (most conversions make none).
enum Named<'a> {
    Key(String),
    Of(&'a Object),
}

impl Named<'_> {
    fn key(&self) -> String {
        match self {
            Named::Key(k) => k.clone(),
            Named::Of(o) => o.key(),
        }
    }
}

impl From<String> for Named<'_> {
    fn from(key: String) -> Self {
        Named::Key(key)
    }
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Named::Key(k) => f.write_str(k),
            Named::Of(o) => f.write_str(&o.key()),
        }
    }
}

impl Cx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ConvertError {
        ConvertError {
            origin: Some(self.origin.to_string()),
            kind: self.kind.to_string(),
            object: self.object.key(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Parses a resource list found at `field` (`status.allocatable`).
    fn resources(
        &self,
        field: &str,
        list: &BTreeMap<String, Quantity>,
    ) -> Result<ResourceList, ConvertError> {
        quantity::parse_list(list)
            .map_err(|(name, e)| self.err(format!("{field}[{name}]"), e.to_string()))
    }

    /// A node's resource list at `field`: a value beyond [`quantity::MAX_QUANTITY`] is taken as
    /// that, with a warning. It is what the node reports, and no request beyond it exists
    /// (pods of ours are refused, other pods clamped), so the node fits exactly the same pods.
    fn capacity(
        &self,
        field: &str,
        list: &BTreeMap<String, Quantity>,
        warnings: &mut Vec<String>,
    ) -> Result<ResourceList, ConvertError> {
        let mut out = ResourceList::new();
        for (name, q) in list {
            let at = || format!("{field}[{name}]");
            let (v, clamped) =
                quantity::parse_clamped(name, &q.0).map_err(|e| self.err(at(), e.to_string()))?;
            if clamped {
                warnings.push(
                    self.warning(at(), format!("{}; taken as 2^60", quantity::above_limit())),
                );
            }
            out.insert(name.clone(), v);
        }
        Ok(out)
    }

    /// A warning in the style of [`ConvertError`]'s message.
    fn warning(&self, field: impl fmt::Display, message: impl fmt::Display) -> String {
        format!(
            "{}: {} {}: {field}: {message}",
            self.origin, self.kind, self.object
        )
    }

    fn name<'m>(&self, meta: &'m ObjectMeta) -> Result<&'m str, ConvertError> {
        match meta.name.as_deref() {
            Some(n) if !n.is_empty() => Ok(n),
            _ => Err(self.err("metadata.name", "missing")),
        }
    }
}

fn created_ms(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp
        .as_ref()
        .map_or(0, |Time(t)| t.as_millisecond())
}

fn namespace(meta: &ObjectMeta) -> String {
    meta.namespace
        .clone()
        .unwrap_or_else(|| "default".to_string())
}

/// A label, else an annotation, of that name.
fn label_or_annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    let get = |m: &'m Option<BTreeMap<String, String>>| m.as_ref()?.get(key).map(String::as_str);
    get(&meta.labels).or_else(|| get(&meta.annotations))
}

fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

// ---------------------------------------------------------------------------------------------
// Priority classes
// ---------------------------------------------------------------------------------------------

struct Priorities {
    classes: HashMap<String, i32>,
    /// Classes with `preemptionPolicy: Never`.
    never: std::collections::HashSet<String>,
    /// The `globalDefault` class's value. With several, Kubernetes uses the lowest value.
    global_default: Option<i32>,
}

impl Priorities {
    fn collect(objects: &[(String, Object)]) -> Result<Priorities, ConvertError> {
        let mut classes = HashMap::new();
        let mut never = std::collections::HashSet::new();
        let mut global_default: Option<i32> = None;
        for (origin, object) in objects {
            let Object::PriorityClass(pc) = object else {
                continue;
            };
            let cx = Cx {
                origin,
                kind: "PriorityClass",
                object: Named::Of(object),
            };
            let name = cx.name(&pc.metadata)?;
            if classes.insert(name.to_string(), pc.value).is_some() {
                return Err(cx.err("metadata.name", "duplicate PriorityClass"));
            }
            if pc.preemption_policy.as_deref() == Some("Never") {
                never.insert(name.to_string());
            }
            if pc.global_default == Some(true) {
                global_default = Some(global_default.map_or(pc.value, |v| v.min(pc.value)));
            }
        }
        Ok(Priorities {
            classes,
            never,
            global_default,
        })
    }

    fn never_preempts(&self, name: &str) -> bool {
        self.never.contains(name)
    }

    /// The value of a named class, or an error at `field` when it does not exist.
    fn lookup(&self, cx: &Cx, field: &str, name: &str) -> Result<i32, ConvertError> {
        self.classes
            .get(name)
            .copied()
            .or_else(|| {
                BUILTIN_PRIORITY_CLASSES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|&(_, v)| v)
            })
            .ok_or_else(|| {
                cx.err(
                    field,
                    format!("names PriorityClass {name}, which does not exist"),
                )
            })
    }
}

/// Where conversion notes what it left out or clamped on a pod of another scheduler.
struct Lenience<'w> {
    ours: bool,
    warnings: &'w mut Vec<String>,
}

impl Lenience<'_> {
    /// A field's value: an error on a pod of ours; on another scheduler's pod, `default` and a
    /// warning naming the pod and the field.
    fn or<T>(&mut self, result: Result<T, ConvertError>, default: T) -> Result<T, ConvertError> {
        match result {
            Err(e) if !self.ours => {
                self.warnings
                    .push(format!("{e}; ignored on a pod of another scheduler"));
                Ok(default)
            }
            other => other,
        }
    }
}

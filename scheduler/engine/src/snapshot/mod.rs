//! Building a [`Snapshot`] from name-based specs.
//!
//! Readers (Kubernetes manifests, the daemon's watch caches, trace files) describe the cluster
//! with the specs below; [`Snapshot::build`] validates references, interns resource names,
//! places running pods on their nodes and sorts everything by name, so the same cluster gives
//! the same snapshot whatever order the objects came in.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use basalt_topology::{TierSpec, Topology};
use thiserror::Error;

use crate::constraints::NamespaceSpec;
use crate::devices::{DeviceUse, ShareNames};
use crate::hash::Map;
use crate::model::*;
use crate::resources::{ResourceId, ResourceList, ResourceNames, Resources, GPU, PODS};

mod builder;
mod devices;
mod meta;
mod patch;
pub use devices::ask_on;
pub(crate) use devices::{asks_closed, charge_held, charge_shares, closed_devices};
mod spec;

use meta::MetaInterner;
pub use spec::*;

/// Kubelet's default pod limit, used when a node does not state its own.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// GPUs are tracked per device in a 64-bit mask.
pub const MAX_GPUS_PER_NODE: usize = 64;
/// The queue that jobs without a queue go to; created when not declared.
pub const DEFAULT_QUEUE: &str = "default";

/// A problem with one object of the input, naming the object and the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind} {object}: {field}: {message}")]
pub struct SnapshotError {
    pub kind: &'static str,
    pub object: String,
    pub field: &'static str,
    pub message: String,
}

fn err(kind: &'static str, object: &str, field: &'static str, message: String) -> SnapshotError {
    SnapshotError {
        kind,
        object: object.to_string(),
        field,
        message,
    }
}

/// An immutable, validated picture of the cluster at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub now_ms: i64,
    pub resources: ResourceNames,
    pub nodes: Vec<Node>,
    pub tasks: Vec<Task>,
    pub jobs: Vec<Job>,
    pub queues: Vec<Queue>,
    pub rules: Vec<PlacementRules>,
    /// Per shape: its placement rules and request (pod slot included).
    pub shapes: Vec<(RulesId, Resources)>,
    /// Resources in use on each node when the snapshot was taken (every bound pod, ours or not).
    pub node_used: Vec<Resources>,
    /// GPUs in use on each node, one bit per GPU index. On a node that shares devices, those
    /// no pod can join any more (see [`crate::devices::DeviceUse::closed`]).
    pub node_gpus_used: Vec<u64>,
    /// What is in use on each device of the nodes that share them, from
    /// [`Node::device_base`] on (empty when no node shares).
    pub device_use: Vec<crate::devices::DeviceUse>,
    /// Per node, the MIG slices bound pods hold (empty when no node has GPUs in MIG mode).
    pub slice_used: Vec<u64>,
    /// HAMi's request names in `resources`.
    pub share_names: crate::devices::ShareNames,
    /// The resources devices are advertised as, on any node (`nvidia.com/gpu` always first).
    pub device_kinds: Vec<crate::resources::ResourceId>,
    /// The memory of the largest device of the nodes that share them (0 when none does).
    pub largest_shared_device_mib: u64,
    /// Per queue: what its pinned pods hold (see [`PodSpec::pinned_queue`]).
    pub queue_pinned: Vec<Resources>,
    /// The sums of the nodes' allocatable and of `node_used`.
    pub allocatable_total: Resources,
    pub used_total: Resources,
    /// Bound pods of other schedulers, counted on their nodes and never moved.
    pub foreign_pods: usize,
    /// The same pods in pod order, for inter-pod rules (shared between patched snapshots).
    pub foreign: Arc<Vec<ForeignPod>>,
    /// Namespaces with their labels, sorted by name, for `namespaceSelector`.
    pub namespaces: Arc<Vec<NamespaceSpec>>,
    /// DRA devices and what claims may take (empty without ResourceSlices).
    pub dra: Arc<crate::dra::DraTable>,
    /// What each queue used (see [`crate::usage`]): by queue name, each with its instant.
    pub usage: Arc<Vec<crate::QueueUsage>>,
    /// Which nodes this snapshot is of, for what a [`crate::Warm`] carries.
    pub(crate) lineage: Lineage,
}

/// Which nodes a snapshot is of and which snapshot of its builder it is: what tells a
/// [`crate::Warm`] whether the state it carries fits this snapshot. A session that starts
/// from the node state a session of the snapshot before left compares only the nodes whose
/// usage `changed` since and those that session changed, not every node. Not part of what
/// the snapshot says (two equal snapshots print alike).
#[derive(Clone, Default)]
pub(crate) struct Lineage {
    /// Shared by snapshots of the same node specs (a builder's, until a node changes).
    pub(crate) nodes: Version,
    /// Shared by snapshots of the same node names and labels, all topologies depend on.
    pub(crate) labels: Version,
    /// Which snapshot of its builder this is.
    pub(crate) generation: Option<u64>,
    /// (the generation before, the nodes whose usage changed since), when known.
    pub(crate) changed: Option<(u64, Vec<NodeId>)>,
}

impl std::fmt::Debug for Lineage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lineage")
    }
}

/// A version of a builder's nodes, compared by identity: each `Version::default()` is new,
/// and since whoever compares holds a clone, no other version can take its address meanwhile
/// (no counter shared between builders or threads).
#[derive(Clone, Default)]
pub(crate) struct Version(Arc<VersionTag>);

#[derive(Default)]
struct VersionTag;

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Version")
    }
}

impl Version {
    pub(crate) fn is(&self, other: &Version) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Snapshot {
    /// Whether some node carries a label of `tiers` (or a Volcano tier label).
    pub(crate) fn has_tier_labels(&self, tiers: &[TierSpec]) -> bool {
        self.nodes.iter().any(|n| {
            n.labels.keys().any(|k| {
                k.starts_with(basalt_topology::VOLCANO_TIER_LABEL)
                    || tiers.iter().any(|t| &t.node_label == k)
            })
        })
    }

    /// The nodes' topology under `tiers`: `None` when no node carries a label of them (nor a
    /// Volcano tier label) unless `always`. Built anew by each call; a [`crate::Warm`] keeps
    /// it from cycle to cycle ([`crate::Warm::topology`]).
    pub fn topology(&self, tiers: &[TierSpec], always: bool) -> Option<Topology> {
        (always || self.has_tier_labels(tiers)).then(|| self.build_topology(tiers))
    }

    pub(crate) fn build_topology(&self, tiers: &[TierSpec]) -> Topology {
        let nodes: Vec<(&str, &BTreeMap<String, String>)> = (self.nodes.iter())
            .map(|n| (n.name.as_str(), &n.labels))
            .collect();
        Topology::build(tiers, &nodes)
    }

    pub fn build(spec: ClusterSpec) -> Result<Snapshot, SnapshotError> {
        let ClusterSpec {
            now_ms,
            nodes,
            pods,
            groups,
            mut queues,
            namespaces,
            dra,
            usage,
        } = spec;
        let mut nodes: Vec<NodeSpec> = nodes.into_iter().map(devices::with_share_totals).collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let pods = sorted_pods(&pods);
        let groups = sorted_groups(&groups);
        queues.sort_by(|a, b| a.name.cmp(&b.name));

        let mut all = workload_resource_names(&pods, &groups, &queues);
        all.extend(
            nodes
                .iter()
                .flat_map(|n| n.allocatable.keys().map(String::as_str)),
        );
        let names = ResourceNames::new(all);
        let needs_default = needs_default_queue(groups.iter().copied(), pods.iter().copied());
        let queues = build_queues(&names, &mut queues, needs_default)?;

        // Nodes.
        let mut node_ids: HashMap<&str, NodeId> = HashMap::new();
        let mut built_nodes = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if node_ids.insert(n.name.as_str(), id).is_some() {
                return Err(duplicate_node(&n.name));
            }
            built_nodes.push(build_node(&names, id, n)?);
        }
        let node_id = |n: &str| node_ids.get(n).copied();
        let mut metas = MetaInterner::default();
        let pod_facts: Vec<PodFacts> = (pods.iter())
            .map(|&p| PodFacts::of(&names, p, &node_id, &mut metas))
            .collect();
        let group_facts: Vec<GroupFacts> =
            groups.iter().map(|&g| GroupFacts::of(&names, g)).collect();
        assemble(
            now_ms,
            names,
            queues,
            BuiltNodes {
                nodes: built_nodes,
                recycled: None,
                lineage: Lineage::default(),
                buffers: Buffers::default(),
            },
            &pods.iter().copied().zip(&pod_facts).collect::<Vec<_>>(),
            false,
            &groups.iter().copied().zip(&group_facts).collect::<Vec<_>>(),
        )
        .map(|a| {
            let dra = (!dra.is_empty()).then(|| {
                let names: Vec<&str> = a.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
                Arc::new(crate::dra::DraTable::new(dra, &names))
            });
            Snapshot {
                namespaces: sorted_namespaces(namespaces),
                dra: dra.unwrap_or_default(),
                usage: Arc::new(usage),
                ..a.snapshot
            }
        })
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn task(&self, id: TaskId) -> &Task {
        &self.tasks[id.index()]
    }

    pub fn job(&self, id: JobId) -> &Job {
        &self.jobs[id.index()]
    }

    /// The devices a request asks for: its count of the device resource it names
    /// (`nvidia.com/gpu`, or another kind some node advertises its devices as).
    pub fn devices_asked(&self, request: &Resources) -> u32 {
        match self.device_kinds.as_slice() {
            [kind] => request.count(*kind),
            kinds => kinds.iter().map(|&k| request.count(k)).max().unwrap_or(0),
        }
    }

    pub fn queue(&self, id: QueueId) -> &Queue {
        &self.queues[id.index()]
    }
}

/// Snapshots of one set of nodes and a changing workload, cycle after cycle, redoing only
/// what changed: the nodes are validated, sorted and interned once and kept while the resource
/// names stay the same (a node that changes is rebuilt alone, [`SnapshotBuilder::update_node`]);
/// the builder holds the pods and PodGroups, told of each change ([`SnapshotBuilder::set_pod`],
/// [`SnapshotBuilder::remove_pod`], and the same for groups), and converts a spec once, not
/// every cycle.
///
/// `builder.build(now, queues)` equals
/// `Snapshot::build(ClusterSpec { now_ms: now, nodes, pods, groups, queues  usage: Default::default(), })` with `nodes`,
/// `pods` and `groups` the builder's current specs, field by field, errors included (node
/// errors are reported by [`SnapshotBuilder::new`] and [`SnapshotBuilder::update_node`]
/// instead; pods and groups are keyed by namespace and name, so a duplicate replaces).
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// Sorted by name; index = node id.
    specs: Vec<NodeSpec>,
    ids: HashMap<String, NodeId>,
    /// Resource name → how many nodes state it in `allocatable`.
    node_names: BTreeMap<String, usize>,
    /// Nodes built for these names (taken back from the last snapshot).
    table: Option<(ResourceNames, Vec<Node>)>,
    /// Nodes changed since `table` was built.
    dirty: BTreeSet<usize>,
    last: Option<Snapshot>,
    /// The versions of the nodes' specs and labels (see [`Lineage`]).
    nodes_version: Version,
    labels_version: Version,
    pods: BTreeMap<(String, String), Converted<PodSpec, PodFacts>>,
    groups: BTreeMap<(String, String), Converted<GroupSpec, GroupFacts>>,
    held: HeldCounts,
    /// The names the kept facts were converted under.
    facts_names: Option<ResourceNames>,
    /// The task vector of the snapshot before last (see [`Buffers`]).
    spare_tasks: Vec<Task>,
    /// Every bound pod of the last snapshot holds the GPUs it names (see [`claim_gpus`] and
    /// `devices::named_shared`).
    claims_as_named: bool,
    /// Snapshots built by patching the last one (see [`SnapshotBuilder::patched`]).
    patched: u64,
    /// What each pinned pod held in the last snapshot.
    pinned_uses: HashMap<(String, String), PinnedUse>,
    /// Snapshots built so far (see [`Lineage`]).
    generation: u64,
    /// Namespaces with their labels (see [`SnapshotBuilder::set_namespaces`]).
    namespaces: Arc<Vec<NamespaceSpec>>,
    /// The pods' metadata values, shared between pods alike.
    metas: MetaInterner,
    /// DRA's devices and claims (see [`SnapshotBuilder::set_dra`]).
    dra: Arc<crate::dra::DraTable>,
    /// What each queue used (see [`SnapshotBuilder::set_usage`]).
    usage: Arc<Vec<crate::QueueUsage>>,
    /// Whether anything changed since the last snapshot (see [`SnapshotBuilder::build`]).
    changed: bool,
    /// The queues the last snapshot was built with, sorted by name.
    last_queues: Vec<QueueSpec>,
}

/// A spec and, once converted under the builder's current resource names, its facts.
#[derive(Debug)]
struct Converted<S, F> {
    spec: S,
    facts: Option<F>,
}

/// What the builder counts of each spec it holds: the resource names it states and whether
/// its job goes to the default queue.
trait Held: PartialEq {
    fn resource_list(&self) -> Option<&ResourceList>;
    fn uses_default_queue(&self) -> bool;
    fn namespace(&self) -> &str;
    /// The name of the job the spec is part of (in its namespace); `None` for a pod of another
    /// scheduler.
    fn job_name(&self) -> Option<&str>;
    /// The pod's name, for a pod of ours (a member of its job).
    fn member_name(&self) -> Option<&str>;
    /// The pod's name, for a pinned pod.
    fn pinned_name(&self) -> Option<&str>;
}

impl Held for PodSpec {
    fn resource_list(&self) -> Option<&ResourceList> {
        Some(&self.request)
    }
    /// A pod of ours without a PodGroup is a job of its own, in its queue.
    fn uses_default_queue(&self) -> bool {
        self.is_member() && self.group.is_none() && self.queue.is_none()
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn job_name(&self) -> Option<&str> {
        (self.is_member()).then(|| self.group.as_deref().unwrap_or(&self.name))
    }
    fn member_name(&self) -> Option<&str> {
        (self.is_member()).then_some(self.name.as_str())
    }
    fn pinned_name(&self) -> Option<&str> {
        self.pinned_queue.as_ref().map(|_| self.name.as_str())
    }
}

impl Held for GroupSpec {
    fn resource_list(&self) -> Option<&ResourceList> {
        self.min_resources.as_ref()
    }
    fn uses_default_queue(&self) -> bool {
        self.queue.is_none()
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn job_name(&self) -> Option<&str> {
        Some(&self.name)
    }
    fn member_name(&self) -> Option<&str> {
        None
    }
    fn pinned_name(&self) -> Option<&str> {
        None
    }
}

/// The builder's counts over the specs it holds, kept in step as specs come and go, and what
/// changed since the last snapshot (what [`patch`] needs to bring it up to date).
#[derive(Debug, Default)]
struct HeldCounts {
    /// Resource name → how many pod requests and group minResources state it.
    names: BTreeMap<String, usize>,
    /// Jobs that go to the default queue: groups without a queue, pods of ours without a group.
    default_queue_users: usize,
    /// Per job (namespace, name): the names of its pods of ours.
    members: HashMap<(String, String), BTreeSet<String>>,
    /// Some spec's namespace held a `/` (not a Kubernetes namespace): in a task's name
    /// `namespace/name` the parts are no longer told apart, so the builder stops patching.
    slashed: bool,
    /// Jobs (namespace, name) whose group or pods changed since the last snapshot.
    changed_jobs: BTreeSet<(String, String)>,
    /// Pinned pods (namespace, name) that changed since the last snapshot.
    changed_pinned: BTreeSet<(String, String)>,
    /// Changes the patch cannot follow happened since the last snapshot: a pod of another
    /// scheduler changed, or more changed than are worth tracking (a builder seldom built).
    /// The next snapshot is assembled anew.
    untracked: bool,
}

/// Changes tracked between snapshots at most; past this, the next one is assembled anew.
const MAX_TRACKED_CHANGES: usize = 1 << 16;

impl HeldCounts {
    fn count(&mut self, spec: &impl Held, add: bool) {
        count_names(&mut self.names, spec.resource_list(), add);
        let users = spec.uses_default_queue() as usize;
        self.slashed |= spec.namespace().contains('/');
        if add {
            self.default_queue_users += users;
        } else {
            self.default_queue_users -= users;
        }
        if self.changed_jobs.len() + self.changed_pinned.len() >= MAX_TRACKED_CHANGES {
            self.changed_jobs.clear();
            self.changed_pinned.clear();
            self.untracked = true;
        }
        if let Some(pod) = spec.pinned_name() {
            if !self.untracked {
                (self.changed_pinned).insert((spec.namespace().to_string(), pod.to_string()));
            }
            return;
        }
        let Some(job) = spec.job_name() else {
            self.untracked = true;
            return;
        };
        let key = (spec.namespace().to_string(), job.to_string());
        if let Some(pod) = spec.member_name() {
            match self.members.get_mut(&key) {
                Some(members) if add => {
                    members.insert(pod.to_string());
                }
                Some(members) => {
                    members.remove(pod);
                    if members.is_empty() {
                        self.members.remove(&key);
                    }
                }
                None if add => {
                    self.members.insert(key.clone(), [pod.to_string()].into());
                }
                None => {}
            }
        }
        if !self.untracked {
            self.changed_jobs.insert(key);
        }
    }

    /// The snapshot is built: from here on, changes count from it.
    fn built(&mut self) {
        self.changed_jobs.clear();
        self.changed_pinned.clear();
        self.untracked = false;
    }
}

/// Puts `spec` under `key` (to be converted again) unless an equal spec is there, keeping the
/// counts in step; whether it changed anything.
fn upsert<S: Held, F>(
    map: &mut BTreeMap<(String, String), Converted<S, F>>,
    counts: &mut HeldCounts,
    key: (String, String),
    spec: S,
) -> bool {
    if map.get(&key).is_some_and(|c| c.spec == spec) {
        return false;
    }
    // The old spec leaves before the new one comes (both may name the same job).
    if let Some(old) = map.remove(&key) {
        counts.count(&old.spec, false);
    }
    counts.count(&spec, true);
    map.insert(key, Converted { spec, facts: None });
    true
}

/// Takes the spec under (`namespace`, `name`) out, keeping the counts in step.
fn take<S: Held, F>(
    map: &mut BTreeMap<(String, String), Converted<S, F>>,
    counts: &mut HeldCounts,
    namespace: &str,
    name: &str,
) -> Option<S> {
    let old = map.remove(&(namespace.to_string(), name.to_string()))?;
    counts.count(&old.spec, false);
    Some(old.spec)
}

fn count_names(counts: &mut BTreeMap<String, usize>, list: Option<&ResourceList>, add: bool) {
    for k in list.into_iter().flat_map(|l| l.keys()) {
        if add {
            // A name is new rarely: no key is copied for the others.
            match counts.get_mut(k) {
                Some(c) => *c += 1,
                None => {
                    counts.insert(k.clone(), 1);
                }
            }
        } else if let Some(c) = counts.get_mut(k) {
            *c -= 1;
            if *c == 0 {
                counts.remove(k);
            }
        }
    }
}

fn duplicate_node(name: &str) -> SnapshotError {
    err("Node", name, "metadata.name", "duplicate node".into())
}

/// One node of the snapshot, its resources interned with `names`.
fn build_node(names: &ResourceNames, id: NodeId, n: &NodeSpec) -> Result<Node, SnapshotError> {
    let mut allocatable = names.resources(&n.allocatable);
    if !n.allocatable.contains_key(crate::resources::PODS_NAME) {
        allocatable.set(PODS, DEFAULT_MAX_PODS);
    }
    devices::check_shared(n)?;
    let device_kind = match &n.device_resource {
        None => GPU,
        Some(name) => names.id(name).ok_or_else(|| {
            err(
                "Node",
                &n.name,
                "device_resource",
                format!("{name} is not in its allocatable"),
            )
        })?,
    };
    let count = allocatable.get(device_kind).max(0) as usize;
    // A shared node's allocatable counts slots; its devices are listed (`check_shared`).
    if count > MAX_GPUS_PER_NODE && !n.sharing.shares() {
        return Err(err(
            "Node",
            &n.name,
            match device_kind {
                GPU => "status.allocatable[nvidia.com/gpu]",
                _ => "status.allocatable",
            },
            format!(
                "{count} {}; at most {MAX_GPUS_PER_NODE} devices per node are supported",
                names.name(device_kind)
            ),
        ));
    }
    // GPUs in MIG mode are listed but not counted as whole devices.
    let gpus = match &n.gpus {
        Some(g) if g.iter().filter(|g| !g.mig).count() == count || n.sharing.shares() => {
            sorted_gpus(g)
        }
        _ => (0..count as u32).map(Gpu::new).collect(),
    };
    let slices = devices::node_slices(names, n, &gpus)?;
    Ok(Node {
        id,
        name: n.name.clone(),
        labels: n.labels.clone(),
        taints: n.taints.clone(),
        unschedulable: n.unschedulable,
        allocatable,
        gpus,
        sharing: n.sharing,
        device_kind,
        device_base: 0,
        slices,
        devices_closed: n.devices_closed.as_deref().map(Arc::from),
        mig_reconfiguring: n.mig_reconfiguring.as_deref().map(Arc::from),
    })
}

fn sorted_gpus(gpus: &[Gpu]) -> Vec<Gpu> {
    let mut g = gpus.to_vec();
    g.sort_by_key(|g| g.index);
    g
}

/// The node part of a snapshot being assembled.
struct BuiltNodes {
    nodes: Vec<Node>,
    /// Usage buffers of an earlier snapshot of the same nodes and resource names, to reuse.
    recycled: Option<(Vec<Resources>, Vec<u64>)>,
    lineage: Lineage,
    buffers: Buffers,
}

/// The task and job vectors of earlier snapshots, emptied and filled again: a big cluster's
/// are megabytes, and a fresh allocation every cycle costs page faults. Tasks alternate between
/// two vectors so that a task can take its name from the last snapshot's task (found at its
/// pod's `slot`) instead of cloning it: a clone or drop of a name touches its reference count,
/// a cache miss per pod per cycle in a big cluster.
#[derive(Default)]
struct Buffers {
    /// The last snapshot's tasks.
    last_tasks: Vec<Task>,
    /// The vector to fill (its old tasks' names already taken or about to be dropped).
    tasks: Vec<Task>,
    jobs: Vec<Job>,
}

/// What a task taken name leaves behind: one shared, always-cached reference count.
static TAKEN: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

fn sorted_pods<'a>(pods: impl IntoIterator<Item = &'a PodSpec>) -> Vec<&'a PodSpec> {
    let mut pods: Vec<&PodSpec> = pods.into_iter().collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}

fn sorted_groups<'a>(groups: impl IntoIterator<Item = &'a GroupSpec>) -> Vec<&'a GroupSpec> {
    let mut groups: Vec<&GroupSpec> = groups.into_iter().collect();
    groups.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    groups
}

/// `namespace/name`, without the formatting machinery (made for every pod of every snapshot).
fn object_key(namespace: &str, name: &str) -> Arc<str> {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key.into()
}

/// What the snapshot takes from one pod's spec alone, under one table of resource names (a
/// [`SnapshotBuilder`] keeps it while the spec and the names stay the same).
#[derive(Clone, Debug)]
struct PodFacts {
    /// `namespace/name`, how the snapshot and its messages name the pod.
    key: Arc<str>,
    /// The request with the pod slot.
    request: Resources,
    /// `spec.nodeName` and `status.nominatedNodeName` resolved (`None` also for a node that
    /// does not exist).
    node: Option<NodeId>,
    nominated: Option<NodeId>,
    /// [`JobKey::hash`] of its job: its PodGroup, or itself without one.
    job_hash: u64,
    /// Its task's position in the builder's last snapshot (see [`Buffers`]).
    slot: std::cell::Cell<u32>,
    meta: Arc<PodMeta>,
    /// What it takes of each device it shares (see [`Task::share`]).
    share: Option<crate::devices::ShareAsk>,
    /// Its containers' asks (see [`Task::containers`]).
    containers: Option<Arc<[crate::devices::ContainerAsk]>>,
    /// Its devices hold different amounts (see [`Task::held`]): snapshot patching declines.
    held_differs: bool,
}

impl PodFacts {
    fn of(
        names: &ResourceNames,
        p: &PodSpec,
        node_id: &dyn Fn(&str) -> Option<NodeId>,
        metas: &mut MetaInterner,
    ) -> Self {
        let mut request = names.resources(&p.request);
        // A pod takes one pod slot; a pinned pod as many as it says it stands for.
        if p.pinned_queue.is_none() || !p.request.contains_key("pods") {
            request.set(PODS, 1);
        }
        // A share without a device count takes one device (see `DeviceAsk::implied_counts`).
        for name in &p.devices.implied_counts {
            if let Some(id) = names.id(name).filter(|&id| request.get(id) <= 0) {
                request.set(id, 1);
            }
        }
        let share = devices::held_share(&p.held_devices, p.devices.share);
        let containers = devices::container_asks(&p.devices.containers);
        PodFacts {
            key: object_key(&p.namespace, &p.name),
            request,
            node: p.node.as_deref().and_then(node_id),
            nominated: p.nominated_node.as_deref().and_then(node_id),
            job_hash: JobKey(&p.namespace, p.group.as_deref().unwrap_or(&p.name)).hash(),
            slot: std::cell::Cell::new(u32::MAX),
            meta: metas.intern(&p.namespace, &p.labels, p.terminating),
            share,
            containers,
            held_differs: devices::held_differs(&p.held_devices),
        }
    }
}

/// The same for a PodGroup.
#[derive(Clone, Debug)]
struct GroupFacts {
    key: Arc<str>,
    min_resources: Option<Resources>,
    /// [`JobKey::hash`] of the group.
    hash: u64,
}

impl GroupFacts {
    fn of(names: &ResourceNames, g: &GroupSpec) -> Self {
        GroupFacts {
            key: object_key(&g.namespace, &g.name),
            min_resources: g.min_resources.as_ref().map(|r| names.resources(r)),
            hash: JobKey(&g.namespace, &g.name).hash(),
        }
    }
}

/// A job's key, ordered as the string `namespace/name` it names (the order job ids follow)
/// without building that string.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct JobKey<'a>(&'a str, &'a str);

impl JobKey<'_> {
    /// A hash fixed for the process, computed once per spec and kept with its facts, so that a
    /// cycle finds each pod's job without hashing names again.
    fn hash(&self) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::default().hash_one(self)
    }

    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        (self.0.bytes())
            .chain(std::iter::once(b'/'))
            .chain(self.1.bytes())
    }
}

impl Ord for JobKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.0 == other.0 {
            self.1.cmp(other.1)
        } else {
            self.bytes().cmp(other.bytes())
        }
    }
}

impl PartialOrd for JobKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The checks a PodGroup's spec must pass on its own (`key` names it in the error).
fn check_group(g: &GroupSpec, key: &str) -> Result<(), SnapshotError> {
    let invalid = |field, message| Err(err("PodGroup", key, field, message));
    // 0 is Volcano's "no gang minimum": every member may start alone.
    if g.min_member < 0 {
        return invalid(
            "spec.minMember",
            format!("must not be negative, got {}", g.min_member),
        );
    }
    if let Some((role, v)) = g.min_task_member.iter().find(|(_, &v)| v < 0) {
        return invalid(
            "spec.minTaskMember",
            format!("role {role:?}: must not be negative, got {v}"),
        );
    }
    for (i, sg) in g.sub_groups.iter().enumerate() {
        if sg.size < 1 {
            return invalid(
                "spec.subGroups[].size",
                format!("sub-group {:?} (#{i}): must be at least 1", sg.name),
            );
        }
        if g.sub_groups[..i].iter().any(|o| o.name == sg.name) {
            return invalid(
                "spec.subGroups[].name",
                format!("duplicate sub-group name {:?}", sg.name),
            );
        }
    }
    Ok(())
}

/// The job of a pod of ours without a PodGroup: a gang of one, in its queue.
fn implicit_group(p: &PodSpec) -> GroupSpec {
    GroupSpec {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        queue: p.queue.clone(),
        min_member: 1,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: Some(p.priority),
        created_ms: p.created_ms,
        phase: JobPhase::Pending,
        topology: TopologySpec::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    }
}

/// What [`assemble`] gives.
struct Assembled {
    snapshot: Snapshot,
    /// The last snapshot's task vector, emptied, to fill next time.
    spare_tasks: Vec<Task>,
    /// Every bound pod holds the GPUs it names (see [`claim_gpus`] and `devices::named_shared`).
    claims_as_named: bool,
    /// What each pinned pod holds, by its index in the pods.
    pinned: Vec<(usize, PinnedUse)>,
}

/// Everything of a snapshot but its nodes, from pods and groups sorted by namespace and name
/// and queues already resolved. `node_id` finds a node by name.
fn assemble(
    now_ms: i64,
    names: ResourceNames,
    queues: Vec<Queue>,
    nodes: BuiltNodes,
    pods: &[(&PodSpec, &PodFacts)],
    pods_unique: bool,
    groups: &[(&GroupSpec, &GroupFacts)],
) -> Result<Assembled, SnapshotError> {
    let BuiltNodes {
        nodes: mut built_nodes,
        recycled,
        lineage,
        buffers,
    } = nodes;
    let mut device_use = vec![DeviceUse::default(); devices::assign_bases(&mut built_nodes)];
    let (queue_ids, has_children) = queue_lookup(&queues);
    // Jobs from PodGroups, then implicit groups of one.
    // (hash, draft) by job key; hashes come with the facts.
    let mut job_keys: hashbrown::HashTable<(u64, usize)> =
        hashbrown::HashTable::with_capacity(groups.len() + pods.len());
    struct Draft<'g> {
        spec: std::borrow::Cow<'g, GroupSpec>,
        name: &'g Arc<str>,
        min_resources: Option<&'g Resources>,
        implicit: bool,
    }
    fn draft_key<'a>(drafts: &'a [Draft], d: usize) -> JobKey<'a> {
        JobKey(&drafts[d].spec.namespace, &drafts[d].spec.name)
    }
    let mut drafts: Vec<Draft> = Vec::with_capacity(groups.len());
    for &(g, facts) in groups {
        check_group(g, &facts.key)?;
        let key = JobKey(&g.namespace, &g.name);
        let same = |&(_, d): &(u64, usize)| draft_key(&drafts, d) == key;
        match job_keys.entry(facts.hash, same, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(_) => {
                return Err(err(
                    "PodGroup",
                    &facts.key,
                    "metadata.name",
                    "duplicate PodGroup".into(),
                ));
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert((facts.hash, drafts.len()));
            }
        }
        drafts.push(Draft {
            spec: std::borrow::Cow::Borrowed(g),
            name: &facts.key,
            min_resources: facts.min_resources.as_ref(),
            implicit: false,
        });
    }
    // Pods come sorted by namespace and name: a duplicate follows its twin (a builder's pods
    // are keyed by namespace and name, so none has one).
    let mut last_pod: Option<(&str, &str)> = None;
    // Per pod of ours, in order: the draft of its job (looked up once, used again below).
    let mut pod_drafts: Vec<usize> = Vec::with_capacity(pods.len());
    for &(p, facts) in pods.iter().filter(|(p, _)| p.is_member()) {
        let this = (p.namespace.as_str(), p.name.as_str());
        if !pods_unique && last_pod.replace(this) == Some(this) {
            return Err(err(
                "Pod",
                &facts.key,
                "metadata.name",
                "duplicate pod".into(),
            ));
        }
        match &p.group {
            Some(g) => match job_keys.find(facts.job_hash, |&(_, d)| {
                draft_key(&drafts, d) == JobKey(&p.namespace, g)
            }) {
                Some(&(_, d)) => pod_drafts.push(d),
                None => {
                    return Err(err(
                        "Pod",
                        &facts.key,
                        "metadata.labels/annotations (pod group)",
                        format!("names PodGroup {}/{g}, which does not exist", p.namespace),
                    ));
                }
            },
            None => {
                let key = JobKey(&p.namespace, &p.name);
                let same = |&(_, d): &(u64, usize)| draft_key(&drafts, d) == key;
                if job_keys.find(facts.job_hash, same).is_some() {
                    return Err(err(
                        "Pod",
                        &facts.key,
                        "metadata.name",
                        format!(
                            "has no PodGroup but a PodGroup named {} exists; name the group explicitly",
                            facts.key
                        ),
                    ));
                }
                job_keys.insert_unique(facts.job_hash, (facts.job_hash, drafts.len()), |e| e.0);
                pod_drafts.push(drafts.len());
                drafts.push(Draft {
                    spec: std::borrow::Cow::Owned(implicit_group(p)),
                    name: &facts.key,
                    min_resources: None,
                    implicit: true,
                });
            }
        }
    }
    // Jobs sorted by name (groups come sorted, implicit groups after them: two sorted runs).
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by(|&a, &b| draft_key(&drafts, a).cmp(&draft_key(&drafts, b)));
    let mut job_index = vec![JobId(0); drafts.len()];
    for (pos, &d) in order.iter().enumerate() {
        job_index[d] = JobId(pos as u32);
    }
    // Tasks and node usage.
    let mut rules_ids: Map<PlacementRules, RulesId> = Map::default();
    let mut rules: Vec<PlacementRules> = Vec::new();
    let mut shape_ids: Map<(RulesId, Resources), ShapeId> = Map::default();
    let mut shapes: Vec<(RulesId, Resources)> = Vec::new();
    // Usage buffers of an earlier snapshot with the same nodes and names, zeroed in place.
    let zero = Resources::zero(names.len());
    let (mut node_used, mut node_gpus_used) = match recycled {
        Some((mut used, mut gpus)) if used.len() == built_nodes.len() => {
            used.fill(zero.clone());
            gpus.fill(0);
            (used, gpus)
        }
        _ => (
            vec![zero.clone(); built_nodes.len()],
            vec![0u64; built_nodes.len()],
        ),
    };
    // GPUs in MIG mode are never free whole devices; their slices are tracked beside.
    let mig = built_nodes
        .iter()
        .any(|n| !n.slices.is_empty() || n.mig_gpus() != 0);
    let mut slice_used = vec![0u64; if mig { built_nodes.len() } else { 0 }];
    if mig {
        for n in &built_nodes {
            node_gpus_used[n.id.index()] = n.mig_gpus();
        }
    }
    let mut last_tasks = buffers.last_tasks;
    let mut tasks = buffers.tasks;
    tasks.clear();
    tasks.reserve(pods.len());
    let mut task_labels: Vec<&BTreeMap<String, String>> = Vec::with_capacity(pods.len());
    // Task lists of the earlier snapshot's jobs, emptied and filled again.
    let mut jobs = buffers.jobs;
    let mut spare: Vec<Vec<TaskId>> = (jobs.iter_mut())
        .map(|j| std::mem::take(&mut j.tasks))
        .collect();
    jobs.clear();
    let mut job_tasks: Vec<Vec<TaskId>> = (0..order.len())
        .map(|_| {
            let mut list = spare.pop().unwrap_or_default();
            list.clear();
            list
        })
        .collect();
    let mut foreign_pods = 0;
    let mut foreign = Vec::new();
    let mut claims_as_named = true;
    let mut last_rules: Option<(&PlacementRules, RulesId)> = None;
    let mut last_shape: Option<(RulesId, &Resources, ShapeId)> = None;
    let mut queue_pinned = vec![Resources::zero(names.len()); queues.len()];
    let mut pinned = Vec::new();
    for (pod_index, &(p, facts)) in pods.iter().enumerate() {
        let request = &facts.request;
        let node = bound_node(p, facts)?;
        let (mut gpus, mut slices) = (0u64, 0u64);
        if let Some(nid) = node {
            node_used[nid.index()].add(request);
            let n = &built_nodes[nid.index()];
            if !n.slices.is_empty() {
                let used = &mut slice_used[nid.index()];
                slices = crate::devices::pick_slices(&n.slices, *used, request);
                *used |= slices;
            }
            let want = request.get(n.device_kind).max(0) as usize;
            if n.sharing.shares() {
                let base = n.device_base as usize;
                let usage = &mut device_use[base..base + n.gpus.len()];
                let as_named;
                (gpus, as_named) =
                    devices::claim_shared(n, usage, &p.held_devices, &p.gpu_ids, want, facts.share);
                claims_as_named &= as_named;
            } else {
                let as_named;
                (gpus, as_named) = claim_gpus(
                    &mut node_gpus_used[nid.index()],
                    n.gpus.len(),
                    &p.gpu_ids,
                    want,
                );
                claims_as_named &= as_named;
            }
        }
        if let Some(queue) = &p.pinned_queue {
            let (queue, node) = pinned_at(&queue_ids, &has_children, facts, queue, node)?;
            queue_pinned[queue.index()].add(request);
            let request = request.clone();
            pinned.push((
                pod_index,
                PinnedUse {
                    node,
                    queue,
                    request,
                    gpus,
                    share: facts.share,
                    held_differs: facts.held_differs,
                },
            ));
            continue;
        }
        if !p.ours {
            if let Some(node) = node {
                foreign_pods += 1;
                foreign.push(ForeignPod {
                    node,
                    meta: facts.meta.clone(),
                    constraints: p.constraints.clone(),
                });
            }
            continue;
        }
        let job = job_index[pod_drafts[tasks.len()]];
        // Look up before inserting: most pods share rules and shapes (a gang's members come
        // one after another), so clone only new ones.
        let rid = match last_rules {
            Some((rules, id)) if *rules == p.rules => id,
            _ => match rules_ids.get(&p.rules) {
                Some(&id) => id,
                None => {
                    let id = RulesId(rules.len() as u32);
                    rules.push(p.rules.clone());
                    rules_ids.insert(p.rules.clone(), id);
                    id
                }
            },
        };
        last_rules = Some((&p.rules, rid));
        let shape = match last_shape {
            Some((r, req, id)) if r == rid && req == request => id,
            _ => {
                let shape_key = (rid, request.clone());
                match shape_ids.get(&shape_key) {
                    Some(&id) => id,
                    None => {
                        let id = ShapeId(shapes.len() as u32);
                        shapes.push(shape_key.clone());
                        shape_ids.insert(shape_key, id);
                        id
                    }
                }
            }
        };
        last_shape = Some((rid, request, shape));
        let id = TaskId(tasks.len() as u32);
        let name = match last_tasks.get_mut(facts.slot.get() as usize) {
            Some(t) if Arc::ptr_eq(&t.name, &facts.key) => {
                std::mem::replace(&mut t.name, TAKEN.clone())
            }
            _ => facts.key.clone(),
        };
        facts.slot.set(id.0);
        job_tasks[job.index()].push(id);
        task_labels.push(&p.labels);
        tasks.push(new_task(
            p,
            facts,
            TaskRefs {
                id,
                name,
                job,
                rules: rid,
                shape,
                node,
                gpus,
                slices,
            },
        ));
    }
    jobs.reserve(order.len());
    for (pos, &d) in order.iter().enumerate() {
        let Draft {
            spec: g,
            name,
            min_resources,
            implicit,
        } = &drafts[d];
        let queue = job_queue(&queue_ids, &has_children, g, name)?;
        let task_ids = std::mem::take(&mut job_tasks[pos]);
        let labels = |t: TaskId| task_labels[t.index()];
        let job = JobRefs {
            id: JobId(pos as u32),
            name: Arc::clone(name),
            queue,
            min_resources: min_resources.cloned(),
            implicit: *implicit,
        };
        jobs.push(new_job(g, job, task_ids, &mut tasks, labels));
    }
    for n in built_nodes.iter().filter(|n| n.sharing.shares()) {
        let base = n.device_base as usize;
        let usage = &device_use[base..base + n.gpus.len()];
        node_gpus_used[n.id.index()] = devices::closed_devices(n, usage);
    }
    let share_names = ShareNames::of(&names);
    let largest_shared_device_mib = (built_nodes.iter().filter(|n| n.sharing.shares()))
        .flat_map(|n| n.gpus.iter().map(|g| g.memory_mib.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    let mut device_kinds: Vec<ResourceId> = built_nodes.iter().map(|n| n.device_kind).collect();
    device_kinds.push(GPU);
    device_kinds.sort_unstable();
    device_kinds.dedup();
    let dims = names.len();
    let allocatable_total = sum(built_nodes.iter().map(|n| &n.allocatable), dims);
    let used_total = sum(&node_used, dims);
    Ok(Assembled {
        snapshot: Snapshot {
            now_ms,
            resources: names,
            nodes: built_nodes,
            tasks,
            jobs,
            queues,
            rules,
            shapes,
            allocatable_total,
            used_total,
            node_used,
            node_gpus_used,
            device_use,
            slice_used,
            share_names,
            device_kinds,
            largest_shared_device_mib,
            queue_pinned,
            foreign_pods,
            foreign: Arc::new(foreign),
            namespaces: Arc::default(),
            dra: Arc::default(),
            usage: Arc::default(),
            lineage,
        },
        spare_tasks: last_tasks,
        claims_as_named,
        pinned,
    })
}

/// `spec.nodeName` of a live (pending or running) pod, resolved; a node that does not exist is
/// an error.
fn bound_node(p: &PodSpec, facts: &PodFacts) -> Result<Option<NodeId>, SnapshotError> {
    let live = matches!(p.phase, PodPhase::Pending | PodPhase::Running);
    match (&p.node, live) {
        (Some(n), true) => facts.node.map(Some).ok_or_else(|| {
            err(
                "Pod",
                &facts.key,
                "spec.nodeName",
                format!("names node {n}, which does not exist"),
            )
        }),
        _ => Ok(None),
    }
}

/// The sum of resource vectors of `dims` dimensions.
fn sum<'r>(items: impl IntoIterator<Item = &'r Resources>, dims: usize) -> Resources {
    let mut total = Resources::zero(dims);
    for r in items {
        total.add(r);
    }
    total
}

/// What a pinned pod holds, on its node and for its queue.
#[derive(Clone, Debug)]
struct PinnedUse {
    node: NodeId,
    queue: QueueId,
    request: Resources,
    gpus: u64,
    /// What it takes of each of `gpus` on a node that shares them.
    share: Option<crate::devices::ShareAsk>,
    /// Its devices hold different amounts (see [`Task::held`]).
    held_differs: bool,
}

/// A pinned pod's queue and node: the queue must exist and be a leaf, and the pod must be
/// bound.
fn pinned_at(
    queue_ids: &Map<&str, QueueId>,
    has_children: &[bool],
    facts: &PodFacts,
    queue: &str,
    node: Option<NodeId>,
) -> Result<(QueueId, NodeId), SnapshotError> {
    let invalid = |message| Err(err("Pod", &facts.key, "pinned_queue", message));
    let Some(node) = node else {
        return invalid("a pinned pod must be running on a node".into());
    };
    match queue_ids.get(queue) {
        None => invalid(format!("names queue {queue}, which does not exist")),
        Some(q) if has_children[q.index()] => invalid(format!(
            "queue {queue} has child queues; only leaf queues hold work"
        )),
        Some(&q) => Ok((q, node)),
    }
}

/// What a task is given beside its pod's spec.
struct TaskRefs {
    id: TaskId,
    name: Arc<str>,
    job: JobId,
    rules: RulesId,
    shape: ShapeId,
    node: Option<NodeId>,
    gpus: u64,
    slices: u64,
}

fn new_task(p: &PodSpec, facts: &PodFacts, refs: TaskRefs) -> Task {
    let TaskRefs {
        id,
        name,
        job,
        rules,
        shape,
        node,
        gpus,
        slices,
    } = refs;
    let state = match (p.phase, node) {
        (PodPhase::Succeeded, _) => TaskState::Succeeded,
        (PodPhase::Failed, _) => TaskState::Failed,
        (_, Some(n)) => TaskState::Bound(n),
        (_, None) => TaskState::Pending,
    };
    // Only a pending pod is held: a bound one cannot have gates (the API server refuses the
    // binding and forbids adding gates later), and one bound with claims counts as usual.
    let hold = match state {
        TaskState::Pending if !p.scheduling_gates.is_empty() => {
            Some(Hold::Gated(p.scheduling_gates.clone()))
        }
        TaskState::Pending if !p.waits.is_empty() => Some(held_for(&p.waits)),
        _ => None,
    };
    Task {
        id,
        name,
        job,
        role: p.role.clone(),
        request: facts.request.clone(),
        rules,
        shape,
        priority: p.priority,
        state,
        gpus,
        slices,
        share: facts.share,
        containers: match state {
            TaskState::Pending => facts.containers.clone(),
            _ => None,
        },
        held: match state {
            TaskState::Bound(_) if devices::held_differs(&p.held_devices) => {
                Some(p.held_devices.as_slice().into())
            }
            _ => None,
        },
        // A nomination to a node that is gone is simply dropped, and a held pod holds nothing.
        nominated: match node {
            None if p.phase == PodPhase::Pending && hold.is_none() => facts.nominated,
            _ => None,
        },
        non_preemptable: p.non_preemptable,
        preemption_never: p.preemption_never,
        created_ms: p.created_ms,
        started_ms: p.started_ms,
        active_deadline_s: p.active_deadline_s,
        rank: p.rank,
        claims: p.claims.iter().map(|c| Arc::from(c.as_str())).collect(),
        sub_group: None,
        hold,
        constraints: p.constraints.clone(),
        meta: facts.meta.clone(),
    }
}

/// Namespaces sorted by name, the last of a duplicate kept.
fn sorted_namespaces(mut list: Vec<NamespaceSpec>) -> Arc<Vec<NamespaceSpec>> {
    list.reverse();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    list.dedup_by(|a, b| a.name == b.name);
    Arc::new(list)
}

/// The hold for a pod's waits: what it does not understand first (nothing else about it can be
/// trusted), then its volumes.
fn held_for(waits: &[Wait]) -> Hold {
    let unsupported: Vec<String> = (waits.iter())
        .filter_map(|w| match w {
            Wait::Unsupported { field, message } => Some(format!("{field}: {message}")),
            _ => None,
        })
        .collect();
    if !unsupported.is_empty() {
        return Hold::Unsupported(unsupported);
    }
    let volumes: Vec<String> = (waits.iter())
        .filter_map(|w| match w {
            Wait::Volume(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    if !volumes.is_empty() {
        return Hold::Volumes(volumes);
    }
    Hold::Claims(
        (waits.iter())
            .filter_map(|w| match w {
                Wait::Claim(m) => Some(m.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// A job's queue: it must exist and be a leaf (`has_children` per queue).
fn job_queue(
    queue_ids: &Map<&str, QueueId>,
    has_children: &[bool],
    g: &GroupSpec,
    name: &str,
) -> Result<QueueId, SnapshotError> {
    let queue_name = g.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
    let queue = *queue_ids.get(queue_name).ok_or_else(|| {
        err(
            "PodGroup",
            name,
            "spec.queue",
            format!("names queue {queue_name}, which does not exist"),
        )
    })?;
    if has_children[queue.index()] {
        return Err(err(
            "PodGroup",
            name,
            "spec.queue",
            format!("queue {queue_name} has child queues; only leaf queues hold jobs"),
        ));
    }
    Ok(queue)
}

/// Queue ids by name, and per queue whether it has child queues.
fn queue_lookup(queues: &[Queue]) -> (Map<&str, QueueId>, Vec<bool>) {
    let ids = queues.iter().map(|q| (q.name.as_str(), q.id)).collect();
    let mut has_children = vec![false; queues.len()];
    for q in queues {
        if let Some(parent) = q.parent {
            has_children[parent.index()] = true;
        }
    }
    (ids, has_children)
}

/// What a job is given beside its group's spec.
struct JobRefs {
    id: JobId,
    name: Arc<str>,
    queue: QueueId,
    min_resources: Option<Resources>,
    implicit: bool,
}

/// The job of group `g` with its members `task_ids` (ordered here, sub-groups formed and
/// recorded on `tasks`); `labels` gives a member's pod labels.
fn new_job<'l>(
    g: &GroupSpec,
    refs: JobRefs,
    mut task_ids: Vec<TaskId>,
    tasks: &mut [Task],
    labels: impl Fn(TaskId) -> &'l BTreeMap<String, String>,
) -> Job {
    // Rank order (pods without a rank last, by name): consecutive ranks are placed together.
    task_ids.sort_by_key(|t| (tasks[t.index()].rank.is_none(), tasks[t.index()].rank, *t));
    let sub_groups = form_sub_groups(&g.sub_groups, &task_ids, labels, tasks);
    let priority = g.priority.unwrap_or_else(|| {
        task_ids
            .iter()
            .map(|t| tasks[t.index()].priority)
            .max()
            .unwrap_or(0)
    });
    Job {
        id: refs.id,
        name: refs.name,
        queue: refs.queue,
        // Counts beyond u32 can never be met, as u32::MAX cannot: saturate, never wrap.
        min_member: u32::try_from(g.min_member).unwrap_or(u32::MAX),
        min_task_member: g
            .min_task_member
            .iter()
            .map(|(k, &v)| (k.clone(), u32::try_from(v).unwrap_or(u32::MAX)))
            .collect(),
        min_resources: refs.min_resources,
        priority,
        created_ms: g.created_ms,
        phase: g.phase,
        tasks: task_ids,
        implicit: refs.implicit,
        topology: g.topology.clone(),
        sub_groups,
        sub_group_policies: g
            .sub_groups
            .iter()
            .map(|sg| SubGroupPolicy {
                name: sg.name.clone(),
                min_sub_groups: sg.min_sub_groups,
            })
            .collect(),
        schedule_timeout_ms: g.schedule_timeout_ms.filter(|&t| t > 0),
    }
}

/// Splits a gang's members into sub-groups: each member goes to the first spec that claims it
/// (its selector, if any, must match; then one with label keys claims the members carrying all
/// of them, grouped by their values; one without claims the rest, cut into blocks of `size` in
/// rank order). Records each member's sub-group on its task.
fn form_sub_groups<'l>(
    specs: &[SubGroupSpec],
    members: &[TaskId],
    labels: impl Fn(TaskId) -> &'l BTreeMap<String, String>,
    tasks: &mut [Task],
) -> Vec<SubGroup> {
    let mut groups: Vec<SubGroup> = Vec::new();
    let mut free: Vec<TaskId> = members.to_vec();
    for (policy, spec) in specs.iter().enumerate() {
        let policy = policy as u32;
        let mut claimed: BTreeMap<Vec<&str>, Vec<TaskId>> = BTreeMap::new();
        let mut rest = Vec::new();
        for &t in &free {
            let l = labels(t);
            let selected = spec
                .selector
                .iter()
                .all(|r| r.matches(l.get(&r.key).map(String::as_str)));
            // Volcano skips a key whose value is empty, as if the pod lacked it.
            let values: Option<Vec<&str>> = selected
                .then(|| {
                    spec.match_label_keys
                        .iter()
                        .map(|k| l.get(k).map(String::as_str).filter(|v| !v.is_empty()))
                        .collect()
                })
                .flatten();
            match values {
                Some(v) if !spec.match_label_keys.is_empty() => {
                    claimed.entry(v).or_default().push(t)
                }
                Some(_) => claimed.entry(Vec::new()).or_default().push(t),
                None => rest.push(t),
            }
        }
        for (values, ts) in claimed {
            if values.is_empty() {
                for (i, block) in ts.chunks(spec.size as usize).enumerate() {
                    groups.push(SubGroup {
                        name: format!("{}-{i}", spec.name),
                        topology: spec.topology.clone(),
                        tasks: block.to_vec(),
                        policy,
                        min_member: block.len() as u32,
                    });
                }
            } else {
                groups.push(SubGroup {
                    name: format!("{}-{}", spec.name, values.join(",")),
                    topology: spec.topology.clone(),
                    tasks: ts,
                    policy,
                    // As Volcano: a sub-group with fewer pods than its size is never complete.
                    min_member: spec.size,
                });
            }
        }
        free = rest;
    }
    for (i, g) in groups.iter().enumerate() {
        for &t in &g.tasks {
            tasks[t.index()].sub_group = Some(i as u32);
        }
    }
    groups
}

/// The queue itself, then its parent, up to the top of the tree (the implicit root is not a
/// queue). Snapshots have no cycles.
pub fn ancestors(snapshot: &Snapshot, queue: QueueId) -> impl Iterator<Item = QueueId> + '_ {
    std::iter::successors(Some(queue), move |q| snapshot.queue(*q).parent)
}

/// Marks the GPUs a bound pod holds: the ids it names when they are valid and free, otherwise
/// the lowest free ones; and whether it holds what it names (it wants none, or they were
/// valid), which makes its claim independent of the other pods' order.
fn claim_gpus(used: &mut u64, count: usize, named: &[u32], want: usize) -> (u64, bool) {
    let (mask, as_named) = match named_gpus(*used, count, named, want) {
        Some(mask) => (mask, true),
        None => {
            let lowest = (0..count as u32)
                .filter(|&i| *used & (1u64 << i) == 0)
                .take(want)
                .fold(0, |mask, i| mask | 1u64 << i);
            (lowest, want == 0)
        }
    };
    *used |= mask;
    (mask, as_named)
}

/// The GPUs a bound pod names, as a mask, when they are `want` valid GPUs of the node's
/// `count`, free in `used` and none named twice.
fn named_gpus(used: u64, count: usize, named: &[u32], want: usize) -> Option<u64> {
    let mut mask = 0u64;
    let valid = named.len() == want
        && named.iter().all(|&i| {
            let ok = (i as usize) < count && (used | mask) & (1u64 << i) == 0;
            mask |= if ok { 1u64 << i } else { 0 };
            ok
        });
    valid.then_some(mask)
}

/// Resource names the pods, groups and queues use (the nodes' are added by the caller).
fn workload_resource_names<'a>(
    pods: &[&'a PodSpec],
    groups: &[&'a GroupSpec],
    queues: &'a [QueueSpec],
) -> Vec<&'a str> {
    // Few distinct names over many lists: a linear check beats a set.
    let mut all: Vec<&str> = Vec::new();
    let mut add = |list: &'a ResourceList| {
        for k in list.keys() {
            if !all.contains(&k.as_str()) {
                all.push(k);
            }
        }
    };
    for p in pods {
        add(&p.request);
    }
    for g in groups {
        if let Some(r) = &g.min_resources {
            add(r);
        }
    }
    for q in queues {
        for list in [&q.capability, &q.guarantee, &q.deserved]
            .into_iter()
            .flatten()
        {
            add(list);
        }
    }
    all
}

/// Whether a job lands in the `default` queue (a group naming no queue, or a pod of ours
/// without a group).
fn needs_default_queue<'a>(
    mut groups: impl Iterator<Item = &'a GroupSpec>,
    mut pods: impl Iterator<Item = &'a PodSpec>,
) -> bool {
    groups.any(Held::uses_default_queue) || pods.any(Held::uses_default_queue)
}

/// Resolves queues: adds `default` when a job needs it and none is declared, checks parents and
/// rejects cycles.
fn build_queues(
    names: &ResourceNames,
    specs: &mut Vec<QueueSpec>,
    needs_default: bool,
) -> Result<Vec<Queue>, SnapshotError> {
    if needs_default && !specs.iter().any(|q| q.name == DEFAULT_QUEUE) {
        specs.push(QueueSpec::new(DEFAULT_QUEUE));
        specs.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut ids: HashMap<&str, QueueId> = HashMap::new();
    for (i, q) in specs.iter().enumerate() {
        if ids.insert(q.name.as_str(), QueueId(i as u32)).is_some() {
            return Err(err(
                "Queue",
                &q.name,
                "metadata.name",
                "duplicate queue".into(),
            ));
        }
    }
    let mut out = Vec::with_capacity(specs.len());
    for (i, q) in specs.iter().enumerate() {
        let parent = match q.parent.as_deref() {
            None | Some("root") | Some("") => None,
            Some(p) => Some(*ids.get(p).ok_or_else(|| {
                err(
                    "Queue",
                    &q.name,
                    "spec.parent",
                    format!("names queue {p}, which does not exist"),
                )
            })?),
        };
        if q.weight == 0 {
            return Err(err(
                "Queue",
                &q.name,
                "spec.weight",
                "must be at least 1".into(),
            ));
        }
        out.push(Queue {
            id: QueueId(i as u32),
            name: q.name.clone(),
            parent,
            weight: q.weight,
            capability: q
                .capability
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            guarantee: q
                .guarantee
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            deserved: q
                .deserved
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            reclaimable: q.reclaimable,
            priority: q.priority,
            state: q.state,
        });
    }
    for q in &out {
        let mut seen = 0;
        let mut cur = q.parent;
        while let Some(p) = cur {
            seen += 1;
            if p == q.id || seen > out.len() {
                return Err(err(
                    "Queue",
                    &q.name,
                    "spec.parent",
                    "parent chain forms a cycle".into(),
                ));
            }
            cur = out[p.index()].parent;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::claim_gpus;

    #[test]
    fn a_bound_pod_keeps_the_gpus_it_names_when_they_are_valid() {
        let mut used = 0b0001;
        assert_eq!(claim_gpus(&mut used, 8, &[2, 3], 2), (0b1100, true));
        assert_eq!(used, 0b1101);
        // Taken, out of range, named twice or the wrong count: the lowest free ones instead.
        for named in [&[0, 4][..], &[4, 9], &[4, 4], &[4]] {
            let mut used = 0b0001;
            assert_eq!(
                claim_gpus(&mut used, 8, named, 2),
                (0b0110, false),
                "{named:?}"
            );
            assert_eq!(used, 0b0111);
        }
        // Fewer free GPUs than wanted: as many as there are.
        let mut used = 0b1110;
        assert_eq!(claim_gpus(&mut used, 4, &[], 3), (0b0001, false));
        // A pod that wants none claims none, whatever it names.
        assert_eq!(claim_gpus(&mut used, 4, &[1], 0), (0, true));
    }
}

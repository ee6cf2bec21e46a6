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

mod assemble;
mod builder;
mod devices;
mod facts;
mod held;
mod job;
mod merge;
mod meta;
mod node;
mod patch;
mod queues;
mod spec;
mod usage;
mod validate;

/// Kept here too, where readers name it with the other specs.
pub use crate::model::TopologySpec;
use assemble::*;
pub use builder::SnapshotBuilder;
pub use devices::ask_on;
pub(crate) use devices::{asks_closed, charge_held, charge_shares, closed_devices};
use facts::*;
use held::*;
use job::*;
use merge::*;
use meta::MetaInterner;
use node::*;
use queues::*;
pub use spec::*;
use usage::*;
use validate::*;

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
    /// The resources devices are advertised as, on any node (the cluster's whole-device
    /// resource, [`crate::resources::GPU`], always first).
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
    /// (the cluster's whole-device resource, or another kind some node advertises its devices as).
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

/// The queue itself, then its parent, up to the top of the tree (the implicit root is not a
/// queue). Snapshots have no cycles.
pub fn ancestors(snapshot: &Snapshot, queue: QueueId) -> impl Iterator<Item = QueueId> + '_ {
    std::iter::successors(Some(queue), move |q| snapshot.queue(*q).parent)
}

#[cfg(test)]
mod tests;

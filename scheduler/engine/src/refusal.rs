//! Why a node cannot take a pod, or a queue a task: a [`Refusal`], a small `Copy` value that
//! names what failed by id (a resource, a queue, a node's taint, a claim of the pod's rules).
//! Checks return it on the hot path without allocating; `session/explain.rs` counts nodes per
//! refusal and words them only when the plan is written, in kube-scheduler's wording ("0/92
//! nodes are available: 60 insufficient nvidia.com/gpu, 2 didn't match node selector.").

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dra::ClaimRefusal;
use crate::model::{NodeId, QueueId, RulesId};
use crate::resources::ResourceId;
use crate::snapshot::Snapshot;

/// Why a node cannot take a pod (a [`crate::NodeFilter`], capacity, devices, claims, the rules
/// about other pods, a reservation) or a queue a task (a [`crate::TaskAdmit`]).
///
/// The derived order only keeps maps of refusals deterministic; messages order their parts by
/// count, then by wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The node is cordoned (`spec.unschedulable`) and the pod does not tolerate that.
    Unschedulable,
    /// The node's taint at this position of [`crate::Node::taints`] (NoSchedule or NoExecute)
    /// is not tolerated. Named by position, so the same taint on two nodes is two refusals that
    /// word alike: their counts merge when worded (`nodes_available`).
    UntoleratedTaint { node: NodeId, taint: u32 },
    /// A `nodeSelector` entry does not match the node's labels.
    NodeSelector,
    /// No term of the required node affinity matches the node.
    NodeAffinity,
    /// A bound volume's node affinity excludes the node.
    VolumeNodeAffinity,
    /// An unbound claim has no volume to bind on the node.
    UnboundVolume,
    /// One of the claims of the pod's placement rules cannot be allocated on the node.
    Claim {
        rules: RulesId,
        refusal: ClaimRefusal,
    },
    /// The node lacks free capacity of this resource.
    Insufficient(ResourceId),
    /// The node's GPUs cannot hold the pod's device ask (see [`DeviceShort`]).
    Devices(DeviceShort),
    /// The node's devices are closed ([`crate::Node::devices_closed`] says why) and the pod
    /// asks for them. Named by node, as a taint is, so equal reasons merge when worded.
    DevicesClosed { node: NodeId },
    /// A host port the pod asks for is taken on the node.
    HostPorts,
    /// An in-tree disk the pod mounts is mounted on the node in a way that forbids sharing it
    /// (kube-scheduler's VolumeRestrictions).
    DiskConflict,
    /// The pod's required pod affinity is not met in the node's domain.
    PodAffinity,
    /// The pod's required anti-affinity selects a pod in the node's domain.
    PodAntiAffinity,
    /// A pod in the node's domain repels this one by its required anti-affinity.
    ExistingPodsAntiAffinity,
    /// A `DoNotSchedule` spread constraint would be skewed beyond its `maxSkew`.
    TopologySpread,
    /// The node lacks a topology key of a `DoNotSchedule` spread constraint.
    TopologySpreadMissingLabel,
    /// The node is reserved for a gang that has waited too long.
    Reserved,
    /// The queue (the task's own or an ancestor) would go over its capability of `resource`.
    OverCapability {
        queue: QueueId,
        resource: ResourceId,
        capability: i64,
        /// What the queue's subtree would hold with the task added.
        would_hold: i64,
    },
    /// The task would eat into `unmet` of `resource` guaranteed to other queues.
    Guaranteed { resource: ResourceId, unmet: i64 },
}

/// Why a node's GPUs cannot hold a pod's device ask: on a node that does not share them, too
/// few free; on a shared one, the reason most of its cards give, named and checked in the
/// order of HAMi's device fit (`pkg/device/nvidia/device.go` Fit, the reasons of
/// `pkg/device/common`), so a HAMi user reads the words HAMi's scheduler would have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceShort {
    TooFewFree,
    /// An MPS node gives each pod one replica; the pod asks for more.
    MpsOneReplica,
    /// HAMi's `NodeInsufficientDevice`: the pod asks for HAMi shares (`nvidia.com/gpumem`,
    /// `gpumem-percentage`, `gpucores`) of a node without HAMi's devices.
    NodeInsufficientDevice,
    /// The card is unhealthy (or cordoned by `hami.io/device-cordon`).
    CardNotHealth,
    /// The card's model fails `nvidia.com/use-gputype` / `nouse-gputype`.
    CardTypeMismatch,
    /// The card's UUID fails `nvidia.com/use-gpuuuid` / `nouse-gpuuuid`.
    CardUuidMismatch,
    /// Every share slot of the card is taken.
    CardTimeSlicingExhausted,
    CardInsufficientMemory,
    CardInsufficientCore,
    /// `gpucores: 100` asks for the card alone, and it is in use.
    ExclusiveDeviceAllocateConflict,
    /// A pod asking no compute cannot join a card whose compute is all taken.
    CardComputeUnitsExhausted,
    /// No card has a reason of its own, yet too few fit the pod.
    AllocatedCardsInsufficientRequest,
}

impl DeviceShort {
    /// HAMi's name of the reason, where HAMi has one.
    pub fn hami_reason(self) -> Option<&'static str> {
        Some(match self {
            DeviceShort::TooFewFree | DeviceShort::MpsOneReplica => return None,
            DeviceShort::NodeInsufficientDevice => "NodeInsufficientDevice",
            DeviceShort::CardNotHealth => "CardNotHealth",
            DeviceShort::CardTypeMismatch => "CardTypeMismatch",
            DeviceShort::CardUuidMismatch => "CardUuidMismatch",
            DeviceShort::CardTimeSlicingExhausted => "CardTimeSlicingExhausted",
            DeviceShort::CardInsufficientMemory => "CardInsufficientMemory",
            DeviceShort::CardInsufficientCore => "CardInsufficientCore",
            DeviceShort::ExclusiveDeviceAllocateConflict => "ExclusiveDeviceAllocateConflict",
            DeviceShort::CardComputeUnitsExhausted => "CardComputeUnitsExhausted",
            DeviceShort::AllocatedCardsInsufficientRequest => "AllocatedCardsInsufficientRequest",
        })
    }

    fn describe(self) -> String {
        match self {
            DeviceShort::TooFewFree => "had too few free GPUs".into(),
            DeviceShort::MpsOneReplica => "share GPUs through MPS, one replica per pod".into(),
            DeviceShort::NodeInsufficientDevice => {
                "had no HAMi GPU for the pod's shares (NodeInsufficientDevice)".into()
            }
            other => {
                let reason = other.hami_reason().unwrap_or("none");
                format!("had no GPU that fits the pod ({reason})")
            }
        }
    }

    /// Evicting pods frees slots, memory, compute and whole devices; it heals no device,
    /// changes no card's model or UUID, no node's sharing mode.
    fn resolvable_by_preemption(self) -> bool {
        !matches!(
            self,
            DeviceShort::CardNotHealth
                | DeviceShort::CardTypeMismatch
                | DeviceShort::CardUuidMismatch
                | DeviceShort::MpsOneReplica
                | DeviceShort::NodeInsufficientDevice
        )
    }
}

impl Refusal {
    /// The refusal as kube-scheduler words it (node refusals complete "N nodes …"); ids are
    /// resolved in `snapshot`, the one the refusal was made in.
    pub fn describe(&self, snapshot: &Snapshot) -> String {
        let names = &snapshot.resources;
        let fixed = match *self {
            Refusal::Unschedulable => "were unschedulable",
            Refusal::UntoleratedTaint { node, taint } => {
                let t = &snapshot.node(node).taints[taint as usize];
                return format!("had untolerated taint {{{}: {}}}", t.key, t.value);
            }
            Refusal::NodeSelector => "didn't match node selector",
            Refusal::NodeAffinity => "didn't match node affinity",
            Refusal::VolumeNodeAffinity => "had volume node affinity conflict",
            Refusal::UnboundVolume => "didn't find available persistent volumes to bind",
            Refusal::Claim { rules, refusal } => {
                let need = snapshot.rules[rules.0 as usize].claims.as_deref();
                return refusal.describe(need.expect("a claim refusal comes from claims"));
            }
            Refusal::Insufficient(resource) => {
                return format!("insufficient {}", names.name(resource))
            }
            Refusal::Devices(short) => return short.describe(),
            Refusal::DevicesClosed { node } => {
                let why = snapshot.node(node).devices_closed.as_deref();
                return format!(
                    "had their GPUs closed ({})",
                    why.unwrap_or("no reason given")
                );
            }
            Refusal::HostPorts => "didn't have free ports for the requested pod ports",
            Refusal::DiskConflict => "had no available disk",
            Refusal::PodAffinity => "didn't match pod affinity rules",
            Refusal::PodAntiAffinity => "didn't match pod anti-affinity rules",
            Refusal::ExistingPodsAntiAffinity => "didn't satisfy existing pods anti-affinity rules",
            Refusal::TopologySpread => "didn't match pod topology spread constraints",
            Refusal::TopologySpreadMissingLabel => {
                "didn't match pod topology spread constraints (missing required label)"
            }
            Refusal::Reserved => "were reserved for a starving gang",
            Refusal::OverCapability {
                queue,
                resource,
                capability,
                would_hold,
            } => {
                return format!(
                    "queue {} would hold {} {} over its capability of {}",
                    snapshot.queue(queue).name,
                    names.format(resource, would_hold),
                    names.name(resource),
                    names.format(resource, capability)
                )
            }
            Refusal::Guaranteed { resource, unmet } => {
                return format!(
                "{} {} of the free capacity is guaranteed to other queues that have not used it",
                names.format(resource, unmet),
                names.name(resource)
            )
            }
        };
        fixed.to_string()
    }

    /// Whether evicting pods could lift the refusal: kube-scheduler's `Unschedulable`, where
    /// `false` is its `UnschedulableAndUnresolvable` (the node's labels, taints, volumes or
    /// devices say no whatever runs there, and so does a reservation).
    pub fn resolvable_by_preemption(&self) -> bool {
        match self {
            Refusal::Unschedulable
            | Refusal::UntoleratedTaint { .. }
            | Refusal::NodeSelector
            | Refusal::NodeAffinity
            | Refusal::VolumeNodeAffinity
            | Refusal::UnboundVolume
            // Evictions only take pods away: they never bring the pods affinity asks for.
            | Refusal::PodAffinity
            | Refusal::TopologySpreadMissingLabel
            | Refusal::DevicesClosed { .. }
            | Refusal::Reserved => false,
            Refusal::Claim { refusal, .. } => refusal.why.resolvable_by_preemption(),
            Refusal::Devices(short) => short.resolvable_by_preemption(),
            Refusal::Insufficient(_)
            | Refusal::HostPorts
            | Refusal::DiskConflict
            | Refusal::PodAntiAffinity
            | Refusal::ExistingPodsAntiAffinity
            | Refusal::TopologySpread
            // Victims of the queue (capability) or of other queues (guarantees) give back.
            | Refusal::OverCapability { .. }
            | Refusal::Guaranteed { .. } => true,
        }
    }
}

/// Why no node takes a pod: the nodes counted per refusal, or nothing counted where nobody
/// will read the reason ([`crate::Framework::explain_failures`] off). Kept as the session
/// found it and worded only when the plan is written ([`NoNode::describe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoNode {
    /// Nodes per refusal, of the snapshot's nodes. Shared: the session keeps one per shape
    /// and hands it to every member that fails alike.
    Counted(Arc<BTreeMap<Refusal, usize>>),
    /// Not counted: [`crate::conditions::NO_NODE_FITS`].
    Uncounted,
}

impl NoNode {
    /// The reason as kube-scheduler words it ("0/3 nodes are available: 2 insufficient
    /// nvidia.com/gpu, 1 didn't match node selector."); ids are resolved in `snapshot`, the
    /// one the nodes were counted in.
    pub fn describe(&self, snapshot: &Snapshot) -> String {
        match self {
            NoNode::Counted(counts) => nodes_available(snapshot, counts),
            NoNode::Uncounted => crate::conditions::NO_NODE_FITS.into(),
        }
    }
}

/// kube-scheduler's message for nodes counted per refusal: "0/N nodes are available: …", most
/// frequent first, equal counts in the order of their wording.
pub(crate) fn nodes_available(snapshot: &Snapshot, counts: &BTreeMap<Refusal, usize>) -> String {
    let parts: Vec<String> = (worded_counts(snapshot, counts).iter())
        .map(|(r, c)| format!("{c} {r}"))
        .collect();
    let total = snapshot.nodes.len();
    if parts.is_empty() {
        format!("0/{total} nodes are available.")
    } else {
        format!("0/{total} nodes are available: {}.", parts.join(", "))
    }
}

/// The counts worded, refusals that word alike merged, most frequent first, equal counts in
/// the order of their wording.
pub(crate) fn worded_counts(
    snapshot: &Snapshot,
    counts: &BTreeMap<Refusal, usize>,
) -> Vec<(String, usize)> {
    let mut worded: BTreeMap<String, usize> = BTreeMap::new();
    for (refusal, &count) in counts {
        *worded.entry(refusal.describe(snapshot)).or_default() += count;
    }
    let mut list: Vec<(String, usize)> = worded.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

mod job;
#[cfg(test)]
mod tests;

pub use job::JobRefusal;

//! A session is the mutable working copy of a snapshot for one cycle; a [`Statement`] is a
//! transaction over it. A gang is placed inside one statement and committed only when it is
//! ready, or discarded as a whole: nothing half-placed leaks into the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::actions::JobCondition;
use crate::framework::Framework;
use crate::hash::Map;
use crate::interpod::InterPod;
use crate::model::*;
use crate::resources::Resources;
use crate::share::Share;
use crate::snapshot::{ancestors, Snapshot};
use crate::warm::Warm;
use basalt_topology::{DomainId, TierId, Topology};
pub(crate) use carry::NodeState;

mod able;
mod bound;
mod capacity;
mod carry;
mod changes;
mod classes;
mod devices;
mod domains;
mod dra;
mod explain;
mod free_index;
mod holds;
mod jobs;
mod open;
mod plan;
mod prefer;
mod queues;
mod read;
mod refusals;
mod relayout;
mod reservations;
mod score;
mod search;
mod topo;
mod transact;
mod usage;
mod view;
mod wait_notes;
mod waiting;

pub use topo::TopoState;
use transact::Op;
pub use transact::Statement;
pub use view::SessionView;

/// Where a task stands inside the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    Pending,
    /// Bound before this cycle.
    Bound(NodeId),
    /// Placed by this cycle.
    Allocated {
        node: NodeId,
        gpus: u64,
    },
    /// Placed by this cycle on capacity that evictions are freeing: reported as a nomination
    /// and bound in a later cycle, once the victims are gone.
    Pipelined {
        node: NodeId,
        gpus: u64,
    },
    /// Evicted by this cycle; its capacity is free.
    Evicted(NodeId),
    Succeeded,
    Failed,
}

impl TaskStatus {
    /// Holds capacity on a node (bound before or placed now).
    pub fn node(&self) -> Option<NodeId> {
        match *self {
            TaskStatus::Bound(n)
            | TaskStatus::Allocated { node: n, .. }
            | TaskStatus::Pipelined { node: n, .. } => Some(n),
            _ => None,
        }
    }
}

/// How one job's pods fared, for its PodGroup status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberCounts {
    /// Bound before this cycle or placed by it.
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub pending: u32,
    /// Placed on capacity that evictions are freeing (nominated, not bound).
    pub pipelined: u32,
    /// Per role named in `minTaskMember` (a pod without a role is role `""`): running +
    /// pipelined + succeeded.
    pub by_role: BTreeMap<String, u32>,
}

/// Feasibility of a set of placement rules over all nodes, computed once per session.
struct Statics {
    ok: Vec<bool>,
    /// Nodes that pass, when they are few enough that scanning them beats the buckets.
    few: Option<Vec<NodeId>>,
}

/// Who may use nodes reserved by a starving gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReservedNodes {
    /// Keep off nodes reserved for other jobs (a job may use its own).
    Avoid(JobId),
    /// Work that ends before the reserving gang could start anyway may use them.
    Use,
}

/// Nodes bucketed by (capacity class, free devices: see [`Session::bucket_devices`]), each
/// bucket sorted by node-order key.
/// Nodes in one capacity class have equal allocatable, so their order is the same for any
/// request: the best node in a bucket is the first that fits.
struct FreeIndex {
    class: Vec<u32>,
    key: Vec<(u32, u64)>,
    buckets: BTreeMap<(u32, u32), BTreeSet<(u64, NodeId)>>,
}

/// The cycle's working copy of a snapshot. Its state is in parts, each owning its fields and
/// changed only through its own methods, so that who may change what is read off the part:
/// `capacity` (nodes, devices, claims), `queues` (shares, admissions), `jobs` (task status,
/// phases, members), `bound` (fixed at opening), `reservations` (reserved nodes,
/// nominations, holds), `refusals` and `notes` (what explanations are counted and written
/// from). One log, `changes`, records every node whose usage changed, for those who bring
/// their state up to date from it. The rest is the node search's indexes and caches.
pub struct Session<'a> {
    pub snapshot: &'a Snapshot,
    fw: &'a Framework,
    /// Where the session's node state comes from and goes back to (none: it starts afresh and
    /// keeps nothing).
    warm: Option<&'a mut Warm>,
    /// What the nodes hold (see `capacity.rs`).
    capacity: capacity::Capacity,
    /// What the queues hold, ask for and deserve (see `queues.rs`).
    queues: queues::Queues,
    /// Where each job and task stands (see `jobs.rs`).
    jobs: jobs::Jobs,
    /// What was bound when the session opened (see `bound.rs`).
    bound: bound::Bound,
    /// Failures the search remembers and their reasons (see `refusals.rs`).
    refusals: refusals::Refusals,
    /// What the explanations of waiting jobs are written from (see `wait_notes.rs`).
    notes: wait_notes::WaitNotes,
    /// Nodes reserved for starving gangs, nominations and holds (see `reservations.rs`).
    reservations: reservations::Reservations,
    index: FreeIndex,
    statics: Map<RulesId, Statics>,
    /// The last session's static filter results, taken over by rules on first use.
    kept_statics: Map<PlacementRules, Statics>,
    committed: Vec<Op>,
    /// Every node whose usage changed, in order: the one change log (see `changes.rs`).
    changes: changes::Changes,
    /// The topology graph and free GPUs per domain; `None` when no tier is configured.
    topo: Option<TopoState>,
    /// Inter-pod affinity, spread and host ports: counts per domain (see [`crate::interpod`]).
    pods: InterPod,
    /// Free nodes per domain of the topology keys inter-pod rules restrict on.
    domain_index: domains::DomainIndex,
    /// Preference points of the tasks' placement rules and preferred node terms.
    preference_cache: prefer::PreferenceCache,
    /// Placements, evictions and undos so far (see `able`).
    charges: u64,
    able: Option<able::AbleNodes>,
    /// The framework's pod-aware scorers prepared for this session (those that had
    /// something to say): when empty, the bucketed node order alone (see `score.rs`).
    scorers: Vec<Box<dyn crate::framework::NodeScorer + 'a>>,
    /// The framework's device choice prepared for this session; taken out while it runs.
    chooser: Option<Box<dyn crate::framework::DeviceChooser + 'a>>,
    /// Tasks the pod-aware search has looked for a node for.
    scored_tasks: u32,
    /// The nodes grouped by state, once a second task is scored (see `classes.rs`).
    classes: Option<classes::StateClasses>,
}

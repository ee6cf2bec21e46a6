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
mod carry;
mod changes;
mod classes;
mod devices;
mod domains;
mod dra;
mod explain;
mod free_index;
mod holds;
mod open;
mod plan;
mod prefer;
mod read;
mod relayout;
mod score;
mod search;
mod topo;
mod transact;
mod usage;
mod waiting;

pub use topo::TopoState;
use transact::Op;
pub use transact::Statement;

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

/// A job's members by their state in the snapshot.
#[derive(Clone, Copy, Default)]
struct StartCounts {
    pending: u32,
    bound: u32,
    succeeded: u32,
    failed: u32,
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

pub struct Session<'a> {
    pub snapshot: &'a Snapshot,
    fw: &'a Framework,
    /// Where the session's node state comes from and goes back to (none: it starts afresh and
    /// keeps nothing).
    warm: Option<&'a mut Warm>,
    used: Vec<Resources>,
    /// The sum of `used`, kept up to date so admission never sums every node per job.
    cluster_used: Resources,
    gpus_used: Vec<u64>,
    /// Per device of the nodes that share them (see [`Snapshot::device_use`]).
    device_use: Vec<crate::devices::DeviceUse>,
    /// Per node, the MIG slices taken (see [`Snapshot::slice_used`]).
    slice_used: Vec<u64>,
    /// The MIG slices each task placed by this cycle takes.
    placed_slices: Map<TaskId, u64>,
    /// What each container of a multi-container task placed this cycle takes (see
    /// [`Self::container_takes`]), in container order.
    placed_takes: Map<TaskId, Vec<crate::devices::Take>>,
    /// DRA devices in use and the claims this cycle allocated.
    claims: dra::Claims,
    status: Vec<TaskStatus>,
    phase: Vec<JobPhase>,
    /// Per job: members holding capacity (bound, placed or pipelined).
    holding: Vec<u32>,
    /// Per job: members placed or pipelined by this cycle (and not undone).
    placed: Vec<u32>,
    /// Per job: how its members stood when the session opened (what [`Session::counts`] gives
    /// for a job no committed operation touched).
    start_counts: Vec<StartCounts>,
    /// Per queue: the lowest priority of its jobs with members bound before this cycle (the
    /// only possible preempt victims), `None` when none is bound.
    lowest_bound_priority: Vec<Option<i32>>,
    /// Jobs in phase Pending in the snapshot (the candidates for admission), by id.
    unadmitted: Vec<JobId>,
    /// Jobs with pending members when the session opened, by id: no other job gets one (a
    /// placement undone gives back a member that was pending; an eviction makes it Evicted).
    with_pending: Vec<JobId>,
    conditions: Vec<Vec<JobCondition>>,
    /// Per queue: what its subtree holds (bound before the cycle, placed or pipelined by it).
    queue_allocated: Vec<Resources>,
    /// Per queue: what its subtree's pending pods asked for when the session opened.
    queue_pending: Vec<Resources>,
    /// Per queue: its fair share (see [`crate::FairShare`]).
    deserved: Vec<Resources>,
    /// Per queue and resource (`queue × dims`): its usage brought to the snapshot's instant
    /// (see [`crate::usage`]); empty without a usage half-life.
    usage: Vec<f64>,
    /// Per queue: the weight the fair share divides by, when the policy adjusted it by usage.
    usage_weights: Option<crate::UsageWeights>,
    /// minResources of admitted jobs that hold nothing yet, in all and per queue subtree.
    inqueue_reserved: Resources,
    queue_reserved: Vec<Resources>,
    cluster_allocatable: Resources,
    /// What the queues share (see [`Session::queue_capacity`]).
    queue_capacity: Resources,
    /// Whether some queue states a guarantee (else a guarantee check has nothing to do).
    guaranteed: bool,
    /// Bound tasks per node when the session opened: the candidates for eviction.
    node_tasks: Vec<TaskId>,
    /// Beside `node_tasks`, each one's job and shape: what the loops over every running task
    /// (the explanations' holder tables) read, 8 bytes a task instead of its record.
    node_task_kinds: Vec<(JobId, ShapeId)>,
    /// Where each node's part of `node_tasks` starts (and, one further, ends).
    node_task_start: Vec<u32>,
    /// Per leaf queue: the nodes its bound tasks were on when the session opened.
    queue_nodes: Vec<Vec<NodeId>>,
    /// Per node: the starving job that reserved it.
    reserved_for: Vec<Option<JobId>>,
    /// Members of reserving jobs and the nodes kept for them.
    reservations: Vec<(TaskId, NodeId)>,
    /// Capacity held for nominated pending pods (freed by an earlier cycle's evictions), per job,
    /// until the job's own turn releases it.
    holds: Map<JobId, Vec<(TaskId, NodeId)>>,
    released_holds: Map<JobId, Vec<(TaskId, NodeId)>>,
    any_reserved: bool,
    index: FreeIndex,
    statics: Map<RulesId, Statics>,
    /// The last session's static filter results, taken over by rules on first use.
    kept_statics: Map<PlacementRules, Statics>,
    /// Bumped whenever capacity is given back; a shape that failed since the last bump fails again.
    released: u64,
    failures: Map<(ShapeId, ReservedNodes), u64>,
    /// Per shape, on clusters that share devices: the nodes without room for it (resources or
    /// devices; a bit per node) since `released` was the value kept. Usage only grows until
    /// capacity is given back, so they still have none, and the search passes them at a
    /// bit's cost.
    room_misses: Map<ShapeId, (u64, Vec<u64>)>,
    /// Why no node takes each failed shape, counted only when asked for.
    explanations: Map<(ShapeId, ReservedNodes), (u64, crate::refusal::NoNode)>,
    /// While set, [`Session::why_no_node`] gives [`crate::NoNode::Uncounted`] for a task
    /// with inter-pod rules (whose reason is a scan of its own) without scanning: the caller
    /// will not report it (see [`Session::set_quiet`]).
    quiet: bool,
    /// The same for tasks with inter-pod rules, per gang and shape, valid while nothing is
    /// committed.
    gang_explanations: Map<(JobId, ShapeId, ReservedNodes), (u64, crate::refusal::NoNode)>,
    /// Per shape, the scan its explanations start from (see `explain.rs`).
    scans: Map<ShapeId, explain::Scan>,
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
    /// Per job: its 1-based turn in the order `allocate` served jobs (0: not served).
    served: Vec<u32>,
    served_count: u32,
    /// Per job: `allocate` could not place its minimum for room or quota; its condition is
    /// worded from its explanation (see `waiting.rs`).
    short: Vec<bool>,
    /// Per job: why it waits, once the actions are done (see `waiting.rs`).
    waiting: Vec<Option<Box<crate::plan::Explanation>>>,
}

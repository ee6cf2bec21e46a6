//! A session is the mutable working copy of a snapshot for one cycle; a [`Statement`] is a
//! transaction over it. A gang is placed inside one statement and committed only when it is
//! ready, or discarded as a whole: nothing half-placed leaks into the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::framework::Framework;
use crate::hash::Map;
use crate::interpod::InterPod;
use crate::model::*;
use crate::plan::Condition;
use crate::resources::Resources;
use crate::share::Share;
use crate::snapshot::{ancestors, Snapshot};
use crate::warm::Warm;
use basalt_topology::{DomainId, TierId, Topology};
pub(crate) use carry::NodeState;

mod able;
mod carry;
mod classes;
mod devices;
mod domains;
mod dra;
mod explain;
mod plan;
mod prefer;
mod relayout;
mod score;
mod search;
mod usage;
mod waiting;

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

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        task: TaskId,
        node: NodeId,
        gpus: u64,
        pipelined: bool,
    },
    Evict {
        task: TaskId,
        node: NodeId,
        gpus: u64,
        reason: String,
        for_job: JobId,
    },
}

/// A transaction: operations apply to the session at once and are undone by `discard`.
#[must_use = "a statement must be committed or discarded"]
#[derive(Debug, Default)]
pub struct Statement {
    ops: Vec<Op>,
}

impl Statement {
    /// Takes over `other`'s operations (a nested attempt that succeeded).
    pub fn append(&mut self, other: Statement) {
        self.ops.extend(other.ops);
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The tasks the statement evicts, in order.
    pub fn evictions(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.ops.iter().filter_map(|op| match op {
            Op::Evict { task, .. } => Some(*task),
            Op::Allocate { .. } => None,
        })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
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
    conditions: Vec<Vec<Condition>>,
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
    /// Every node whose usage changed, in order, since the session opened: what a kept
    /// explanation scan looks at again (see `explain.rs`).
    touched: Vec<NodeId>,
    failures: Map<(ShapeId, ReservedNodes), u64>,
    /// Per shape, on clusters that share devices: the nodes without room for it (resources or
    /// devices; a bit per node) since `released` was the value kept. Usage only grows until
    /// capacity is given back, so they still have none, and the search passes them at a
    /// bit's cost.
    room_misses: Map<ShapeId, (u64, Vec<u64>)>,
    /// The reason message per failed shape, computed only when asked for.
    explanations: Map<(ShapeId, ReservedNodes), (u64, String)>,
    /// While set, [`Session::why_no_node`] gives [`crate::framework::NO_NODE_FITS`] for a task
    /// with inter-pod rules (whose reason is a scan of its own) without scanning: the caller
    /// will not report it (see [`Session::set_quiet`]).
    quiet: bool,
    /// The same for tasks with inter-pod rules, per gang and shape, valid while nothing is
    /// committed.
    gang_explanations: Map<(JobId, ShapeId, ReservedNodes), (u64, String)>,
    /// Per shape, the scan its explanations start from (see `explain.rs`).
    scans: Map<ShapeId, explain::Scan>,
    committed: Vec<Op>,
    /// Nodes whose usage this session changed (with repeats): those of its operations and of
    /// its holds (noted when taken; releasing and restoring one changes no other node).
    moved: Vec<NodeId>,
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

/// Free whole GPUs per topology domain, kept up to date as the session places and evicts, and
/// per tier the domains ordered by free GPUs (so the best fit for a gang is a range lookup).
pub struct TopoState {
    pub topology: Arc<Topology>,
    free: Vec<i64>,
    by_tier: Vec<BTreeSet<(i64, DomainId)>>,
}

impl TopoState {
    pub fn free(&self, domain: DomainId) -> i64 {
        self.free[domain.index()]
    }

    /// Domains of `tier` with at least `need` free GPUs, the fullest (least left over) first.
    pub fn fitting(&self, tier: TierId, need: i64) -> impl Iterator<Item = DomainId> + '_ {
        self.by_tier[tier.0 as usize]
            .range((need, DomainId(0))..)
            .map(|&(_, d)| d)
    }

    /// The domain of `tier` with the most free GPUs.
    pub fn roomiest(&self, tier: TierId) -> Option<DomainId> {
        self.by_tier[tier.0 as usize].last().map(|&(_, d)| d)
    }

    fn change(&mut self, node: NodeId, delta: i64) {
        // A share that leaves the node's free whole GPUs as they were moves no domain.
        if delta == 0 {
            return;
        }
        for &d in self.topology.domains_of(node.index()) {
            let tier = self.topology.domain(d).tier.0 as usize;
            let set = &mut self.by_tier[tier];
            set.remove(&(self.free[d.index()], d));
            self.free[d.index()] += delta;
            set.insert((self.free[d.index()], d));
        }
    }
}

impl<'a> Session<'a> {
    /// A session that starts afresh and hands nothing on.
    pub fn new(snapshot: &'a Snapshot, fw: &'a Framework) -> Self {
        Self::open(snapshot, fw, None)
    }

    /// A session that starts from what `warm` carries, when it fits `snapshot`, and leaves its
    /// own node state there when it ends ([`Session::into_plan`]). Decides exactly as
    /// [`Session::new`] does.
    pub fn with_warm(snapshot: &'a Snapshot, fw: &'a Framework, warm: &'a mut Warm) -> Self {
        Self::open(snapshot, fw, Some(warm))
    }

    fn open(snapshot: &'a Snapshot, fw: &'a Framework, mut warm: Option<&'a mut Warm>) -> Self {
        let n = snapshot.nodes.len();
        let dims = snapshot.resources.len();
        let cluster_allocatable = snapshot.allocatable_total.clone();
        let node_used_sum = snapshot.used_total.clone();
        let zeros = vec![Resources::zero(dims); snapshot.queues.len()];
        let mut queue_allocated = zeros.clone();
        let mut queue_pending = zeros.clone();
        let mut start_counts = vec![StartCounts::default(); snapshot.jobs.len()];
        // Bound tasks per node, as one list cut at `node_task_start` (counted, then placed).
        let mut node_task_start = vec![0u32; n + 1];
        let mut status = Vec::with_capacity(snapshot.tasks.len());
        // Per task, its job's (leaf) queue: tasks mostly follow their job, so look it up once
        // per run of a job's tasks.
        let mut task_queue: Vec<QueueId> = Vec::with_capacity(snapshot.tasks.len());
        let mut last_job: Option<(JobId, QueueId)> = None;
        // Requests are summed per leaf queue here and into the leaves' ancestors below.
        for t in &snapshot.tasks {
            let queue = match last_job {
                Some((job, queue)) if job == t.job => queue,
                _ => snapshot.job(t.job).queue,
            };
            last_job = Some((t.job, queue));
            task_queue.push(queue);
            let counts = &mut start_counts[t.job.index()];
            status.push(match t.state {
                TaskState::Pending => {
                    // A held pod is no demand its queue could use this cycle.
                    if t.hold.is_none() {
                        queue_pending[queue.index()].add(&t.request);
                    }
                    counts.pending += 1;
                    TaskStatus::Pending
                }
                TaskState::Bound(node) => {
                    queue_allocated[queue.index()].add(&t.request);
                    counts.bound += 1;
                    node_task_start[node.index() + 1] += 1;
                    TaskStatus::Bound(node)
                }
                TaskState::Succeeded => {
                    counts.succeeded += 1;
                    TaskStatus::Succeeded
                }
                TaskState::Failed => {
                    counts.failed += 1;
                    TaskStatus::Failed
                }
            });
        }
        // Members holding capacity: the bound ones, to begin with.
        let holding: Vec<u32> = start_counts.iter().map(|c| c.bound).collect();
        let mut lowest_bound_priority: Vec<Option<i32>> = vec![None; snapshot.queues.len()];
        for job in snapshot.jobs.iter().filter(|j| holding[j.id.index()] > 0) {
            let lowest = &mut lowest_bound_priority[job.queue.index()];
            *lowest = Some(lowest.map_or(job.priority, |p| p.min(job.priority)));
        }
        for (held, pinned) in queue_allocated.iter_mut().zip(&snapshot.queue_pinned) {
            held.add(pinned);
        }
        // Bound requests of our pods (the rest of the nodes' usage is other schedulers').
        let mut ours_bound = Resources::zero(dims);
        for q in &snapshot.queues {
            ours_bound.add(&queue_allocated[q.id.index()]);
        }
        // Only leaves hold jobs: what each leaf holds goes up to every ancestor.
        let (own_pending, own_allocated) = (queue_pending.clone(), queue_allocated.clone());
        for q in &snapshot.queues {
            for a in ancestors(snapshot, q.id).skip(1) {
                queue_pending[a.index()].add(&own_pending[q.id.index()]);
                queue_allocated[a.index()].add(&own_allocated[q.id.index()]);
            }
        }
        for i in 0..n {
            node_task_start[i + 1] += node_task_start[i];
        }
        let mut node_tasks = vec![TaskId(0); node_task_start[n] as usize];
        let mut next = node_task_start.clone();
        for (t, status) in snapshot.tasks.iter().zip(&status) {
            if let TaskStatus::Bound(node) = status {
                node_tasks[next[node.index()] as usize] = t.id;
                next[node.index()] += 1;
            }
        }
        let mut queue_nodes: Vec<Vec<NodeId>> = vec![Vec::new(); snapshot.queues.len()];
        for node in 0..n {
            let (from, to) = (node_task_start[node], node_task_start[node + 1]);
            for &t in &node_tasks[from as usize..to as usize] {
                let list = &mut queue_nodes[task_queue[t.index()].index()];
                if list.last() != Some(&NodeId(node as u32)) {
                    list.push(NodeId(node as u32));
                }
            }
        }
        // One pass over the jobs for what the session keeps of them.
        let mut phase = Vec::with_capacity(snapshot.jobs.len());
        let (mut unadmitted, mut to_reserve) = (Vec::new(), Vec::new());
        let mut constrained = false;
        for job in &snapshot.jobs {
            phase.push(job.phase);
            match job.phase {
                JobPhase::Pending => unadmitted.push(job.id),
                // A gang backing off after its schedule timeout reserves nothing.
                JobPhase::Inqueue
                    if holding[job.id.index()] == 0
                        && fw.timed_out(job, false, snapshot.now_ms).is_none() =>
                {
                    to_reserve.push(job.id)
                }
                _ => {}
            }
            constrained |= !job.topology.is_empty() || !job.sub_groups.is_empty();
        }
        let with_pending = (start_counts.iter().enumerate())
            .filter(|(_, c)| c.pending > 0)
            .map(|(j, _)| JobId(j as u32))
            .collect();
        let kept = warm
            .as_deref_mut()
            .and_then(|w| w.take_node_state(snapshot));
        let topology = match warm.as_deref_mut() {
            Some(w) => w.topology(snapshot, &fw.tiers, constrained),
            None => snapshot.topology(&fw.tiers, constrained).map(Arc::new),
        };
        let mut session = Session {
            snapshot,
            fw,
            warm,
            used: Vec::new(),
            cluster_used: Resources::zero(dims),
            gpus_used: Vec::new(),
            device_use: snapshot.device_use.clone(),
            slice_used: snapshot.slice_used.clone(),
            placed_slices: Map::default(),
            placed_takes: Map::default(),
            claims: dra::Claims::new(&snapshot.dra),
            status,
            phase,
            unadmitted,
            with_pending,
            placed: vec![0; holding.len()],
            start_counts,
            lowest_bound_priority,
            holding,
            conditions: vec![Vec::new(); snapshot.jobs.len()],
            queue_allocated,
            queue_pending,
            deserved: Vec::new(),
            usage: Vec::new(),
            usage_weights: None,
            inqueue_reserved: Resources::zero(dims),
            queue_reserved: zeros,
            cluster_allocatable,
            queue_capacity: Resources::zero(dims),
            guaranteed: snapshot.queues.iter().any(|q| !q.guarantee.is_empty()),
            node_tasks,
            node_task_start,
            queue_nodes,
            reserved_for: vec![None; n],
            reservations: Vec::new(),
            holds: Map::default(),
            released_holds: Map::default(),
            any_reserved: false,
            index: FreeIndex {
                class: Vec::new(),
                key: Vec::new(),
                buckets: BTreeMap::new(),
            },
            statics: Map::default(),
            kept_statics: Map::default(),
            released: 0,
            touched: Vec::new(),
            failures: Map::default(),
            room_misses: Map::default(),
            explanations: Map::default(),
            gang_explanations: Map::default(),
            scans: Map::default(),
            quiet: false,
            committed: Vec::new(),
            moved: Vec::new(),
            topo: None,
            pods: InterPod::new(snapshot),
            domain_index: domains::DomainIndex::default(),
            preference_cache: prefer::PreferenceCache::default(),
            charges: 0,
            able: None,
            scorers: Vec::new(),
            chooser: None,
            scored_tasks: 0,
            classes: None,
            served: vec![0; snapshot.jobs.len()],
            served_count: 0,
            short: vec![false; snapshot.jobs.len()],
            waiting: vec![None; snapshot.jobs.len()],
        };
        let kept_topo = session.start_nodes(kept);
        session.domain_index =
            domains::DomainIndex::new(session.pods.coarse_keys(snapshot.nodes.len()));
        session.topo = topology.map(|t| session.topo_state(t, kept_topo));
        session.cluster_used.add(&node_used_sum);
        for job in to_reserve {
            session.reserve_admission(job, true);
        }
        session.queue_capacity = {
            let mut foreign = node_used_sum;
            foreign.take_back(&ours_bound);
            let mut capacity = session.cluster_allocatable.clone();
            capacity.sub(&foreign);
            capacity
        };
        session.usage = session.usage_now();
        session.usage_weights = (fw.fair_share.as_ref()).and_then(|p| p.weights(&session));
        session.deserved = match &fw.fair_share {
            Some(policy) => policy.deserved(&session),
            // Without a fair-share policy every queue may use the whole cluster.
            None => vec![session.queue_capacity.clone(); snapshot.queues.len()],
        };
        session.prepare_scoring();
        session
    }

    /// The topology and its free capacity, when the cluster has one.
    pub fn topology(&self) -> Option<&TopoState> {
        self.topo.as_ref()
    }

    /// Free whole GPUs of one NVLink island of a node.
    pub fn island_free(&self, node: NodeId, island: u32) -> u32 {
        let used = self.gpus_used[node.index()];
        self.snapshot.nodes[node.index()]
            .gpus
            .iter()
            .enumerate()
            .filter(|(p, g)| g.nvlink_domain == island && used & (1u64 << p) == 0)
            .count() as u32
    }

    pub fn framework(&self) -> &'a Framework {
        self.fw
    }

    // ----- reading state -----

    pub fn task_status(&self, task: TaskId) -> &TaskStatus {
        &self.status[task.index()]
    }

    pub fn phase(&self, job: JobId) -> JobPhase {
        self.phase[job.index()]
    }

    pub fn used(&self, node: NodeId) -> &Resources {
        &self.used[node.index()]
    }

    /// What a node has left.
    pub fn free(&self, node: NodeId) -> Resources {
        let mut free = self.snapshot.node(node).allocatable.clone();
        free.sub(&self.used[node.index()]);
        free
    }

    /// The node's devices no pod can take or join now, as a mask of positions: the used whole
    /// devices of an unshared node; on a shared one, devices no pod can join any more.
    pub fn closed_devices(&self, node: NodeId) -> u64 {
        self.gpus_used[node.index()]
    }

    pub fn free_gpus(&self, node: NodeId) -> u32 {
        let count = self.snapshot.node(node).gpus.len() as u32;
        count - self.gpus_used[node.index()].count_ones().min(count)
    }

    pub fn cluster_allocatable(&self) -> &Resources {
        &self.cluster_allocatable
    }

    /// Everything in use now, across all nodes.
    pub fn cluster_used(&self) -> &Resources {
        &self.cluster_used
    }

    pub fn inqueue_reserved(&self) -> &Resources {
        &self.inqueue_reserved
    }

    /// minResources reserved by admitted jobs of the queue's subtree that hold nothing yet.
    pub fn queue_reserved(&self, queue: QueueId) -> &Resources {
        &self.queue_reserved[queue.index()]
    }

    /// What the queue's subtree holds (bound before the cycle, placed or pipelined by it).
    pub fn queue_allocated(&self, queue: QueueId) -> &Resources {
        &self.queue_allocated[queue.index()]
    }

    /// What the queue's subtree asks for: what it holds plus what its pending pods asked for
    /// when the session opened.
    pub fn queue_demand(&self, queue: QueueId) -> Resources {
        let mut demand = self.queue_pending[queue.index()].clone();
        demand.add(&self.queue_allocated[queue.index()]);
        demand
    }

    /// The queue's fair share.
    pub fn deserved(&self, queue: QueueId) -> &Resources {
        &self.deserved[queue.index()]
    }

    /// Whether some queue states a guarantee.
    pub fn any_guarantee(&self) -> bool {
        self.guaranteed
    }

    /// What the queues share: the cluster's allocatable less what pods of other schedulers use.
    pub fn queue_capacity(&self) -> Resources {
        self.queue_capacity.clone()
    }

    /// Dominant share: the largest allocated / deserved over the resources the queue holds.
    pub fn share(&self, queue: QueueId) -> Share {
        Share::dominant(
            &self.queue_allocated[queue.index()],
            &self.deserved[queue.index()],
        )
    }

    /// Bound tasks on a node when the session opened, in name order.
    pub fn node_tasks(&self, node: NodeId) -> &[TaskId] {
        let (i, start) = (node.index(), &self.node_task_start);
        &self.node_tasks[start[i] as usize..start[i + 1] as usize]
    }

    /// Nodes where the queue's jobs had bound pods when the session opened, in name order.
    pub fn queue_nodes(&self, queue: QueueId) -> &[NodeId] {
        &self.queue_nodes[queue.index()]
    }

    /// Jobs whose PodGroup was Pending in the snapshot, by id.
    pub fn unadmitted(&self) -> &[JobId] {
        &self.unadmitted
    }

    /// Jobs that had pending members when the session opened, by id: a superset of the jobs
    /// with pending members at any later point of the cycle.
    pub fn with_pending(&self) -> &[JobId] {
        &self.with_pending
    }

    /// Whether this cycle placed (or nominated) members of the job: such a job is being
    /// started, and is no victim for anyone.
    /// `Some(ms left)` while the job backs off after its schedule timeout (no member was
    /// bound when the session opened; see [`Framework::timed_out`]).
    pub fn timed_out(&self, job: JobId) -> Option<i64> {
        let snap = self.snapshot;
        let j = snap.job(job);
        j.schedule_timeout_ms?;
        let started = (j.tasks.iter()).any(|&t| matches!(snap.task(t).state, TaskState::Bound(_)));
        self.fw.timed_out(j, started, snap.now_ms)
    }

    pub fn placed_now(&self, job: JobId) -> bool {
        self.placed[job.index()] > 0
    }

    pub fn holding(&self, job: JobId) -> u32 {
        self.holding[job.index()]
    }

    /// The lowest priority of the queue's jobs with members bound before this cycle (`None`:
    /// none): a preemptor of that priority or below finds no lower-priority victim there.
    pub fn lowest_bound_priority(&self, queue: QueueId) -> Option<i32> {
        self.lowest_bound_priority[queue.index()]
    }

    pub fn counts(&self, job: JobId) -> MemberCounts {
        let mut c = MemberCounts::default();
        let minimums = &self.snapshot.job(job).min_task_member;
        for &t in &self.snapshot.job(job).tasks {
            let holds = match self.status[t.index()] {
                TaskStatus::Pending | TaskStatus::Evicted(_) => {
                    c.pending += 1;
                    false
                }
                TaskStatus::Bound(_) | TaskStatus::Allocated { .. } => {
                    c.running += 1;
                    true
                }
                TaskStatus::Pipelined { .. } => {
                    c.pipelined += 1;
                    true
                }
                TaskStatus::Succeeded => {
                    c.succeeded += 1;
                    true
                }
                TaskStatus::Failed => {
                    c.failed += 1;
                    false
                }
            };
            // Only roles with a minimum are counted: nothing else reads them.
            if holds && !minimums.is_empty() {
                let role = self.snapshot.task(t).role();
                if !minimums.contains_key(role) {
                    continue;
                }
                match c.by_role.get_mut(role) {
                    Some(n) => *n += 1,
                    None => {
                        c.by_role.insert(role.to_string(), 1);
                    }
                }
            }
        }
        c
    }

    /// Whether the job still meets every gang minimum ([`Job::meets_minimums`]) without the
    /// members in `gone` (each holding a node now), counting members that hold a node (bound,
    /// placed or pipelined) or succeeded. Without role minimums this is a count, not a scan.
    pub fn meets_minimums(&self, job: JobId, gone: &[TaskId]) -> bool {
        let j = self.snapshot.job(job);
        let succeeded = self.start_counts[job.index()].succeeded;
        let members = (self.holding[job.index()] + succeeded).saturating_sub(gone.len() as u32);
        if j.min_task_member.is_empty() {
            return members >= j.min_member;
        }
        let counts = |t: &TaskId| {
            !gone.contains(t)
                && matches!(
                    self.status[t.index()],
                    TaskStatus::Bound(_)
                        | TaskStatus::Allocated { .. }
                        | TaskStatus::Pipelined { .. }
                        | TaskStatus::Succeeded
                )
        };
        j.meets_minimums(members, |role| {
            (j.tasks.iter())
                .filter(|t| counts(t) && self.snapshot.task(**t).role() == role)
                .count() as u32
        })
    }

    // ----- job phase, conditions, reservations -----

    /// Moves a job into the schedulable set, reserving its minResources until it holds members.
    pub fn admit(&mut self, job: JobId) {
        if self.phase[job.index()] != JobPhase::Pending {
            return;
        }
        self.phase[job.index()] = JobPhase::Inqueue;
        self.reserve_admission(job, true);
    }

    /// Adds (or gives back) an admitted job's minResources to the admission reservations.
    fn reserve_admission(&mut self, job: JobId, add: bool) {
        let snap = self.snapshot;
        if self.phase[job.index()] != JobPhase::Inqueue {
            return;
        }
        let Some(min) = &snap.job(job).min_resources else {
            return;
        };
        for q in ancestors(snap, snap.job(job).queue) {
            if add {
                self.queue_reserved[q.index()].add(min);
            } else {
                self.queue_reserved[q.index()].take_back(min);
            }
        }
        if add {
            self.inqueue_reserved.add(min);
        } else {
            self.inqueue_reserved.take_back(min);
        }
    }

    pub fn add_condition(&mut self, job: JobId, condition: Condition) {
        let list = &mut self.conditions[job.index()];
        if !list.contains(&condition) {
            list.push(condition);
        }
    }

    /// Gives the job back the capacity held for its nominated pods, so that they (or other
    /// members) can be placed; other jobs never see it.
    pub fn release_holds(&mut self, job: JobId) {
        let Some(holds) = self.holds.remove(&job) else {
            return;
        };
        for &(task, node) in &holds {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.used[node.index()].take_back(request);
            self.touched.push(node);
            self.cluster_used.take_back(request);
            self.index_insert(node);
        }
        self.released += 1;
        self.released_holds.insert(job, holds);
    }

    /// After a job's turn: its nominated pods still pending hold their nodes again, for the
    /// rest of the cycle.
    pub fn restore_holds(&mut self, job: JobId) {
        let Some(holds) = self.released_holds.remove(&job) else {
            return;
        };
        let keep: Vec<(TaskId, NodeId)> = holds
            .into_iter()
            .filter(|&(t, _)| self.status[t.index()] == TaskStatus::Pending)
            .collect();
        for &(task, node) in &keep {
            self.index_remove(node);
            let request = &self.snapshot.task(task).request;
            self.used[node.index()].add(request);
            self.touched.push(node);
            self.cluster_used.add(request);
            self.index_insert(node);
        }
        if !keep.is_empty() {
            self.holds.insert(job, keep);
        }
    }

    pub fn reserved_for(&self, node: NodeId) -> Option<JobId> {
        self.reserved_for[node.index()]
    }

    /// Keeps a node for a starving job: other work may use it only with `ReservedNodes::Use`.
    pub fn reserve_node(&mut self, node: NodeId, job: JobId) {
        self.reserved_for[node.index()] = Some(job);
        self.any_reserved = true;
        // Cached failures assumed no reservations; they are stale now.
        self.released += 1;
    }

    pub fn has_reservations(&self) -> bool {
        self.any_reserved
    }

    /// Records that a member of a reserving job waits for this node; reported as a nomination
    /// unless the member is placed in the same cycle.
    pub fn nominate(&mut self, task: TaskId, node: NodeId) {
        debug_assert!(
            self.snapshot.task(task).hold.is_none(),
            "a held task is nominated"
        );
        self.reservations.push((task, node));
    }

    /// Forgets the nominations of a job's reservation.
    pub fn drop_nominations(&mut self, job: JobId) {
        let snap = self.snapshot;
        self.reservations.retain(|&(t, _)| snap.task(t).job != job);
    }

    // ----- node search -----

    /// Holds capacity for nominated pending pods (see `holds`), noting their nodes.
    fn hold_nominated(&mut self, nodes: &mut Vec<NodeId>) {
        for t in &self.snapshot.tasks {
            let (TaskState::Pending, Some(node)) = (t.state, t.nominated) else {
                continue;
            };
            // A gang backing off after its schedule timeout holds nothing.
            if self.timed_out(t.job).is_some() {
                continue;
            }
            self.used[node.index()].add(&t.request);
            self.cluster_used.add(&t.request);
            self.moved.push(node);
            self.holds.entry(t.job).or_default().push((t.id, node));
            nodes.push(node);
        }
    }

    /// Indexes every node at once: one sort and bulk-built sets.
    fn index_all(&mut self) {
        let snapshot = self.snapshot;
        // Capacity classes: nodes with equal allocatable, numbered in node order.
        let mut classes: Map<&Resources, u32> = Map::default();
        let mut last: Option<(&Resources, u32)> = None;
        self.index.class = (snapshot.nodes.iter())
            .map(|node| {
                // Neighbours by name are often alike: compare before hashing.
                let c = match last {
                    Some((a, c)) if *a == node.allocatable => c,
                    _ => {
                        let next = classes.len() as u32;
                        *classes.entry(&node.allocatable).or_insert(next)
                    }
                };
                last = Some((&node.allocatable, c));
                c
            })
            .collect();
        let mut entries: Vec<((u32, u32), (u64, NodeId))> = (snapshot.nodes.iter())
            .map(|node| {
                let i = node.id.index();
                let free_gpus = self.bucket_devices(node.id);
                let key = (self.fw.node_order()).key(&node.allocatable, &self.used[i]);
                ((self.index.class[i], free_gpus), (key, node.id))
            })
            .collect();
        self.index.key = entries.iter().map(|&((_, f), (k, _))| (f, k)).collect();
        entries.sort_unstable();
        let mut rest = entries.as_slice();
        while let Some(&(bucket, _)) = rest.first() {
            let len = rest.partition_point(|e| e.0 == bucket);
            let (run, tail) = rest.split_at(len);
            (self.index.buckets).insert(bucket, run.iter().map(|e| e.1).collect());
            rest = tail;
        }
    }

    fn index_insert(&mut self, node: NodeId) {
        let i = node.index();
        let snap_node = &self.snapshot.nodes[i];
        let free_gpus = self.bucket_devices(node);
        let key = (self.fw.node_order()).key(&snap_node.allocatable, &self.used[i]);
        self.index.key[i] = (free_gpus, key);
        let bucket = (self.index.class[i], free_gpus);
        self.index
            .buckets
            .entry(bucket)
            .or_default()
            .insert((key, node));
        self.domain_index.insert(&self.pods, bucket, (key, node));
    }

    fn index_remove(&mut self, node: NodeId) {
        let i = node.index();
        let (free_gpus, key) = self.index.key[i];
        let bucket = (self.index.class[i], free_gpus);
        if let Some(set) = self.index.buckets.get_mut(&bucket) {
            set.remove(&(key, node));
            if set.is_empty() {
                self.index.buckets.remove(&bucket);
            }
        }
        self.domain_index.remove(&self.pods, bucket, (key, node));
    }

    // ----- transactions -----

    pub fn statement(&self) -> Statement {
        Statement::default()
    }

    /// Moves a task's request on or off a node and its queues.
    fn charge(&mut self, task: TaskId, node: NodeId, gpus: u64, add: bool) {
        let snap = self.snapshot;
        let t = snap.task(task);
        self.charges += 1;
        self.index_remove(node);
        let i = node.index();
        self.moved.push(node);
        self.touched.push(node);
        let free_before = self.free_gpus(node) as i64;
        if add {
            self.used[i].add(&t.request);
            self.cluster_used.add(&t.request);
            self.holding[t.job.index()] += 1;
        } else {
            self.used[i].take_back(&t.request);
            self.cluster_used.take_back(&t.request);
            self.holding[t.job.index()] -= 1;
        }
        self.charge_devices(task, node, gpus, add);
        let freed = self.free_gpus(node) as i64 - free_before;
        if let Some(topo) = &mut self.topo {
            topo.change(node, freed);
        }
        self.pods.charge(snap, task, node, add);
        self.index_insert(node);
        for q in ancestors(snap, snap.job(t.job).queue) {
            if add {
                self.queue_allocated[q.index()].add(&t.request);
            } else {
                self.queue_allocated[q.index()].take_back(&t.request);
            }
        }
        // An admitted job's minResources stay reserved until it holds its first member.
        let holding = self.holding[t.job.index()];
        if add && holding == 1 {
            self.reserve_admission(t.job, false);
        } else if !add && holding == 0 {
            self.reserve_admission(t.job, true);
        }
    }

    /// Places a pending task on a node inside the statement.
    pub fn allocate(&mut self, stmt: &mut Statement, task: TaskId, node: NodeId) {
        self.place(stmt, task, node, false, None);
    }

    /// Places a pending task with its GPUs inside one NVLink island of the node.
    pub fn allocate_in_island(
        &mut self,
        stmt: &mut Statement,
        task: TaskId,
        node: NodeId,
        island: u32,
    ) {
        self.place(stmt, task, node, false, Some(island));
    }

    /// Places a pending task on capacity that the statement's evictions free: it is nominated
    /// to the node and bound in a later cycle.
    pub fn pipeline(&mut self, stmt: &mut Statement, task: TaskId, node: NodeId) {
        self.place(stmt, task, node, true, None);
    }

    fn place(
        &mut self,
        stmt: &mut Statement,
        task: TaskId,
        node: NodeId,
        pipelined: bool,
        island: Option<u32>,
    ) {
        debug_assert_eq!(self.status[task.index()], TaskStatus::Pending);
        debug_assert!(
            self.snapshot.task(task).hold.is_none(),
            "a held task is placed"
        );
        let gpus = self.pick_devices(task, node, island);
        self.take_slices(task, node);
        self.take_claims(task, node);
        self.charge(task, node, gpus, true);
        self.placed[self.snapshot.task(task).job.index()] += 1;
        self.status[task.index()] = if pipelined {
            TaskStatus::Pipelined { node, gpus }
        } else {
            TaskStatus::Allocated { node, gpus }
        };
        stmt.ops.push(Op::Allocate {
            task,
            node,
            gpus,
            pipelined,
        });
    }

    /// Evicts a bound task inside the statement; its capacity is free for the rest of the cycle.
    pub fn evict(&mut self, stmt: &mut Statement, task: TaskId, reason: &str, for_job: JobId) {
        let TaskStatus::Bound(node) = self.status[task.index()] else {
            return;
        };
        let gpus = self.snapshot.task(task).gpus;
        self.charge(task, node, gpus, false);
        self.status[task.index()] = TaskStatus::Evicted(node);
        self.released += 1;
        stmt.ops.push(Op::Evict {
            task,
            node,
            gpus,
            reason: reason.to_string(),
            for_job,
        });
    }

    pub fn commit(&mut self, stmt: Statement) {
        self.committed.extend(stmt.ops);
    }

    /// Undoes every operation of the statement, newest first.
    pub fn discard(&mut self, stmt: Statement) {
        for op in stmt.ops.into_iter().rev() {
            match op {
                Op::Allocate {
                    task, node, gpus, ..
                } => {
                    self.charge(task, node, gpus, false);
                    self.placed_slices.remove(&task);
                    self.placed_takes.remove(&task);
                    self.give_back_claims(task);
                    self.placed[self.snapshot.task(task).job.index()] -= 1;
                    self.status[task.index()] = TaskStatus::Pending;
                    self.released += 1;
                }
                Op::Evict {
                    task, node, gpus, ..
                } => {
                    self.charge(task, node, gpus, true);
                    self.status[task.index()] = TaskStatus::Bound(node);
                }
            }
        }
    }
}

//! A session is the mutable working copy of a snapshot for one cycle; a [`Statement`] is a
//! transaction over it. A gang is placed inside one statement and committed only when it is
//! ready, or discarded as a whole: nothing half-placed leaks into the plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::framework::{Framework, Reason};
use crate::model::*;
use crate::plan::{Binding, Condition, Eviction, Plan, PodGroupStatus};
use crate::resources::{Resources, GPU};
use crate::snapshot::Snapshot;

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
    /// Evicted by this cycle; its capacity is free.
    Evicted(NodeId),
    Succeeded,
    Failed,
}

impl TaskStatus {
    /// Holds capacity on a node (bound before or placed now).
    pub fn node(&self) -> Option<NodeId> {
        match *self {
            TaskStatus::Bound(n) | TaskStatus::Allocated { node: n, .. } => Some(n),
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
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
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
    /// Per role: running + succeeded.
    pub by_role: BTreeMap<String, u32>,
}

/// Why no node could take a pod of some shape: the kube-scheduler style message.
#[derive(Clone, Debug)]
pub struct FitFailure {
    pub message: String,
}

/// Feasibility of a set of placement rules over all nodes, computed once per session.
struct Statics {
    ok: Vec<bool>,
    /// Nodes that pass, when they are few enough that scanning them beats the buckets.
    few: Option<Vec<NodeId>>,
}

/// Nodes bucketed by (capacity class, free whole GPUs), each bucket sorted by node-order key.
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
    used: Vec<Resources>,
    gpus_used: Vec<u64>,
    status: Vec<TaskStatus>,
    phase: Vec<JobPhase>,
    /// Per job: members holding capacity (bound before the cycle or placed by it).
    holding: Vec<u32>,
    conditions: Vec<Vec<Condition>>,
    queue_allocated: Vec<Resources>,
    /// minResources of admitted jobs that hold no member yet (reserved by admission).
    inqueue_reserved: Resources,
    cluster_allocatable: Resources,
    index: FreeIndex,
    statics: HashMap<RulesId, Statics>,
    /// Bumped whenever capacity is given back; a shape that failed since the last bump fails again.
    released: u64,
    failures: HashMap<ShapeId, (u64, FitFailure)>,
    committed: Vec<Op>,
}

impl<'a> Session<'a> {
    pub fn new(snapshot: &'a Snapshot, fw: &'a Framework) -> Self {
        let n = snapshot.nodes.len();
        let mut classes: HashMap<&Resources, u32> = HashMap::new();
        let class: Vec<u32> = snapshot
            .nodes
            .iter()
            .map(|node| {
                let next = classes.len() as u32;
                *classes.entry(&node.allocatable).or_insert(next)
            })
            .collect();
        let mut cluster_allocatable = Resources::zero(snapshot.resources.len());
        for node in &snapshot.nodes {
            cluster_allocatable.add(&node.allocatable);
        }
        let status: Vec<TaskStatus> = snapshot
            .tasks
            .iter()
            .map(|t| match t.state {
                TaskState::Pending => TaskStatus::Pending,
                TaskState::Bound(n) => TaskStatus::Bound(n),
                TaskState::Succeeded => TaskStatus::Succeeded,
                TaskState::Failed => TaskStatus::Failed,
            })
            .collect();
        let mut queue_allocated =
            vec![Resources::zero(snapshot.resources.len()); snapshot.queues.len()];
        for t in &snapshot.tasks {
            if let TaskState::Bound(_) = t.state {
                queue_allocated[snapshot.job(t.job).queue.index()].add(&t.request);
            }
        }
        let mut holding = vec![0u32; snapshot.jobs.len()];
        for t in &snapshot.tasks {
            if let TaskState::Bound(_) = t.state {
                holding[t.job.index()] += 1;
            }
        }
        let mut session = Session {
            snapshot,
            fw,
            used: snapshot.node_used.clone(),
            gpus_used: snapshot.node_gpus_used.clone(),
            status,
            phase: snapshot.jobs.iter().map(|j| j.phase).collect(),
            holding,
            conditions: vec![Vec::new(); snapshot.jobs.len()],
            queue_allocated,
            inqueue_reserved: Resources::zero(snapshot.resources.len()),
            cluster_allocatable,
            index: FreeIndex {
                class,
                key: vec![(0, 0); n],
                buckets: BTreeMap::new(),
            },
            statics: HashMap::new(),
            released: 0,
            failures: HashMap::new(),
            committed: Vec::new(),
        };
        for i in 0..n {
            session.index_insert(NodeId(i as u32));
        }
        for job in &snapshot.jobs {
            if job.phase == JobPhase::Inqueue && session.holding[job.id.index()] == 0 {
                if let Some(min) = &job.min_resources {
                    session.inqueue_reserved.add(min);
                }
            }
        }
        session
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

    pub fn cluster_allocatable(&self) -> &Resources {
        &self.cluster_allocatable
    }

    /// Everything in use now, across all nodes.
    pub fn cluster_used(&self) -> Resources {
        let mut total = Resources::zero(self.snapshot.resources.len());
        for u in &self.used {
            total.add(u);
        }
        total
    }

    pub fn inqueue_reserved(&self) -> &Resources {
        &self.inqueue_reserved
    }

    /// What the queue's jobs hold (bound before the cycle or placed by it).
    pub fn queue_allocated(&self, queue: QueueId) -> &Resources {
        &self.queue_allocated[queue.index()]
    }

    pub fn counts(&self, job: JobId) -> MemberCounts {
        let mut c = MemberCounts::default();
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
                TaskStatus::Succeeded => {
                    c.succeeded += 1;
                    true
                }
                TaskStatus::Failed => {
                    c.failed += 1;
                    false
                }
            };
            if holds {
                if let Some(role) = &self.snapshot.task(t).role {
                    *c.by_role.entry(role.clone()).or_default() += 1;
                }
            }
        }
        c
    }

    // ----- job phase and conditions -----

    /// Moves a job into the schedulable set, reserving its minResources until it holds members.
    pub fn admit(&mut self, job: JobId) {
        if self.phase[job.index()] != JobPhase::Pending {
            return;
        }
        self.phase[job.index()] = JobPhase::Inqueue;
        if let Some(min) = &self.snapshot.job(job).min_resources {
            self.inqueue_reserved.add(min);
        }
    }

    pub fn add_condition(&mut self, job: JobId, condition: Condition) {
        let list = &mut self.conditions[job.index()];
        if !list.contains(&condition) {
            list.push(condition);
        }
    }

    // ----- node search -----

    fn index_insert(&mut self, node: NodeId) {
        let i = node.index();
        let snap_node = &self.snapshot.nodes[i];
        let free_gpus = snap_node.gpus.len() as u32
            - (self.gpus_used[i].count_ones()).min(snap_node.gpus.len() as u32);
        let key = self
            .fw
            .node_order
            .key(&snap_node.allocatable, &self.used[i]);
        self.index.key[i] = (free_gpus, key);
        self.index
            .buckets
            .entry((self.index.class[i], free_gpus))
            .or_default()
            .insert((key, node));
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
    }

    fn ensure_statics(&mut self, rules: RulesId) {
        if self.statics.contains_key(&rules) {
            return;
        }
        let r = &self.snapshot.rules[rules.0 as usize];
        let ok: Vec<bool> = self
            .snapshot
            .nodes
            .iter()
            .map(|n| self.fw.filter_node(r, n).is_ok())
            .collect();
        let passing = ok.iter().filter(|&&b| b).count();
        // Scanning a short list of feasible nodes beats walking buckets full of infeasible ones.
        let few = (passing * 8 < ok.len()).then(|| {
            ok.iter()
                .enumerate()
                .filter(|(_, &b)| b)
                .map(|(i, _)| NodeId(i as u32))
                .collect()
        });
        self.statics.insert(rules, Statics { ok, few });
    }

    fn fits(&self, node: NodeId, request: &Resources) -> bool {
        let alloc = &self.snapshot.nodes[node.index()].allocatable;
        let used = &self.used[node.index()];
        request
            .iter()
            .all(|(id, v)| used.get(id) + v <= alloc.get(id))
    }

    fn key_with(&self, node: NodeId, request: &Resources) -> u64 {
        let mut after = self.used[node.index()].clone();
        after.add(request);
        self.fw
            .node_order
            .key(&self.snapshot.nodes[node.index()].allocatable, &after)
    }

    /// The best node for a task, or why there is none. Shapes that failed since capacity was
    /// last given back fail at once, so a long backlog of identical pods costs one search.
    pub fn find_node(&mut self, task: TaskId) -> Result<NodeId, FitFailure> {
        let snap = self.snapshot;
        let t = snap.task(task);
        let (shape, rules) = (t.shape, t.rules);
        if let Some((epoch, f)) = self.failures.get(&shape) {
            if *epoch == self.released {
                return Err(f.clone());
            }
        }
        self.ensure_statics(rules);
        let request = &snap.shapes[shape.0 as usize].1;
        let statics = &self.statics[&rules];
        let mut best: Option<(u64, NodeId)> = None;
        let consider = |node: NodeId, best: &mut Option<(u64, NodeId)>| {
            let cand = (self.key_with(node, request), node);
            if best.is_none_or(|b| cand < b) {
                *best = Some(cand);
            }
        };
        if let Some(few) = &statics.few {
            for &node in few {
                if self.fits(node, request) {
                    consider(node, &mut best);
                }
            }
        } else {
            let want_gpus = request.get(GPU).max(0) as u32;
            for (&(_, free_gpus), set) in &self.index.buckets {
                if free_gpus < want_gpus {
                    continue;
                }
                if let Some(&(_, node)) = set
                    .iter()
                    .find(|&&(_, n)| statics.ok[n.index()] && self.fits(n, request))
                {
                    consider(node, &mut best);
                }
            }
        }
        match best {
            Some((_, node)) => Ok(node),
            None => {
                let failure = self.explain(rules, request);
                self.failures
                    .insert(shape, (self.released, failure.clone()));
                Err(failure)
            }
        }
    }

    /// The aggregated reason no node fits: "0/3 nodes are available: 2 insufficient nvidia.com/gpu,
    /// 1 didn't match node selector." Most frequent reasons first.
    fn explain(&self, rules: RulesId, request: &Resources) -> FitFailure {
        let r = &self.snapshot.rules[rules.0 as usize];
        let mut counts: BTreeMap<Reason, usize> = BTreeMap::new();
        for node in &self.snapshot.nodes {
            match self.fw.filter_node(r, node) {
                Err(reason) => *counts.entry(reason).or_default() += 1,
                Ok(()) => {
                    let alloc = &node.allocatable;
                    let used = &self.used[node.id.index()];
                    for (id, v) in request.iter() {
                        if used.get(id) + v > alloc.get(id) {
                            let name = self.snapshot.resources.name(id);
                            *counts
                                .entry(format!("insufficient {name}").into())
                                .or_default() += 1;
                        }
                    }
                }
            }
        }
        let mut list: Vec<(Reason, usize)> = counts.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let parts: Vec<String> = list.iter().map(|(r, c)| format!("{c} {r}")).collect();
        let total = self.snapshot.nodes.len();
        let message = if parts.is_empty() {
            format!("0/{total} nodes are available.")
        } else {
            format!("0/{total} nodes are available: {}.", parts.join(", "))
        };
        FitFailure { message }
    }

    /// Whole GPUs for a task on a node: inside one NVLink island when one can hold them all
    /// (the fullest such island, so whole islands stay free), else the lowest free indices.
    fn pick_gpus(&self, node: NodeId, count: u32) -> u64 {
        if count == 0 {
            return 0;
        }
        let gpus = &self.snapshot.nodes[node.index()].gpus;
        let used = self.gpus_used[node.index()];
        let mut islands: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (pos, g) in gpus.iter().enumerate() {
            if used & (1u64 << pos) == 0 {
                islands.entry(g.nvlink_domain).or_default().push(pos as u32);
            }
        }
        let fitting = islands
            .values()
            .filter(|free| free.len() as u32 >= count)
            .min_by_key(|free| free.len());
        let chosen: Vec<u32> = match fitting {
            Some(free) => free.iter().copied().take(count as usize).collect(),
            None => (0..gpus.len() as u32)
                .filter(|&p| used & (1u64 << p) == 0)
                .take(count as usize)
                .collect(),
        };
        chosen.iter().fold(0, |m, &p| m | (1u64 << p))
    }

    // ----- transactions -----

    pub fn statement(&self) -> Statement {
        Statement::default()
    }

    fn apply_usage(&mut self, node: NodeId, request: &Resources, gpus: u64, add: bool) {
        self.index_remove(node);
        let i = node.index();
        if add {
            self.used[i].add(request);
            self.gpus_used[i] |= gpus;
        } else {
            self.used[i].sub(request);
            self.gpus_used[i] &= !gpus;
        }
        self.index_insert(node);
    }

    /// Places a pending task on a node inside the statement.
    pub fn allocate(&mut self, stmt: &mut Statement, task: TaskId, node: NodeId) {
        let t = self.snapshot.task(task);
        debug_assert_eq!(self.status[task.index()], TaskStatus::Pending);
        let gpus = self.pick_gpus(node, t.request.get(GPU).max(0) as u32);
        let (job, request) = (t.job, &t.request);
        self.apply_usage(node, request, gpus, true);
        self.holding[job.index()] += 1;
        let queue = self.snapshot.job(job).queue;
        self.queue_allocated[queue.index()].add(request);
        self.status[task.index()] = TaskStatus::Allocated { node, gpus };
        if self.holding[job.index()] == 1 {
            self.release_reservation(job, true);
        }
        stmt.ops.push(Op::Allocate { task, node, gpus });
    }

    /// Evicts a bound task inside the statement; its capacity is free for the rest of the cycle.
    pub fn evict(&mut self, stmt: &mut Statement, task: TaskId, reason: &str, for_job: JobId) {
        let t = self.snapshot.task(task);
        let TaskStatus::Bound(node) = self.status[task.index()] else {
            return;
        };
        let gpus = t.gpu_ids.iter().fold(0u64, |m, &g| m | (1u64 << g));
        let (job, request) = (t.job, &t.request);
        self.apply_usage(node, request, gpus, false);
        self.holding[job.index()] -= 1;
        let queue = self.snapshot.job(job).queue;
        self.queue_allocated[queue.index()].sub(request);
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

    /// An admitted job's minResources stay reserved until it holds its first member.
    fn release_reservation(&mut self, job: JobId, release: bool) {
        let j = self.snapshot.job(job);
        if self.phase[job.index()] != JobPhase::Inqueue {
            return;
        }
        if let Some(min) = &j.min_resources {
            if release {
                self.inqueue_reserved.sub(min);
            } else {
                self.inqueue_reserved.add(min);
            }
        }
    }

    pub fn commit(&mut self, stmt: Statement) {
        self.committed.extend(stmt.ops);
    }

    /// Undoes every operation of the statement, newest first.
    pub fn discard(&mut self, stmt: Statement) {
        for op in stmt.ops.into_iter().rev() {
            match op {
                Op::Allocate { task, node, gpus } => {
                    let t = self.snapshot.task(task);
                    let job = t.job;
                    self.apply_usage(node, &t.request, gpus, false);
                    let queue = self.snapshot.job(job).queue;
                    self.queue_allocated[queue.index()].sub(&t.request);
                    self.status[task.index()] = TaskStatus::Pending;
                    self.holding[job.index()] -= 1;
                    if self.holding[job.index()] == 0 {
                        self.release_reservation(job, false);
                    }
                    self.released += 1;
                }
                Op::Evict {
                    task, node, gpus, ..
                } => {
                    let t = self.snapshot.task(task);
                    self.apply_usage(node, &t.request, gpus, true);
                    self.holding[t.job.index()] += 1;
                    let queue = self.snapshot.job(t.job).queue;
                    self.queue_allocated[queue.index()].add(&t.request);
                    self.status[task.index()] = TaskStatus::Bound(node);
                }
            }
        }
    }

    // ----- the result -----

    /// The plan: committed bindings and evictions in the order they were decided, and every
    /// job's status after the cycle, sorted by name.
    pub fn into_plan(self) -> Plan {
        let snap = self.snapshot;
        let mut plan = Plan::default();
        for op in &self.committed {
            match op {
                Op::Allocate { task, node, gpus } => {
                    let n = snap.node(*node);
                    plan.bindings.push(Binding {
                        pod: snap.task(*task).name.clone(),
                        node: n.name.clone(),
                        gpus: (0..n.gpus.len())
                            .filter(|p| gpus & (1u64 << p) != 0)
                            .map(|p| n.gpus[p].index)
                            .collect(),
                    });
                }
                Op::Evict {
                    task,
                    reason,
                    for_job,
                    ..
                } => plan.evictions.push(Eviction {
                    pod: snap.task(*task).name.clone(),
                    reason: reason.clone(),
                    for_group: snap.job(*for_job).name.clone(),
                }),
            }
        }
        for job in &snap.jobs {
            let c = self.counts(job.id);
            let phase = if c.running + c.succeeded >= job.min_member {
                if c.running == 0 && c.pending == 0 {
                    JobPhase::Completed
                } else {
                    JobPhase::Running
                }
            } else if c.running > 0 {
                JobPhase::Unknown
            } else if self.phase[job.id.index()] == JobPhase::Pending {
                JobPhase::Pending
            } else {
                JobPhase::Inqueue
            };
            let conditions = if c.pending > 0 {
                self.conditions[job.id.index()].clone()
            } else {
                Vec::new()
            };
            plan.pod_groups.push(PodGroupStatus {
                name: job.name.clone(),
                phase,
                conditions,
                running: c.running,
                succeeded: c.succeeded,
                failed: c.failed,
                pending: c.pending,
                min_member: job.min_member,
            });
        }
        plan
    }
}

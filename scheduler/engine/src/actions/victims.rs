//! The victim search of `reclaim` and `preempt`: for one pending task, the node and the set of
//! bound pods whose eviction lets the task start there.
//!
//! On each candidate node the pods that free something the task lacks are ordered (lowest pod
//! priority, then job priority, then youngest; for reclaim, the lowest queue priority first) and
//! taken greedily until the task fits. One greedy pass can walk into a dead end: a cheap first
//! victim can leave the gang that must go impossible to take. So when the first pass fails or
//! takes more than one victim, up to [`FIRST_VICTIM_ALTERNATIVES`] more passes start from each of
//! the next candidates instead (one victim ends the search, and a start that would only repeat
//! the best set is skipped); the cheapest set found wins (fewest victims, then the lowest
//! highest priority among them, then the least work lost). Units a set does not need (the task
//! fits without them) are dropped.

use std::cmp::Reverse;

use super::evict::Mode;
use crate::devices::DeviceUse;
use crate::model::{Job, JobId, NodeId, QueueId, TaskId};
use crate::resources::{ResourceId, Resources};
use crate::session::{ReservedNodes, Session, TaskStatus};
use crate::snapshot::{ancestors, Snapshot};
use crate::snapshot::{ask_on, charge_shares};

/// How many other first victims a node's search tries after the plain greedy pass: the bound
/// that keeps the search linear in the pods of a node.
pub const FIRST_VICTIM_ALTERNATIVES: usize = 3;

/// Fewest victims, then the lowest highest (pod, job) priority among them, then the youngest
/// oldest victim (the least work lost).
pub(super) type Cost = (usize, (i32, i32), Reverse<i64>);

/// What the victims must achieve for one task.
pub struct Goal<'r> {
    pub task: TaskId,
    pub request: &'r Resources,
    /// Preempt in a queue at its capability: the victims (all of the preemptor's queue) must
    /// also give back enough for the task to be admitted.
    pub needs_admission: bool,
}

/// Where and whom to evict for one task.
pub struct Victims {
    pub node: NodeId,
    /// Whole gangs where a single eviction would break one.
    pub tasks: Vec<TaskId>,
    /// The resources the task lacked on the node: those the eviction is for.
    pub short: Vec<ResourceId>,
}

/// The node needing the cheapest victims for the goal's task, and the victims. Only nodes
/// hosting pods of the victim queues are searched, not the whole cluster.
pub fn best_victims(
    session: &mut Session,
    job: &Job,
    goal: &Goal,
    mode: Mode,
    within: Option<&[NodeId]>,
) -> Option<Victims> {
    let snap = session.snapshot;
    let queues = victim_queues(session, job, goal.request, mode);
    let mut nodes: Vec<NodeId> = queues
        .iter()
        .flat_map(|&q| session.queue_nodes(q).iter().copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    if let Some(within) = within {
        nodes.retain(|n| within.binary_search(n).is_ok());
    }
    let mut best: Option<(Cost, Victims)> = None;
    for node in nodes {
        if !session.may_use(node, ReservedNodes::Avoid(job.id))
            || !session.passes_filters(goal.task, node)
            || !goal.request.fits_in(&snap.node(node).allocatable)
        {
            continue;
        }
        let Some((cost, victims)) = victims_on(session, job, node, goal, mode) else {
            continue;
        };
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, victims));
        }
    }
    best.map(|(_, victims)| victims)
}

/// Queues the job may take pods from: its own (preempt), or the reclaimable queues holding more
/// than they deserve in some resource the task asks for (reclaim).
fn victim_queues(session: &Session, job: &Job, request: &Resources, mode: Mode) -> Vec<QueueId> {
    let snap = session.snapshot;
    match mode {
        Mode::Preempt => vec![job.queue],
        Mode::Reclaim => snap
            .queues
            .iter()
            .filter(|q| q.id != job.queue && q.reclaimable && !session.queue_nodes(q.id).is_empty())
            .filter(|q| {
                let allocated = session.queue_allocated(q.id);
                let deserved = session.deserved(q.id);
                request
                    .iter()
                    .any(|(r, _)| allocated.get(r) > deserved.get(r))
            })
            .map(|q| q.id)
            .collect(),
    }
}

/// The cheapest victims on `node` for the goal and their cost; `None` when the node cannot be
/// freed enough (or needs no victims: `find_node` has turned it down, so it is skipped too).
fn victims_on(
    session: &Session,
    job: &Job,
    node: NodeId,
    goal: &Goal,
    mode: Mode,
) -> Option<(Cost, Victims)> {
    let snap = session.snapshot;
    let search = NodeSearch::new(session, job, node, goal, mode)?;
    let candidates = search.candidates();
    if candidates.is_empty() {
        return None;
    }
    let mut best: Option<(Cost, Vec<Vec<TaskId>>)> = None;
    for first in 0..=FIRST_VICTIM_ALTERNATIVES.min(candidates.len().saturating_sub(1)) {
        // One victim is as few as it gets.
        if first > 0 && best.as_ref().is_some_and(|(cost, _)| cost.0 <= 1) {
            break;
        }
        // A start already in the best set, that would go the same way again (alone, or
        // dragging the same whole gang), can only repeat that set.
        let start = candidates[first];
        let repeats = |units: &Vec<Vec<TaskId>>| {
            units.iter().any(|u| {
                u.contains(&start)
                    && (u.len() == 1 || !session.meets_minimums(snap.task(start).job, &[start]))
            })
        };
        if first > 0 && best.as_ref().is_some_and(|(_, units)| repeats(units)) {
            continue;
        }
        let Some(units) = search.greedy(&candidates, first) else {
            continue;
        };
        let units = search.drop_unneeded(units);
        let victims: Vec<TaskId> = units.iter().flatten().copied().collect();
        let cost = cost_of(snap, &victims);
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, units));
        }
    }
    best.map(|(cost, units)| {
        let victims = Victims {
            node,
            tasks: units.into_iter().flatten().collect(),
            short: search.short.clone(),
        };
        (cost, victims)
    })
}

pub(super) fn cost_of(snap: &Snapshot, victims: &[TaskId]) -> Cost {
    let priority = victims
        .iter()
        .map(|&v| (snap.task(v).priority, snap.job(snap.task(v).job).priority))
        .max()
        .unwrap_or((i32::MIN, i32::MIN));
    // Prefer the set whose oldest victim is youngest: the least work lost.
    let oldest = victims
        .iter()
        .map(|&v| snap.task(v).created_ms)
        .min()
        .unwrap_or(0);
    (victims.len(), priority, Reverse(oldest))
}

/// One node's search: what it has free and what the task lacks there.
struct NodeSearch<'s, 'a> {
    session: &'s Session<'a>,
    job: &'s Job,
    node: NodeId,
    goal: &'s Goal<'s>,
    mode: Mode,
    free: Resources,
    free_gpus: i64,
    /// The resources the node lacks for the task (for a capped preempt, every one it asks for).
    short: Vec<ResourceId>,
}

impl<'s, 'a> NodeSearch<'s, 'a> {
    fn new(
        session: &'s Session<'a>,
        job: &'s Job,
        node: NodeId,
        goal: &'s Goal<'s>,
        mode: Mode,
    ) -> Option<Self> {
        let free = session.free(node);
        let free_gpus = session.free_gpus(node) as i64;
        let mut search = NodeSearch {
            session,
            job,
            node,
            goal,
            mode,
            short: Vec::new(),
            free,
            free_gpus,
        };
        if search.fits(&[]) {
            return None;
        }
        search.short = if goal.needs_admission {
            goal.request.iter().map(|(r, _)| r).collect()
        } else {
            goal.request.shortfall(&search.free).collect()
        };
        // Nothing but its devices short (a share's memory or compute on a shared node): the
        // pods holding devices there may free them.
        if search.short.is_empty() {
            search.short.push(session.snapshot.node(node).device_kind);
        }
        // The reclaimer never ends above its own deserved share in a resource it is short of
        // here; the resources that are idle (CPU beside the GPUs it lacks) never block it.
        if mode == Mode::Reclaim {
            let allocated = session.queue_allocated(job.queue);
            let deserved = session.deserved(job.queue);
            let over = |&r: &ResourceId| {
                allocated.get(r).saturating_add(goal.request.get(r)) > deserved.get(r)
            };
            if search.short.iter().any(over) {
                return None;
            }
        }
        Some(search)
    }

    /// Whether the task fits once `units` are gone.
    fn fits(&self, units: &[Vec<TaskId>]) -> bool {
        let mut freed = self.nothing_freed();
        for &m in units.iter().flatten() {
            freed.take(self, m);
        }
        freed.fits(self)
    }

    fn nothing_freed(&self) -> Freed {
        Freed {
            free: self.free.clone(),
            free_gpus: self.free_gpus,
            devices: self.session.usage(self.node).to_vec(),
            given_back: Resources::zero(self.session.snapshot.resources.len()),
        }
    }

    /// Bound pods on the node that free something the task lacks, in victim order: lowest pod
    /// priority, then job priority (their queue's priority before both, for reclaim), then
    /// youngest, then id.
    fn candidates(&self) -> Vec<TaskId> {
        let (session, snap) = (self.session, self.session.snapshot);
        let mut candidates: Vec<TaskId> = session
            .node_tasks(self.node)
            .iter()
            .copied()
            .filter(|&v| {
                matches!(session.task_status(v), TaskStatus::Bound(_))
                    && self.short.iter().any(|&r| snap.task(v).request.get(r) > 0)
            })
            .collect();
        let reclaim = self.mode == Mode::Reclaim;
        candidates.sort_by_key(|&v| {
            let t = snap.task(v);
            let vjob = snap.job(t.job);
            let queue_priority = if reclaim {
                snap.queue(vjob.queue).priority
            } else {
                0
            };
            (
                queue_priority,
                t.priority,
                vjob.priority,
                Reverse(t.created_ms),
                v,
            )
        });
        candidates
    }

    /// Takes `candidates[first]`, then the others in order, until the task fits; each victim
    /// with the gang mates it drags along (a unit).
    fn greedy(&self, candidates: &[TaskId], first: usize) -> Option<Vec<Vec<TaskId>>> {
        let order = std::iter::once(candidates[first]).chain(
            candidates
                .iter()
                .copied()
                .enumerate()
                .filter(|&(i, _)| i != first)
                .map(|(_, v)| v),
        );
        let mut tally = Tally::default();
        let mut freed = self.nothing_freed();
        let mut units: Vec<Vec<TaskId>> = Vec::new();
        for v in order {
            if freed.fits(self) {
                break;
            }
            if tally.has(v) {
                continue;
            }
            let Some(unit) = unit_of(self.session, self.job, v, &self.short, self.mode, &tally)
            else {
                continue;
            };
            for &m in &unit {
                tally.take(self.session, m);
                freed.take(self, m);
            }
            units.push(unit);
        }
        (!units.is_empty() && freed.fits(self)).then_some(units)
    }

    /// Drops, first to last, each unit the task fits without. A unit shares its job with no
    /// other unit before it goes (dropping it would change what the later ones of that job
    /// must take), and what stays remains eligible: every check looks at what the victims
    /// before a victim take, and taking less before never turns a victim away.
    fn drop_unneeded(&self, mut units: Vec<Vec<TaskId>>) -> Vec<Vec<TaskId>> {
        let snap = self.session.snapshot;
        let job_of = |u: &Vec<TaskId>| snap.task(u[0]).job;
        let mut i = 0;
        while units.len() > 1 && i < units.len() {
            let job = job_of(&units[i]);
            let alone = units.iter().filter(|u| job_of(u) == job).count() == 1;
            let without: Vec<Vec<TaskId>> = (units.iter().enumerate())
                .filter(|&(k, _)| k != i)
                .map(|(_, u)| u.clone())
                .collect();
            if alone && self.fits(&without) {
                units = without;
            } else {
                i += 1;
            }
        }
        units
    }
}

/// What the node has free once some victims are gone, and what they give back to their queues.
struct Freed {
    free: Resources,
    free_gpus: i64,
    /// The shared devices' usage on a node that shares them (empty on one that does not).
    devices: Vec<DeviceUse>,
    given_back: Resources,
}

impl Freed {
    fn take(&mut self, search: &NodeSearch, task: TaskId) {
        let t = search.session.snapshot.task(task);
        if search.session.task_status(task).node() == Some(search.node) {
            self.free.add(&t.request);
            self.free_gpus += t.gpus.count_ones() as i64;
            let n = search.session.snapshot.node(search.node);
            if n.sharing.shares() {
                let ask = ask_on(n.sharing, t.share);
                charge_shares(&n.gpus, &mut self.devices, t.gpus, ask, false);
            }
        }
        self.given_back.add(&t.request);
    }

    /// Room on the node (whole GPUs counted per device) and, for a capped preempt, admission
    /// with what the victims give back to the queue.
    fn fits(&self, search: &NodeSearch) -> bool {
        let request = search.goal.request;
        let (session, node) = (search.session, search.node);
        let devices_fit = match session.snapshot.node(node).sharing.shares() {
            false => self.free_gpus >= session.snapshot.devices_asked(request) as i64,
            true => {
                let need = session.device_need(search.goal.task);
                let open = session.open_devices_with(&need, node, None, &self.devices);
                open.count_ones() >= session.snapshot.devices_asked(request)
            }
        };
        if !(request.fits_in(&self.free) && devices_fit) {
            return false;
        }
        if !search.goal.needs_admission {
            return true;
        }
        // Preempt victims are of the preemptor's queue: the task adds only the difference.
        let mut net = request.clone();
        net.sub(&self.given_back);
        let session = search.session;
        (session.framework())
            .admit_task(session, search.goal.task, &net)
            .is_ok()
    }
}

/// What the victims chosen so far on one node take: from their queues (each leaf and every
/// ancestor) and their gangs.
/// A handful of entries: plain vectors beat hashing here.
#[derive(Default)]
struct Tally {
    taken: Vec<TaskId>,
    from_queue: Vec<(QueueId, Resources)>,
}

impl Tally {
    fn take(&mut self, session: &Session, task: TaskId) {
        let snap = session.snapshot;
        let t = snap.task(task);
        self.taken.push(task);
        add_to_queues(snap, &mut self.from_queue, t.job, &t.request);
    }

    fn has(&self, task: TaskId) -> bool {
        self.taken.contains(&task)
    }

    fn taken_from_queue(&self, queue: QueueId) -> Option<&Resources> {
        self.from_queue
            .iter()
            .find(|(q, _)| *q == queue)
            .map(|(_, r)| r)
    }
}

/// The victim alone while its gang keeps every minimum without it (minMember and each role's
/// minTaskMember, see [`Session::meets_minimums`]), else its whole gang (every bound member not
/// yet taken); `None` when any of them may not be evicted.
fn unit_of(
    session: &Session,
    job: &Job,
    victim: TaskId,
    short: &[ResourceId],
    mode: Mode,
    tally: &Tally,
) -> Option<Vec<TaskId>> {
    let snap = session.snapshot;
    let vjob = snap.job(snap.task(victim).job);
    let mut gone: Vec<TaskId> = (tally.taken.iter().copied())
        .filter(|&t| snap.task(t).job == vjob.id)
        .collect();
    gone.push(victim);
    let unit: Vec<TaskId> = if session.meets_minimums(vjob.id, &gone) {
        vec![victim]
    } else {
        vjob.tasks
            .iter()
            .copied()
            .filter(|&m| matches!(session.task_status(m), TaskStatus::Bound(_)) && !tally.has(m))
            .collect()
    };
    // The unit goes as one eviction: judged as a whole against its queues.
    let mut request = Resources::zero(snap.resources.len());
    for &m in &unit {
        request.add(&snap.task(m).request);
    }
    (unit.iter().all(|&m| may_take(session, job, m, mode))
        && (mode == Mode::Preempt || queues_give(session, job, vjob.queue, &request, short, tally)))
    .then_some(unit)
}

/// Adds `request` to the entries of `job`'s queue and every ancestor of it.
fn add_to_queues(
    snap: &Snapshot,
    taken: &mut Vec<(QueueId, Resources)>,
    job: JobId,
    request: &Resources,
) {
    for q in ancestors(snap, snap.job(job).queue) {
        match taken.iter_mut().find(|(x, _)| *x == q) {
            Some((_, r)) => r.add(request),
            None => taken.push((q, request.clone())),
        }
    }
}

/// The queues a reclaim from `victim` to `preemptor` moves resources out of: the victim's leaf
/// and its ancestors below the lowest one the two share. Above that, the move is internal.
fn reclaimed_from(snap: &Snapshot, victim: QueueId, preemptor: QueueId) -> Vec<QueueId> {
    ancestors(snap, victim)
        .take_while(|&q| !ancestors(snap, preemptor).any(|p| p == q))
        .collect()
}

/// Whether `victim` may be evicted for `job` at all: never a pod annotated non-preemptable, nor
/// one of a gang this cycle is starting (evicting part of it would leave it broken); for preempt
/// a lower-priority job of the same queue, for reclaim a job of another queue.
fn may_take(session: &Session, job: &Job, victim: TaskId, mode: Mode) -> bool {
    let snap = session.snapshot;
    let v = snap.task(victim);
    if v.non_preemptable || v.job == job.id || session.placed_now(v.job) {
        return false;
    }
    let vjob = snap.job(v.job);
    match mode {
        Mode::Preempt => vjob.queue == job.queue && vjob.priority < job.priority,
        Mode::Reclaim => vjob.queue != job.queue,
    }
}

/// Whether the queues of a reclaim victim unit (of `queue`, asking `request` in all) may give it
/// up, after what the units chosen before it take (`tally`). `short` names the resources the
/// task lacks on the node. Judged at every level the reclaim crosses, from the victim's leaf up
/// to (not including) the ancestor shared with the preemptor: each queue must be reclaimable,
/// keep its guarantee, and be above its deserved share before this eviction in a resource the
/// task lacks and the unit frees. Pods are indivisible, so a queue over by less than one pod
/// still gives one up; the reclaimer, which never ends above its own share in those resources,
/// is then no victim for the queue it took from (no ping-pong).
fn queues_give(
    session: &Session,
    job: &Job,
    queue: QueueId,
    request: &Resources,
    short: &[ResourceId],
    tally: &Tally,
) -> bool {
    let snap = session.snapshot;
    reclaimed_from(snap, queue, job.queue).into_iter().all(|q| {
        let queue = snap.queue(q);
        let allocated = session.queue_allocated(q);
        let taken = tally.taken_from_queue(q);
        // What the queue holds of `r` before this unit goes.
        let held = |r: ResourceId| {
            allocated
                .get(r)
                .saturating_sub(taken.map_or(0, |t| t.get(r)))
        };
        let deserved = session.deserved(q);
        queue.reclaimable
            && (queue.guarantee.iter())
                .all(|(r, g)| request.get(r) == 0 || held(r).saturating_sub(request.get(r)) >= g)
            && (short.iter()).any(|&r| request.get(r) > 0 && held(r) > deserved.get(r))
    })
}

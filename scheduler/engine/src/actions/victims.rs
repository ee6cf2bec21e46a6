//! The victim search of `reclaim` and `preempt`: for one pending task, the node and the set of
//! bound pods whose eviction lets the task start there. Who may be taken, in what order, and
//! which set costs least is the framework's [`crate::framework::Victims`] policy.
//!
//! On each candidate node the pods that free something the task lacks are ordered by the policy
//! and taken greedily until the task fits, in two sweeps: first the victims whose gang keeps its
//! minimums without them (a shrink), then the others, each with its whole gang (a stop); for an
//! extra member (see [`Goal::extra`]) only the first sweep runs. One greedy pass can walk into a
//! dead end: a cheap first victim can leave the gang that must go impossible to take. So when
//! the first pass fails or takes more than one victim, up to [`FIRST_VICTIM_ALTERNATIVES`] more
//! passes start from each of the next candidates instead, taken whatever it drags (one victim
//! ends the search, and a start that would only repeat the best set is skipped); the cheapest
//! set found wins. Units a set does not need (the task fits without them) are dropped.
//!
//! The task's inter-pod rules are part of the fit: pods it conflicts with on the node are
//! victims too, and those that alone refuse it there go first (see [`pod_rules`]).

mod pod_rules;

use crate::devices::DeviceUse;
use crate::framework::{EvictionKind, GivenBack, VictimCost, VictimUnit};
use crate::interpod::Check;
use crate::model::{Job, JobId, NodeId, QueueId, TaskId};
use crate::resources::{ResourceId, Resources};
use crate::session::{ReservedNodes, Session, TaskStatus};
use crate::snapshot::{ancestors, Snapshot};
use crate::snapshot::{ask_on, charge_shares};
use pod_rules::NodeRules;

/// How many other first victims a node's search tries after the plain greedy pass: the bound
/// that keeps the search linear in the pods of a node.
pub const FIRST_VICTIM_ALTERNATIVES: usize = 3;

/// What the victims must achieve for one task.
pub struct Goal<'r> {
    pub task: TaskId,
    pub request: &'r Resources,
    /// The task's queue (or an ancestor) refuses it now: the victims must also give back
    /// enough, to the queues they share with it, for it to be admitted; these resources are
    /// then what the eviction is (also) for.
    pub admission: Option<Vec<ResourceId>>,
    /// The task is above its job's minimum (an elastic job's extra): its victims are only pods
    /// whose gang keeps every minimum without them, never a pod some gang's minimum needs.
    pub extra: bool,
}

/// Where and whom to evict for one task.
pub struct NodeVictims {
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
    mode: EvictionKind,
    within: Option<&[NodeId]>,
) -> Option<NodeVictims> {
    let snap = session.snapshot;
    let policy = session.framework().victims(mode);
    let mut queues = policy.queues(&session.view(), job.id, goal.request);
    queues.retain(|&q| in_scope(mode, job.queue, q));
    let mut nodes: Vec<NodeId> = queues
        .iter()
        .flat_map(|&q| session.queue_nodes(q).iter().copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    if let Some(within) = within {
        nodes.retain(|n| within.binary_search(n).is_ok());
    }
    nodes.retain(|&node| {
        session.may_use(node, ReservedNodes::Avoid(job.id))
            && session.passes_filters(goal.task, node)
            && goal.request.fits_in(&snap.node(node).allocatable)
    });
    let session = &*session;
    let rules = session.pod_rules(goal.task);
    let mut best: Option<(VictimCost, NodeVictims)> = None;
    for node in nodes {
        let Some(found) = victims_on(session, job, node, goal, mode, rules.as_ref()) else {
            continue;
        };
        if best.as_ref().is_none_or(|(cost, _)| found.0 < *cost) {
            best = Some(found);
        }
    }
    best.map(|(_, victims)| victims)
}

/// Whether pods of `victim` are within the action's scope: the preemptor's own queue for
/// preempt, any other for reclaim.
fn in_scope(mode: EvictionKind, preemptor: QueueId, victim: QueueId) -> bool {
    match mode {
        EvictionKind::Preempt => victim == preemptor,
        EvictionKind::Reclaim => victim != preemptor,
    }
}

/// The cheapest victims on `node` for the goal, and their cost; `None` when the node cannot be
/// freed enough (or needs no victims: `find_node` has turned it down, so it is skipped too).
fn victims_on(
    session: &Session,
    job: &Job,
    node: NodeId,
    goal: &Goal,
    mode: EvictionKind,
    rules: Option<&Check>,
) -> Option<(VictimCost, NodeVictims)> {
    let snap = session.snapshot;
    let policy = session.framework().victims(mode);
    let search = NodeSearch::new(session, job, node, goal, mode, rules)?;
    let (candidates, spare) = search.candidates();
    let blocked = !search.blocking().is_empty();
    // An extra takes only victims that can go alone.
    if (candidates.is_empty() && !blocked) || (goal.extra && !spare && !blocked) {
        return None;
    }
    // The cheapest set so far: its cost, its victims, and the same in units.
    let mut best: Option<(VictimCost, Vec<TaskId>, Vec<Vec<TaskId>>)> = None;
    for first in 0..candidates.len().clamp(1, FIRST_VICTIM_ALTERNATIVES + 1) {
        // One victim ends the search (its bound, whatever the policy's costs).
        if first > 0
            && best
                .as_ref()
                .is_some_and(|(_, victims, _)| victims.len() <= 1)
        {
            break;
        }
        // A start already in the best set, that would go the same way again (alone, or
        // dragging the same whole gang), can only repeat that set.
        let repeats = |units: &Vec<Vec<TaskId>>, start: TaskId| {
            units.iter().any(|u| {
                u.contains(&start)
                    && (u.len() == 1 || !session.meets_minimums(snap.task(start).job, &[start]))
            })
        };
        if first > 0
            && (best.as_ref()).is_some_and(|(_, _, units)| repeats(units, candidates[first]))
        {
            continue;
        }
        let Some(units) = search.greedy(&candidates, spare, first) else {
            continue;
        };
        let units = search.drop_unneeded(units);
        let victims: Vec<TaskId> = units.iter().flatten().copied().collect();
        let cost = policy.cost(&session.view(), job.id, &victims);
        if best.as_ref().is_none_or(|(b, _, _)| cost < *b) {
            best = Some((cost, victims, units));
        }
    }
    best.map(|(cost, tasks, _)| {
        let short = search.short.clone();
        (cost, NodeVictims { node, tasks, short })
    })
}

/// One node's search: what it has free and what the task lacks there.
struct NodeSearch<'s, 'a> {
    session: &'s Session<'a>,
    job: &'s Job,
    node: NodeId,
    goal: &'s Goal<'s>,
    mode: EvictionKind,
    free: Resources,
    free_gpus: i64,
    /// The resources the eviction is for: those the node lacks for the task, those its queue's
    /// admission lacks, and when only its inter-pod rules refuse it, every one it asks for.
    short: Vec<ResourceId>,
    /// Whether the node (or the queue's admission) lacks room for the task.
    lacks_room: bool,
    /// The task's inter-pod rules on the node, when it has any.
    rules: Option<NodeRules<'s, 'a>>,
}

impl<'s, 'a> NodeSearch<'s, 'a> {
    fn new(
        session: &'s Session<'a>,
        job: &'s Job,
        node: NodeId,
        goal: &'s Goal<'s>,
        mode: EvictionKind,
        rules: Option<&'s Check<'a>>,
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
            lacks_room: false,
            rules: rules.map(|check| NodeRules::new(session, check, node)),
        };
        let nothing = search.nothing_freed();
        search.lacks_room = !nothing.room(&search);
        if !search.lacks_room && nothing.rules_allow(&search) {
            return None;
        }
        search.short = goal.request.shortfall(&search.free).collect();
        for &r in goal.admission.iter().flatten() {
            if !search.short.contains(&r) {
                search.short.push(r);
            }
        }
        // Nothing but its devices short (a share's memory or compute on a shared node): the
        // pods holding devices there may free them.
        if search.short.is_empty() && search.lacks_room {
            search.short.push(session.snapshot.node(node).device_kind);
        }
        // Only its inter-pod rules refuse it: the victims are for all it takes.
        if search.short.is_empty() {
            search.short = goal.request.iter().map(|(r, _)| r).collect();
        }
        // Only the resources short here count: those that are idle (CPU beside the GPUs it
        // lacks) are no victims' doing.
        let policy = session.framework().victims(mode);
        if !policy.may_keep(&session.view(), job.id, goal.request, &search.short) {
            return None;
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
            given_back: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// The pods on the node that alone refuse the task there: every set takes them first.
    fn blocking(&self) -> &[TaskId] {
        self.rules.as_ref().map_or(&[], |r| &r.blocking)
    }

    /// Bound pods on the node that free something the task lacks, or that its inter-pod rules
    /// count against it, in the policy's victim order, ties by id; those that alone refuse it
    /// are left out (they go first). And whether any of them could go alone (its gang keeps its
    /// minimums without it): without one, no victim can shrink a gang here.
    fn candidates(&self) -> (Vec<TaskId>, bool) {
        let (session, snap) = (self.session, self.session.snapshot);
        let frees = |v: TaskId| {
            self.lacks_room && self.short.iter().any(|&r| snap.task(v).request.get(r) > 0)
        };
        let counted = |v: TaskId| self.rules.as_ref().is_some_and(|r| r.may_help(v));
        let mut candidates: Vec<TaskId> = session
            .node_tasks(self.node)
            .iter()
            .copied()
            .filter(|&v| {
                matches!(session.task_status(v), TaskStatus::Bound(_))
                    && (frees(v) || counted(v))
                    && !self.blocking().contains(&v)
            })
            .collect();
        // A gang's pods often sit together: its answer is asked once per run of them.
        let mut last: Option<(JobId, bool)> = None;
        let spare = candidates.iter().any(|&v| {
            let job = snap.task(v).job;
            let alone = match last {
                Some((j, alone)) if j == job && snap.job(job).min_task_member.is_empty() => alone,
                _ => session.meets_minimums(job, std::slice::from_ref(&v)),
            };
            last = Some((job, alone));
            alone
        });
        let policy = session.framework().victims(self.mode);
        candidates
            .sort_by(|&a, &b| (policy.compare_victims(&session.view(), a, b)).then(a.cmp(&b)));
        (candidates, spare)
    }

    /// Takes the pods that block the task (every one, else no set), then the candidates in
    /// order until the task fits, each victim with the gang mates it drags along (a unit):
    /// first (when some candidate can, `spare`) those whose gang keeps its minimums without
    /// them, then (except for an extra) those that stop their gang. From `first` > 0,
    /// `candidates[first]` goes before the sweeps, whatever it drags (except for an extra).
    fn greedy(&self, candidates: &[TaskId], spare: bool, first: usize) -> Option<Vec<Vec<TaskId>>> {
        let stops = !self.goal.extra;
        let mut tally = Tally::default();
        let mut freed = self.nothing_freed();
        let mut units: Vec<Vec<TaskId>> = Vec::new();
        let mut take = |v: TaskId, may_stop: bool, tally: &mut Tally, freed: &mut Freed| {
            let Some(unit) = unit_of(self, v, may_stop, tally) else {
                return false;
            };
            for &m in &unit {
                tally.take(self.session, m);
                freed.take(self, m);
            }
            units.push(unit);
            true
        };
        for &v in self.blocking() {
            if !tally.has(v) && !take(v, stops, &mut tally, &mut freed) {
                return None;
            }
        }
        if first > 0 && !tally.has(candidates[first]) {
            take(candidates[first], stops, &mut tally, &mut freed);
        }
        let sweeps = [(false, spare), (true, stops)];
        for may_stop in sweeps.into_iter().filter(|&(_, run)| run).map(|(s, _)| s) {
            for &v in candidates {
                if freed.fits(self) {
                    break;
                }
                if !tally.has(v) {
                    take(v, may_stop, &mut tally, &mut freed);
                }
            }
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
    /// What the victims give back to each queue (kept only when admission is at stake).
    given_back: Vec<(QueueId, Resources)>,
    /// The victims (kept only when the task has inter-pod rules).
    gone: Vec<TaskId>,
}

impl Freed {
    fn take(&mut self, search: &NodeSearch, task: TaskId) {
        let t = search.session.snapshot.task(task);
        if search.session.task_status(task).node() == Some(search.node) {
            self.free.add(&t.request);
            self.free_gpus += t.gpus.count_ones() as i64;
            let n = search.session.snapshot.node(search.node);
            if let Some(held) = t.held.as_deref().filter(|_| n.sharing.shares()) {
                crate::snapshot::charge_held(&n.gpus, &mut self.devices, held, false);
            } else if n.sharing.shares() {
                let ask = ask_on(n.sharing, t.share);
                charge_shares(&n.gpus, &mut self.devices, t.gpus, ask, false);
            }
        }
        if search.goal.admission.is_some() {
            add_to_queues(
                search.session.snapshot,
                &mut self.given_back,
                t.job,
                &t.request,
            );
        }
        if search.rules.is_some() {
            self.gone.push(task);
        }
    }

    /// Room for the task and its inter-pod rules.
    fn fits(&self, search: &NodeSearch) -> bool {
        self.room(search) && self.rules_allow(search)
    }

    /// Whether the task's inter-pod rules let it onto the node once the victims are gone.
    fn rules_allow(&self, search: &NodeSearch) -> bool {
        (search.rules.as_ref()).is_none_or(|r| r.allow(search.session, &self.gone))
    }

    /// Room on the node (whole GPUs counted per device) and, when the task's queue refuses it
    /// now, admission with what the victims give back to the queues they share with it.
    fn room(&self, search: &NodeSearch) -> bool {
        let request = search.goal.request;
        let (session, node) = (search.session, search.node);
        let devices_fit = match session.snapshot.node(node).sharing.shares() {
            false => self.free_gpus >= session.snapshot.devices_asked(request) as i64,
            true => {
                let need = session.device_need(search.goal.task);
                let sharing = session.snapshot.node(node).sharing;
                if need.per_container(sharing) {
                    (session.container_takes(&need, node, None, &self.devices)).is_some()
                } else {
                    let open = session.open_devices_with(&need, node, None, &self.devices);
                    open.count_ones() >= session.snapshot.devices_asked(request)
                }
            }
        };
        if !(request.fits_in(&self.free) && devices_fit) {
            return false;
        }
        if search.goal.admission.is_none() {
            return true;
        }
        let given_back = GivenBack(&self.given_back);
        (session.framework())
            .admit_task_over(session, search.goal.task, request, given_back)
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
}

/// The victim alone while its gang keeps every minimum without it (minMember and each role's
/// minTaskMember, see [`Session::meets_minimums`]), else, when `may_stop`, its whole gang (every
/// bound member not yet taken); `None` when the gang may not lose them: it is the preemptor,
/// this cycle starts it, it is outside the action's scope, or the policy keeps it.
fn unit_of(
    search: &NodeSearch,
    victim: TaskId,
    may_stop: bool,
    tally: &Tally,
) -> Option<Vec<TaskId>> {
    let (session, job, mode) = (search.session, search.job, search.mode);
    let snap = session.snapshot;
    let vjob = snap.job(snap.task(victim).job);
    if vjob.id == job.id || session.placed_now(vjob.id) || !in_scope(mode, job.queue, vjob.queue) {
        return None;
    }
    // Without earlier victims of its gang (the common case) no list is built.
    let earlier = |t: &&TaskId| snap.task(**t).job == vjob.id;
    let alone = if tally.taken.iter().any(|t| earlier(&t)) {
        let mut gone: Vec<TaskId> = tally.taken.iter().filter(earlier).copied().collect();
        gone.push(victim);
        session.meets_minimums(vjob.id, &gone)
    } else {
        session.meets_minimums(vjob.id, std::slice::from_ref(&victim))
    };
    if !alone && !may_stop {
        return None;
    }
    let tasks: Vec<TaskId> = if alone {
        vec![victim]
    } else {
        vjob.tasks
            .iter()
            .copied()
            .filter(|&m| matches!(session.task_status(m), TaskStatus::Bound(_)) && !tally.has(m))
            .collect()
    };
    // The unit goes as one eviction: judged as a whole.
    let mut request = Resources::zero(snap.resources.len());
    for &m in &tasks {
        request.add(&snap.task(m).request);
    }
    let unit = VictimUnit {
        tasks: &tasks,
        stops_job: !alone,
        request: &request,
        short: &search.short,
        taken: &tally.from_queue,
    };
    let policy = session.framework().victims(mode);
    policy
        .may_take(&session.view(), job.id, &unit)
        .then_some(tasks)
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

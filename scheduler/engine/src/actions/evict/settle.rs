//! What a simulated eviction keeps before it is committed: no unit its placement does not need,
//! and only an eviction the policy finds worth it.
//!
//! The victim search works member by member and node by node, so a victim taken for an early
//! member can turn out needless once a later member's victims free more (a one-pod job taken
//! first, then a whole gang that alone would have done). Once the gang's placement works, each
//! unit of its victims (a pod whose gang keeps its minimums without it, or a whole gang) is left
//! out in turn, the dearest first by the policy's costs, and the placement simulated again
//! without it; the unit stays out when the gang still starts and the policy still accepts the
//! eviction. Room only grows with victims, so a unit the set needed is needed by every subset
//! of it: one pass leaves a set from which no unit can go. At most [`DROP_TRIES`] units are
//! tried: the bound that keeps a gang of hundreds of members from costing hundreds of
//! placements.

use super::{find_room, reason};
use crate::actions::placement_order;
use crate::framework::EvictionKind;
use crate::model::{Job, JobId, NodeId, TaskId};
use crate::resources::{ResourceId, Resources};
use crate::session::{Session, Statement};

/// How many units of a set the settling pass tries to leave out, dearest first.
pub const DROP_TRIES: usize = 16;

/// One operation of a simulated placement, in order, to replay it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Evict(TaskId),
    Place(TaskId, NodeId),
}

/// A simulated placement: its statement (applied to the session), the steps that made it, and
/// the resources its victims were taken for.
pub(super) struct Simulated {
    pub stmt: Statement,
    pub steps: Vec<Step>,
    pub reclaimed: Vec<ResourceId>,
}

impl Simulated {
    pub fn new(session: &Session) -> Self {
        Simulated {
            stmt: session.statement(),
            steps: Vec::new(),
            reclaimed: Vec::new(),
        }
    }

    pub fn evict(&mut self, session: &mut Session, task: TaskId, mode: EvictionKind, job: JobId) {
        session.evict(&mut self.stmt, task, reason(mode), job);
        self.steps.push(Step::Evict(task));
    }

    /// Nominates the task to the node (the capacity is being freed).
    pub fn place(&mut self, session: &mut Session, task: TaskId, node: NodeId) {
        session.pipeline(&mut self.stmt, task, node);
        self.steps.push(Step::Place(task, node));
    }

    fn victims(&self) -> Vec<TaskId> {
        (self.steps.iter())
            .filter_map(|s| match *s {
                Step::Evict(t) => Some(t),
                Step::Place(..) => None,
            })
            .collect()
    }

    fn placed(&self) -> Vec<TaskId> {
        (self.steps.iter())
            .filter_map(|s| match *s {
                Step::Place(t, _) => Some(t),
                Step::Evict(_) => None,
            })
            .collect()
    }
}

/// The settled statement of a gang's simulated placement (ready, with victims): its needless
/// units left out, and `None` (undone) when the policy does not accept what remains.
pub(super) fn settle(
    session: &mut Session,
    job: &Job,
    mode: EvictionKind,
    sim: Simulated,
    within: Option<&[NodeId]>,
) -> Option<Statement> {
    let mut kept = sim.victims();
    let mut units = units(session, &kept);
    if units.len() < 2 {
        let keep = acceptable(session, job, mode, &sim, within);
        return keep_if(session, keep, sim.stmt);
    }
    let Simulated {
        stmt,
        mut steps,
        reclaimed,
    } = sim;
    session.discard(stmt);
    // Costs are compared with the victims holding their nodes.
    let policy = session.framework().victims(mode);
    units.sort_by_cached_key(|u| std::cmp::Reverse(policy.cost(&session.view(), job.id, u)));
    for unit in units.iter().take(DROP_TRIES) {
        let rest: Vec<TaskId> = (kept.iter().copied())
            .filter(|v| !unit.contains(v))
            .collect();
        if let Some(trial) = place_after(session, job, mode, &rest, &reclaimed, within) {
            session.discard(trial.stmt);
            steps = trial.steps;
            kept = rest;
        }
    }
    let settled = replay(session, job, mode, steps, reclaimed);
    let keep = acceptable(session, job, mode, &settled, within);
    keep_if(session, keep, settled.stmt)
}

fn keep_if(session: &mut Session, keep: bool, stmt: Statement) -> Option<Statement> {
    if keep {
        Some(stmt)
    } else {
        session.discard(stmt);
        None
    }
}

/// The victims grouped in units, with the victims evicted: a job left holding no node is one
/// unit, every other victim (its gang keeps its minimums) its own.
fn units(session: &Session, victims: &[TaskId]) -> Vec<Vec<TaskId>> {
    let snap = session.snapshot;
    let mut by_job: Vec<(JobId, Vec<TaskId>)> = Vec::new();
    for &v in victims {
        let job = snap.task(v).job;
        match by_job.iter_mut().find(|(j, _)| *j == job) {
            Some((_, list)) => list.push(v),
            None => by_job.push((job, vec![v])),
        }
    }
    let mut units = Vec::with_capacity(victims.len());
    for (job, list) in by_job {
        if session.holding(job) == 0 {
            units.push(list);
        } else {
            units.extend(list.into_iter().map(|v| vec![v]));
        }
    }
    units
}

/// The gang's placement with exactly `victims` evicted first, each member then taking the best
/// node with room; `Some` when the gang starts and the policy accepts the eviction.
fn place_after(
    session: &mut Session,
    job: &Job,
    mode: EvictionKind,
    victims: &[TaskId],
    reclaimed: &[ResourceId],
    within: Option<&[NodeId]>,
) -> Option<Simulated> {
    let fw = session.framework();
    let mut sim = Simulated::new(session);
    sim.reclaimed = reclaimed.to_vec();
    for &v in victims {
        sim.evict(session, v, mode, job.id);
    }
    for task in placement_order(session, job) {
        if fw.job_ready(session, job.id) {
            break;
        }
        let request = &session.snapshot.task(task).request;
        if fw.admit_task(session, task, request).is_err() {
            continue;
        }
        if let Some(node) = find_room(session, task, within) {
            sim.place(session, task, node);
        }
    }
    if acceptable(session, job, mode, &sim, within) {
        Some(sim)
    } else {
        session.discard(sim.stmt);
        None
    }
}

/// Applies the steps again, in order: the same session state gives the same statement.
fn replay(
    session: &mut Session,
    job: &Job,
    mode: EvictionKind,
    steps: Vec<Step>,
    reclaimed: Vec<ResourceId>,
) -> Simulated {
    let mut stmt = session.statement();
    for step in &steps {
        match *step {
            Step::Evict(t) => session.evict(&mut stmt, t, reason(mode), job.id),
            Step::Place(t, n) => session.pipeline(&mut stmt, t, n),
        }
    }
    Simulated {
        stmt,
        steps,
        reclaimed,
    }
}

/// Whether the applied simulation may be committed: the gang is ready, its queue may keep what
/// it gains in the resources the victims were taken for, and the policy finds the eviction
/// worth it for the members it places; failing that, for them and the job's other pending
/// members the room left lets start (its extras would take it next, in the same plan).
pub(super) fn acceptable(
    session: &mut Session,
    job: &Job,
    mode: EvictionKind,
    sim: &Simulated,
    within: Option<&[NodeId]>,
) -> bool {
    let fw = session.framework();
    let nothing_more = Resources::zero(session.snapshot.resources.len());
    let (victims, reclaimed) = (sim.victims(), &sim.reclaimed);
    if !fw.job_ready(session, job.id)
        || !(fw.victims(mode)).may_keep(&session.view(), job.id, &nothing_more, reclaimed)
    {
        return false;
    }
    let mut placed = sim.placed();
    let policy = fw.victims(mode);
    if policy.worth_evicting(&session.view(), job.id, &victims, &placed, reclaimed)
        || victims.is_empty()
    {
        return true;
    }
    let mut more = session.statement();
    placed.extend(pipeline_where_room(session, job, within, &mut more));
    let worth = policy.worth_evicting(&session.view(), job.id, &victims, &placed, reclaimed);
    session.discard(more);
    worth
}

/// Nominates each of the job's pending members its queue admits to the best node with room
/// (inside `within` when given), without victims; returns those placed.
pub(super) fn pipeline_where_room(
    session: &mut Session,
    job: &Job,
    within: Option<&[NodeId]>,
    stmt: &mut Statement,
) -> Vec<TaskId> {
    let fw = session.framework();
    let mut placed = Vec::new();
    for task in placement_order(session, job) {
        let request = &session.snapshot.task(task).request;
        if fw.admit_task(session, task, request).is_ok() {
            if let Some(node) = find_room(session, task, within) {
                session.pipeline(stmt, task, node);
                placed.push(task);
            }
        }
    }
    placed
}

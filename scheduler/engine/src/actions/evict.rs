//! `reclaim` (across queues) and `preempt` (inside a queue): the mechanism. Who may be evicted
//! and who goes first is the framework's [`crate::framework::Victims`] policy.
//!
//! Each action serves every gang below its minimum first, then the extra members (above the
//! minimum) of elastic jobs that are ready, in job order both times. For a gang's minimum it
//! simulates the whole placement inside one statement before anything is evicted, and commits
//! only when the gang then fits: its members are nominated to the freed nodes and the victims
//! evicted. Each member that finds no room takes its victims on one node (the search is in
//! [`super::victims`]). A victim whose gang would fall below any minimum (minMember, a role's
//! minTaskMember) takes its whole gang with it, or is not taken at all when the policy keeps
//! some member. Once the gang fits, the units it does not need are dropped and the policy says
//! whether the eviction is worth it ([`settle`]). An extra member is one statement of its own,
//! and its victims only pods whose gang keeps every minimum without them: an extra never stops
//! a job.
//!
//! - preempt: victims are of the preemptor's queue; in a queue at its capability they are taken
//!   until the node fits and the queue's capability holds.
//! - reclaim: victims are of other queues. A member its own queue's capability refuses takes
//!   none; one a parent's capability refuses (a child below its share under a parent at its
//!   capability) takes victims of queues under that parent, which give back to the parent what
//!   the member adds, until the node fits and every capability holds. Room its evictions free
//!   counts as reclaimed for whichever member takes it, held to that member's queue share; what
//!   no queue takes within its share is lent last to ready jobs' extras (as allocate lends).

use super::victims::{best_victims, Goal, NodeVictims};
use super::{has_pending, placement_order, schedulable_jobs};
use crate::framework::{EvictionKind, VictimCost};
use crate::hash::Set;
use crate::model::{Job, NodeId, QueueId, ShapeId, TaskId};
use crate::refusal::Refusal;
use crate::resources::ResourceId;
use crate::session::{ReservedNodes, Session, Statement, TaskStatus};
use settle::{Simulated, Step};

mod settle;

pub const PREEMPT: &str = "preempt";
pub const RECLAIM: &str = "reclaim";

/// A starving gang, then an elastic job's extra members, take back what other queues borrowed.
pub fn reclaim(session: &mut Session) {
    run(session, EvictionKind::Reclaim);
}

/// A starving gang, then an elastic job's extra members, displace lower-priority pods of their
/// own queue (also when the queue is at its capability).
pub fn preempt(session: &mut Session) {
    run(session, EvictionKind::Preempt);
}

/// Searches that found no victims. Evictions committed later only shrink the pool (their
/// capacity goes to their preemptor), and an extra member has fewer victims than a minimum, so a
/// failed search stays failed for the action's run. Keyed by shape, queue, job priority and
/// whether the task was admitted without victims and its inter-pod view (which pods its rules
/// count against it).
type Failed = Set<(ShapeId, QueueId, i32, bool, usize)>;

/// Whom a round of an action makes room for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Gangs below their minimum: the members they need to start.
    Minimums,
    /// Then ready jobs' members above their minimum, one at a time, their queue held to its
    /// share in the room reclaim frees.
    Extras,
    /// Reclaim only, last: room its evictions freed that no queue took within its share is
    /// lent to ready jobs' extras, as allocate lends idle capacity (nobody within its share
    /// can use it; the queue it came from stays above its share in it).
    Lend,
}

impl Round {
    fn of(mode: EvictionKind) -> &'static [Round] {
        match mode {
            EvictionKind::Reclaim => &[Round::Minimums, Round::Extras, Round::Lend],
            EvictionKind::Preempt => &[Round::Minimums, Round::Extras],
        }
    }
}

fn run(session: &mut Session, mode: EvictionKind) {
    let fw = session.framework();
    let jobs = schedulable_jobs(session);
    let mut failed = Failed::default();
    for &round in Round::of(mode) {
        // A gang the first round starts takes part in the later ones with its members left.
        let turn: Vec<&Job> = (jobs.iter().copied())
            .filter(|j| {
                has_pending(session, j) && fw.job_ready(session, j.id) == (round != Round::Minimums)
            })
            .collect();
        for job in turn {
            if fw.validate_job(session, job.id).is_err() {
                continue;
            }
            match round {
                Round::Lend => lend_room(session, job),
                _ if !may_evict_for(session, job, mode) => {}
                Round::Minimums => {
                    with_holds_released(session, job, |s| make_room(s, job, mode, &mut failed))
                }
                Round::Extras => with_holds_released(session, job, |s| {
                    make_room_for_extras(s, job, mode, &mut failed)
                }),
            }
        }
    }
}

/// Runs `f` with the job's held members free to move (their holds restored after).
fn with_holds_released(session: &mut Session, job: &Job, f: impl FnOnce(&mut Session)) {
    session.release_holds(job.id);
    f(session);
    session.restore_holds(job.id);
}

/// Cheap checks before any search: something in the action's scope runs (for preempt, in the
/// preemptor's queue), and the policy lets the preemptor evict.
fn may_evict_for(session: &Session, job: &Job, mode: EvictionKind) -> bool {
    let in_scope = match mode {
        EvictionKind::Preempt => !session.queue_nodes(job.queue).is_empty(),
        EvictionKind::Reclaim => true,
    };
    in_scope && (session.framework().victims(mode)).may_evict_for(&session.view(), job.id)
}

/// Makes room for the job. A gang with a required topology tier picks the domain first: each
/// candidate domain of that tier is tried in a statement, and the one needing the cheapest
/// victims (by the policy) wins; victims are only ever taken inside it.
fn make_room(session: &mut Session, job: &Job, mode: EvictionKind, failed: &mut Failed) {
    let Some(domains) = super::topology::eviction_domains(session, job) else {
        if let Some(stmt) = attempt(session, job, mode, failed, None) {
            session.commit(stmt);
        }
        return;
    };
    let victims = session.framework().victims(mode);
    let mut best: Option<(VictimCost, Vec<NodeId>)> = None;
    for nodes in domains {
        // A search inside one domain says nothing about the others: its failures stay local.
        let mut local = Failed::default();
        if let Some(stmt) = attempt(session, job, mode, &mut local, Some(&nodes)) {
            let taken: Vec<TaskId> = stmt.evictions().collect();
            session.discard(stmt);
            let cost = victims.cost(&session.view(), job.id, &taken);
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, nodes));
            }
        }
    }
    if let Some((_, nodes)) = best {
        let mut local = Failed::default();
        if let Some(stmt) = attempt(session, job, mode, &mut local, Some(&nodes)) {
            session.commit(stmt);
        }
    }
}

/// The reason an eviction of `mode` gives.
fn reason(mode: EvictionKind) -> &'static str {
    match mode {
        EvictionKind::Reclaim => RECLAIM,
        EvictionKind::Preempt => PREEMPT,
    }
}

/// Simulates the job's placement with evictions (inside `within` when given). Returns the
/// statement, settled, when it makes the gang ready; otherwise undoes it.
fn attempt(
    session: &mut Session,
    job: &Job,
    mode: EvictionKind,
    failed: &mut Failed,
    within: Option<&[NodeId]>,
) -> Option<Statement> {
    let fw = session.framework();
    let order = placement_order(session, job);
    let mut sim = Simulated::new(session);
    let mut holding = {
        let c = session.counts(job.id);
        c.running + c.pipelined + c.succeeded
    };
    for (i, &task) in order.iter().enumerate() {
        if fw.job_ready(session, job.id) {
            break;
        }
        // Give up once the members left cannot reach the minimum.
        if holding + ((order.len() - i) as u32) < job.min_member {
            break;
        }
        if place_member(session, job, task, mode, failed, within, &mut sim) {
            holding += 1;
        }
    }
    let evicted_any = sim.steps.iter().any(|s| matches!(s, Step::Evict(_)));
    if evicted_any && fw.job_ready(session, job.id) {
        settle::settle(session, job, mode, sim, within)
    } else {
        session.discard(sim.stmt);
        None
    }
}

/// Places one pending member inside the simulation: on a node with room, else on the node whose
/// victims the search finds (and evicts). Returns whether it was placed.
fn place_member(
    session: &mut Session,
    job: &Job,
    task: TaskId,
    mode: EvictionKind,
    failed: &mut Failed,
    within: Option<&[NodeId]>,
    sim: &mut Simulated,
) -> bool {
    let fw = session.framework();
    let t = session.snapshot.task(task);
    let admission = match admission(session, job, task, mode) {
        Admission::Admitted => None,
        Admission::Over(resources) => Some(resources),
        Admission::Never => return false,
    };
    let admitted = admission.is_none();
    if admitted {
        if let Some(node) = find_room(session, task, within) {
            if mode == EvictionKind::Reclaim {
                sim.reclaimed.extend(freed_room_taken(session, task, node));
            }
            sim.place(session, task, node);
            return true;
        }
    }
    let key = (
        t.shape,
        job.queue,
        job.priority,
        admitted,
        session.pod_view(task),
    );
    if failed.contains(&key) {
        return false;
    }
    let goal = Goal {
        task,
        request: &t.request,
        admission,
        extra: fw.job_ready(session, job.id),
    };
    let Some(NodeVictims { node, tasks, short }) = best_victims(session, job, &goal, mode, within)
    else {
        failed.insert(key);
        return false;
    };
    sim.reclaimed.extend(short);
    for v in tasks {
        sim.evict(session, v, mode, job.id);
    }
    // Its inter-pod rules are checked after the evictions: a victim may have been what
    // repelled it, or what it needed nearby.
    let fits = session.fits(node, &t.request)
        && session.has_devices(task, node, None)
        && session.pod_rules_allow(task, node)
        && fw.admit_task(session, task, &t.request).is_ok();
    if fits {
        sim.place(session, task, node);
    }
    fits
}

/// The resources a member placed on `node` takes from room this cycle's evictions freed there:
/// those the node, with its evicted pods back, would lack. Placed by reclaim, it is a gain of
/// the reclaim like its own victims' room, held to its queue's share in them: room a reclaim
/// freed and its gang left over is no loan its queue may keep beyond its share (the queue it
/// came from would take it back).
fn freed_room_taken(session: &Session, task: TaskId, node: NodeId) -> Vec<ResourceId> {
    let snap = session.snapshot;
    let mut room = session.free(node);
    for &t in session.node_tasks(node) {
        if *session.task_status(t) == TaskStatus::Evicted(node) {
            room.sub(&snap.task(t).request);
        }
    }
    (snap.task(task).request.iter())
        .filter(|&(r, q)| q > 0 && room.get(r) < q)
        .map(|(r, _)| r)
        .collect()
}

/// Whether a member's queue takes it in, and what its victims must give back when not.
enum Admission {
    Admitted,
    /// Victims sharing a queue with it can lift the refusal; these resources are what the
    /// eviction is then (also) for.
    Over(Vec<ResourceId>),
    /// No victim in the action's scope can.
    Never,
}

/// Preempt's victims are of the member's own queue: they credit every level, in whatever it
/// asks. Reclaim's are of other queues: they credit only the ancestors they share with it, so
/// a parent's capability may yield, never its own queue's. Nor does reclaim evict for a
/// guarantee's refusal: room that victims free is no one's to lend while a guarantee is unmet.
fn admission(session: &Session, job: &Job, task: TaskId, mode: EvictionKind) -> Admission {
    let request = &session.snapshot.task(task).request;
    let Err(refusal) = session.framework().admit_task(session, task, request) else {
        return Admission::Admitted;
    };
    match (mode, refusal) {
        (EvictionKind::Preempt, _) => Admission::Over(request.iter().map(|(r, _)| r).collect()),
        (
            EvictionKind::Reclaim,
            Refusal::OverCapability {
                queue, resource, ..
            },
        ) if queue != job.queue => Admission::Over(vec![resource]),
        (EvictionKind::Reclaim, _) => Admission::Never,
    }
}

/// Makes room for a ready job's pending members above its minimum, one statement each, in
/// placement order. A gang with a required topology tier takes them only in the domain it runs
/// in; one with sub-groups (placed by the topology search) takes none.
fn make_room_for_extras(session: &mut Session, job: &Job, mode: EvictionKind, failed: &mut Failed) {
    if !job.sub_groups.is_empty() {
        return;
    }
    let within = super::topology::running_domain(session, job);
    for task in placement_order(session, job) {
        let mut sim = Simulated::new(session);
        let within = within.as_deref();
        let placed = place_member(session, job, task, mode, failed, within, &mut sim);
        if placed && settle::acceptable(session, job, mode, &sim, within) {
            session.commit(sim.stmt);
        } else {
            session.discard(sim.stmt);
        }
    }
}

/// Lends the room left to a ready job's pending extras, without victims: each takes the best
/// node with room its queue admits (inside the domain it runs in, for a required tier).
fn lend_room(session: &mut Session, job: &Job) {
    if !job.sub_groups.is_empty() {
        return;
    }
    let within = super::topology::running_domain(session, job);
    let mut stmt = session.statement();
    settle::pipeline_where_room(session, job, within.as_deref(), &mut stmt);
    session.commit(stmt);
}

/// A node with room for the task now: the best one (inside `within` when given).
fn find_room(session: &mut Session, task: TaskId, within: Option<&[NodeId]>) -> Option<NodeId> {
    match within {
        None => session.find_node(task),
        Some(nodes) => find_in(session, task, nodes),
    }
}

/// The best node among `nodes` with room for the task now (node order and preferences).
fn find_in(session: &mut Session, task: TaskId, nodes: &[NodeId]) -> Option<NodeId> {
    let access = ReservedNodes::Avoid(session.snapshot.task(task).job);
    let request = &session.snapshot.task(task).request;
    let preferences = session.preferences(task);
    let mut best: Option<(i128, NodeId)> = None;
    for &n in nodes {
        if session.can_take(task, n, access, None) {
            let cand = (
                session.placement_score(task, n, request, preferences.as_ref()),
                n,
            );
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
    }
    best.map(|(_, n)| n)
}

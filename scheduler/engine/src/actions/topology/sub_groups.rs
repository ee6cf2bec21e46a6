//! Sub-groups of a gang (e.g. tensor-parallel groups) placed inside the gang's domain: a bounded
//! backtracking search over assignments of sub-groups to domains, each domain checked for the
//! sub-group's GPUs, CPU and memory before its members are placed node by node.

use basalt_topology::{DomainId, TierId};

use super::{choose_domains, fill, nvlink_pin, place_one, MemberFailure, Placement};
use crate::framework::{DomainAsk, DomainPurpose};
use crate::model::{JobId, NodeId, TaskId};
use crate::resources::{CPU, MEMORY};
use crate::session::{Session, Statement, TaskStatus};

/// Places the job's pending members inside `at.within` (or anywhere): sub-groups first, each in
/// one domain of its tiers, then the members outside any sub-group. Sub-groups are assigned to
/// domains by a bounded backtracking search (largest first, every candidate domain of each, a
/// choice undone when the sub-groups after it cannot all be placed), so a placement is found
/// whatever the order of the spec's entries. When none holds them all, each goes where it fits
/// alone and one that fits nowhere is left out (the gang's readiness decides); the error says
/// why.
pub(super) fn place_members(
    session: &mut Session,
    stmt: &mut Statement,
    at: Placement,
    members: &[TaskId],
) -> Result<(), MemberFailure> {
    let (job, within) = (at.job, at.within);
    let mut groups: Vec<Pending> = Vec::new();
    for (i, group) in job.sub_groups.iter().enumerate() {
        let tasks: Vec<TaskId> = group
            .tasks
            .iter()
            .copied()
            .filter(|&t| *session.task_status(t) == TaskStatus::Pending && members.contains(&t))
            .collect();
        if !tasks.is_empty() {
            let demand = demand_of(session, &tasks);
            groups.push(Pending {
                sub: i,
                tasks,
                demand,
            });
        }
    }
    // The hardest to fit first, while the most room is left; ties in spec order.
    groups.sort_by_key(|g| (std::cmp::Reverse(g.demand), g.sub));
    let mut failure: Option<MemberFailure> = None;
    let mut search = Search {
        at,
        groups: &groups,
        budget: SEARCH_BUDGET,
        chosen: Vec::new(),
        failure: None,
    };
    if search.place(session, 0) {
        for sub in search.chosen {
            stmt.append(sub);
        }
    } else {
        failure = search.failure;
        for g in &groups {
            let mut sub = session.statement();
            match place_sub_group(session, &mut sub, at, g, None) {
                Ok(()) => stmt.append(sub),
                Err(m) => {
                    session.discard(sub);
                    failure = Some(m);
                    if at.subs[g.sub].required.is_none() {
                        // Nothing required: each member that fits is placed (extras beyond
                        // the gang's minimum need not come in whole sub-groups).
                        for &t in &g.tasks {
                            if let Err(m) = place_one(session, stmt, at, t, None, None) {
                                failure = Some(m);
                            }
                        }
                    }
                }
            }
        }
    }
    let mut prev = None;
    for (i, &t) in members.iter().enumerate() {
        if *session.task_status(t) != TaskStatus::Pending
            || session.snapshot.task(t).sub_group.is_some()
        {
            continue;
        }
        match place_one(session, stmt, at, t, prev, None) {
            Ok(node) => prev = Some(node),
            Err(m) => {
                failure = Some(m);
                // A try inside one domain is over once the gang's minimum is out of reach
                // (the caller tries the next); the last, cluster-wide try places every member
                // it can, so its report counts them.
                let left = (members.len() - i - 1) as u32;
                if within.is_some() && session.holding(job.id) + left < job.min_member {
                    break;
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Domain choices tried per gang placement by the sub-group search, over all its levels: each
/// is one placement of a sub-group's members.
const SEARCH_BUDGET: u32 = 1024;

/// Candidate domains of one tier tried for a sub-group (best fit first).
const SUB_DOMAINS: usize = 8;

/// A sub-group's pending members and what they ask for in total.
struct Pending {
    /// Index in the job's `sub_groups`.
    sub: usize,
    tasks: Vec<TaskId>,
    demand: Demand,
}

/// GPUs, CPU and memory: the resources a domain's free totals are compared in.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Demand {
    gpus: i64,
    cpu: i64,
    memory: i64,
}

fn demand_of(session: &Session, tasks: &[TaskId]) -> Demand {
    let mut d = Demand {
        gpus: 0,
        cpu: 0,
        memory: 0,
    };
    for &t in tasks {
        let r = &session.snapshot.task(t).request;
        let devices = session.snapshot.devices_asked(r) as i64;
        d.gpus = d.gpus.saturating_add(devices);
        d.cpu = d.cpu.saturating_add(r.get(CPU).max(0));
        d.memory = d.memory.saturating_add(r.get(MEMORY).max(0));
    }
    d
}

/// The bounded backtracking search of [`place_members`].
struct Search<'a> {
    at: Placement<'a>,
    groups: &'a [Pending],
    budget: u32,
    /// One statement per sub-group placed so far, in order (undone newest first).
    chosen: Vec<Statement>,
    failure: Option<MemberFailure>,
}

impl Search<'_> {
    /// Places `groups[k..]`, each in one of its candidate domains; on `false` nothing of them
    /// is left placed.
    fn place(&mut self, session: &mut Session, k: usize) -> bool {
        let Some(g) = self.groups.get(k) else {
            return true;
        };
        let (at, reach) = (self.at, &self.at.subs[g.sub]);
        let mut candidates: Vec<Option<DomainId>> = Vec::new();
        for &tier in &reach.tiers {
            for d in sub_domains(
                session,
                at.job.id,
                at.within,
                tier,
                g.demand,
                reach.required,
            ) {
                if !candidates.contains(&Some(d)) {
                    candidates.push(Some(d));
                }
            }
        }
        if reach.required.is_none() {
            // Nothing required: anywhere inside the gang's domain is the last choice.
            candidates.push(None);
        }
        for d in candidates {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            let mut sub = session.statement();
            let placed = place_sub_group(session, &mut sub, at, g, Some(d));
            match placed {
                Ok(()) => {
                    self.chosen.push(sub);
                    if self.place(session, k + 1) {
                        return true;
                    }
                    let sub = self.chosen.pop().expect("pushed above");
                    session.discard(sub);
                }
                Err(m) => {
                    session.discard(sub);
                    self.failure = Some(m);
                }
            }
        }
        false
    }
}

/// Places all of a sub-group's pending members or fails: in `choice` when given (`Some(None)`:
/// anywhere inside `at.within`), else in the first of its candidate domains that holds it (and,
/// with nothing required, member by member wherever each fits).
fn place_sub_group(
    session: &mut Session,
    stmt: &mut Statement,
    at: Placement,
    g: &Pending,
    choice: Option<Option<DomainId>>,
) -> Result<(), MemberFailure> {
    let (job, reach) = (at.job, &at.subs[g.sub]);
    let scatter = |session: &mut Session, stmt: &mut Statement| -> Result<(), MemberFailure> {
        for &t in &g.tasks {
            place_one(session, stmt, at, t, None, None)?;
        }
        Ok(())
    };
    match choice {
        Some(Some(d)) => {
            let pin = nvlink_pin(session, reach.required, d);
            return fill(session, stmt, at, &g.tasks, d, pin);
        }
        Some(None) => return scatter(session, stmt),
        None => {}
    }
    let mut failure = None;
    for &tier in &reach.tiers {
        for d in sub_domains(session, job.id, at.within, tier, g.demand, reach.required) {
            let mut sub = session.statement();
            let pin = nvlink_pin(session, reach.required, d);
            match fill(session, &mut sub, at, &g.tasks, d, pin) {
                Ok(()) => {
                    stmt.append(sub);
                    return Ok(());
                }
                Err(m) => {
                    session.discard(sub);
                    failure = Some(m);
                }
            }
        }
    }
    let Some(required) = reach.required else {
        // Nothing required: the members go wherever they fit inside the gang's domain.
        return scatter(session, stmt);
    };
    let topo = &session.topology().expect("topology").topology;
    Err(MemberFailure::SubGroup {
        sub: g.sub,
        pods: g.tasks.len(),
        gpus: g.demand.gpus,
        tier: topo.tier(required).name.clone(),
        why: failure.map(Box::new),
    })
}

/// Domains of `tier` inside `within` (and inside one domain of `required`) whose free GPUs,
/// CPU and memory hold `demand`, as the policy chooses them, at most [`SUB_DOMAINS`].
fn sub_domains(
    session: &Session,
    job: JobId,
    within: Option<DomainId>,
    tier: TierId,
    demand: Demand,
    required: Option<TierId>,
) -> Vec<DomainId> {
    let topo = session.topology().expect("topology");
    let t = &topo.topology;
    let room = |d: &DomainId| {
        let (mut cpu, mut memory) = (0i64, 0i64);
        for &n in &t.domain(*d).nodes {
            let free = session.free(NodeId(n));
            cpu = cpu.saturating_add(free.get(CPU));
            memory = memory.saturating_add(free.get(MEMORY));
        }
        cpu >= demand.cpu && memory >= demand.memory
    };
    let inside_required = |d: &DomainId| required.is_none_or(|r| t.enclosing(*d, r).is_some());
    let ask = DomainAsk {
        purpose: DomainPurpose::SubGroup,
        job,
        tier,
        gpus: demand.gpus,
        coarser: &[],
        limit: SUB_DOMAINS,
    };
    match within {
        Some(w) => {
            let w_tier = t.domain(w).tier;
            let mut ds: Vec<DomainId> = t
                .domain(w)
                .nodes
                .iter()
                .map(|&n| t.domain_of(n as usize, tier))
                .collect();
            ds.sort_unstable();
            ds.dedup();
            // A tier coarser than the gang's domain is no tighter than the domain itself.
            ds.retain(|&d| topo.free(d) >= demand.gpus && t.enclosing(d, w_tier) == Some(w));
            ds.sort_by_key(|&d| (topo.free(d), d));
            let mut possible = ds.into_iter().filter(inside_required).filter(room);
            choose_domains(session, &ask, &mut possible)
        }
        None => {
            // The CPU and memory of at most this many domains are summed.
            let mut possible = (topo.fitting(tier, demand.gpus))
                .filter(inside_required)
                .take(4 * SUB_DOMAINS)
                .filter(room);
            choose_domains(session, &ask, &mut possible)
        }
    }
}

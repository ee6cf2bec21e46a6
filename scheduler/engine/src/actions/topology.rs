//! Topology-aware gang placement. A gang goes to the tightest tier at which one domain holds
//! it (node, NVLink domain, rack, spine, ..., up to its required tier), and among that tier's
//! domains to the best fit: the one left with the fewest free GPUs, so large free domains stay
//! whole for the gangs that need them. Each candidate is tried in a statement and only the one
//! that works is kept. Inside it, each sub-group (e.g. a tensor-parallel group) goes to the
//! tightest domain of its own tiers, and consecutive ranks to the same node; a sub-group that
//! requires an NVLink tier on a node without a multi-node NVLink domain gets its GPUs inside one
//! of the node's NVLink islands.

use basalt_topology::{DomainId, TierId, Topology};

use super::placement_order;
use crate::model::{Job, NodeId, TaskId};
use crate::resources::{CPU, GPU, MEMORY};
use crate::session::{ReservedNodes, Session, Statement, TaskStatus, TopoState};
use crate::snapshot::TopologySpec;

pub const INVALID_TOPOLOGY: &str = "InvalidTopology";
/// The condition type of a topology warning: the job is scheduled, the warning says how.
pub const TOPOLOGY_WARNING: &str = "TopologyWarning";
/// A preferred tier the topology does not know: the preference does not apply.
pub const UNKNOWN_PREFERRED_TIER: &str = "UnknownPreferredTier";

/// Candidate domains tried per tier before moving one tier up: the aggregate free GPUs say a
/// domain may fit; the dry run says whether it does.
const TRIES_PER_TIER: usize = 3;

/// Why a gang was not placed: the condition reason and message.
pub type Failure = (&'static str, String);

/// How far a gang or sub-group may spread: its ladder's tiers, finest first, up to and
/// including the required tier (all of them when none is required).
struct Reach {
    tiers: Vec<TierId>,
    required: Option<TierId>,
}

/// The job's reach at `field`, and a warning when its preferred tier is one the topology does
/// not know: a preference that cannot apply is dropped, never an error. Only a required tier
/// that does not exist (or tiers of two ladders) is.
fn reach(
    topo: &Topology,
    spec: &TopologySpec,
    field: &str,
) -> Result<(Reach, Option<String>), String> {
    let unknown = |which: &str, name: &String| {
        format!(
            "{field}.{which}: unknown tier {name:?} (tiers: {})",
            topo.tier_names().join(", ")
        )
    };
    let required = match &spec.required {
        Some(n) => Some(topo.tier_id(n).ok_or_else(|| unknown("required", n))?),
        None => None,
    };
    let mut warning = None;
    let preferred = spec.preferred.as_ref().and_then(|n| {
        let id = topo.tier_id(n);
        if id.is_none() {
            warning = Some(format!(
                "{}; the preference does not apply",
                unknown("preferred", n)
            ));
        }
        id
    });
    let ladder = topo.ladder_for(required.into_iter().chain(preferred));
    let mut tiers: Vec<TierId> = ladder.iter().rev().copied().collect();
    if let Some(r) = required {
        match tiers.iter().position(|&t| t == r) {
            Some(pos) => tiers.truncate(pos + 1),
            None => return Err(format!("{field}: tiers of two different ladders")),
        }
    }
    Ok((Reach { tiers, required }, warning))
}

/// Places the job through the topology, or `None` when topology does not apply (no topology
/// graph, or an unconstrained job on a flat cluster): the plain gang placement runs then.
/// `Ok` carries a statement that makes the gang ready (the caller commits it).
pub(super) fn place(
    session: &mut Session,
    job: &Job,
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
) -> Option<Result<Statement, Failure>> {
    let topo = session.topology()?;
    let constrained = !job.topology.is_empty() || !job.sub_groups.is_empty();
    if !constrained && topo.topology.is_flat() {
        return None;
    }
    let invalid = |m: String| Some(Err((INVALID_TOPOLOGY, m)));
    let mut warnings = Vec::new();
    let gang = match reach(&topo.topology, &job.topology, "spec.topology") {
        Ok((r, w)) => {
            warnings.extend(w);
            r
        }
        Err(m) => return invalid(m),
    };
    let mut subs = Vec::with_capacity(job.sub_groups.len());
    for g in &job.sub_groups {
        let field = format!("spec.subGroups[{}].topology", g.name);
        match reach(&topo.topology, &g.topology, &field) {
            Ok((r, w)) => {
                // Sub-groups of one spec share its topology: one warning for them all.
                warnings.extend(w.filter(|w| !warnings.contains(w)));
                subs.push(r)
            }
            Err(m) => return invalid(m),
        }
    }
    for message in warnings {
        session.add_condition(
            job.id,
            crate::plan::Condition {
                kind: TOPOLOGY_WARNING.to_string(),
                reason: UNKNOWN_PREFERRED_TIER.to_string(),
                message,
            },
        );
    }
    Some(place_gang(session, job, &gang, &subs, access, admissible))
}

fn gpus_of(session: &Session, tasks: &[TaskId]) -> i64 {
    tasks
        .iter()
        .map(|&t| session.snapshot.task(t).request.get(GPU).max(0))
        .fold(0, i64::saturating_add)
}

fn place_gang(
    session: &mut Session,
    job: &Job,
    gang: &Reach,
    subs: &[Reach],
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
) -> Result<Statement, Failure> {
    let fw = session.framework();
    let members = placement_order(session, job);
    let holding = session.holding(job.id);
    let need = (job.min_member.saturating_sub(holding) as usize).min(members.len());
    let need_gpus = gpus_of(session, &members[..need]);
    // Members already holding nodes pin the gang's domain.
    let held: Vec<NodeId> = job
        .tasks
        .iter()
        .filter_map(|&t| match session.task_status(t) {
            TaskStatus::Pending | TaskStatus::Evicted(_) => None,
            s => s.node(),
        })
        .collect();
    let mut tried: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    for &tier in &gang.tiers {
        let topo = session.topology().expect("placed through the topology");
        let coarser: Vec<TierId> = gang
            .tiers
            .iter()
            .copied()
            .skip_while(|&t| t != tier)
            .skip(1)
            .collect();
        let t = &topo.topology;
        let candidates = best_fits(topo, tier, need_gpus, &coarser, |d| {
            held.iter().all(|n| t.domain_of(n.index(), tier) == d)
                // Nodes missing a coarser tier's label stand alone there: a finer domain of
                // them may span several domains of the required tier.
                && gang.required.is_none_or(|r| t.enclosing(d, r).is_some())
        });
        for d in candidates {
            let mut stmt = session.statement();
            let outcome = place_members(
                session,
                &mut stmt,
                job,
                &members,
                Some(d),
                subs,
                access,
                admissible,
            );
            if fw.job_ready(session, job.id) && !stmt.is_empty() {
                return Ok(stmt);
            }
            session.discard(stmt);
            let topo = &session
                .topology()
                .expect("placed through the topology")
                .topology;
            tried.push(topo.domain(d).name.clone());
            last = outcome.err().or(last);
        }
    }
    if gang.required.is_none() {
        // No single domain holds the gang: the whole cluster, sub-groups still kept together.
        let mut stmt = session.statement();
        let outcome = place_members(
            session, &mut stmt, job, &members, None, subs, access, admissible,
        );
        if fw.job_ready(session, job.id) && !stmt.is_empty() {
            return Ok(stmt);
        }
        let got = session.holding(job.id);
        session.discard(stmt);
        let why = outcome
            .err()
            .or(last)
            .unwrap_or_else(|| "members do not fit on the nodes".into());
        return Err((
            super::NOT_ENOUGH_RESOURCES,
            format!(
                "{got}/{} members of the gang could be placed: {why}",
                job.min_member
            ),
        ));
    }
    let required = gang.required.expect("checked above");
    let topo = session.topology().expect("placed through the topology");
    let tier_name = &topo.topology.tier(required).name;
    let why = if tried.is_empty() {
        let best = topo.roomiest(required);
        let (best_name, best_free) = best.map_or(("none".to_string(), 0), |d| {
            (topo.topology.domain(d).name.clone(), topo.free(d))
        });
        format!(
            "no {tier_name} domain can hold the gang's {need_gpus} GPUs (required tier {tier_name}); \
             the roomiest, {best_name}, has {best_free} free (short by {})",
            need_gpus - best_free
        )
    } else {
        format!(
            "no {tier_name} domain can hold the gang (required tier {tier_name}); tried {}: {}",
            tried.join(", "),
            last.unwrap_or_else(|| "members do not fit on its nodes".into())
        )
    };
    Err((
        super::NOT_ENOUGH_RESOURCES,
        format!(
            "{holding}/{} members of the gang could be placed: {why}",
            job.min_member
        ),
    ))
}

/// Up to [`TRIES_PER_TIER`] domains of `tier` with `need` free GPUs that pass `keep`: the best
/// fits first, ties broken by the enclosing domains (the fuller the next tier up, and then the
/// one above, the better), so equal candidates never break a whole free rack or clique.
fn best_fits(
    topo: &TopoState,
    tier: TierId,
    need: i64,
    coarser: &[TierId],
    keep: impl Fn(DomainId) -> bool,
) -> Vec<DomainId> {
    /// Ties examined for the tie-break; beyond that the order by id stands.
    const TIES: usize = 64;
    /// Enclosing tiers compared in the tie-break (the nearest ones matter most).
    const DEPTH: usize = 4;
    let mut found: Vec<DomainId> = Vec::new();
    let mut first_free = None;
    for d in topo.fitting(tier, need).filter(|&d| keep(d)) {
        let free = topo.free(d);
        let tie = first_free.is_none_or(|f| f == free);
        if found.len() >= TRIES_PER_TIER && (!tie || found.len() >= TIES) {
            break;
        }
        first_free.get_or_insert(free);
        found.push(d);
    }
    let t = &topo.topology;
    found.sort_by_cached_key(|&d| {
        let node = t.domain(d).nodes[0] as usize;
        let mut enclosing = [0i64; DEPTH];
        for (slot, &c) in enclosing.iter_mut().zip(coarser) {
            *slot = topo.free(t.domain_of(node, c));
        }
        (topo.free(d), enclosing, d)
    });
    found.truncate(TRIES_PER_TIER);
    found
}

/// Places the job's pending members inside `within` (or anywhere): sub-groups first, each in
/// one domain of its tiers, then the members outside any sub-group. Sub-groups are assigned to
/// domains by a bounded backtracking search (largest first, every candidate domain of each, a
/// choice undone when the sub-groups after it cannot all be placed), so a placement is found
/// whatever the order of the spec's entries. When none holds them all, each goes where it fits
/// alone and one that fits nowhere is left out (the gang's readiness decides); the error says
/// why.
#[allow(clippy::too_many_arguments)]
fn place_members(
    session: &mut Session,
    stmt: &mut Statement,
    job: &Job,
    members: &[TaskId],
    within: Option<DomainId>,
    subs: &[Reach],
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
) -> Result<(), String> {
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
    let mut failure: Option<String> = None;
    let mut search = Search {
        job,
        groups: &groups,
        within,
        subs,
        access,
        admissible,
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
            match place_sub_group(
                session, &mut sub, job, g, within, subs, access, admissible, None,
            ) {
                Ok(()) => stmt.append(sub),
                Err(m) => {
                    session.discard(sub);
                    failure = Some(m);
                    if subs[g.sub].required.is_none() {
                        // Nothing required: each member that fits is placed (extras beyond
                        // the gang's minimum need not come in whole sub-groups).
                        for &t in &g.tasks {
                            if let Err(m) =
                                place_one(session, stmt, t, within, None, None, access, admissible)
                            {
                                failure = Some(m);
                            }
                        }
                    }
                }
            }
        }
    }
    let mut prev = None;
    for &t in members {
        if *session.task_status(t) != TaskStatus::Pending
            || session.snapshot.task(t).sub_group.is_some()
        {
            continue;
        }
        match place_one(session, stmt, t, within, prev, None, access, admissible) {
            Ok(node) => prev = Some(node),
            Err(m) => failure = Some(m),
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
        d.gpus = d.gpus.saturating_add(r.get(GPU).max(0));
        d.cpu = d.cpu.saturating_add(r.get(CPU).max(0));
        d.memory = d.memory.saturating_add(r.get(MEMORY).max(0));
    }
    d
}

/// The bounded backtracking search of [`place_members`].
struct Search<'a> {
    job: &'a Job,
    groups: &'a [Pending],
    within: Option<DomainId>,
    subs: &'a [Reach],
    access: ReservedNodes,
    admissible: &'a dyn Fn(&Session, TaskId) -> Result<(), String>,
    budget: u32,
    /// One statement per sub-group placed so far, in order (undone newest first).
    chosen: Vec<Statement>,
    failure: Option<String>,
}

impl Search<'_> {
    /// Places `groups[k..]`, each in one of its candidate domains; on `false` nothing of them
    /// is left placed.
    fn place(&mut self, session: &mut Session, k: usize) -> bool {
        let Some(g) = self.groups.get(k) else {
            return true;
        };
        let reach = &self.subs[g.sub];
        let mut candidates: Vec<Option<DomainId>> = Vec::new();
        for &tier in &reach.tiers {
            for d in sub_domains(session, self.within, tier, g.demand, reach.required) {
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
            let placed = place_sub_group(
                session,
                &mut sub,
                self.job,
                g,
                self.within,
                self.subs,
                self.access,
                self.admissible,
                Some(d),
            );
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
/// anywhere inside `within`), else in the first of its candidate domains that holds it (and,
/// with nothing required, member by member wherever each fits).
#[allow(clippy::too_many_arguments)]
fn place_sub_group(
    session: &mut Session,
    stmt: &mut Statement,
    job: &Job,
    g: &Pending,
    within: Option<DomainId>,
    subs: &[Reach],
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
    choice: Option<Option<DomainId>>,
) -> Result<(), String> {
    let reach = &subs[g.sub];
    let scatter = |session: &mut Session, stmt: &mut Statement| -> Result<(), String> {
        for &t in &g.tasks {
            place_one(session, stmt, t, within, None, None, access, admissible)?;
        }
        Ok(())
    };
    match choice {
        Some(Some(d)) => {
            let pin = nvlink_pin(session, reach.required, d);
            return fill(session, stmt, &g.tasks, d, pin, access, admissible);
        }
        Some(None) => return scatter(session, stmt),
        None => {}
    }
    let mut failure = None;
    for &tier in &reach.tiers {
        for d in sub_domains(session, within, tier, g.demand, reach.required) {
            let mut sub = session.statement();
            let pin = nvlink_pin(session, reach.required, d);
            match fill(session, &mut sub, &g.tasks, d, pin, access, admissible) {
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
    Err(format!(
        "sub-group {} ({} pods, {} GPUs) fits in no {} domain{}",
        job.sub_groups[g.sub].name,
        g.tasks.len(),
        g.demand.gpus,
        topo.tier(required).name,
        failure.map(|f| format!(" ({f})")).unwrap_or_default()
    ))
}

/// Domains of `tier` inside `within` (and inside one domain of `required`) whose free GPUs,
/// CPU and memory hold `demand`, best fit first, at most [`SUB_DOMAINS`].
fn sub_domains(
    session: &Session,
    within: Option<DomainId>,
    tier: TierId,
    demand: Demand,
    required: Option<TierId>,
) -> Vec<DomainId> {
    let topo = session.topology().expect("topology");
    let t = &topo.topology;
    let room = |d: DomainId| {
        let (mut cpu, mut memory) = (0i64, 0i64);
        for &n in &t.domain(d).nodes {
            let free = session.free(NodeId(n));
            cpu = cpu.saturating_add(free.get(CPU));
            memory = memory.saturating_add(free.get(MEMORY));
        }
        cpu >= demand.cpu && memory >= demand.memory
    };
    let inside_required = |d: DomainId| required.is_none_or(|r| t.enclosing(d, r).is_some());
    let mut found: Vec<DomainId> = match within {
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
            ds
        }
        None => topo
            .fitting(tier, demand.gpus)
            .filter(|&d| inside_required(d))
            .take(4 * SUB_DOMAINS)
            .collect(),
    };
    found.retain(|&d| inside_required(d) && room(d));
    found.truncate(SUB_DOMAINS);
    found
}

/// The NVLink island a sub-group must use: when its required tier is an NVLink tier and the
/// domain is a single node outside any multi-node NVLink domain.
fn nvlink_pin(session: &Session, required: Option<TierId>, d: DomainId) -> Option<NodeId> {
    let t = &session.topology()?.topology;
    let r = required?;
    if !t.tier(r).nvlink {
        return None;
    }
    let nodes = &t.domain(d).nodes;
    let &[node] = nodes.as_slice() else {
        return None;
    };
    t.domain(t.domain_of(node as usize, r))
        .alone
        .then_some(NodeId(node))
}

/// Places all of `tasks` inside domain `d` (consecutive members on the same node when it has
/// room), or none of them.
fn fill(
    session: &mut Session,
    stmt: &mut Statement,
    tasks: &[TaskId],
    d: DomainId,
    pin: Option<NodeId>,
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
) -> Result<(), String> {
    let island = match pin {
        None => None,
        Some(node) => {
            let want = gpus_of(session, tasks).clamp(0, u32::MAX as i64) as u32;
            let mut islands: Vec<u32> = session
                .snapshot
                .node(node)
                .gpus
                .iter()
                .map(|g| g.nvlink_domain)
                .collect();
            islands.sort_unstable();
            islands.dedup();
            // The fullest island that still holds the whole sub-group.
            let best = islands
                .into_iter()
                .map(|i| (session.island_free(node, i), i))
                .filter(|&(free, _)| free >= want)
                .min();
            match best {
                Some((_, i)) => Some((node, i)),
                None => {
                    return Err(format!(
                        "no NVLink island of node {} has {want} free GPUs",
                        session.snapshot.node(node).name
                    ))
                }
            }
        }
    };
    let mut prev = island.map(|(node, _)| node);
    for &t in tasks {
        let node = place_one(
            session,
            stmt,
            t,
            Some(d),
            prev,
            island.map(|(_, i)| i),
            access,
            admissible,
        )?;
        prev = Some(node);
    }
    Ok(())
}

/// Places one task inside `within` (or anywhere), on `prev` when it has room, else on the best
/// node by the node order; with `island`, its GPUs come from that NVLink island. Returns the
/// node.
#[allow(clippy::too_many_arguments)]
fn place_one(
    session: &mut Session,
    stmt: &mut Statement,
    task: TaskId,
    within: Option<DomainId>,
    prev: Option<NodeId>,
    island: Option<u32>,
    access: ReservedNodes,
    admissible: &dyn Fn(&Session, TaskId) -> Result<(), String>,
) -> Result<NodeId, String> {
    admissible(session, task)?;
    let request = &session.snapshot.task(task).request;
    let usable = |session: &mut Session, n: NodeId| session.can_take(task, n, access, island);
    let node = match (prev, within) {
        (Some(p), _) if usable(session, p) => Some(p),
        (_, None) => session.find_node_with(task, access),
        (_, Some(d)) => {
            let t = &session.topology().expect("topology").topology;
            let nodes = t.domain(d).nodes.clone();
            // Closer to the previous member first: the more tiers of the ladder it shares with
            // it, the better (a spread gang fills one rack before the next).
            let ladder = t.ladders[t.tier(t.domain(d).tier).ladder].clone();
            let near = |t: &Topology, n: NodeId| {
                prev.map_or(0, |p| {
                    ladder
                        .iter()
                        .filter(|&&tier| {
                            t.domain_of(n.index(), tier) == t.domain_of(p.index(), tier)
                        })
                        .count()
                })
            };
            let mut best: Option<(std::cmp::Reverse<usize>, u64, NodeId)> = None;
            for n in nodes.into_iter().map(NodeId) {
                if usable(session, n) {
                    let t = &session.topology().expect("topology").topology;
                    let cand = (
                        std::cmp::Reverse(near(t, n)),
                        session.key_with(n, request),
                        n,
                    );
                    if best.is_none_or(|b| cand < b) {
                        best = Some(cand);
                    }
                }
            }
            best.map(|(_, _, n)| n)
        }
    };
    let node = node.ok_or_else(|| session.why_no_node(task, access))?;
    match island {
        Some(i) => session.allocate_in_island(stmt, task, node, i),
        None => session.allocate(stmt, task, node),
    }
    Ok(node)
}

/// For a gang with a required tier, the candidate domains of that tier for evictions (their
/// nodes, sorted), roomiest first, at most [`EVICTION_DOMAINS`]; `None` for a gang without one
/// (or with an invalid one, which allocate reports).
pub(super) fn eviction_domains(session: &Session, job: &Job) -> Option<Vec<Vec<NodeId>>> {
    let topo = session.topology()?;
    let required = reach(&topo.topology, &job.topology, "spec.topology")
        .ok()?
        .0
        .required?;
    let t = &topo.topology;
    let mut domains: Vec<DomainId> = (0..t.domains.len() as u32)
        .map(DomainId)
        .filter(|&d| t.domain(d).tier == required)
        .collect();
    domains.sort_by_key(|&d| (std::cmp::Reverse(topo.free(d)), d));
    domains.truncate(EVICTION_DOMAINS);
    Some(
        domains
            .into_iter()
            .map(|d| t.domain(d).nodes.iter().map(|&n| NodeId(n)).collect())
            .collect(),
    )
}

/// Domains searched for victims per starving gang: each is a full dry run.
const EVICTION_DOMAINS: usize = 16;

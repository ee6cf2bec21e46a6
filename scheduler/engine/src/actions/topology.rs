//! Topology-aware gang placement. A gang goes to the tightest tier at which one domain holds
//! it (node, NVLink domain, rack, spine, ..., up to its required tier), trying at each tier the
//! domains the framework's [`crate::framework::Domains`] policy chooses among those that could
//! hold it, in its order. Each candidate is tried in a statement and only the one that works is
//! kept. Inside it, the sub-groups (e.g. tensor-parallel groups) are assigned to domains of
//! their own tiers by a bounded search ([`sub_groups`]), and consecutive ranks go to the same
//! node; a sub-group that requires an NVLink tier on a node without a multi-node NVLink domain
//! gets its GPUs inside one of the node's NVLink islands. A preferred tier the topology does not
//! know is dropped with a warning condition; only an unknown required tier is an error.

use basalt_topology::{DomainId, TierId, Topology};

use super::placement_order;
use crate::framework::{DomainAsk, DomainPurpose};
use crate::model::{Job, NodeId, TaskId};
use crate::session::{ReservedNodes, Session, Statement, TaskStatus};
use crate::snapshot::TopologySpec;
use sub_groups::place_members;

mod sub_groups;

pub const INVALID_TOPOLOGY: &str = "InvalidTopology";
/// The condition type of a topology warning: the job is scheduled, the warning says how.
pub const TOPOLOGY_WARNING: &str = "TopologyWarning";
/// A preferred tier the topology does not know: the preference does not apply.
pub const UNKNOWN_PREFERRED_TIER: &str = "UnknownPreferredTier";

/// Domains tried per tier before moving one tier up: the aggregate free GPUs say a domain may
/// fit; the dry run says whether it does.
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
    // Members that each take a share of a device pack by device, not by rack: without a
    // constraint they need no domain (whose free-device counts a share would only pass).
    let snap = session.snapshot;
    if !constrained && job.tasks.iter().all(|&t| snap.task(t).share.is_some()) {
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
        .map(|&t| {
            session
                .snapshot
                .devices_asked(&session.snapshot.task(t).request) as i64
        })
        .fold(0, i64::saturating_add)
}

/// Whether domain `d` has a node for each of `members` when no two may share one (hostname
/// anti-affinity on their own label), each with the whole GPUs the smallest of them asks: a
/// domain without is not tried, which spares placing and undoing the members that fit (a
/// single-node domain of a finer tier would take one member each time).
fn room_for_one_per_node(session: &Session, members: &[TaskId], d: DomainId) -> bool {
    let snap = session.snapshot;
    let want = (members.iter())
        .map(|&t| snap.devices_asked(&snap.task(t).request))
        .min()
        .unwrap_or(0);
    let t = &session.topology().expect("topology").topology;
    let with_room = (t.domain(d).nodes.iter())
        .filter(|&&n| session.free_gpus(NodeId(n)) >= want)
        .count();
    with_room >= members.len()
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
    // A gang whose members must spread is not packed into one preferred domain first: its
    // rule asks for the opposite, and every such try would fail member by member.
    let spreads = gang.required.is_none() && members.iter().any(|&t| session.must_spread(t));
    let separate = session.one_per_node(&members[..need]);
    for &tier in gang.tiers.iter().filter(|_| !spreads) {
        let coarser: Vec<TierId> = gang
            .tiers
            .iter()
            .copied()
            .skip_while(|&t| t != tier)
            .skip(1)
            .collect();
        let ask = DomainAsk {
            purpose: DomainPurpose::Gang,
            job: job.id,
            tier,
            gpus: need_gpus,
            coarser: &coarser,
            limit: TRIES_PER_TIER,
        };
        let candidates = {
            let topo = session.topology().expect("placed through the topology");
            let t = &topo.topology;
            let mut possible = topo.fitting(tier, need_gpus).filter(|&d| {
                held.iter().all(|n| t.domain_of(n.index(), tier) == d)
                    // Nodes missing a coarser tier's label stand alone there: a finer domain of
                    // them may span several domains of the required tier.
                    && gang.required.is_none_or(|r| t.enclosing(d, r).is_some())
            });
            choose_domains(session, &ask, &mut possible)
        };
        for d in candidates {
            if separate && !room_for_one_per_node(session, &members[..need], d) {
                let t = &session.topology().expect("topology").topology;
                tried.push(t.domain(d).name.clone());
                continue;
            }
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

/// The domains the policy chooses among `candidates`, at most `ask.limit`.
fn choose_domains(
    session: &Session,
    ask: &DomainAsk,
    candidates: &mut dyn Iterator<Item = DomainId>,
) -> Vec<DomainId> {
    let mut chosen = (session.framework().domains).choose(session, ask, candidates);
    chosen.truncate(ask.limit);
    chosen
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

/// Places one task inside `within` (or anywhere), on `prev` when it has room (consecutive ranks
/// together outrank preferences), else on the nearest best node by the node order and the
/// task's preferences; with `island`, its GPUs come from that NVLink island. Returns the node.
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
            let topology = session.topology().expect("topology").topology.clone();
            let t = &*topology;
            // Closer to the previous member first: the more tiers of the ladder it shares with
            // it, the better (a spread gang fills one rack before the next).
            let ladder = &t.ladders[t.tier(t.domain(d).tier).ladder];
            let near = |n: NodeId| {
                prev.map_or(0, |p| {
                    (ladder.iter())
                        .filter(|&&tier| {
                            t.domain_of(n.index(), tier) == t.domain_of(p.index(), tier)
                        })
                        .count()
                })
            };
            let preferences = session.preferences(task);
            let able = session.able_in(task, d, &t.domain(d).nodes, access, island);
            let mut candidates = able.clone();
            if preferences.is_none() {
                // A node's score is then its key after placing: per nearness and capacity
                // class, only the first node by its key now can win (see `order_key`).
                let mut heads: Vec<(usize, u32, (u64, NodeId))> = Vec::new();
                for &n in &able {
                    let ((class, key), near) = (session.order_key(n), near(n));
                    match heads.iter_mut().find(|h| (h.0, h.1) == (near, class)) {
                        Some(h) => h.2 = h.2.min((key, n)),
                        None => heads.push((near, class, (key, n))),
                    }
                }
                candidates = heads.into_iter().map(|(_, _, (_, n))| n).collect();
            }
            let mut best: Option<(std::cmp::Reverse<usize>, i128, NodeId)> = None;
            for n in candidates {
                let cand = (
                    std::cmp::Reverse(near(n)),
                    session.placement_score(task, n, request, preferences.as_ref()),
                    n,
                );
                if best.is_none_or(|b| cand < b) {
                    best = Some(cand);
                }
            }
            if let Some((_, _, n)) = best {
                match island {
                    Some(i) => session.allocate_in_island(stmt, task, n, i),
                    None => session.allocate(stmt, task, n),
                }
                // The next member alike may start from these (see `Session::able_in`).
                session.keep_able(task, d, access, island, able, n);
                return Ok(n);
            }
            None
        }
    };
    let node = node.ok_or_else(|| session.why_no_node(task, access))?;
    match island {
        Some(i) => session.allocate_in_island(stmt, task, node, i),
        None => session.allocate(stmt, task, node),
    }
    Ok(node)
}

/// For a gang with a required tier, the domains of that tier to search for victims (their nodes,
/// sorted), as the policy chooses them, at most [`EVICTION_DOMAINS`]; `None` for a gang without
/// one (or with an invalid one, which allocate reports).
pub(super) fn eviction_domains(session: &Session, job: &Job) -> Option<Vec<Vec<NodeId>>> {
    let topo = session.topology()?;
    let required = reach(&topo.topology, &job.topology, "spec.topology")
        .ok()?
        .0
        .required?;
    let ask = DomainAsk {
        purpose: DomainPurpose::Evictions,
        job: job.id,
        tier: required,
        gpus: 0,
        coarser: &[],
        limit: EVICTION_DOMAINS,
    };
    let mut every = topo.fitting(required, i64::MIN);
    let domains = choose_domains(session, &ask, &mut every);
    let t = &topo.topology;
    Some(
        domains
            .into_iter()
            .map(|d| t.domain(d).nodes.iter().map(|&n| NodeId(n)).collect())
            .collect(),
    )
}

/// Domains searched for victims per starving gang: each is a full dry run.
const EVICTION_DOMAINS: usize = 16;

/// For a running gang with a required tier, the nodes of the domain of that tier it runs in
/// (sorted; none when it holds no node), where its extra members may take victims; `None` for
/// a gang without one, whose extras go anywhere.
pub(super) fn running_domain(session: &Session, job: &Job) -> Option<Vec<NodeId>> {
    let topo = session.topology()?;
    let required = reach(&topo.topology, &job.topology, "spec.topology")
        .ok()?
        .0
        .required?;
    let held = job
        .tasks
        .iter()
        .find_map(|&t| match session.task_status(t) {
            TaskStatus::Pending | TaskStatus::Evicted(_) => None,
            s => s.node(),
        });
    let t = &topo.topology;
    let mut nodes: Vec<NodeId> = held
        .map(|n| t.domain(t.domain_of(n.index(), required)).nodes.clone())
        .unwrap_or_default()
        .into_iter()
        .map(NodeId)
        .collect();
    nodes.sort_unstable();
    Some(nodes)
}

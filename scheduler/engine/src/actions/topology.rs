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

use super::unplaced::{GangFailure, MemberFailure, ShortWhy, TierError};
use super::{placement_order, JobCondition};
use crate::framework::{DomainAsk, DomainPurpose};
use crate::model::{Job, NodeId, TaskId};
use crate::session::{ReservedNodes, Session, Statement, TaskStatus};
use crate::snapshot::TopologySpec;
use sub_groups::place_members;

mod sub_groups;

/// The condition type of a topology warning: the job is scheduled, the warning says how.
pub const TOPOLOGY_WARNING: &str = "TopologyWarning";
/// A preferred tier the topology does not know: the preference does not apply.
pub const UNKNOWN_PREFERRED_TIER: &str = "UnknownPreferredTier";

/// Whether a member may be placed at all, before any node is searched (its queue's say).
pub(super) type Admissible<'a> = dyn Fn(&Session, TaskId) -> Result<(), MemberFailure> + 'a;

/// What the placements of one gang's members share, handed down as one value: the job, its
/// sub-groups' reach, the domain they go in (`None`: anywhere), which reserved nodes they may
/// use, and the job's side of each member's admission.
#[derive(Clone, Copy)]
struct Placement<'a> {
    job: &'a Job,
    subs: &'a [Reach],
    within: Option<DomainId>,
    access: ReservedNodes,
    admissible: &'a Admissible<'a>,
}

impl Placement<'_> {
    /// The same placement inside `within`.
    fn inside(self, within: Option<DomainId>) -> Self {
        Placement { within, ..self }
    }
}

/// Domains tried per tier before moving one tier up: the aggregate free GPUs say a domain may
/// fit; the dry run says whether it does.
const TRIES_PER_TIER: usize = 3;

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
) -> Result<(Reach, Option<TierError>), TierError> {
    let unknown = |which: &'static str, name: &String| TierError::Unknown {
        field: field.to_string(),
        which,
        name: name.clone(),
        tiers: topo.tier_names().iter().map(|t| t.to_string()).collect(),
    };
    let required = match &spec.required {
        Some(n) => Some(topo.tier_id(n).ok_or_else(|| unknown("required", n))?),
        None => None,
    };
    let mut warning = None;
    let preferred = spec.preferred.as_ref().and_then(|n| {
        let id = topo.tier_id(n);
        if id.is_none() {
            warning = Some(unknown("preferred", n));
        }
        id
    });
    let ladder = topo.ladder_for(required.into_iter().chain(preferred));
    let mut tiers: Vec<TierId> = ladder.iter().rev().copied().collect();
    if let Some(r) = required {
        match tiers.iter().position(|&t| t == r) {
            Some(pos) => tiers.truncate(pos + 1),
            None => {
                let field = field.to_string();
                return Err(TierError::TwoLadders { field });
            }
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
    admissible: &Admissible,
) -> Option<Result<Statement, GangFailure>> {
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
    let invalid = |e: TierError| Some(Err(GangFailure::InvalidTopology(e)));
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
    for warning in warnings {
        session.add_condition(job.id, JobCondition::UnknownPreferredTier(warning));
    }
    let at = Placement {
        job,
        subs: &subs,
        within: None,
        access,
        admissible,
    };
    Some(place_gang(session, &gang, at))
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
    gang: &Reach,
    at: Placement,
) -> Result<Statement, GangFailure> {
    let (fw, job) = (session.framework(), at.job);
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
    let mut last: Option<MemberFailure> = None;
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
            let outcome = place_members(session, &mut stmt, at.inside(Some(d)), &members);
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
        let outcome = place_members(session, &mut stmt, at, &members);
        if fw.job_ready(session, job.id) && !stmt.is_empty() {
            return Ok(stmt);
        }
        let got = session.holding(job.id);
        session.discard(stmt);
        let why = (outcome.err().or(last)).map_or(ShortWhy::MembersDoNotFit, ShortWhy::Member);
        return Err(GangFailure::Short {
            placed: got,
            min: job.min_member,
            why,
        });
    }
    let required = gang.required.expect("checked above");
    Err(GangFailure::Short {
        placed: holding,
        min: job.min_member,
        why: no_domain_holds(session, required, need_gpus, tried, last),
    })
}

/// Why no domain of the `required` tier held the gang: none has its `gpus` free (the roomiest
/// says by how much), or the domains `tried` did not (the `last` one's reason).
fn no_domain_holds(
    session: &Session,
    required: TierId,
    gpus: i64,
    tried: Vec<String>,
    last: Option<MemberFailure>,
) -> ShortWhy {
    let topo = session.topology().expect("placed through the topology");
    let tier = topo.topology.tier(required).name.clone();
    if !tried.is_empty() {
        return ShortWhy::NoDomainHolds { tier, tried, last };
    }
    let roomiest =
        (topo.roomiest(required)).map(|d| (topo.topology.domain(d).name.clone(), topo.free(d)));
    ShortWhy::NoRoomyDomain {
        tier,
        gpus,
        roomiest,
    }
}

/// The domains the policy chooses among `candidates`, at most `ask.limit`.
fn choose_domains(
    session: &Session,
    ask: &DomainAsk,
    candidates: &mut dyn Iterator<Item = DomainId>,
) -> Vec<DomainId> {
    let mut chosen = (session.framework().domains).choose(&session.view(), ask, candidates);
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
    at: Placement,
    tasks: &[TaskId],
    d: DomainId,
    pin: Option<NodeId>,
) -> Result<(), MemberFailure> {
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
                None => return Err(MemberFailure::NoIsland { node, want }),
            }
        }
    };
    let (at, mut prev) = (at.inside(Some(d)), island.map(|(node, _)| node));
    for &t in tasks {
        prev = Some(place_one(
            session,
            stmt,
            at,
            t,
            prev,
            island.map(|(_, i)| i),
        )?);
    }
    Ok(())
}

/// Places one task inside `at.within` (or anywhere), on `prev` when it has room (consecutive
/// ranks together outrank preferences), else on the nearest best node by the node order and
/// the task's preferences; with `island`, its GPUs come from that NVLink island. Returns the
/// node.
fn place_one(
    session: &mut Session,
    stmt: &mut Statement,
    at: Placement,
    task: TaskId,
    prev: Option<NodeId>,
    island: Option<u32>,
) -> Result<NodeId, MemberFailure> {
    let (within, access) = (at.within, at.access);
    (at.admissible)(session, task)?;
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
    let node = node.ok_or_else(|| MemberFailure::NoNode(session.why_no_node(task, access)))?;
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

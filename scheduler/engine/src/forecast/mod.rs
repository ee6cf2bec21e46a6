//! The forecast: when each waiting gang will start, found by running the engine forward on a
//! cluster's specs. Running pods end when their [`End`] says; nothing new arrives. Cycles run
//! as the daemon's and the replay's do: one at `now_ms`, then one a period after any cycle that
//! changed something, and one at the first period boundary at or after each end; between
//! them the cluster is a fixed point of the scheduler, so nothing is skipped. Every action of
//! the framework runs, reclaim and preempt included: an evicted gang goes back to waiting (all
//! its pods) and runs its whole run time again when it restarts, as the replay does.
//!
//! Pure: time is `ClusterSpec::now_ms`, the budget is counted in cycles, a horizon and work
//! (nodes and pods per cycle, what a cycle's CPU time grows with), never in wall time, so the
//! same input gives the same forecast.

mod history;
mod world;
pub use history::History;
use world::World;

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::devices::{HeldDevice, Sharing};
use crate::{schedule, ClusterSpec, Framework, JobPhase, Plan, PodPhase, PodSpec, ResourceNames};
use crate::{GroupSpec, NominationReason, SnapshotBuilder, SnapshotError, Warm};

/// How a forecast start (or a pod's end) is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every end it depends on is stated (a deadline, a declared run time).
    Exact,
    /// Some end it depends on is learned or unknown-but-irrelevant: the start is a bound.
    Estimate,
    /// It does not start within what can be bounded (an end nobody knows is ahead of it, or
    /// the budget ran out).
    Unknown,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::Estimate => "estimate",
            Method::Unknown => "unknown",
        }
    }
}

/// When a pod ends: a running pod at an instant, a waiting one a run time after it binds. A
/// running pod whose start is known runs as long again when evicted and started again.
/// `method` is `Exact` or `Estimate` (a pod whose end is unknown has no `End`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    At { ms: i64, method: Method },
    After { ms: i64, method: Method },
}

/// What a forecast may spend, in deterministic units.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The scheduling period: cycles fall on its multiples after the first.
    pub period_ms: i64,
    /// Cycles at most; gangs not started by then are `Unknown`.
    pub max_cycles: u32,
    /// How far ahead of `now_ms` to look.
    pub horizon_ms: i64,
    /// Work at most, counted per cycle as its snapshot's nodes plus pods (a cycle's cost
    /// grows with both): the bound in CPU time. The first cycle always runs.
    pub max_work: u64,
}

/// The default work bound: 5 cycles at 10,000 nodes and 130,000 pods (80,000 running, 50,000
/// waiting), the first one (which always runs) and 4 forward, under 1 s of CPU there; a
/// cluster a tenth that size gets 50. At that size the world's setup and the first cycle (a
/// snapshot assembled, a session opened on every task) cost most of it (`basalt-sim bench
/// --forecast`).
pub const DEFAULT_MAX_WORK: u64 = 800_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            period_ms: 1000,
            max_cycles: 200,
            horizon_ms: 30 * 24 * 3600 * 1000,
            max_work: DEFAULT_MAX_WORK,
        }
    }
}

/// One waiting gang's forecast.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobForecast {
    /// `namespace/name` of the PodGroup.
    pub job: String,
    /// When its gang is complete (`None`: not within the forecast).
    pub start_ms: Option<i64>,
    pub method: Method,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    pub now_ms: i64,
    /// Every PodGroup whose gang had not started, by name.
    pub jobs: Vec<JobForecast>,
    pub cycles: u32,
    /// The pod ends it applied.
    pub ends: u32,
    /// The work its cycles counted (see [`Limits::max_work`]; a run whose decided first
    /// cycle starts every waiting gang counts the spec's nodes and pods instead, building no
    /// snapshot).
    pub work: u64,
}

impl Forecast {
    pub fn job(&self, name: &str) -> Option<&JobForecast> {
        (self
            .jobs
            .binary_search_by(|j| j.job.as_str().cmp(name))
            .ok())
        .map(|i| &self.jobs[i])
    }
}

/// Runs the engine forward from `spec` and says when each waiting gang starts. `ends` holds
/// per pod (`namespace/name`) its end when known; a running pod without one never ends.
/// `framework` makes the cycles' framework for the snapshot's resource names; its reports and
/// explanations are turned off here (they change no decision, nobody reads them, and they
/// cost as much as the decisions).
pub fn forecast(
    spec: ClusterSpec,
    framework: impl FnOnce(&ResourceNames) -> Framework,
    ends: &HashMap<String, End>,
    limits: Limits,
) -> Result<Forecast, SnapshotError> {
    forecast_shared(spec, Vec::new(), None, framework, ends, limits)
}

/// [`forecast`] of `spec` with `shared` among its pods: specs its caller keeps too (a daemon's
/// kept conversions), read in place and copied only when the run changes them.
///
/// `decided` is the plan a scheduler already made for this very cluster at `now_ms` with the
/// framework `framework` makes (the daemon's cycle whose objects these are): the run takes it
/// as its first cycle instead of deciding it again. The engine is pure and `Warm` only caches,
/// so it is the plan the first cycle would make, and the forecast is the same; that cycle is
/// most of a run whose first cycle places a backlog.
pub fn forecast_shared(
    mut spec: ClusterSpec,
    mut shared: Vec<Arc<PodSpec>>,
    mut decided: Option<&Plan>,
    framework: impl FnOnce(&ResourceNames) -> Framework,
    ends: &HashMap<String, End>,
    limits: Limits,
) -> Result<Forecast, SnapshotError> {
    let now = spec.now_ms;
    shared.extend(std::mem::take(&mut spec.pods).into_iter().map(Arc::new));
    if nothing_waits(now, &shared, &spec.groups, ends) {
        // What the run below would find, without copying every spec into its world.
        return Ok(Forecast {
            now_ms: now,
            ..Forecast::default()
        });
    }
    if let Some(jobs) =
        decided.and_then(|plan| all_start_now(now, &shared, &spec.groups, ends, plan))
    {
        // Likewise: one cycle, the one decided.
        let work = (spec.nodes.len() + shared.len()) as u64;
        return Ok(Forecast {
            now_ms: now,
            jobs,
            cycles: 1,
            ends: 0,
            work,
        });
    }
    let period = limits.period_ms.max(1);
    let queues = spec.queues;
    let mut world = World::new(
        &spec.device_resource,
        spec.nodes,
        shared,
        spec.groups,
        ends,
        now,
    )?;
    world.builder.set_namespaces(spec.namespaces);
    world.builder.set_dra(spec.dra);
    world.end_until(now);
    let mut waiting: BTreeMap<world::Key, Option<(i64, Method)>> = (world.groups.keys())
        .filter(|g| !world.started(g))
        .map(|g| (g.clone(), None))
        .collect();
    let mut warm = Warm::default();
    let mut framework = Some(framework);
    let mut made = None;
    let (mut t, mut cycles, mut work) = (now, 0u32, 0u64);
    while cycles < limits.max_cycles && waiting.values().any(Option::is_none) {
        let snapshot = world.builder.build(t, &queues)?;
        let cost = (snapshot.nodes.len() + snapshot.tasks.len()) as u64;
        if cycles > 0 && work.saturating_add(cost) > limits.max_work {
            break;
        }
        work = work.saturating_add(cost);
        let plan = match decided.take() {
            Some(plan) => Cow::Borrowed(plan),
            None => {
                // The nodes never change here, so neither do the resource names.
                if let Some(make) = framework.take() {
                    made = Some(quiet(make(&snapshot.resources)));
                }
                let made = made.as_ref().expect("made above");
                Cow::Owned(schedule(snapshot, made, &mut warm))
            }
        };
        cycles += 1;
        // Starts depend on every end applied so far, and on running pods nobody can end.
        let method = match world.unknown.len() {
            0 => world.applied,
            _ => world.applied.max(Method::Estimate),
        };
        let changed = world.apply(&plan, t, ends);
        for (name, start) in waiting.iter_mut().filter(|(_, s)| s.is_none()) {
            if world.started(name) {
                *start = Some((t, method));
            }
        }
        let next = match changed {
            true => Some(t.saturating_add(period)),
            false => (world.next_end()).map(|e| (e + period - 1).div_euclid(period) * period),
        };
        let Some(next) = next.filter(|&n| n.saturating_sub(now) <= limits.horizon_ms) else {
            break;
        };
        world.end_until(next);
        t = next;
    }
    let jobs = (waiting.into_iter())
        .map(|(job, start)| JobForecast {
            job: job.to_string(),
            start_ms: start.map(|(t, _)| t),
            method: start.map_or(Method::Unknown, |(_, m)| m),
        })
        .collect();
    Ok(Forecast {
        now_ms: now,
        jobs,
        cycles,
        ends: world.ends_applied,
        work,
    })
}

/// `fw` with every output no decision depends on turned off.
fn quiet(mut fw: Framework) -> Framework {
    fw.report_queues = false;
    fw.explain_failures = false;
    fw.report_settled_groups = false;
    fw
}

/// Whether no gang waits, now or once the ends due now are applied: every group complete
/// (`World::started`: not completed, at least `minMember` of its pods on a node) and no
/// running pod's end due at `now` (it could take a member away). Then the forecast is empty:
/// no cycle runs and no end applies. The common case of a daemon with nothing pending, where
/// building the world is most of a run's cost.
fn nothing_waits(
    now: i64,
    pods: &[Arc<PodSpec>],
    groups: &[GroupSpec],
    ends: &HashMap<String, End>,
) -> bool {
    let bound = bound_members(pods);
    let complete = |g: &GroupSpec| {
        let on_nodes = bound.get(&(&*g.namespace, &*g.name)).copied().unwrap_or(0);
        gang_complete(g.phase, g.min_member, on_nodes)
    };
    groups.iter().all(complete) && !an_end_is_due(now, pods, ends)
}

/// Per group (namespace, name) how many of its pods are on a node.
fn bound_members(pods: &[Arc<PodSpec>]) -> HashMap<(&str, &str), i64> {
    let mut bound: HashMap<(&str, &str), i64> = HashMap::new();
    for p in pods {
        if let (Some(group), Some(_)) = (&p.group, &p.node) {
            *bound.entry((&p.namespace, group)).or_default() += 1;
        }
    }
    bound
}

/// Whether a running pod's end is due at `now` (it could take a member away).
fn an_end_is_due(now: i64, pods: &[Arc<PodSpec>], ends: &HashMap<String, End>) -> bool {
    let due = |p: &PodSpec| {
        holds_node(p)
            && match ends.get(&format!("{}/{}", p.namespace, p.name)) {
                Some(&End::At { ms, .. }) => ms <= now,
                Some(&End::After { ms, .. }) => {
                    (p.started_ms).is_some_and(|s| s.saturating_add(ms) <= now)
                }
                None => false,
            }
    };
    !ends.is_empty() && pods.iter().any(|p| due(p))
}

/// The forecast's jobs when the `decided` first cycle completes every waiting gang, evicts
/// nothing, ends no group and no end is due now: each starts at `now`, known as well as the
/// ends of the pods on nodes are. What the run would find after that cycle, without building
/// its world (the daemon's cycle that places a whole backlog); `None` otherwise.
fn all_start_now(
    now: i64,
    pods: &[Arc<PodSpec>],
    groups: &[GroupSpec],
    ends: &HashMap<String, End>,
    decided: &Plan,
) -> Option<Vec<JobForecast>> {
    let ending = |s: &crate::PodGroupStatus| s.phase == JobPhase::Completed;
    if !decided.evictions.is_empty() || decided.pod_groups.iter().any(ending) {
        return None;
    }
    let before = bound_members(pods);
    let mut after = before.clone();
    let by_name: HashMap<(&str, &str), &PodSpec> = (pods.iter())
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), &**p))
        .collect();
    let mut placed = HashSet::new();
    for b in &decided.bindings {
        let (namespace, name) = b.pod.split_once('/')?;
        let p = by_name.get(&(namespace, name))?;
        if let (Some(group), None, true) = (&p.group, &p.node, placed.insert((namespace, name))) {
            *after.entry((&p.namespace, group)).or_default() += 1;
        }
    }
    let mut jobs = Vec::new();
    for g in groups {
        let on_nodes = |counts: &HashMap<(&str, &str), i64>| {
            let n = counts.get(&(g.namespace.as_str(), g.name.as_str()));
            gang_complete(g.phase, g.min_member, n.copied().unwrap_or(0))
        };
        match (on_nodes(&before), on_nodes(&after)) {
            (true, _) => {}
            (false, true) => jobs.push(format!("{}/{}", g.namespace, g.name)),
            (false, false) => return None,
        }
    }
    if an_end_is_due(now, pods, ends) {
        return None;
    }
    // As the world counts them: a running pod's end is known at an instant, or from its start.
    let known = |p: &PodSpec| match ends.get(&format!("{}/{}", p.namespace, p.name)) {
        Some(End::At { .. }) => true,
        Some(End::After { .. }) => p.started_ms.is_some(),
        None => false,
    };
    let method = match pods.iter().filter(|p| holds_node(p)).all(|p| known(p)) {
        true => Method::Exact,
        false => Method::Estimate,
    };
    jobs.sort();
    jobs.dedup();
    let start = |job| JobForecast {
        job,
        start_ms: Some(now),
        method,
    };
    Some(jobs.into_iter().map(start).collect())
}

/// Whether a gang has started: not completed, and at least `minMember` (one at least) of its
/// pods on a node.
fn gang_complete(phase: JobPhase, min_member: i64, on_nodes: i64) -> bool {
    phase != JobPhase::Completed && on_nodes >= min_member.max(1)
}

/// Whether a pod holds its node's capacity until it ends (what an [`End`] applies to).
fn holds_node(p: &PodSpec) -> bool {
    p.node.is_some() && matches!(p.phase, PodPhase::Pending | PodPhase::Running)
}

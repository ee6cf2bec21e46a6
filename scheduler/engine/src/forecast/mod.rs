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
pub use history::History;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

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
    /// The work its cycles counted (see [`Limits::max_work`]).
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

/// The cluster as the forecast moves it: the builder holds every spec (told of each change),
/// the world what it reads of them and the pending ends.
struct World {
    builder: SnapshotBuilder,
    /// Per pod by `namespace/name`: where the builder holds it, its group, whether it is bound.
    pods: HashMap<String, PodAt>,
    /// Per group by `namespace/name`: what its start depends on.
    groups: BTreeMap<String, GroupAt>,
    /// Per group its pods' keys.
    members: HashMap<String, Vec<String>>,
    /// Per group how many of its pods hold a node (what [`World::started`] counts).
    bound: HashMap<String, u32>,
    /// Known ends of running pods: (instant, pod, the pod's epoch when pushed, method).
    heap: BinaryHeap<Reverse<(i64, String, u32, Method)>>,
    /// Per pod, how often it was evicted: an end pushed before is void.
    epochs: HashMap<String, u32>,
    /// Running pods whose end nobody knows.
    unknown: HashSet<String>,
    /// Per pod running at the start with an end at an instant, its run time from its start:
    /// evicted and started again, it runs that long again (its deadline restarts too).
    runs: HashMap<String, i64>,
    /// How each node shares its devices (what a binding's devices mean).
    sharing: HashMap<String, Sharing>,
    /// The worst method of the ends applied so far.
    applied: Method,
    ends_applied: u32,
}

/// What the forecast reads of a pod; its spec is the builder's alone (one copy of 100,000
/// pods, not two).
struct PodAt {
    namespace: String,
    name: String,
    /// Its group's `namespace/name`.
    group: Option<String>,
    /// It holds a node.
    bound: bool,
}

/// What the forecast reads of a PodGroup; its spec is the builder's alone.
struct GroupAt {
    namespace: String,
    name: String,
    min_member: i64,
    phase: JobPhase,
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
    let now = spec.now_ms;
    let period = limits.period_ms.max(1);
    let queues = spec.queues;
    let mut world = World::new(spec.nodes, spec.pods, spec.groups, ends, now)?;
    world.builder.set_namespaces(spec.namespaces);
    world.builder.set_dra(spec.dra);
    world.end_until(now);
    let mut waiting: BTreeMap<String, Option<(i64, Method)>> = (world.groups.keys())
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
        // The nodes never change here, so neither do the resource names.
        if let Some(make) = framework.take() {
            made = Some(quiet(make(&snapshot.resources)));
        }
        let plan = schedule(snapshot, made.as_ref().expect("made above"), &mut warm);
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
            job,
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

impl World {
    fn new(
        nodes: Vec<crate::NodeSpec>,
        pods: Vec<PodSpec>,
        groups: Vec<GroupSpec>,
        ends: &HashMap<String, End>,
        now: i64,
    ) -> Result<World, SnapshotError> {
        let sharing = (nodes.iter())
            .map(|n| (n.name.clone(), n.sharing))
            .collect();
        let mut world = World {
            builder: SnapshotBuilder::new(nodes)?,
            pods: HashMap::with_capacity(pods.len()),
            groups: BTreeMap::new(),
            members: HashMap::new(),
            bound: HashMap::new(),
            heap: BinaryHeap::new(),
            epochs: HashMap::new(),
            unknown: HashSet::new(),
            runs: HashMap::new(),
            sharing,
            applied: Method::Exact,
            ends_applied: 0,
        };
        for g in groups {
            let at = GroupAt {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                min_member: g.min_member,
                phase: g.phase,
            };
            world
                .groups
                .insert(format!("{}/{}", g.namespace, g.name), at);
            world.builder.set_group(g);
        }
        for p in pods {
            let key = format!("{}/{}", p.namespace, p.name);
            let group = (p.group.as_ref()).map(|g| format!("{}/{g}", p.namespace));
            if let Some(group) = &group {
                world
                    .members
                    .entry(group.clone())
                    .or_default()
                    .push(key.clone());
                if p.node.is_some() {
                    *world.bound.entry(group.clone()).or_default() += 1;
                }
            }
            let holds =
                p.node.is_some() && matches!(p.phase, PodPhase::Pending | PodPhase::Running);
            if holds {
                match ends.get(&key) {
                    // An end already past (a deadline not yet enforced) is taken as now.
                    Some(&End::At { ms, method }) => {
                        if let Some(started) = p.started_ms {
                            world
                                .runs
                                .insert(key.clone(), ms.saturating_sub(started).max(0));
                        }
                        world.push_end(&key, ms.max(now), method)
                    }
                    // A run time without a start: from the pod's start, when known.
                    Some(&End::After { ms, method }) if p.started_ms.is_some() => {
                        let at = p.started_ms.unwrap_or(now).saturating_add(ms);
                        world.push_end(&key, at.max(now), method)
                    }
                    _ => {
                        world.unknown.insert(key.clone());
                    }
                }
            }
            let at = PodAt {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                group,
                bound: p.node.is_some(),
            };
            world.builder.set_pod(p);
            world.pods.insert(key, at);
        }
        Ok(world)
    }

    fn push_end(&mut self, pod: &str, at: i64, method: Method) {
        let epoch = self.epochs.get(pod).copied().unwrap_or(0);
        self.heap
            .push(Reverse((at, pod.to_string(), epoch, method)));
    }

    /// Whether a group's gang is complete: at least `minMember` of its pods hold a node.
    fn started(&self, group: &str) -> bool {
        let Some(g) = self.groups.get(group) else {
            return false;
        };
        let bound = self.bound.get(group).copied().unwrap_or(0);
        g.phase != JobPhase::Completed && bound as i64 >= g.min_member.max(1)
    }

    /// Takes the pod's spec out of the builder, changes it with `change` and hands it back:
    /// the builder sees one changed pod, and nothing is copied. Marks it bound or not.
    fn change_pod(&mut self, key: &str, bound: bool, change: impl FnOnce(&mut PodSpec)) {
        let Some(at) = self.pods.get_mut(key) else {
            return;
        };
        if at.bound != bound {
            at.bound = bound;
            if let Some(group) = &at.group {
                let count = self.bound.entry(group.clone()).or_default();
                match bound {
                    true => *count += 1,
                    false => *count = count.saturating_sub(1),
                }
            }
        }
        if let Some(mut spec) = self.builder.remove_pod(&at.namespace, &at.name) {
            change(&mut spec);
            self.builder.set_pod(spec);
        }
    }

    /// Sets a group's phase, here and in the builder.
    fn set_phase(&mut self, group: &str, phase: JobPhase) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.phase = phase;
        let spec = self.builder.group(&g.namespace, &g.name);
        if let Some(mut spec) = spec.filter(|s| s.phase != phase).cloned() {
            spec.phase = phase;
            self.builder.set_group(spec);
        }
    }

    /// Carries a plan out as the daemon would: evictions (the whole gang back to waiting),
    /// nominations onto freed capacity, bindings (each starting its pod's run time), phases.
    /// Says whether anything changed.
    fn apply(&mut self, plan: &Plan, t: i64, ends: &HashMap<String, End>) -> bool {
        let mut changed = false;
        let mut touched = Vec::new();
        for e in &plan.evictions {
            let group = (self.pods.get(&e.pod)).and_then(|p| p.group.clone());
            let keys = match &group {
                Some(g) => self.members.get(g).cloned().unwrap_or_default(),
                None => vec![e.pod.clone()],
            };
            for key in keys {
                changed |= self.unbind(&key);
            }
            if let Some(g) = group {
                self.set_phase(&g, JobPhase::Pending);
            }
        }
        for n in plan
            .nominations
            .iter()
            .filter(|n| n.reason == NominationReason::Evictions)
        {
            let Some(p) = self.pods.get(&n.pod).filter(|p| !p.bound) else {
                continue;
            };
            let spec = self.builder.pod(&p.namespace, &p.name);
            if spec.is_some_and(|s| s.nominated_node.as_deref() != Some(n.node.as_str())) {
                self.change_pod(&n.pod, false, |p| p.nominated_node = Some(n.node.clone()));
                changed = true;
            }
        }
        for b in &plan.bindings {
            let Some(p) = self.pods.get(&b.pod).filter(|p| !p.bound) else {
                continue;
            };
            if let Some(g) = &p.group {
                touched.push(g.clone());
            }
            let shares = self
                .sharing
                .get(&b.node)
                .is_some_and(|s| *s != Sharing::Exclusive);
            let named = !b.devices.is_empty() && b.devices.iter().all(|d| d.uuid.is_some());
            self.change_pod(&b.pod, true, |p| {
                p.node = Some(b.node.clone());
                p.phase = PodPhase::Running;
                p.gpu_ids = b.gpus.clone();
                p.started_ms = Some(t);
                p.nominated_node = None;
                if shares && named {
                    p.held_devices = (b.devices.iter())
                        .map(|d| HeldDevice {
                            uuid: d.uuid.clone().unwrap_or_default(),
                            memory_mib: d.memory_mib.unwrap_or(0),
                            cores: d.cores.unwrap_or(0),
                        })
                        .collect();
                }
            });
            match ends.get(&b.pod) {
                Some(&End::After { ms, method }) => {
                    self.push_end(&b.pod, t.saturating_add(ms), method)
                }
                // Started again after an eviction: its whole run time again, when known.
                Some(&End::At { ms, method }) => {
                    let at = match self.runs.get(&b.pod) {
                        Some(&run) => t.saturating_add(run),
                        None => ms.max(t),
                    };
                    self.push_end(&b.pod, at, method)
                }
                None => {
                    self.unknown.insert(b.pod.clone());
                }
            }
            changed = true;
        }
        for s in &plan.pod_groups {
            if (self.groups.get(&*s.name)).is_some_and(|g| g.phase != s.phase) {
                self.set_phase(&s.name, s.phase);
                changed = true;
            }
        }
        // A gang whose minimum is bound is running (the daemon's status writer says so).
        for name in touched {
            if self.started(&name) {
                self.set_phase(&name, JobPhase::Running);
            }
        }
        changed
    }

    /// Takes a pod off its node (evicted): it waits again, and its pending end is void.
    fn unbind(&mut self, key: &str) -> bool {
        if !self.pods.get(key).is_some_and(|p| p.bound) {
            return false;
        }
        self.change_pod(key, false, |p| {
            p.node = None;
            p.phase = PodPhase::Pending;
            p.gpu_ids.clear();
            p.held_devices.clear();
            p.nominated_node = None;
            p.started_ms = None;
        });
        *self.epochs.entry(key.to_string()).or_default() += 1;
        self.unknown.remove(key);
        true
    }

    /// The next known end still standing (stale ones dropped on the way).
    fn next_end(&mut self) -> Option<i64> {
        while let Some(Reverse((at, pod, epoch, _))) = self.heap.peek() {
            if self.current(pod, *epoch) {
                return Some(*at);
            }
            self.heap.pop();
        }
        None
    }

    fn current(&self, pod: &str, epoch: u32) -> bool {
        self.epochs.get(pod).copied().unwrap_or(0) == epoch
            && self.pods.get(pod).is_some_and(|p| p.bound)
    }

    /// Ends every pod whose end is at or before `t`: it leaves the cluster, and its group with
    /// its last pod (as a finished job's do).
    fn end_until(&mut self, t: i64) {
        while let Some(Reverse((at, pod, epoch, method))) = self.heap.peek().cloned() {
            if at > t {
                break;
            }
            self.heap.pop();
            if !self.current(&pod, epoch) {
                continue;
            }
            let gone = self.pods.remove(&pod).expect("current pods exist");
            self.builder.remove_pod(&gone.namespace, &gone.name);
            self.applied = self.applied.max(method);
            self.ends_applied += 1;
            let Some(group) = gone.group else {
                continue;
            };
            if let Some(count) = self.bound.get_mut(&group) {
                *count = count.saturating_sub(1);
            }
            let members = self.members.get_mut(&group);
            let left = members.map(|m| {
                m.retain(|k| *k != pod);
                m.len()
            });
            if left == Some(0) {
                self.members.remove(&group);
                self.bound.remove(&group);
                if let Some(g) = self.groups.remove(&group) {
                    self.builder.remove_group(&g.namespace, &g.name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> PodSpec {
        PodSpec {
            namespace: "ml".into(),
            name: name.into(),
            ours: true,
            group: Some("g".into()),
            node: node.map(Into::into),
            phase: PodPhase::Running,
            ..Default::default()
        }
    }

    /// The builder holds the only copy of each spec: a binding, an eviction and an end change
    /// the builder's pod, and the group's bound count follows them.
    #[test]
    fn the_builder_holds_the_specs_and_the_world_counts_bound_members() {
        let node = crate::NodeSpec {
            name: "n".into(),
            allocatable: [("cpu".to_string(), 8)].into(),
            ..Default::default()
        };
        let g = GroupSpec::new("ml", "g", 2);
        let pods = vec![pod("a", Some("n")), pod("b", None)];
        let mut world = World::new(vec![node], pods, vec![g], &HashMap::new(), 0).expect("valid");
        assert!(!world.started("ml/g"), "one of two bound");
        let plan = Plan {
            bindings: vec![crate::Binding {
                pod: "ml/b".into(),
                node: "n".into(),
                gpus: Vec::new(),
                devices: Vec::new(),
            }],
            ..Default::default()
        };
        assert!(world.apply(&plan, 5, &HashMap::new()));
        let b = world.builder.pod("ml", "b").expect("held by the builder");
        assert_eq!((b.node.as_deref(), b.started_ms), (Some("n"), Some(5)));
        assert!(world.started("ml/g"), "both bound");
        let phase = world.builder.group("ml", "g").map(|g| g.phase);
        assert_eq!(phase, Some(JobPhase::Running));
        assert!(world.unbind("ml/a"));
        assert_eq!(
            world.builder.pod("ml", "a").and_then(|a| a.node.clone()),
            None
        );
        assert!(!world.started("ml/g"));
    }
}

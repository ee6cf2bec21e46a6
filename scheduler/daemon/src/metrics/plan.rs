//! The gauges a cycle ends with, read from its snapshot and plan: PodGroups pending by reason,
//! per queue the oldest one's age and what its waiting pods ask for, gangs left partly bound,
//! gangs whose minimum the plan placed (their latency), and GPUs allocated and free in the
//! cluster and per topology domain.

use std::collections::{BTreeMap, HashMap, HashSet};

use basalt_engine::actions::UNSCHEDULABLE;
use basalt_engine::{Job, JobPhase, Plan, PodGroupStatus, Snapshot, TaskState, CPU_NAME};
use basalt_topology::Topology;

use super::{pairs, Metrics};
use crate::stranded::partly_bound;

/// The `reason` of a pending PodGroup without an `Unschedulable` condition.
pub const NO_REASON: &str = "None";

impl Metrics {
    /// Sets the plan's gauges and observes the gangs it completes; series of reasons, queues
    /// and domains gone since the last cycle are dropped.
    pub fn observe_plan(&self, snapshot: &Snapshot, plan: &Plan, topology: Option<&Topology>) {
        let jobs = jobs_of(snapshot, plan);
        self.pending_groups.clear();
        for (reason, n) in pending_by_reason(plan) {
            self.pending_groups
                .get_or_create(&pairs(&[("reason", reason)]))
                .set(n);
        }
        let partial = plan.pod_groups.iter().filter(|g| partly_bound(g)).count();
        self.partial_gangs.set(partial as i64);
        for seconds in placed_gangs(snapshot, plan, &jobs) {
            self.group_scheduling_latency.observe(seconds);
        }
        self.queue_waiting(snapshot, plan, &jobs);
        self.gpu_gauges(snapshot, plan, topology);
    }

    /// Per queue: the oldest waiting PodGroup's age, and what the waiting pods ask for.
    fn queue_waiting(&self, snapshot: &Snapshot, plan: &Plan, jobs: &[Option<&Job>]) {
        let bound: HashSet<&str> = plan.bindings.iter().map(|b| b.pod.as_str()).collect();
        let mut oldest: BTreeMap<&str, i64> = BTreeMap::new();
        let mut demand: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for (g, job) in plan.pod_groups.iter().zip(jobs) {
            let Some(job) = job.filter(|_| waiting(g)) else {
                continue;
            };
            let queue = snapshot.queue(job.queue).name.as_str();
            let age = snapshot.now_ms.saturating_sub(job.created_ms).max(0);
            let entry = oldest.entry(queue).or_default();
            *entry = (*entry).max(age);
            for &t in &job.tasks {
                let task = snapshot.task(t);
                if task.state != TaskState::Pending || bound.contains(&*task.name) {
                    continue;
                }
                for (id, v) in task.request.iter() {
                    let name = snapshot.resources.name(id);
                    *demand.entry((queue, name)).or_default() += v;
                }
            }
        }
        self.queue_oldest_pending.clear();
        for (queue, ms) in oldest {
            let labels = pairs(&[("queue", queue)]);
            (self.queue_oldest_pending.get_or_create(&labels)).set(ms as f64 / 1000.0);
        }
        self.queue_pending_demand.clear();
        for ((queue, resource), v) in demand {
            let labels = pairs(&[("queue", queue), ("resource", resource)]);
            (self.queue_pending_demand.get_or_create(&labels)).set(in_base_units(resource, v));
        }
    }

    /// GPUs allocated and free in the cluster and in each domain of the topology's tiers (the
    /// node tier and nodes standing alone left out; domains without GPUs too).
    fn gpu_gauges(&self, snapshot: &Snapshot, plan: &Plan, topology: Option<&Topology>) {
        let per_node = gpus_per_node(snapshot, plan);
        let (allocated, total) =
            (per_node.iter()).fold((0, 0), |(a, t), (na, nt)| (a + na, t + nt));
        self.gpus.clear();
        if total > 0 {
            self.set_gpus(&self.gpus, &[], allocated, total);
        }
        self.domain_gpus.clear();
        let Some(topology) = topology else {
            return;
        };
        let node_tier = topology.node_tier();
        for d in topology
            .domains
            .iter()
            .filter(|d| d.tier != node_tier && !d.alone)
        {
            let (allocated, total) = (d.nodes.iter())
                .filter_map(|&n| per_node.get(n as usize))
                .fold((0, 0), |(a, t), (na, nt)| (a + na, t + nt));
            if total > 0 {
                let tier = topology.tier(d.tier).name.as_str();
                let at = [("tier", tier), ("domain", d.name.as_str())];
                self.set_gpus(&self.domain_gpus, &at, allocated, total);
            }
        }
    }

    fn set_gpus(
        &self,
        family: &prometheus_client::metrics::family::Family<
            super::Labels,
            prometheus_client::metrics::gauge::Gauge,
        >,
        at: &[(&str, &str)],
        allocated: i64,
        total: i64,
    ) {
        for (state, n) in [("allocated", allocated), ("free", total - allocated)] {
            let mut labels = pairs(at);
            labels.push(("state".into(), state.into()));
            family.get_or_create(&labels).set(n);
        }
    }
}

/// The snapshot's job of each of the plan's PodGroups: the plan lists them in job order (some
/// left out), so one walk finds them without an index.
fn jobs_of<'s>(snapshot: &'s Snapshot, plan: &Plan) -> Vec<Option<&'s Job>> {
    let mut jobs = snapshot.jobs.iter();
    (plan.pod_groups.iter())
        .map(|g| {
            (jobs.by_ref()).find(|j| std::sync::Arc::ptr_eq(&j.name, &g.name) || j.name == g.name)
        })
        .collect()
}

/// Left Pending or Inqueue by the plan.
fn waiting(g: &PodGroupStatus) -> bool {
    matches!(g.phase, JobPhase::Pending | JobPhase::Inqueue)
}

/// Waiting PodGroups per reason of their `Unschedulable` condition.
fn pending_by_reason(plan: &Plan) -> BTreeMap<&str, i64> {
    let mut out = BTreeMap::new();
    for g in plan.pod_groups.iter().filter(|g| waiting(g)) {
        let reason = (g.conditions.iter())
            .find(|c| c.kind == UNSCHEDULABLE)
            .map_or(NO_REASON, |c| c.reason.as_str());
        *out.entry(reason).or_default() += 1;
    }
    out
}

/// Seconds from creation of each PodGroup whose minimum this plan's bindings complete (pods
/// without a group left out: `scheduling_latency_seconds` times them).
fn placed_gangs(snapshot: &Snapshot, plan: &Plan, jobs: &[Option<&Job>]) -> Vec<f64> {
    if plan.bindings.is_empty() {
        return Vec::new();
    }
    let bound: HashSet<&str> = plan.bindings.iter().map(|b| b.pod.as_str()).collect();
    let mut out = Vec::new();
    for (g, job) in plan.pod_groups.iter().zip(jobs) {
        let held = g.running.saturating_add(g.succeeded);
        let Some(job) = job else {
            continue;
        };
        if job.implicit || g.min_member == 0 || held < g.min_member {
            continue;
        }
        let now_bound = (job.tasks.iter())
            .filter(|&&t| bound.contains(&*snapshot.task(t).name))
            .count() as u32;
        if held.saturating_sub(now_bound) < g.min_member {
            let ms = snapshot.now_ms.saturating_sub(job.created_ms).max(0);
            out.push(ms as f64 / 1000.0);
        }
    }
    out
}

/// Per node (in snapshot order): GPUs allocated (in use when the snapshot was taken, or bound
/// by the plan) and GPUs in all.
fn gpus_per_node(snapshot: &Snapshot, plan: &Plan) -> Vec<(i64, i64)> {
    let mut used: Vec<u64> = snapshot.node_gpus_used.clone();
    used.resize(snapshot.nodes.len(), 0);
    if !plan.bindings.is_empty() {
        let index: HashMap<&str, usize> = (snapshot.nodes.iter().enumerate())
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        for b in &plan.bindings {
            if let Some(&i) = index.get(b.node.as_str()) {
                used[i] |= (b.gpus.iter())
                    .filter(|&&g| g < 64)
                    .fold(0, |m, &g| m | 1 << g);
            }
        }
    }
    (snapshot.nodes.iter().zip(used))
        .map(|(n, mask)| {
            let all = n.gpus.len().min(64);
            let mask = if all == 64 {
                mask
            } else {
                mask & ((1 << all) - 1)
            };
            (mask.count_ones() as i64, all as i64)
        })
        .collect()
}

/// Cores for cpu (the engine counts millicores), the engine's own unit for the rest (bytes,
/// counts).
pub fn in_base_units(resource: &str, v: i64) -> f64 {
    match resource {
        CPU_NAME => v as f64 / 1000.0,
        _ => v as f64,
    }
}

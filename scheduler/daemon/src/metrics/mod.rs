//! The scheduler's Prometheus metrics (`basalt_scheduler_*`): what each family means is in its
//! help text and in the README's table; `plan.rs` and `queues.rs` set the gauges a cycle ends
//! with. Counters get `_total` when encoded (OpenMetrics), so their names here have none.

use std::sync::atomic::{AtomicBool, AtomicU64};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

pub mod plan;
pub mod queues;

/// Label pairs of a series (`queue`, `resource`, ...).
pub type Labels = Vec<(String, String)>;
/// A gauge of fractional values (cores, shares, seconds).
pub type GaugeF = Gauge<f64, AtomicU64>;

/// Why the scheduler evicts: the engine's two actions and the rollback of a partly bound gang.
pub const EVICTION_ACTIONS: [&str; 3] = ["preempt", "reclaim", "gang_rollback"];
/// Why an eviction was not done: a PodDisruptionBudget refused it (429), or another API error.
pub const EVICTION_ERRORS: [&str; 2] = ["disruption_budget", "api_error"];

pub struct Metrics {
    /// The caches hold a full list: scheduling has started.
    pub ready: AtomicBool,
    pub cycle_duration: Histogram,
    /// Per `action` (enqueue, allocate, reclaim, preempt): its run inside the engine.
    pub action_duration: Family<Labels, Histogram>,
    pub binds: Counter,
    pub bind_errors: Counter,
    /// Per `action` ([`EVICTION_ACTIONS`]): pods evicted.
    pub evictions: Family<Labels, Counter>,
    /// Per `action` and `reason` ([`EVICTION_ERRORS`]): evictions asked and not done.
    pub eviction_errors: Family<Labels, Counter>,
    pub pending_pods: Gauge,
    /// Per `reason`: PodGroups the last plan left Pending or Inqueue, by the reason of their
    /// `Unschedulable` condition (`None` without one).
    pub pending_groups: Family<Labels, Gauge>,
    /// Gangs the last plan leaves with members bound but fewer than their minimum.
    pub partial_gangs: Gauge,
    /// Nodes whose bound pods hold more than they have (`overfull.rs`).
    pub nodes_over_capacity: Gauge,
    /// Pod creation to its successful bind, observed at the bind.
    pub scheduling_latency: Histogram,
    /// PodGroup creation to the cycle that placed its minimum.
    pub group_scheduling_latency: Histogram,
    /// Per `queue`: Basalt pods unbound after the last cycle.
    pub queue_pending_pods: Family<Labels, Gauge>,
    /// Per `queue`: PodGroups the last plan left Pending or Inqueue.
    pub queue_pending_groups: Family<Labels, Gauge>,
    /// Per `queue`: the age of its oldest PodGroup the last plan left Pending or Inqueue.
    pub queue_oldest_pending: Family<Labels, GaugeF>,
    /// Per `queue` and `resource` (cores for cpu, bytes for memory, counts otherwise).
    pub queue_deserved: Family<Labels, GaugeF>,
    pub queue_allocated: Family<Labels, GaugeF>,
    /// What the queue's pods still waiting for a node ask for.
    pub queue_pending_demand: Family<Labels, GaugeF>,
    /// Per `queue`: its dominant share (allocated over deserved, the largest over resources).
    pub queue_share: Family<Labels, GaugeF>,
    /// Per `queue` and `resource`: what it held on average over the usage half-life (cpu in
    /// cores); no series while `fairness.usage.halfLife` is off.
    pub queue_usage: Family<Labels, GaugeF>,
    /// Per `state` (allocated, free): the cluster's GPUs after the last plan.
    pub gpus: Family<Labels, Gauge>,
    /// Per `tier`, `domain` and `state`: the same per topology domain.
    pub domain_gpus: Family<Labels, Gauge>,
    /// 1 while this replica leads (set when scraped).
    pub leader: Gauge,
    /// When the last cycle ended (Unix seconds), and the gap after which liveness fails.
    pub last_cycle: GaugeF,
    pub max_cycle_gap: GaugeF,
    /// Config files read again because they changed, and those refused (the old config kept).
    pub config_reloads: Counter,
    pub config_reload_errors: Counter,
    /// Events not written because the Event queue was full.
    pub events_dropped: Counter,
    pub(crate) registry: Registry,
}

/// Registers each metric under the scheduler's prefix, keeping a handle.
struct Register(Registry);

impl Register {
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.register(name, help, metric.clone());
        metric
    }
}

fn pairs(pairs: &[(&str, &str)]) -> Labels {
    (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn seconds(start: f64, count: u16) -> Histogram {
    Histogram::new(exponential_buckets(start, 2.0, count))
}

/// 0.1 ms to 13 s: an action takes from nothing to most of a large cycle.
fn action_histogram() -> Histogram {
    seconds(0.0001, 18)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Register(Registry::with_prefix("basalt_scheduler"));
        let build_info = r.add(
            "build_info",
            "Always 1; the version label names the running binary",
            Family::<Labels, Gauge>::default(),
        );
        build_info
            .get_or_create(&pairs(&[("version", env!("CARGO_PKG_VERSION"))]))
            .set(1);
        let m = Metrics {
            ready: AtomicBool::new(false),
            cycle_duration: r.add(
                "cycle_duration_seconds",
                "Duration of a scheduling cycle (snapshot, engine, apply)",
                seconds(0.001, 16),
            ),
            action_duration: r.add(
                "action_duration_seconds",
                "Duration of one action of the engine in a cycle, per action",
                Family::new_with_constructor(action_histogram as fn() -> Histogram),
            ),
            binds: r.add("binds", "Pods bound", Counter::default()),
            bind_errors: r.add(
                "bind_errors",
                "Bindings refused or failed",
                Counter::default(),
            ),
            evictions: r.add(
                "evictions",
                "Pods evicted, per action: preempt (inside a queue), reclaim (across queues), \
                 gang_rollback (a gang left partly bound past --partial-gang-timeout)",
                Family::default(),
            ),
            eviction_errors: r.add(
                "eviction_errors",
                "Evictions asked and not done, per action and reason (disruption_budget: a \
                 PodDisruptionBudget refused it; api_error: any other error)",
                Family::default(),
            ),
            pending_pods: r.add(
                "pending_pods",
                "Basalt pods waiting for a node after the last cycle",
                Gauge::default(),
            ),
            pending_groups: r.add(
                "pending_podgroups",
                "PodGroups the last cycle left Pending or Inqueue, per reason of their \
                 Unschedulable condition (None without one)",
                Family::default(),
            ),
            partial_gangs: r.add(
                "partial_gangs",
                "Gangs with members bound but fewer than their minimum after the last cycle",
                Gauge::default(),
            ),
            nodes_over_capacity: r.add(
                "nodes_over_capacity",
                "Nodes whose bound pods request more than the node's allocatable; nothing more is bound there",
                Gauge::default(),
            ),
            scheduling_latency: r.add(
                "scheduling_latency_seconds",
                "Time from a pod's creation to its successful bind",
                seconds(0.005, 20),
            ),
            group_scheduling_latency: r.add(
                "podgroup_scheduling_latency_seconds",
                "Time from a PodGroup's creation to the cycle that placed its minimum members",
                seconds(0.005, 22),
            ),
            queue_pending_pods: r.add(
                "queue_pending_pods",
                "Basalt pods waiting for a node after the last cycle, per queue",
                Family::default(),
            ),
            queue_pending_groups: r.add(
                "queue_pending_podgroups",
                "PodGroups the last cycle left Pending or Inqueue, per queue",
                Family::default(),
            ),
            queue_oldest_pending: r.add(
                "queue_oldest_pending_podgroup_age_seconds",
                "Age of the queue's oldest PodGroup the last cycle left Pending or Inqueue",
                Family::default(),
            ),
            queue_deserved: r.add(
                "queue_deserved",
                "Queue's deserved share from the last plan (cpu in cores, memory in bytes, others in units)",
                Family::default(),
            ),
            queue_allocated: r.add(
                "queue_allocated",
                "Queue's allocation from the last plan (cpu in cores, memory in bytes, others in units)",
                Family::default(),
            ),
            queue_pending_demand: r.add(
                "queue_pending_demand",
                "What the queue's pods waiting for a node ask for (cpu in cores, memory in bytes, others in units)",
                Family::default(),
            ),
            queue_share: r.add(
                "queue_share",
                "Queue's dominant share from the last plan: allocated over deserved, in the resource where it is largest",
                Family::default(),
            ),
            queue_usage: r.add(
                "queue_usage",
                "What the queue held on average over the usage half-life, from the last plan (cpu in cores, memory in bytes, others in units)",
                Family::default(),
            ),
            gpus: r.add(
                "gpus",
                "The cluster's GPUs after the last plan, per state (allocated: held by a pod, or shared and closed to more; free)",
                Family::default(),
            ),
            domain_gpus: r.add(
                "domain_gpus",
                "GPUs per topology domain after the last plan, per tier, domain and state (allocated, free)",
                Family::default(),
            ),
            leader: r.add(
                "leader",
                "1 while this replica leads (schedules and writes), 0 otherwise",
                Gauge::default(),
            ),
            last_cycle: r.add(
                "last_cycle_timestamp_seconds",
                "When the last scheduling cycle ended, in seconds since the Unix epoch",
                GaugeF::default(),
            ),
            max_cycle_gap: r.add(
                "max_cycle_gap_seconds",
                "The gap without a finished cycle after which /healthz fails (--max-cycle-gap)",
                GaugeF::default(),
            ),
            config_reloads: r.add(
                "config_reloads",
                "Changed config files read and taken",
                Counter::default(),
            ),
            config_reload_errors: r.add(
                "config_reload_errors",
                "Changed config files refused (invalid); the config before is kept",
                Counter::default(),
            ),
            events_dropped: r.add(
                "events_dropped",
                "Events not written because the Event queue was full",
                Counter::default(),
            ),
            registry: r.0,
        };
        // Every eviction series from the start, so that rates read 0 rather than nothing.
        for action in EVICTION_ACTIONS {
            let _ = m.evictions.get_or_create(&pairs(&[("action", action)]));
            for reason in EVICTION_ERRORS {
                let labels = pairs(&[("action", action), ("reason", reason)]);
                let _ = m.eviction_errors.get_or_create(&labels);
            }
        }
        m
    }

    /// A pod evicted for `action` (one of [`EVICTION_ACTIONS`]).
    pub fn evicted(&self, action: &str) {
        self.evictions
            .get_or_create(&pairs(&[("action", action)]))
            .inc();
    }

    /// An eviction for `action` not done, for `reason` (one of [`EVICTION_ERRORS`]).
    pub fn eviction_failed(&self, action: &str, reason: &str) {
        let labels = pairs(&[("action", action), ("reason", reason)]);
        self.eviction_errors.get_or_create(&labels).inc();
    }

    /// One engine action's run.
    pub fn action_ran(&self, action: &str, seconds: f64) {
        let labels = pairs(&[("action", action)]);
        self.action_duration.get_or_create(&labels).observe(seconds);
    }

    /// A cycle ended at `unix_seconds`.
    pub fn cycle_ended(&self, seconds: f64, unix_seconds: f64) {
        self.cycle_duration.observe(seconds);
        self.last_cycle.set(unix_seconds);
    }

    /// An idle scheduler (no cycle needed) looked and found nothing to do: as alive as a
    /// cycle ended, for the last-cycle gauge (and the alert on it).
    pub fn idle_looked(&self, unix_seconds: f64) {
        self.last_cycle.set(unix_seconds);
    }

    /// Drops what the last plan said: a replica that does not lead makes no plans, and the
    /// gauges of one it made while it led would add to the leader's.
    pub fn forget_plan(&self) {
        for family in [
            &self.pending_groups,
            &self.queue_pending_pods,
            &self.queue_pending_groups,
            &self.gpus,
            &self.domain_gpus,
        ] {
            family.clear();
        }
        for family in [
            &self.queue_oldest_pending,
            &self.queue_deserved,
            &self.queue_allocated,
            &self.queue_pending_demand,
            &self.queue_share,
            &self.queue_usage,
        ] {
            family.clear();
        }
        for gauge in [
            &self.pending_pods,
            &self.partial_gangs,
            &self.nodes_over_capacity,
        ] {
            gauge.set(0);
        }
    }

    /// The OpenMetrics text of every family.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_stops_leading_drops_its_plan_and_keeps_its_counters() {
        let m = Metrics::new();
        let queue = pairs(&[("queue", "research")]);
        m.queue_share.get_or_create(&queue).set(0.5);
        m.queue_pending_pods.get_or_create(&queue).set(3);
        m.pending_pods.set(3);
        m.binds.inc();
        m.evicted("reclaim");
        m.forget_plan();
        let text = m.encode().unwrap();
        assert!(!text.contains(r#"{queue="research"}"#), "{text}");
        assert!(text.contains("basalt_scheduler_pending_pods 0\n"), "{text}");
        assert!(text.contains("basalt_scheduler_binds_total 1\n"), "{text}");
        let reclaim = r#"basalt_scheduler_evictions_total{action="reclaim"} 1"#;
        assert!(text.contains(reclaim), "{text}");
        // The other actions' series exist from the start, at 0.
        let rollback = r#"basalt_scheduler_evictions_total{action="gang_rollback"} 0"#;
        assert!(text.contains(rollback), "{text}");
    }
}

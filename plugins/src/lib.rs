//! Basalt's scheduling policies and the configuration that picks them.
//!
//! - `gang`: all-or-nothing admission by minMember / minTaskMember;
//! - `priority`: job order by PriorityClass value, then age; a job's pods by their own priority;
//! - `predicates`: cordons, taints, node selectors and required node affinity;
//! - `nodeorder`: `binpack` (default) or `spread` scoring;
//! - `fragmentation`: fragmentation-aware scoring and device choice where devices are shared;
//! - `devicepick`: which devices of the chosen node a pod takes;
//! - `hami_nodes`: HAMi's per-pod `hami.io/node-scheduler-policy` (binpack or spread);
//! - `domains`: which topology domains a gang tries, in order;
//! - `admission`: `overcommit` enqueue admission and queue `capability`;
//! - `queue_order`: which sibling queue is served first (priority, then fair share);
//! - `victims`: whom `preempt` and `reclaim` may evict (a policy each), and who goes first;
//! - `mig_relayout`: new MIG layouts for idle GPUs from pending MIG demand (off by default).
//!
//! [`framework`] turns a [`Config`] into the engine's [`Framework`] value; [`schedule`] runs one
//! cycle. Of Basalt's crates it depends on `basalt-engine`, `basalt-queue`, `basalt-topology` and
//! `basalt-mig` only (and `serde_yaml` to read a config's text): no Kubernetes, no I/O
//! (`basalt-crds` is a dev-dependency: tests read pods' device asks as the daemon does).

pub mod admission;
pub mod config;
pub mod devicepick;
pub mod domains;
pub mod fairness;
pub mod fragmentation;
pub mod gang;
pub mod hami_nodes;
pub mod mig_relayout;
pub mod nodeorder;
pub mod predicates;
pub mod priority;
pub mod queue_order;
pub mod victims;

use basalt_engine::{Framework, Plan, ResourceNames, Snapshot};

pub use config::{Config, ConfigError};

/// The framework a config describes, for a cluster with these resource names.
pub fn framework(config: &Config, names: &ResourceNames) -> Framework {
    let actions = config.actions.iter().map(|&a| a.into()).collect();
    let mut fw = Framework::new(
        actions,
        Box::new(nodeorder::Utilisation::new(&config.node_order, names)),
    );
    if config.priority.enabled {
        fw.job_order.push(Box::new(priority::Priority));
        fw.task_order.push(Box::new(priority::Priority));
    }
    if config.gang.enabled {
        fw.job_valid.push(Box::new(gang::Gang));
        fw.job_ready.push(Box::new(gang::Gang));
    }
    fw.admit.push(Box::new(admission::Overcommit {
        factor_milli: (config.enqueue.overcommit_factor * 1000.0).round() as i64,
    }));
    fw.admit.push(Box::new(admission::Capability));
    fw.task_admit.push(Box::new(admission::Capability));
    fw.task_admit.push(Box::new(admission::Guarantee));
    fw.filters.push(Box::new(predicates::Predicates));
    fw.device_pick = Box::new(devicepick::KeepIslandsWhole);
    let frag = &config.node_order.fragmentation;
    if frag.enabled {
        let policy = fragmentation::Fragmentation {
            workload: fragmentation::Workload::Seen {
                window: frag.window as usize,
                coverage_pct: frag.coverage_percent as u64,
            },
            rule: fragmentation::Rule::Basalt,
            shared_only: true,
        };
        fw.scores.push(Box::new(policy.clone()));
        if frag.pick_devices {
            fw.device_pick = Box::new(policy);
        }
    }
    // After fragmentation, which leaves the pods stating HAMi's node policy to it.
    fw.scores.push(Box::new(hami_nodes::HamiNodePolicy));
    fw.queue_order = Box::new(queue_order::PriorityThenShare);
    let min_used_milli = (config.eviction.min_used_fraction * 1000.0).round() as u32;
    fw.preempt_victims = Box::new(victims::LowerPriority { min_used_milli });
    fw.reclaim_victims = Box::new(victims::OverShare {
        min_used_milli,
        min_runtime_ms: config.eviction.reclaim_min_runtime_ms().unwrap_or(0),
    });
    fw.domains = Box::new(domains::BestFit);
    if config.fair_share.enabled {
        fw.fair_share = Some(Box::new(basalt_queue::WaterFilling {
            usage: config.fairness.usage.weighting(),
        }));
    }
    fw.reserve_after_ms = config
        .backfill
        .reserve_after_seconds
        .map(|s| s.saturating_mul(1000).min(i64::MAX as u64) as i64);
    fw.gang_backoff_ms = (config.gang.timeout_backoff_seconds)
        .saturating_mul(1000)
        .min(i64::MAX as u64) as i64;
    fw.tiers = config.topology.tiers.clone();
    fw.usage_half_life_ms = config.fairness.usage.half_life_ms().unwrap_or(0);
    fw.preferences = (&config.scoring).into();
    if config.mig.relayout {
        fw.mig_relayout = Some(Box::new(mig_relayout::DemandRelayout {
            max_gpus_per_node: config.mig.max_gpus_per_node,
            whole_gpus: config.mig.whole_gpus,
        }));
    }
    fw
}

/// One scheduling cycle of `snapshot` under `config`, from scratch: a framework built for
/// this call and nothing carried from an earlier cycle (for one-off plans and tests). A
/// scheduler that runs cycle after cycle keeps its [`framework`] and a [`basalt_engine::Warm`]
/// and calls [`basalt_engine::schedule`]; the plan is the same.
pub fn schedule(snapshot: &Snapshot, config: &Config) -> Plan {
    let fw = framework(config, &snapshot.resources);
    basalt_engine::schedule(snapshot, &fw, &mut basalt_engine::Warm::default())
}

#[cfg(test)]
mod tests {
    use basalt_engine::ResourceNames;

    use super::{framework, Config};

    #[test]
    fn the_default_framework_names_each_plugin_by_its_extension_point() {
        let fw = framework(
            &Config::default(),
            &ResourceNames::new("nvidia.com/gpu", []),
        );
        let plugins = fw.plugins();
        let at = |point: &str| -> Vec<&str> {
            (plugins.iter())
                .filter(|(p, _)| *p == point)
                .map(|(_, name)| *name)
                .collect()
        };
        assert_eq!(at("JobOrder"), ["priority"]);
        assert_eq!(at("JobValid"), ["gang"]);
        assert_eq!(at("Admit"), ["overcommit", "capability"]);
        assert_eq!(at("TaskAdmit"), ["capability", "guarantee"]);
        assert_eq!(at("NodeFilter"), ["predicates"]);
        assert_eq!(at("NodeOrder"), ["binpack"]);
        assert_eq!(at("FairShare"), ["water-filling"]);
        assert_eq!(at("Victims(preempt)"), ["lower-priority"]);
        assert_eq!(at("Victims(reclaim)"), ["over-share"]);
        assert!(plugins.iter().all(|(_, name)| !name.is_empty()));
    }
}

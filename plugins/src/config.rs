//! The scheduler configuration file. Absent fields take defaults; unknown fields are errors that
//! name the field (`deny_unknown_fields` everywhere).

use std::collections::BTreeMap;

use basalt_engine::Action;
use basalt_topology::TierSpec;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    /// Actions of a cycle, run in this order.
    pub actions: Vec<ActionName>,
    /// Pods whose `spec.schedulerName` is one of these are Basalt's.
    pub scheduler_names: Vec<String>,
    pub gang: GangArgs,
    pub priority: PriorityArgs,
    pub enqueue: EnqueueArgs,
    pub node_order: NodeOrderArgs,
    pub fair_share: FairShareArgs,
    /// Fair share over time (queue usage decayed by a half-life); off by default.
    pub fairness: crate::fairness::FairnessArgs,
    pub backfill: BackfillArgs,
    pub topology: TopologyArgs,
    pub scoring: ScoringArgs,
    pub eviction: EvictionArgs,
    /// Resources that name devices (accounted per device, with islands, topology tiers and
    /// ids), in order: a node's devices are the first of these it advertises.
    pub devices: Vec<String>,
    /// MIG layouts chosen from demand (`plugins/src/mig_relayout.rs`); off by default.
    pub mig: MigArgs,
}

/// Resources that name devices unless configured: those `crds` knows
/// (`basalt_crds::convert::device_names::DEFAULT_DEVICE_RESOURCES`, kept equal by a test).
pub const DEFAULT_DEVICES: [&str; 7] = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "amd.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310",
    "habana.ai/gaudi",
    "gpu.intel.com/i915",
];

impl Default for Config {
    fn default() -> Self {
        Config {
            actions: vec![
                ActionName::Enqueue,
                ActionName::Allocate,
                ActionName::Reclaim,
                ActionName::Preempt,
            ],
            scheduler_names: vec!["basalt".to_string()],
            gang: GangArgs::default(),
            priority: PriorityArgs::default(),
            enqueue: EnqueueArgs::default(),
            node_order: NodeOrderArgs::default(),
            fair_share: FairShareArgs::default(),
            fairness: Default::default(),
            backfill: BackfillArgs::default(),
            topology: TopologyArgs::default(),
            scoring: ScoringArgs::default(),
            eviction: EvictionArgs::default(),
            devices: DEFAULT_DEVICES.map(String::from).to_vec(),
            mig: MigArgs::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionName {
    Enqueue,
    Allocate,
    Reclaim,
    Preempt,
}

impl From<ActionName> for Action {
    fn from(a: ActionName) -> Action {
        match a {
            ActionName::Enqueue => Action::Enqueue,
            ActionName::Allocate => Action::Allocate,
            ActionName::Reclaim => Action::Reclaim,
            ActionName::Preempt => Action::Preempt,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GangArgs {
    /// All-or-nothing admission of minMember (and minTaskMember) members.
    pub enabled: bool,
    /// How long a gang that did not start within its PodGroup's `scheduleTimeoutSeconds`
    /// sits out (holding nothing) before it is tried again.
    pub timeout_backoff_seconds: u64,
}

impl Default for GangArgs {
    fn default() -> Self {
        GangArgs {
            enabled: true,
            timeout_backoff_seconds: 60,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PriorityArgs {
    /// Order jobs by PriorityClass value, then creation time (then name).
    pub enabled: bool,
}

impl Default for PriorityArgs {
    fn default() -> Self {
        PriorityArgs { enabled: true }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct EnqueueArgs {
    /// A job is admitted while its minResources fit in allocatable × this factor, less what is
    /// in use and what earlier admitted jobs reserved.
    pub overcommit_factor: f64,
}

impl Default for EnqueueArgs {
    fn default() -> Self {
        EnqueueArgs {
            overcommit_factor: 1.2,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct FairShareArgs {
    /// Deserved shares by weighted water-filling down the queue tree. Without it every queue
    /// deserves the whole cluster (queues are still ordered by share, capped by capability).
    pub enabled: bool,
}

impl Default for FairShareArgs {
    fn default() -> Self {
        FairShareArgs { enabled: true }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct BackfillArgs {
    /// A gang that has waited this long reserves the nodes it will start on; smaller or
    /// lower-priority work may use them only if it ends (`activeDeadlineSeconds`) before the
    /// gang could start. `null` turns reservations off.
    pub reserve_after_seconds: Option<u64>,
}

impl Default for BackfillArgs {
    fn default() -> Self {
        BackfillArgs {
            reserve_after_seconds: Some(600),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeOrderPolicy {
    /// Most-allocated first: fill nodes up and keep whole nodes free for big gangs.
    Binpack,
    /// Least-allocated first.
    Spread,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeOrderArgs {
    pub policy: NodeOrderPolicy,
    /// Weight of each resource in the utilisation score; resources not listed do not count.
    pub weights: BTreeMap<String, u32>,
    /// Fragmentation-aware placement on clusters whose devices are shared
    /// (`basalt_plugins::fragmentation`); clusters of whole devices keep `policy` alone.
    pub fragmentation: FragmentationArgs,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct FragmentationArgs {
    /// On by default; it acts only where some node shares its devices. The shapes are learned
    /// from the snapshot's tasks (pending and bound pods), so a replay does not fold bound pods
    /// into pinned pods (no tasks) while it is on and devices are shared.
    pub enabled: bool,
    /// The typical pod shapes are learned from this many of the newest pods of the snapshot.
    pub window: u32,
    /// Shapes are taken most frequent first until they cover this share of those pods (%).
    pub coverage_percent: u8,
    /// Also choose the shared devices a pod takes (where fragmentation grows least) when it
    /// states no HAMi device policy or filters. Off by default: such pods get HAMi's default
    /// `spread`, as under HAMi's own scheduler, and only the node is chosen for fragmentation.
    pub pick_devices: bool,
}

impl Default for FragmentationArgs {
    fn default() -> Self {
        FragmentationArgs {
            enabled: true,
            window: 10_000,
            coverage_percent: 95,
            pick_devices: false,
        }
    }
}

impl Default for NodeOrderArgs {
    fn default() -> Self {
        NodeOrderArgs {
            policy: NodeOrderPolicy::Binpack,
            weights: [("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 10)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            fragmentation: FragmentationArgs::default(),
        }
    }
}

/// How much a pod's soft preferences weigh against `nodeOrder`. A node's preference points of
/// each kind (a matching preferred node-affinity term: its weight, 1..=100; an untolerated
/// `PreferNoSchedule` taint: −100; preferred pod (anti-)affinity: ±its weight; `ScheduleAnyway`
/// spread: up to 100 per constraint) are multiplied by that kind's weight, and each weighted
/// point counts as 1 % utilisation: the pod goes to the node with the lowest `nodeOrder` score
/// after placing less its weighted points. This is kube-scheduler's rule (each plugin's score
/// times its weight, NodeResourcesFit weighing 1 with 100 points for the whole utilisation
/// range), with its default weights, so a stated preference wins over a small utilisation
/// difference: a weight-100 term (200 points) beats any packing difference, a weight-10 term
/// (20 points) only a difference below 20 %. Unlike kube-scheduler, points are absolute, not
/// normalised over the nodes (that needs a full scan per pod). All 0: pure packing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ScoringArgs {
    /// Preferred node affinity (kube-scheduler's NodeAffinity weight).
    pub node_affinity: u32,
    /// Preferred pod affinity and anti-affinity (InterPodAffinity).
    pub pod_affinity: u32,
    /// `ScheduleAnyway` topology spread constraints (PodTopologySpread).
    pub topology_spread: u32,
    /// `PreferNoSchedule` taints the pod does not tolerate (TaintToleration).
    pub taint_toleration: u32,
}

impl Default for ScoringArgs {
    fn default() -> Self {
        ScoringArgs {
            node_affinity: 2,
            pod_affinity: 2,
            topology_spread: 2,
            taint_toleration: 3,
        }
    }
}

impl From<&ScoringArgs> for basalt_engine::PreferenceWeights {
    fn from(s: &ScoringArgs) -> Self {
        basalt_engine::PreferenceWeights {
            node_affinity: s.node_affinity,
            pod_affinity: s.pod_affinity,
            topology_spread: s.topology_spread,
            taint_toleration: s.taint_toleration,
        }
    }
}

/// What `reclaim` and `preempt` accept to evict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct EvictionArgs {
    /// An eviction that stops a job (evicts a whole gang) is made only when the preemptor's
    /// members placed on the nodes it frees (with its other pending members the room left lets
    /// start) use at least this fraction of what it frees, in every resource the victims were
    /// taken for: 0.5 by default, so one 1-GPU pod never ends a gang of 8 GPUs. 0 accepts any
    /// such eviction; 1 only one that leaves nothing it frees idle. Evictions that only shrink
    /// elastic jobs are not judged.
    pub min_used_fraction: f64,
    /// How long a pod must have run before `reclaim` may take it (KAI-Scheduler's
    /// `reclaimMinRuntime`, at the scheduler's level): `30m`, `1h`; `0` (the default) takes
    /// any. Each stretch of running counts from its start, so two queues that take the
    /// cluster back from each other each keep it this long. `preempt` is not limited.
    pub reclaim_min_runtime: String,
}

impl Default for EvictionArgs {
    fn default() -> Self {
        EvictionArgs {
            min_used_fraction: 0.5,
            reclaim_min_runtime: "0".into(),
        }
    }
}

impl EvictionArgs {
    /// `reclaimMinRuntime` in milliseconds (0: none), or why it is not a duration.
    pub fn reclaim_min_runtime_ms(&self) -> Result<i64, String> {
        crate::fairness::duration_ms(&self.reclaim_min_runtime)
            .map_err(|e| format!("eviction.reclaimMinRuntime: {e}"))
    }
}

/// Topology tiers, coarse to fine, each read from a node label; the node itself is the built-in
/// finest tier `node`. A node without a tier's label stands alone at that tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct TopologyArgs {
    pub tiers: Vec<TierSpec>,
}

impl Default for TopologyArgs {
    fn default() -> Self {
        let tier = |name: &str, label: &str, nvlink| TierSpec {
            name: name.into(),
            node_label: label.into(),
            nvlink,
        };
        TopologyArgs {
            tiers: vec![
                tier("spine", "topology.basalt.dev/spine", false),
                tier("rack", "topology.basalt.dev/rack", false),
                tier("nvlink", "nvidia.com/gpu.clique", true),
            ],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct MigArgs {
    /// Propose new MIG layouts for idle GPUs when pending pods ask for profiles no free
    /// instance serves (the plan's `migLayouts`).
    pub relayout: bool,
    /// GPUs re-laid per node per cycle, at most (1 or more).
    pub max_gpus_per_node: u32,
    /// Also propose GPUs not in MIG mode. Only for clusters where something switches MIG mode
    /// on them (NVIDIA's mig-manager): Basalt's node agent never does (it needs a GPU reset)
    /// and reports such a layout `failed`, so by default only GPUs in MIG mode are re-laid.
    pub whole_gpus: bool,
    /// A GPU is re-laid at most once per this many seconds: kept by whoever applies layouts
    /// (the node agent, the simulator), which knows when it last did.
    pub min_interval_seconds: u64,
}

impl Default for MigArgs {
    fn default() -> Self {
        MigArgs {
            relayout: false,
            max_gpus_per_node: 1,
            whole_gpus: false,
            min_interval_seconds: 300,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Tiers(#[from] basalt_topology::TierError),
    #[error("enqueue.overcommitFactor: must be a finite number of at least 1.0, got {0}")]
    Overcommit(f64),
    #[error("actions: must not be empty")]
    NoActions,
    #[error("actions: {0:?} is listed twice")]
    DuplicateAction(ActionName),
    #[error("schedulerNames: must name at least one scheduler")]
    NoSchedulerNames,
    #[error("devices: must name at least one device resource")]
    NoDevices,
    #[error("nodeOrder.fragmentation.coveragePercent: must be 1 to 100, got {0}")]
    Coverage(u8),
    #[error("eviction.minUsedFraction: must be a number from 0 to 1, got {0}")]
    MinUsedFraction(f64),
    #[error("{0}")]
    Fairness(String),
    #[error("mig.maxGpusPerNode: must be at least 1, got 0")]
    MigMaxGpus,
}

impl Config {
    /// A config file's YAML, validated: empty text is the defaults; an error names `label`
    /// (the file) and the field. The size and depth limits of untrusted input are the
    /// caller's to check first (`basalt_crds::limits`).
    pub fn from_yaml(label: &str, text: &str) -> Result<Config, String> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let config: Config = serde_yaml::from_str(text).map_err(|e| format!("{label}: {e}"))?;
        config.validate().map_err(|e| format!("{label}: {e}"))?;
        Ok(config)
    }

    /// Checks what the types alone cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let f = self.enqueue.overcommit_factor;
        if !f.is_finite() || f < 1.0 {
            return Err(ConfigError::Overcommit(f));
        }
        if self.actions.is_empty() {
            return Err(ConfigError::NoActions);
        }
        for (i, a) in self.actions.iter().enumerate() {
            if self.actions[..i].contains(a) {
                return Err(ConfigError::DuplicateAction(*a));
            }
        }
        if self.scheduler_names.is_empty() {
            return Err(ConfigError::NoSchedulerNames);
        }
        if self.devices.is_empty() {
            return Err(ConfigError::NoDevices);
        }
        let coverage = self.node_order.fragmentation.coverage_percent;
        if !(1..=100).contains(&coverage) {
            return Err(ConfigError::Coverage(coverage));
        }
        let used = self.eviction.min_used_fraction;
        if !(0.0..=1.0).contains(&used) {
            return Err(ConfigError::MinUsedFraction(used));
        }
        (self.eviction.reclaim_min_runtime_ms()).map_err(ConfigError::Fairness)?;
        (self.fairness.usage.validate()).map_err(ConfigError::Fairness)?;
        if self.mig.max_gpus_per_node == 0 {
            return Err(ConfigError::MigMaxGpus);
        }
        basalt_topology::validate_tiers(&self.topology.tiers)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_devices_are_those_the_reader_knows() {
        let known = basalt_crds::convert::device_names::DEFAULT_DEVICE_RESOURCES;
        assert_eq!(DEFAULT_DEVICES, known);
    }

    #[test]
    fn eviction_min_used_fraction_is_half_by_default_and_zero_to_one() {
        assert_eq!(Config::default().eviction.min_used_fraction, 0.5);
        let with = |f: f64| {
            let mut c = Config::default();
            c.eviction.min_used_fraction = f;
            c.validate()
        };
        assert!(with(0.0).is_ok());
        assert!(with(1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let err = with(bad).expect_err("out of range").to_string();
            assert!(err.starts_with("eviction.minUsedFraction: must be a number from 0 to 1"));
        }
        let err = Config::from_yaml("c.yaml", "eviction: {minUsedFraction: 2}").unwrap_err();
        assert_eq!(
            err,
            "c.yaml: eviction.minUsedFraction: must be a number from 0 to 1, got 2"
        );
        let err = Config::from_yaml("c.yaml", "eviction: {minUsed: 0.2}").unwrap_err();
        assert!(err.contains("unknown field `minUsed`"), "{err}");
        let err = Config::from_yaml("c.yaml", "eviction: {reclaimMinRuntime: soon}").unwrap_err();
        assert!(err.contains("eviction.reclaimMinRuntime"), "{err}");
        let ok = Config::from_yaml("c.yaml", "eviction: {reclaimMinRuntime: 8m}").unwrap();
        assert_eq!(ok.eviction.reclaim_min_runtime_ms(), Ok(480_000));
        let ok = Config::from_yaml("c.yaml", "eviction: {minUsedFraction: 0.25}").unwrap();
        assert_eq!(ok.eviction.min_used_fraction, 0.25);
    }
}

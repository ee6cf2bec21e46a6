//! The replay's input model: a workload (jobs of pods with resources, queue, priority, TP size
//! and duration) and a cluster (node specs plus the labels that describe its topology).
//!
//! Every reader in [`crate::replay::readers`] produces these; the simulator knows nothing of the
//! trace formats.

use basalt_engine::NodeSpec;
use serde::{Deserialize, Serialize};

/// Node label holding the GPU model (as NVIDIA's GPU feature discovery writes it).
pub const GPU_MODEL_LABEL: &str = "nvidia.com/gpu.product";
/// Node label naming the NVLink clique (multi-node NVLink domain, e.g. an NVL72 rack).
pub const CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";
pub const RACK_LABEL: &str = "topology.basalt.dev/rack";
pub const SPINE_LABEL: &str = "topology.basalt.dev/spine";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Extended resource used by `--gpu-share pool` for fractional GPU pods (per-node pool of
/// 1,000 milli per GPU; see docs/simulations.md for what this approximation does and does not
/// model).
pub const GPU_SHARE_RESOURCE: &str = "basalt.dev/gpu-share-milli";

/// One pod of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodShape {
    pub cpu_milli: i64,
    /// Bytes.
    pub memory: i64,
    /// Whole GPUs, or 1 for a fractional pod.
    #[serde(default)]
    pub gpus: u32,
    /// Per-GPU share in milli (1000 = the whole GPU); below 1000 only when `gpus == 1`.
    #[serde(default = "whole")]
    pub gpu_milli: u32,
    /// Allowed GPU models; empty = any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
}

fn whole() -> u32 {
    1000
}

impl PodShape {
    /// GPU demand in milli-GPU as the trace states it.
    pub fn gpu_demand_milli(&self) -> i64 {
        self.gpus as i64 * self.gpu_milli as i64
    }
}

/// One job: a gang of pods that starts when `min_member` of them are placed and runs for
/// `duration_ms` from then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceJob {
    pub name: String,
    #[serde(default = "default_queue")]
    pub queue: String,
    #[serde(default)]
    pub priority: i32,
    pub submit_ms: i64,
    pub duration_ms: i64,
    pub pods: Vec<PodShape>,
    /// 0 = every pod.
    #[serde(default)]
    pub min_member: u32,
    /// Tensor-parallel group size in GPUs (0 = none): groups of this many consecutive GPUs of
    /// the job should share an NVLink domain.
    #[serde(default)]
    pub tp_size: u32,
}

fn default_queue() -> String {
    "default".into()
}

impl TraceJob {
    pub fn min_member(&self) -> u32 {
        if self.min_member == 0 {
            self.pods.len() as u32
        } else {
            self.min_member.min(self.pods.len() as u32)
        }
    }

    pub fn gpus(&self) -> u32 {
        self.pods.iter().map(|p| p.gpus).sum()
    }
}

/// A queue the workload names, with its weight (deserved share ∝ weight).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueDef {
    pub name: String,
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Default)]
pub struct Workload {
    /// Where it came from, for the report.
    pub source: String,
    pub jobs: Vec<TraceJob>,
    /// Queues with weights; queues that jobs name but that are not listed get weight 1.
    pub queues: Vec<QueueDef>,
    /// What the reader had to approximate, for the report.
    pub notes: Vec<String>,
}

impl Workload {
    /// Adds weight-1 queues for every queue a job names that is not declared, sorted by name.
    pub fn complete_queues(&mut self) {
        let mut names: std::collections::BTreeSet<&str> =
            self.jobs.iter().map(|j| j.queue.as_str()).collect();
        for q in &self.queues {
            names.remove(q.name.as_str());
        }
        let extra: Vec<QueueDef> = names
            .into_iter()
            .map(|n| QueueDef {
                name: n.to_string(),
                weight: 1,
            })
            .collect();
        self.queues.extend(extra);
        self.queues.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub source: String,
    pub nodes: Vec<NodeSpec>,
}

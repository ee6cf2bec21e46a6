//! The experiment's cluster and trace, shared read-only by every run: the nodes, the pods and
//! the typical shapes of the trace. Runs go through the engine (`engine.rs`).

use std::collections::HashMap;

use basalt_plugins::fragmentation::{ModelSet, Shape, TypicalShapes};

use super::FgdError;
use crate::openb::{Node as NodeSpec, Pod as PodSpec, GPU_MILLI};

#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub cpu: i64,
    pub mem: i64,
    pub gpus: u32,
    /// Model id; `None` when the list gives no model.
    pub model: Option<u8>,
    /// Offset of this node's GPUs in the flat per-GPU arrays.
    pub off: usize,
}

#[derive(Clone, Debug)]
pub struct PodInfo {
    pub cpu: i64,
    pub mem: i64,
    pub num_gpu: u32,
    pub share: u16,
    pub models: ModelSet,
    /// `clustering` class (see `baselines::class`).
    pub class: u32,
    /// Id of (cpu, share, count): what the fgd score of a node depends on besides the node.
    pub key: u32,
    pub request: u64,
}

/// The cluster, the trace and the typical shapes, shared read-only by every run.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub nodes: Vec<NodeInfo>,
    pub pods: Vec<PodInfo>,
    pub models: Vec<String>,
    pub capacity_milli: u64,
    pub frag: TypicalShapes,
    pub keys: usize,
    pub gpu_total: usize,
}

impl Experiment {
    pub fn new(nodes: &[NodeSpec], pods: &[PodSpec]) -> Result<Self, FgdError> {
        let mut models: Vec<String> = nodes
            .iter()
            .filter(|n| !n.model.is_empty())
            .map(|n| n.model.clone())
            .collect();
        models.sort();
        models.dedup();
        // 63, not 64: the all-ones set is reserved for "any model".
        if models.len() > 63 {
            return Err(FgdError::Cluster(format!(
                "{} GPU models in the node list; at most 63 are supported",
                models.len()
            )));
        }
        let model_id = |m: &str| models.iter().position(|x| x == m).map(|i| i as u8);
        let mut off = 0;
        let mut node_infos = Vec::with_capacity(nodes.len());
        for n in nodes {
            node_infos.push(NodeInfo {
                cpu: n.cpu_milli,
                mem: n.memory_mib,
                gpus: n.gpus,
                model: if n.model.is_empty() {
                    None
                } else {
                    model_id(&n.model)
                },
                off,
            });
            off += n.gpus as usize;
        }
        let capacity_milli = off as u64 * GPU_MILLI as u64;
        if capacity_milli == 0 {
            return Err(FgdError::Cluster(
                "the node list has no GPUs; the experiment measures GPU allocation".to_string(),
            ));
        }
        let mut keys: HashMap<(i64, u16, u32), u32> = HashMap::new();
        let mut pod_infos = Vec::with_capacity(pods.len());
        for p in pods {
            let models = if p.gpu_spec.is_empty() {
                ModelSet::ANY
            } else {
                // Models no node has cannot be chosen; a pod allowing only those never fits.
                ModelSet(
                    p.gpu_spec
                        .iter()
                        .filter_map(|m| model_id(m))
                        .fold(0u64, |acc, id| acc | (1u64 << id)),
                )
            };
            let share = p.gpu_milli as u16;
            let next = keys.len() as u32;
            let key = *keys.entry((p.cpu_milli, share, p.num_gpu)).or_insert(next);
            pod_infos.push(PodInfo {
                cpu: p.cpu_milli,
                mem: p.memory_mib,
                num_gpu: p.num_gpu,
                share,
                models,
                class: super::baselines::class(share, p.num_gpu),
                key,
                request: p.gpu_request(),
            });
        }
        let frag = TypicalShapes::from_pods(
            pod_infos.iter().map(|p| Shape {
                cpu_milli: p.cpu,
                gpu_milli: p.share,
                num_gpu: p.num_gpu,
                models: p.models,
            }),
            95,
        );
        Ok(Experiment {
            nodes: node_infos,
            pods: pod_infos,
            models,
            capacity_milli,
            frag,
            keys: keys.len(),
            gpu_total: off,
        })
    }

    /// GPU requests of the trace pods, in milli, for the workload generator.
    pub fn requests(&self) -> Vec<u64> {
        self.pods.iter().map(|p| p.request).collect()
    }

    /// The models of a set by name; `None` for any model.
    pub fn model_names(&self, set: ModelSet) -> Option<Vec<String>> {
        (set != ModelSet::ANY).then(|| {
            (self.models.iter().enumerate())
                .filter(|&(i, _)| set.allows(Some(i as u8)))
                .map(|(_, m)| m.clone())
                .collect()
        })
    }
}

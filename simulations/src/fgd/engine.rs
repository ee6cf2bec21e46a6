//! The experiment through the engine: each arrival is one scheduling cycle of
//! `basalt_engine::schedule`, the function the daemon calls, with one pending pod; a pod the
//! plan binds stays bound with the devices it was given (nothing leaves), one it does not is
//! dropped. The policies are plugins of the framework ([`framework`]), the cluster a
//! [`SnapshotBuilder`] told of each change.
//!
//! The trace becomes Kubernetes-shaped objects:
//! - a node: CPU (milli), memory (MiB × 2^20), its GPU model as label
//!   `nvidia.com/gpu.product`; a GPU node shares its GPUs as HAMi does ([`Sharing::Hami`]),
//!   each GPU with [`SLOTS`] slots (so slots never bind: a share is at least 1 %), 100 cores
//!   and [`GPU_MEMORY_MIB`] of memory;
//! - a pod sharing one GPU (`gpu_milli` < 1000, always a multiple of 10 in openb) asks
//!   `nvidia.com/gpu: 1`, `nvidia.com/gpucores` and `nvidia.com/gpumem-percentage` of
//!   `gpu_milli / 10`: its free share fits exactly where the trace's does. A whole-GPU pod asks
//!   `nvidia.com/gpu: n`, which on a HAMi node takes unused devices whole. `gpu_spec` is a
//!   required node affinity on the model label.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_crds::convert::device_names::{
    share_vocabulary, GPU_CORES_NAME, GPU_MEMORY_PERCENT_NAME, GPU_NAME,
};
use basalt_engine::devices::{HeldDevice, Sharing};
use basalt_engine::{
    Framework, Gpu, NodeSelectorTerm, NodeSpec, PlacementRules, PodPhase, PodSpec,
    RequiredNodeAffinity, ResourceList, SelectorOperator, SelectorRequirement, SnapshotBuilder,
};
use basalt_plugins::fragmentation::{Fragmentation, GivenShape, Rule, Workload};

use super::baselines::Baseline;
use super::experiment::Experiment;
use super::measure::Trajectory;
use super::policy::Policy;
use super::rng::{Rng, Stream};
use super::FgdError;
use crate::openb::GPU_MILLI;

/// Slots per GPU: more than the smallest share (1 %) can fill.
pub const SLOTS: u32 = 100;
/// Memory of each GPU: a share of p % takes 10·p MiB, in step with its compute.
pub const GPU_MEMORY_MIB: u64 = 1000;
const MODEL_LABEL: &str = "nvidia.com/gpu.product";
const MIB: i64 = 1 << 20;

/// Each node's place in the run's random ranking (lower wins ties), drawn once from the seed.
pub fn tie_ranks(nodes: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..nodes as u32).collect();
    Rng::stream(seed, Stream::TieRank).shuffle(&mut order);
    let mut rank = vec![0u32; nodes];
    for (pos, &node) in order.iter().enumerate() {
        rank[node as usize] = pos as u32;
    }
    rank
}

/// Node `i` of the list; names sort in list order, so node ids are list positions.
fn node_name(i: usize) -> String {
    format!("fgd-{i:06}")
}

/// Where one arrival went: (node, GPUs as a mask), or dropped.
pub type Placement = Option<(u32, u64)>;

/// The framework of a policy: Basalt's default config (the daemon's), with the policy's
/// scorer and device choice for the paper's policies, and the run's tie ranking.
pub fn framework(
    exp: &Experiment,
    policy: Policy,
    seed: u64,
    names: &basalt_engine::ResourceNames,
) -> Framework {
    let mut config = basalt_plugins::Config::default();
    // Basalt's sharing policy with its device choice: the trace's pods state no HAMi policy.
    config.node_order.fragmentation.enabled = true;
    config.node_order.fragmentation.pick_devices = true;
    config.actions = vec![
        basalt_plugins::config::ActionName::Enqueue,
        basalt_plugins::config::ActionName::Allocate,
    ];
    let mut fw = basalt_plugins::framework(&config, names);
    match policy {
        Policy::Basalt => {}
        Policy::Fgd => {
            let frag = Fragmentation {
                workload: trace_shapes(exp),
                rule: Rule::Fgd,
                shared_only: false,
            };
            fw.scores = vec![Box::new(frag.clone())];
            fw.device_pick = Box::new(frag);
        }
        baseline => {
            fw.scores = vec![Box::new(Baseline {
                policy: baseline,
                seed,
            })];
            fw.device_pick = Box::new(Baseline {
                policy: baseline,
                seed,
            });
        }
    }
    fw.node_rank = Some(tie_ranks(exp.nodes.len(), seed).into());
    fw.report_queues = false;
    fw.explain_failures = false;
    fw.report_settled_groups = false;
    fw
}

/// The protocol's typical shapes: every trace pod once, 95 % coverage.
fn trace_shapes(exp: &Experiment) -> Workload {
    let mut counts: BTreeMap<GivenShape, u64> = BTreeMap::new();
    for p in &exp.pods {
        let shape = GivenShape {
            cpu_milli: p.cpu,
            gpu_milli: p.share,
            num_gpu: p.num_gpu,
            models: exp.model_names(p.models),
        };
        *counts.entry(shape).or_default() += 1;
    }
    Workload::Given {
        shapes: Arc::new(counts.into_iter().collect()),
        coverage_pct: 95,
    }
}

impl Experiment {
    fn engine_nodes(&self) -> Vec<NodeSpec> {
        (self.nodes.iter().enumerate())
            .map(|(i, n)| {
                let name = node_name(i);
                let mut allocatable: ResourceList = [
                    ("cpu".to_string(), n.cpu),
                    ("memory".to_string(), n.mem * MIB),
                ]
                .into();
                let mut spec = NodeSpec {
                    name: name.clone(),
                    ..NodeSpec::default()
                };
                let model = n.model.map(|m| self.models[m as usize].clone());
                if let Some(m) = &model {
                    spec.labels.insert(MODEL_LABEL.to_string(), m.clone());
                }
                if n.gpus > 0 {
                    allocatable.insert("nvidia.com/gpu".into(), (n.gpus * SLOTS) as i64);
                    spec.sharing = Sharing::Hami;
                    spec.shares = Some(share_vocabulary());
                    spec.gpus = Some(
                        (0..n.gpus)
                            .map(|g| Gpu {
                                uuid: Some(format!("{name}-gpu{g}")),
                                model: model.clone(),
                                memory_mib: Some(GPU_MEMORY_MIB),
                                slots: SLOTS,
                                ..Gpu::new(g)
                            })
                            .collect(),
                    );
                }
                spec.allocatable = allocatable;
                spec
            })
            .collect()
    }

    /// The pending pod of arrival `k`, trace pod `i`.
    fn engine_pod(&self, k: usize, i: u32) -> PodSpec {
        let p = &self.pods[i as usize];
        let mut request: ResourceList = [
            ("cpu".to_string(), p.cpu),
            ("memory".to_string(), p.mem * MIB),
        ]
        .into();
        if p.num_gpu > 0 {
            request.insert("nvidia.com/gpu".into(), p.num_gpu as i64);
            if (p.share as u32) < GPU_MILLI {
                let percent = (p.share / 10) as i64;
                request.insert(GPU_CORES_NAME.into(), percent);
                request.insert(GPU_MEMORY_PERCENT_NAME.into(), percent);
            }
        }
        let mut rules = PlacementRules::default();
        if let Some(models) = self.model_names(p.models) {
            rules.affinity = Some(RequiredNodeAffinity {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![SelectorRequirement {
                        key: MODEL_LABEL.to_string(),
                        operator: SelectorOperator::In,
                        values: models,
                    }],
                    match_fields: Vec::new(),
                }],
            });
        }
        PodSpec {
            namespace: "fgd".into(),
            name: format!("a{k:07}"),
            ours: true,
            devices: basalt_crds::device_ask(&request),
            request,
            rules,
            created_ms: k as i64,
            ..PodSpec::default()
        }
    }

    /// Runs one policy over one arrival sequence through the engine: the trajectory and where
    /// each arrival went.
    pub fn run(
        &self,
        workload: &[u32],
        policy: Policy,
        seed: u64,
    ) -> Result<(Trajectory, Vec<Placement>), FgdError> {
        let cluster = |e: basalt_engine::SnapshotError| FgdError::Cluster(e.to_string());
        let mut builder = SnapshotBuilder::new(GPU_NAME, self.engine_nodes()).map_err(cluster)?;
        let mut fw: Option<Framework> = None;
        // What each cycle hands the next (one builder, one framework).
        let mut warm = basalt_engine::Warm::default();
        let mut samples = Vec::with_capacity(workload.len());
        let mut placements = Vec::with_capacity(workload.len());
        let (mut arrived, mut allocated) = (0u64, 0u64);
        for (k, &i) in workload.iter().enumerate() {
            let mut pod = self.engine_pod(k, i);
            builder.set_pod(pod.clone());
            let snapshot = builder.build(k as i64, &[]).map_err(cluster)?;
            // One framework and Warm for the run (the nodes, hence the resource names, never
            // change), so each session starts from the last one's node index.
            let fw = fw.get_or_insert_with(|| framework(self, policy, seed, &snapshot.resources));
            let plan = basalt_engine::schedule(snapshot, fw, &mut warm);
            arrived += self.pods[i as usize].request;
            let placed = plan.bindings.first().map(|b| {
                let node: usize = b.node["fgd-".len()..].parse().expect("our node names");
                let mask = b.gpus.iter().fold(0u64, |m, &g| m | 1 << g);
                pod.phase = PodPhase::Running;
                pod.node = Some(b.node.clone());
                pod.held_devices = (b.devices.iter())
                    .map(|d| HeldDevice {
                        uuid: d.uuid.clone().unwrap_or_default(),
                        memory_mib: d.memory_mib.unwrap_or(0),
                        cores: d.cores.unwrap_or(0),
                    })
                    .collect();
                (node as u32, mask)
            });
            match placed {
                Some(_) => {
                    allocated += self.pods[i as usize].request;
                    builder.set_pod(pod);
                }
                None => {
                    builder.remove_pod(&pod.namespace, &pod.name);
                }
            }
            samples.push((arrived, allocated));
            placements.push(placed);
        }
        let trajectory = Trajectory {
            capacity_milli: self.capacity_milli,
            samples,
        };
        Ok((trajectory, placements))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fgd::{workload, SAMPLE_NODES, SAMPLE_PODS};

    /// Every policy's placements, replayed on plain counters, never overfill a node, a GPU or
    /// a model constraint, and a dropped pod had no node with room; the same seed gives the
    /// same placements.
    #[test]
    fn every_policy_places_feasibly_and_deterministically() {
        let nodes = crate::openb::read_nodes("nodes", SAMPLE_NODES.as_bytes()).unwrap();
        let pods = crate::openb::read_pods("pods", SAMPLE_PODS.as_bytes()).unwrap();
        let exp = Experiment::new(&nodes, &pods).unwrap();
        for seed in [42, 43] {
            let w = workload::generate(&exp.requests(), exp.capacity_milli, seed);
            for policy in Policy::ALL {
                let (_, placed) = exp.run(&w, policy, seed).unwrap();
                assert_eq!(placed, exp.run(&w, policy, seed).unwrap().1, "{policy}");
                let mut cpu: Vec<i64> = exp.nodes.iter().map(|n| n.cpu).collect();
                let mut mem: Vec<i64> = exp.nodes.iter().map(|n| n.mem).collect();
                let mut gpu: Vec<Vec<i64>> = (exp.nodes.iter())
                    .map(|n| vec![GPU_MILLI as i64; n.gpus as usize])
                    .collect();
                let fits = |n: usize,
                            p: &super::super::experiment::PodInfo,
                            cpu: &[i64],
                            mem: &[i64],
                            gpu: &[Vec<i64>]| {
                    cpu[n] >= p.cpu
                        && mem[n] >= p.mem
                        && p.models.allows(exp.nodes[n].model)
                        && gpu[n].iter().filter(|&&g| g >= p.share as i64).count()
                            >= p.num_gpu as usize
                };
                for (&i, at) in w.iter().zip(&placed) {
                    let p = &exp.pods[i as usize];
                    let Some((n, mask)) = *at else {
                        let any = (0..exp.nodes.len()).any(|n| fits(n, p, &cpu, &mem, &gpu));
                        assert!(!any, "{policy}: a pod was dropped with room for it");
                        continue;
                    };
                    let n = n as usize;
                    assert!(
                        fits(n, p, &cpu, &mem, &gpu),
                        "{policy}: placed without room"
                    );
                    assert_eq!(mask.count_ones(), p.num_gpu, "{policy}");
                    cpu[n] -= p.cpu;
                    mem[n] -= p.mem;
                    for (g, free) in gpu[n].iter_mut().enumerate() {
                        if mask & (1 << g) != 0 {
                            let take = if p.share as u32 >= GPU_MILLI {
                                GPU_MILLI as i64
                            } else {
                                p.share as i64
                            };
                            assert!(*free >= take, "{policy}: GPU {g} overfilled");
                            if take == GPU_MILLI as i64 {
                                assert_eq!(*free, take, "{policy}: a whole GPU was shared");
                            }
                            *free -= take;
                        }
                    }
                }
            }
        }
    }
}

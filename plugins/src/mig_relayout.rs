//! `migRelayout`: new MIG layouts for idle GPUs, chosen from the MIG demand a cycle left
//! pending (the engine's [`MigRelayout`] extension point; the tables and the layout search are
//! `basalt-mig`'s). Off by default.
//!
//! The policy, per cycle:
//! - **demand**: pending pods (not held) asking for `nvidia.com/mig-<profile>` (NVIDIA's mixed
//!   strategy), by priority, then age; a pod a free instance already serves on a node that
//!   takes it is left to the next cycle's `allocate`;
//! - **GPUs**: those the engine calls re-layable (healthy, idle, node open and not
//!   reconfiguring), whose model the tables know, on nodes no starving gang reserved, in MIG
//!   mode; with `mig.wholeGpus` (for clusters where mig-manager switches MIG mode: the node
//!   agent never does) whole GPUs too, after those in MIG mode (a whole GPU given to MIG is one
//!   fewer for a whole-GPU job), and none on a node a pending whole-GPU pod could use (its
//!   NVLink islands are what such a gang waits for);
//! - **layout**: for the first unserved pod, the first GPU on a node that takes it (static
//!   filters, CPU and memory); its layout holds the pod's profiles, then as many of the next
//!   pending pods' (those the node takes too) as fit, then fills the rest with the demanded
//!   profiles, largest first, and finally the smallest profile: no compute is left unlaid;
//! - **bound**: at most `maxGpusPerNode` GPUs per node per cycle.

use std::collections::BTreeMap;

use basalt_engine::devices::Sharing;
use basalt_engine::{
    MigRelayout, NodeId, RelayoutProposal, ResourceId, Resources, SessionView, Task, TaskId,
    TaskStatus, GPU,
};
use basalt_mig::planner::{self, Wanted};
use basalt_mig::profiles::{self, GpuModel};

/// What NVIDIA's mixed strategy names MIG resources with (`crds` reads nodes' slices alike).
const MIG_PREFIX: &str = "nvidia.com/mig-";

/// The demand-driven policy (see the module doc).
pub struct DemandRelayout {
    /// GPUs re-laid per node per cycle, at most.
    pub max_gpus_per_node: u32,
    /// GPUs not in MIG mode are candidates too (`mig.wholeGpus`).
    pub whole_gpus: bool,
}

/// A pending pod's MIG asks: profile name and count.
struct Ask {
    task: TaskId,
    profiles: BTreeMap<String, u32>,
    /// Its request without the MIG resources: what the node must still have free.
    rest: Resources,
}

/// The profile a `nvidia.com/mig-<profile>` resource names (`1g.10gb.me` is `1g.10gb+me`).
pub fn mig_profile(resource: &str) -> Option<String> {
    let p = resource.strip_prefix(MIG_PREFIX)?;
    Some(match p.strip_suffix(".me") {
        Some(base) => format!("{base}+me"),
        None => p.to_string(),
    })
}

impl MigRelayout for DemandRelayout {
    fn name(&self) -> &str {
        "demand"
    }

    fn propose(&self, s: &SessionView) -> Vec<RelayoutProposal> {
        let asks = demand(s);
        if asks.is_empty() {
            return Vec::new();
        }
        let mut gpus = candidate_gpus(s, self.whole_gpus);
        let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut served = vec![false; asks.len()];
        let mut out = Vec::new();
        for i in 0..asks.len() {
            if served[i] {
                continue;
            }
            let takes = |node: NodeId, a: &Ask| takes(s, node, a);
            let chosen = gpus.iter().position(|c| {
                per_node.get(&c.node).copied().unwrap_or(0) < self.max_gpus_per_node
                    && takes(c.node, &asks[i])
                    && planner::plan(c.model, &Wanted(asks[i].profiles.clone())).is_ok()
            });
            let Some(chosen) = chosen else { continue };
            let gpu = gpus.remove(chosen);
            let mut wanted = asks[i].profiles.clone();
            let mut waiting = vec![asks[i].task];
            served[i] = true;
            for j in i + 1..asks.len() {
                if served[j] || !takes(gpu.node, &asks[j]) {
                    continue;
                }
                let mut more = wanted.clone();
                add(&mut more, &asks[j].profiles);
                if planner::plan(gpu.model, &Wanted(more.clone())).is_ok() {
                    wanted = more;
                    waiting.push(asks[j].task);
                    served[j] = true;
                }
            }
            let demanded: Vec<&str> = asks
                .iter()
                .flat_map(|a| a.profiles.keys())
                .map(String::as_str)
                .collect();
            fill(gpu.model, &mut wanted, &demanded);
            let Ok(plan) = planner::plan(gpu.model, &Wanted(wanted)) else {
                continue;
            };
            *per_node.entry(gpu.node).or_default() += 1;
            out.push(RelayoutProposal {
                node: gpu.node,
                gpu: gpu.index,
                layout: (plan.placements.iter())
                    .map(|p| (p.profile.name.to_string(), p.start))
                    .collect(),
                waiting,
            });
        }
        out
    }
}

fn add(to: &mut BTreeMap<String, u32>, more: &BTreeMap<String, u32>) {
    for (p, c) in more {
        *to.entry(p.clone()).or_default() += c;
    }
}

/// Adds instances while any fits: the demanded profiles, largest first, then the model's
/// smallest (one compute and one memory slice, no media extensions).
fn fill(model: &'static GpuModel, wanted: &mut BTreeMap<String, u32>, demanded: &[&str]) {
    let mut order: Vec<&'static profiles::MigProfile> = (model.profiles.iter())
        .filter(|p| demanded.contains(&p.name))
        .collect();
    order.sort_by_key(|p| std::cmp::Reverse((p.compute_slices, p.memory_slices)));
    order.extend(
        (model.profiles.iter())
            .filter(|p| p.compute_slices == 1 && p.memory_slices == 1 && !p.name.ends_with("+me")),
    );
    for p in order {
        loop {
            let mut more = wanted.clone();
            *more.entry(p.name.to_string()).or_default() += 1;
            if planner::plan(model, &Wanted(more.clone())).is_err() {
                break;
            }
            *wanted = more;
        }
    }
}

/// Pending pods asking for MIG profiles, by priority (highest first), then age, then name.
fn demand(s: &SessionView) -> Vec<Ask> {
    let snap = s.snapshot;
    let names = &snap.resources;
    let mig: Vec<(ResourceId, String)> = (names.ids())
        .filter_map(|id| mig_profile(names.name(id)).map(|p| (id, p)))
        .collect();
    if mig.is_empty() {
        return Vec::new();
    }
    let mut pending: Vec<&Task> = (snap.tasks.iter())
        .filter(|t| t.hold.is_none() && *s.task_status(t.id) == TaskStatus::Pending)
        .collect();
    pending.sort_by_key(|t| (std::cmp::Reverse(t.priority), t.created_ms, t.id));
    let mut asks = Vec::new();
    for t in pending {
        let mut profiles = BTreeMap::new();
        let mut rest = t.request.clone();
        for (id, profile) in &mig {
            let count = t.request.count(*id);
            if count > 0 {
                profiles.insert(profile.clone(), count);
                rest.set(*id, 0);
            }
        }
        if !profiles.is_empty() && !served_by_free_instance(s, t, &rest) {
            asks.push(Ask {
                task: t.id,
                profiles,
                rest,
            });
        }
    }
    asks
}

/// Whether a node that takes the pod has free instances of every profile it asks for: then it
/// waits for something else (its gang, its turn), not for a layout.
fn served_by_free_instance(s: &SessionView, t: &Task, rest: &Resources) -> bool {
    (s.snapshot.nodes.iter()).any(|n| {
        let used = s.slices_used(n.id);
        let free = |kind: ResourceId| {
            (n.slices.iter().enumerate())
                .filter(|(p, sl)| sl.kind == kind && used & (1 << p) == 0)
                .count() as u32
        };
        let asked: Vec<(ResourceId, u32)> = (t.request.iter())
            .filter(|(id, _)| mig_profile(s.snapshot.resources.name(*id)).is_some())
            .map(|(id, _)| (id, t.request.count(id)))
            .collect();
        asked.iter().all(|&(id, c)| c > 0 && free(id) >= c)
            && s.framework()
                .filter_node(&s.snapshot.rules[t.rules.0 as usize], n)
                .is_ok()
            && s.fits(n.id, rest)
    })
}

/// Whether the node could take the pod once a GPU of it is re-laid.
fn takes(s: &SessionView, node: NodeId, a: &Ask) -> bool {
    let t = s.snapshot.task(a.task);
    let n = s.snapshot.node(node);
    s.reserved_for(node).is_none()
        && s.framework()
            .filter_node(&s.snapshot.rules[t.rules.0 as usize], n)
            .is_ok()
        && s.fits(node, &a.rest)
}

struct Candidate {
    node: NodeId,
    index: u32,
    model: &'static GpuModel,
}

/// Re-layable GPUs of known models: in MIG mode first, then (with `include_whole`) whole ones on
/// nodes no pending whole-GPU pod could use; each by node, then position.
fn candidate_gpus(s: &SessionView, include_whole: bool) -> Vec<Candidate> {
    let snap = s.snapshot;
    let whole_gpu_pending: Vec<&Task> = (snap.tasks.iter())
        .filter(|t| *s.task_status(t.id) == TaskStatus::Pending)
        .filter(|t| t.request.count(GPU) > 0)
        .collect();
    let mut partitioned = Vec::new();
    let mut whole_gpus = Vec::new();
    for n in snap
        .nodes
        .iter()
        .filter(|n| n.sharing == Sharing::Exclusive)
    {
        if s.reserved_for(n.id).is_some() {
            continue;
        }
        let awaited = || {
            (whole_gpu_pending.iter()).any(|t| {
                s.framework()
                    .filter_node(&snap.rules[t.rules.0 as usize], n)
                    .is_ok()
            })
        };
        for (position, g) in n.gpus.iter().enumerate() {
            let Some(model) = g.model.as_deref().and_then(|m| model_of(m, g.memory_mib)) else {
                continue;
            };
            if !s.gpu_relayable(n.id, position) {
                continue;
            }
            let c = Candidate {
                node: n.id,
                index: g.index,
                model,
            };
            if g.mig {
                partitioned.push(c);
            } else if include_whole && !awaited() {
                whole_gpus.push(c);
            }
        }
    }
    partitioned.extend(whole_gpus);
    partitioned
}

/// The model of a GPU as the engine knows it: NVML's or GFD's product name, and its memory
/// when known (else the `<n>GB` in the name: `NVIDIA-H100-80GB-HBM3`).
fn model_of(product: &str, memory_mib: Option<u64>) -> Option<&'static GpuModel> {
    let memory = memory_mib.or_else(|| {
        let upper = product.to_ascii_uppercase();
        let at = upper.find("GB")?;
        let digits: String = upper[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        let gb: u64 = digits.chars().rev().collect::<String>().parse().ok()?;
        Some(gb * 1024)
    })?;
    profiles::model_for_device(product, memory)
}

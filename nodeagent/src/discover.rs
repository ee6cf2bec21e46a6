//! Discovery: from what NVML reported ([`RawNode`]) to the node's topology: per-GPU facts, the
//! pairwise link matrix, NVLink islands (connected components of the NVLink graph, where GPUs
//! behind the same NVSwitches or in the same fabric clique are linked) and the fabric clique.

use std::collections::{BTreeMap, BTreeSet};

use basalt_crd_types::{GpuInfo, MigDeviceInfo, MigInfo, NodeTopology, NodeTopologySpec};
use kube::api::ObjectMeta;
use petgraph::graph::UnGraph;
use serde::Serialize;
use thiserror::Error;

use crate::raw::{canonical_bus_id, FabricState, PcieLevel, RawNode, RemoteType};

/// How two GPUs are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Link {
    Itself,
    /// NVLinks between them, direct or through NVSwitches.
    NvLink(u32),
    /// No NVLink; the closest common PCIe ancestor.
    Pcie(PcieLevel),
    Unknown,
}

impl Link {
    /// `nvidia-smi topo -m` notation.
    pub fn smi(self) -> String {
        match self {
            Link::Itself => "X".into(),
            Link::NvLink(n) => format!("NV{n}"),
            Link::Pcie(l) => l.smi().into(),
            Link::Unknown => "?".into(),
        }
    }
}

/// The result of discovery.
#[derive(Clone, Debug, PartialEq)]
pub struct Discovery {
    /// By index, 0..n.
    pub gpus: Vec<GpuInfo>,
    /// `matrix[a][b]`, by index.
    pub matrix: Vec<Vec<Link>>,
    /// Connected components of the NVLink graph, each sorted, ordered by first GPU; GPUs without
    /// NVLink are islands of one.
    pub islands: Vec<Vec<u32>>,
    /// `<clusterUuid>.<cliqueId>`, the GPU operator's `nvidia.com/gpu.clique` value.
    pub clique_id: Option<String>,
    pub fabric_cluster_uuid: Option<String>,
    /// Things that look wrong but do not stop discovery, plus the backend's per-GPU errors.
    pub warnings: Vec<String>,
}

/// A report discovery cannot make sense of; names the field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct DiscoverError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> DiscoverError {
    DiscoverError {
        field: field.into(),
        message: message.into(),
    }
}

pub fn discover(raw: &RawNode) -> Result<Discovery, DiscoverError> {
    let n = raw.gpus.len();
    let mut warnings = raw.errors.clone();
    // Position in `raw.gpus` of each index; indices must be exactly 0..n (the engine's GPU masks).
    let mut pos_of: Vec<Option<usize>> = vec![None; n];
    for (pos, g) in raw.gpus.iter().enumerate() {
        let slot = pos_of.get_mut(g.index as usize).ok_or_else(|| {
            err(
                format!("gpus[{pos}].index"),
                format!("GPU index {} out of range: indices must be 0..{n}", g.index),
            )
        })?;
        if slot.replace(pos).is_some() {
            return Err(err(
                format!("gpus[{pos}].index"),
                format!("duplicate GPU index {}", g.index),
            ));
        }
    }
    let order: Vec<usize> = pos_of
        .into_iter()
        .map(|p| p.expect("n distinct indices in 0..n"))
        .collect();
    let mut bus_to_index: BTreeMap<String, u32> = BTreeMap::new();
    let mut bus_ids = Vec::with_capacity(n);
    for (index, &pos) in order.iter().enumerate() {
        let g = &raw.gpus[pos];
        let bus = canonical_bus_id(&g.pci_bus_id).ok_or_else(|| {
            err(
                format!("gpus[{pos}].pciBusId"),
                format!(
                    "{:?} is not a PCI bus id (domain:bus:device.function)",
                    g.pci_bus_id
                ),
            )
        })?;
        if let Some(other) = bus_to_index.insert(bus.clone(), index as u32) {
            return Err(err(
                format!("gpus[{pos}].pciBusId"),
                format!("bus id {bus} is also GPU {other}'s"),
            ));
        }
        bus_ids.push(bus);
    }

    // NVLinks: direct GPU-GPU counts and per-switch counts.
    let mut direct = vec![vec![0u32; n]; n];
    let mut switches: Vec<BTreeMap<String, u32>> = vec![BTreeMap::new(); n];
    let mut active = vec![0u32; n];
    for (a, &pos) in order.iter().enumerate() {
        let g = &raw.gpus[pos];
        let mut seen = BTreeSet::new();
        let mut unknown_remote = 0;
        for (j, l) in g.nvlinks.iter().enumerate() {
            let field = format!("gpus[{pos}].nvlinks[{j}]");
            if !seen.insert(l.link) {
                return Err(err(
                    format!("{field}.link"),
                    format!("link {} listed twice", l.link),
                ));
            }
            active[a] += 1;
            let Some(remote) = &l.remote_pci_bus_id else {
                unknown_remote += 1;
                continue;
            };
            let remote = canonical_bus_id(remote).ok_or_else(|| {
                err(
                    format!("{field}.remotePciBusId"),
                    format!("{remote:?} is not a PCI bus id"),
                )
            })?;
            let local = bus_to_index.get(&remote).copied();
            match (l.remote_type, local) {
                (RemoteType::Gpu | RemoteType::Unknown, Some(b)) if b as usize != a => {
                    direct[a][b as usize] += 1
                }
                (RemoteType::Gpu | RemoteType::Unknown, Some(_)) => {
                    return Err(err(
                        format!("{field}.remotePciBusId"),
                        "an NVLink to the GPU itself",
                    ));
                }
                (RemoteType::Gpu, None) => warnings.push(format!(
                    "GPU {a}: NVLink {} goes to GPU {remote}, which is not on this node",
                    l.link
                )),
                (RemoteType::Switch | RemoteType::Unknown, None) => {
                    *switches[a].entry(remote).or_insert(0) += 1
                }
                (RemoteType::Switch, Some(b)) => {
                    return Err(err(
                        format!("{field}.remoteType"),
                        format!("switch, but {remote} is GPU {b}"),
                    ))
                }
                (RemoteType::Npu, _) => {}
            }
        }
        if unknown_remote > 0 {
            // Normal for NVL72 trays, whose switches are outside the node: the fabric clique
            // links those GPUs instead.
            let fabric = g
                .fabric
                .as_ref()
                .is_some_and(|f| f.state == FabricState::Completed);
            if !fabric {
                warnings.push(format!(
                    "GPU {a}: {unknown_remote} NVLink(s) without a remote PCI bus id are not counted"
                ));
            }
        }
    }
    // Fabric cliques (NVL72): GPUs in the same completed clique share the NVLink fabric.
    let mut clique_of: Vec<Option<String>> = vec![None; n];
    let mut fabric_uuid = None;
    for (a, &pos) in order.iter().enumerate() {
        let Some(f) = &raw.gpus[pos].fabric else {
            continue;
        };
        match f.state {
            FabricState::Completed => {
                if let Some(status) = f.status.as_deref().filter(|s| *s != "Success") {
                    warnings.push(format!(
                        "GPU {a}: fabric registration finished with {status}"
                    ));
                    continue;
                }
                clique_of[a] = Some(format!("{}.{}", f.cluster_uuid, f.clique_id));
                fabric_uuid.get_or_insert_with(|| f.cluster_uuid.clone());
            }
            FabricState::NotSupported => {}
            s => warnings.push(format!(
                "GPU {a}: fabric registration not completed ({s:?})"
            )),
        }
    }
    let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
    for c in clique_of.iter().flatten() {
        *counts.entry(c).or_insert(0) += 1;
    }
    if counts.len() > 1 {
        warnings.push(format!(
            "GPUs report different fabric cliques: {}",
            counts
                .keys()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let clique_id = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(c, _)| (*c).clone());

    // PCIe levels.
    let pcie = &raw.pcie_topology;
    if n > 1 && pcie.is_empty() {
        warnings.push("no PCIe topology reported: pairs without NVLink show as unknown".into());
    }
    if !pcie.is_empty() {
        if pcie.len() != n {
            return Err(err(
                "pcieTopology",
                format!("{} rows for {n} GPUs", pcie.len()),
            ));
        }
        for (a, row) in pcie.iter().enumerate() {
            if row.len() != n {
                return Err(err(
                    format!("pcieTopology[{a}]"),
                    format!("{} columns for {n} GPUs", row.len()),
                ));
            }
            for (b, cell) in row.iter().enumerate() {
                match (a == b, cell) {
                    (true, Some(PcieLevel::Itself) | None) | (false, None) => {}
                    (true, Some(l)) => {
                        return Err(err(
                            format!("pcieTopology[{a}][{b}]"),
                            format!("the diagonal must be self, got {l:?}"),
                        ))
                    }
                    (false, Some(PcieLevel::Itself)) => {
                        return Err(err(
                            format!("pcieTopology[{a}][{b}]"),
                            "self off the diagonal",
                        ))
                    }
                    (false, Some(_)) => {}
                }
            }
        }
    }

    let mut matrix = vec![vec![Link::Unknown; n]; n];
    let mut graph: UnGraph<u32, u32> = UnGraph::new_undirected();
    let nodes: Vec<_> = (0..n as u32).map(|i| graph.add_node(i)).collect();
    for a in 0..n {
        matrix[a][a] = Link::Itself;
        for b in (a + 1)..n {
            if direct[a][b] != direct[b][a] {
                warnings.push(format!(
                    "GPU {a} reports {} NVLinks to GPU {b}, GPU {b} reports {}: using the larger",
                    direct[a][b], direct[b][a]
                ));
            }
            let d = direct[a][b].max(direct[b][a]);
            let shared = |x: usize, y: usize| -> u32 {
                switches[x]
                    .iter()
                    .filter(|(s, _)| switches[y].contains_key(*s))
                    .map(|(_, c)| c)
                    .sum()
            };
            let via_switch = shared(a, b).min(shared(b, a));
            let via_fabric = match (&clique_of[a], &clique_of[b]) {
                (Some(x), Some(y)) if x == y => active[a].min(active[b]),
                _ => 0,
            };
            let nv = d + via_switch.max(via_fabric);
            let link = if nv > 0 {
                graph.add_edge(nodes[a], nodes[b], nv);
                Link::NvLink(nv)
            } else {
                let level =
                    |x: usize, y: usize| pcie.get(x).and_then(|r| r.get(y)).copied().flatten();
                match (level(a, b), level(b, a)) {
                    (Some(x), Some(y)) => {
                        if x != y {
                            warnings.push(format!(
                                "PCIe level of GPUs {a} and {b} differs by direction ({x}, {y}): using the farther"
                            ));
                        }
                        Link::Pcie(x.max(y))
                    }
                    (Some(x), None) | (None, Some(x)) => Link::Pcie(x),
                    (None, None) => Link::Unknown,
                }
            };
            matrix[a][b] = link;
            matrix[b][a] = link;
        }
    }
    let mut islands: Vec<Vec<u32>> = petgraph::algo::tarjan_scc(&graph)
        .into_iter()
        .map(|c| {
            let mut v: Vec<u32> = c.into_iter().map(|i| graph[i]).collect();
            v.sort_unstable();
            v
        })
        .collect();
    islands.sort();

    let gpus = order
        .iter()
        .enumerate()
        .map(|(index, &pos)| {
            let g = &raw.gpus[pos];
            GpuInfo {
                index: index as u32,
                uuid: Some(g.uuid.clone()),
                model: Some(g.name.clone()),
                memory_mib: Some(g.memory_mib),
                pci_bus_id: Some(bus_ids[index].clone()),
                numa_node: g.numa_node,
                nvlinks: (active[index] > 0).then_some(active[index]),
                fabric_clique_id: clique_of[index]
                    .as_ref()
                    .and(g.fabric.as_ref())
                    .map(|f| f.clique_id),
                mig: g.mig.as_ref().map(|m| MigInfo {
                    enabled: m.enabled,
                    pending_enabled: m.pending_enabled.filter(|p| *p != m.enabled),
                    devices: {
                        let mut d: Vec<MigDeviceInfo> = m
                            .instances
                            .iter()
                            .map(|i| MigDeviceInfo {
                                profile: i.profile.clone(),
                                start: i.start,
                                size: i.size,
                                gpu_instance_id: i.id,
                                busy: i.busy(),
                            })
                            .collect();
                        d.sort_by_key(|d| (d.start, d.gpu_instance_id));
                        d
                    },
                }),
            }
        })
        .collect();
    Ok(Discovery {
        gpus,
        matrix,
        islands,
        clique_id,
        fabric_cluster_uuid: fabric_uuid,
        warnings,
    })
}

impl Discovery {
    /// The link matrix in `nvidia-smi topo -m` notation.
    pub fn matrix_smi(&self) -> Vec<Vec<String>> {
        self.matrix
            .iter()
            .map(|r| r.iter().map(|l| l.smi()).collect())
            .collect()
    }

    /// The NodeTopology object for node `name`.
    pub fn node_topology(&self, name: &str, time_slice_replicas: Option<u32>) -> NodeTopology {
        NodeTopology {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: NodeTopologySpec {
                gpus: self.gpus.clone(),
                islands: self.islands.clone(),
                clique_id: self.clique_id.clone(),
                time_slice_replicas,
                link_matrix: if self.gpus.len() > 1 {
                    self.matrix_smi()
                } else {
                    Vec::new()
                },
                fabric_cluster_uuid: self.fabric_cluster_uuid.clone(),
                // The scheduler's; `publish` carries the stored one over.
                mig_layouts: Vec::new(),
            },
            status: None,
        }
    }
}

//! Real per-device GPU sharing for the replay (`--gpu-share hami`): the trace's GPU nodes become
//! HAMi nodes, fractional pods ask HAMi's compute and memory shares, and a table follows what
//! every device holds so the replay can report per-device fragmentation.
//!
//! - **Nodes.** Each node with GPUs and no sharing of its own becomes a HAMi node
//!   ([`Sharing::Hami`]): its GPUs are listed as devices `0..n` with UUID `<node>-gpu<i>`, the
//!   model of its `nvidia.com/gpu.product` label, [`HAMI_SLOTS`] slots (HAMi's chart default
//!   `deviceSplitCount`), 100 cores (HAMi's `devcore`) and the memory of its model
//!   ([`gpu_memory_mib`]); allocatable `nvidia.com/gpu` becomes devices × slots, as HAMi's
//!   device plugin advertises it. Nodes that already share their devices (manifests) are kept.
//! - **Pods.** A pod asking a share of one GPU (`gpu_milli` < 1000) asks `nvidia.com/gpu: 1`,
//!   `nvidia.com/gpucores: p` and `nvidia.com/gpumem-percentage: p` with
//!   p = ⌈gpu_milli / 10⌉ (1 to 100; openb's `gpu_milli` is a share of one GPU and states no
//!   GPU memory, so memory is taken in proportion). Whole-GPU pods ask a plain
//!   `nvidia.com/gpu: n`, which on a HAMi node takes whole devices (all memory, 100 cores).
//! - **Accounting.** [`DeviceTable`] charges each binding's devices with the compute the plan
//!   gave them (`devices[].cores`; a whole device on a node that does not share its devices
//!   counts all of it) and keeps running totals, so every sample of the replay states the
//!   compute free on devices some pod holds (fragmented), the compute of devices no pod holds,
//!   and the number of partially used devices.

use basalt_engine::devices::Sharing;
use basalt_engine::{BoundDevice, Gpu, NodeSpec};

use super::workload::GPU_MODEL_LABEL;

/// Slots per device of a HAMi node made from a trace: HAMi's chart default `deviceSplitCount`
/// (HAMi's `charts/hami/values.yaml`; `docs/protocols.md`, section 1). At most this many pods share one GPU.
pub const HAMI_SLOTS: u32 = 10;

/// Memory of a GPU whose model the table does not know (openb's undisclosed `G2` and `G3`, or
/// a node without a model label), in MiB: 16 GiB, the smallest of openb's disclosed models.
/// Shares ask memory in percent of the device, so the value changes no placement.
pub const DEFAULT_GPU_MEMORY_MIB: u64 = 16 * 1024;

/// Memory of one GPU of `model` in MiB: the openb models (P100, T4 and V100M16 16 GiB,
/// V100M32 32 GiB, A10 24 GiB) and the generator's default H100 (80 GiB); anything else
/// [`DEFAULT_GPU_MEMORY_MIB`].
pub fn gpu_memory_mib(model: Option<&str>) -> u64 {
    let gib = match model.unwrap_or("").to_ascii_uppercase().as_str() {
        "P100" | "T4" | "V100M16" => 16,
        "V100M32" => 32,
        "A10" => 24,
        "H100" => 80,
        _ => return DEFAULT_GPU_MEMORY_MIB,
    };
    gib * 1024
}

/// The compute (and memory) share, in percent of one device, that a pod asking `gpu_milli` of
/// one GPU takes: ⌈gpu_milli / 10⌉, at least 1 (HAMi ignores a share of 0) and at most 100.
pub fn share_percent(gpu_milli: u32) -> i64 {
    gpu_milli.div_ceil(10).clamp(1, 100) as i64
}

/// The node as a HAMi node (see the module docs); nodes without GPUs, and nodes that already
/// share their devices, are returned as they are.
pub fn hami_node(mut n: NodeSpec) -> NodeSpec {
    if n.sharing.shares() || n.device_resource.is_some() {
        return n;
    }
    let count = n.allocatable.get("nvidia.com/gpu").copied().unwrap_or(0);
    if count <= 0 {
        return n;
    }
    let model = n.labels.get(GPU_MODEL_LABEL).cloned();
    let memory = gpu_memory_mib(model.as_deref());
    let listed = n.gpus.take().filter(|g| g.len() as i64 == count);
    let gpus: Vec<Gpu> = match listed {
        Some(gpus) => gpus,
        None => (0..count as u32).map(Gpu::new).collect(),
    };
    let gpus: Vec<Gpu> = gpus
        .into_iter()
        .map(|g| Gpu {
            uuid: g
                .uuid
                .or_else(|| Some(format!("{}-gpu{}", n.name, g.index))),
            model: g.model.or_else(|| model.clone()),
            memory_mib: g.memory_mib.or(Some(memory)),
            slots: HAMI_SLOTS,
            ..g
        })
        .collect();
    n.allocatable.insert(
        "nvidia.com/gpu".into(),
        gpus.len() as i64 * HAMI_SLOTS as i64,
    );
    n.gpus = Some(gpus);
    n.sharing = Sharing::Hami;
    n.shares = Some(basalt_crds::convert::device_names::share_vocabulary());
    n
}

/// Physical GPUs of a node as the engine counts them: the listed devices of a node that
/// shares them (its allocatable counts slots), else its allocatable `nvidia.com/gpu` (the
/// replay's pods ask for no other device resource).
pub fn device_count(n: &NodeSpec) -> u32 {
    if n.sharing.shares() {
        return n.gpus.as_ref().map_or(0, |g| g.len() as u32);
    }
    n.allocatable
        .get("nvidia.com/gpu")
        .copied()
        .unwrap_or(0)
        .max(0) as u32
}

/// What one device holds.
#[derive(Clone, Copy, Debug, Default)]
struct Device {
    /// Gpu index (what bindings name).
    index: u32,
    /// Compute it has (HAMi's `devcore`, 100 per device).
    cap: u32,
    /// Compute the pods on it were given.
    cores: u32,
    pods: u32,
}

impl Device {
    /// (compute of a device no pod holds, compute free on a device some pod holds, partially
    /// used: held with compute left).
    fn contribution(&self) -> (u64, u64, u32) {
        if self.pods == 0 {
            (self.cap as u64, 0, 0)
        } else {
            let left = self.cap.saturating_sub(self.cores);
            (0, left as u64, (left > 0) as u32)
        }
    }
}

/// Every device of the cluster and what is on it, with running totals (compute in percent of
/// one device: 100 = one whole GPU).
#[derive(Clone, Debug, Default)]
pub struct DeviceTable {
    /// Node `n`'s devices are `devices[base[n]..base[n + 1]]`, by index.
    base: Vec<u32>,
    devices: Vec<Device>,
    shares: Vec<bool>,
    /// Per node: devices some pod holds.
    in_use: Vec<u32>,
    pub total_cores: u64,
    /// Compute of devices no pod holds.
    pub free_cores: u64,
    /// Compute free on devices some pod holds.
    pub fragmented_cores: u64,
    /// Devices some pod holds that have compute left.
    pub partial: u32,
    /// Devices some pod holds.
    pub used: u32,
    /// Devices whose pods were given more compute than the device has (the engine never
    /// should), and the most there were at once.
    pub overcommitted: u32,
    pub overcommitted_peak: u32,
}

/// One device a placed pod holds: its position in the node's devices and the compute it got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub position: u32,
    pub cores: u32,
}

impl DeviceTable {
    /// The devices of `nodes` (in node id order), all free.
    pub fn new(nodes: &[NodeSpec]) -> Self {
        let mut t = DeviceTable {
            base: vec![0],
            ..Default::default()
        };
        for n in nodes {
            let count = device_count(n) as usize;
            let mut gpus: Vec<Gpu> = match &n.gpus {
                Some(g) if g.len() == count => g.clone(),
                _ => (0..count as u32).map(Gpu::new).collect(),
            };
            gpus.sort_by_key(|g| g.index);
            for g in gpus {
                t.devices.push(Device {
                    index: g.index,
                    cap: g.cores,
                    ..Default::default()
                });
                t.total_cores += g.cores as u64;
                t.free_cores += g.cores as u64;
            }
            t.base.push(t.devices.len() as u32);
            t.shares.push(n.sharing.shares());
            t.in_use.push(0);
        }
        t
    }

    /// Whether node `node` shares its devices.
    pub fn shares(&self, node: u32) -> bool {
        self.shares[node as usize]
    }

    /// Devices some pod holds on node `node`.
    pub fn in_use(&self, node: u32) -> u32 {
        self.in_use[node as usize]
    }

    fn range(&self, node: u32) -> std::ops::Range<usize> {
        self.base[node as usize] as usize..self.base[node as usize + 1] as usize
    }

    /// The devices a binding on `node` takes: on a node that shares them, each of `devices`
    /// with the compute the plan gave it (all of it when the plan says none: a time-sliced
    /// replica uses the whole device in turn); otherwise whole devices `gpus`. Indices the
    /// node does not have are skipped.
    pub fn held(&self, node: u32, gpus: &[u32], devices: &[BoundDevice]) -> Vec<Held> {
        let range = self.range(node);
        let list = &self.devices[range];
        let position = |index: u32| list.iter().position(|d| d.index == index);
        if self.shares(node) && !devices.is_empty() {
            return (devices.iter())
                .filter_map(|d| {
                    let p = position(d.index)?;
                    Some(Held {
                        position: p as u32,
                        cores: d.cores.unwrap_or(list[p].cap),
                    })
                })
                .collect();
        }
        (gpus.iter())
            .filter_map(|&i| {
                let p = position(i)?;
                Some(Held {
                    position: p as u32,
                    cores: list[p].cap,
                })
            })
            .collect()
    }

    /// Puts (or takes off) one pod's devices on node `node`; returns the change in the number
    /// of devices some pod holds on the node.
    pub fn charge(&mut self, node: u32, held: &[Held], add: bool) -> i64 {
        let start = self.range(node).start;
        let before = self.in_use[node as usize];
        for h in held {
            let d = &mut self.devices[start + h.position as usize];
            let (free, frag, partial) = d.contribution();
            self.free_cores -= free;
            self.fragmented_cores -= frag;
            self.partial -= partial;
            let was_used = d.pods > 0;
            let was_over = d.cores > d.cap;
            if add {
                d.pods += 1;
                d.cores = d.cores.saturating_add(h.cores);
            } else {
                d.pods = d.pods.saturating_sub(1);
                d.cores = d.cores.saturating_sub(h.cores);
            }
            let (free, frag, partial) = d.contribution();
            self.free_cores += free;
            self.fragmented_cores += frag;
            self.partial += partial;
            match (was_used, d.pods > 0) {
                (false, true) => self.in_use[node as usize] += 1,
                (true, false) => self.in_use[node as usize] -= 1,
                _ => {}
            }
            match (was_over, d.cores > d.cap) {
                (false, true) => self.overcommitted += 1,
                (true, false) => self.overcommitted -= 1,
                _ => {}
            }
        }
        self.overcommitted_peak = self.overcommitted_peak.max(self.overcommitted);
        let after = self.in_use[node as usize];
        self.used = (self.used as i64 + after as i64 - before as i64) as u32;
        after as i64 - before as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(gpus: i64, model: &str) -> NodeSpec {
        NodeSpec {
            name: "n".into(),
            labels: BTreeMap::from([(GPU_MODEL_LABEL.to_string(), model.to_string())]),
            allocatable: [("nvidia.com/gpu".to_string(), gpus)].into_iter().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn trace_nodes_become_hami_nodes_with_their_models_memory() {
        let n = hami_node(node(2, "V100M32"));
        assert_eq!(n.sharing, Sharing::Hami);
        assert_eq!(n.allocatable["nvidia.com/gpu"], 20);
        let gpus = n.gpus.as_ref().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].uuid.as_deref(), Some("n-gpu1"));
        assert_eq!(gpus[1].memory_mib, Some(32 * 1024));
        assert_eq!(gpus[1].slots, HAMI_SLOTS);
        assert_eq!(device_count(&n), 2);
        let g2 = hami_node(node(8, "G2"));
        assert_eq!(g2.gpus.unwrap()[0].memory_mib, Some(DEFAULT_GPU_MEMORY_MIB));
        // No GPUs: unchanged.
        assert_eq!(hami_node(node(0, "T4")).sharing, Sharing::Exclusive);
    }

    #[test]
    fn share_percent_rounds_up_and_is_bounded() {
        assert_eq!(share_percent(500), 50);
        assert_eq!(share_percent(333), 34);
        assert_eq!(share_percent(0), 1);
        assert_eq!(share_percent(999), 100);
    }

    #[test]
    fn the_table_tells_fragmented_from_whole_free_compute() {
        let mut t = DeviceTable::new(&[hami_node(node(2, "T4"))]);
        assert_eq!((t.total_cores, t.free_cores), (200, 200));
        let share = |cores| BoundDevice {
            index: 0,
            uuid: None,
            memory_mib: None,
            cores: Some(cores),
            mig: None,
        };
        let a = t.held(0, &[0], &[share(60)]);
        assert_eq!(t.charge(0, &a, true), 1);
        assert_eq!((t.free_cores, t.fragmented_cores, t.partial), (100, 40, 1));
        let b = t.held(0, &[0], &[share(40)]);
        assert_eq!(t.charge(0, &b, true), 0);
        assert_eq!((t.free_cores, t.fragmented_cores, t.partial), (100, 0, 0));
        assert_eq!(t.charge(0, &a, false), 0);
        assert_eq!((t.free_cores, t.fragmented_cores, t.partial), (100, 60, 1));
        assert_eq!(t.charge(0, &b, false), -1);
        assert_eq!((t.free_cores, t.fragmented_cores, t.used), (200, 0, 0));
    }
}

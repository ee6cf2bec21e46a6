//! `--dra`: the cluster's whole GPUs as DRA devices and the jobs' GPU pods asking through
//! ResourceClaims, so a DRA cluster can be compared with the device-plugin one on one trace.
//!
//! - **Devices.** Each GPU of a node becomes device `gpu-<i>` of driver [`DRIVER`] in pool =
//!   the node's name, reachable from that node only (a `nodeName` slice, as NVIDIA's DRA
//!   driver publishes them), with the attributes `gpu.nvidia.com/type` (`gpu`), `index`,
//!   `uuid` (the node's listed UUID, else `<node>-gpu<i>`) and `productName` (the GPU's model,
//!   else the node's `nvidia.com/gpu.product` label) where known. No `pcieRoot`: no trace
//!   states the PCIe tree. Devices are in (driver, pool, name) order, as the reader lists a
//!   real cluster's slices. Unhealthy GPUs are not published. Nodes then advertise no
//!   `nvidia.com/gpu`.
//! - **Claims.** A pod asking `n` whole GPUs asks instead through one claim of its own (made
//!   from a template named `gpus`, as the resourceclaim controller makes one per pod): one
//!   request `gpus` for exactly `n` devices of the set every GPU is in, or, when the job names
//!   GPU models, of the GPUs whose `productName` is one of them (the device-plugin run's node
//!   affinity on `nvidia.com/gpu.product`, which the claim replaces). A pod already placed
//!   names its claim and asks nothing: its devices are in [`DraSpec::allocated`].
//! - **Accounting.** A binding's devices come from the plan's `claimAllocations`; they stay
//!   the pod's until it completes or its job is evicted, and a device is never given twice
//!   (checked at every binding, and the whole table after every cycle in debug builds).
//!
//! Shares of a GPU (HAMi, time-slicing, MPS, MIG, other vendors' devices) are refused: only
//! whole NVIDIA GPUs are mapped.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use basalt_engine::dra::{
    Alternative, AttrValue, ClaimAsk, ClaimNeed, ClaimState, Count, DeviceSet, DraDevice, DraSpec,
    DraTable, Reach, RequestAsk,
};
use basalt_engine::{ClaimAllocation, NodeSpec, PlacementRules, Snapshot};

use super::super::shares;
use super::super::workload::{Workload, GPU_MODEL_LABEL};

/// The DRA driver of the devices (NVIDIA's).
pub const DRIVER: &str = "gpu.nvidia.com";
/// The claim template's entry name in each pod, and its one request.
const ENTRY: &str = "gpus";

/// The devices, what each pod's claim asks, and which pod holds each device.
pub(super) struct DraGpus {
    devices: Vec<DraDevice>,
    /// Set 0: every GPU; then one per distinct list of models a job names.
    eligible: Vec<DeviceSet>,
    allocated: DeviceSet,
    /// (pool, device name) → device.
    by_name: HashMap<(String, String), u32>,
    /// Per device: its node (simulator index) and GPU index.
    place: Vec<(u32, u32)>,
    /// Per device: the (job, pod) whose claim holds it.
    owner: Vec<Option<(u32, u32)>>,
    /// Per (job, pod): the devices its claim holds.
    held: BTreeMap<(u32, u32), Vec<u32>>,
    /// Per job: the eligible set its GPU pods ask of.
    job_set: Vec<u32>,
    /// What a pending pod asks, by (set, GPUs): one `Arc` for every pod alike.
    needs: HashMap<(u32, u32), Arc<ClaimNeed>>,
    /// The table with nothing allocated for the snapshot's node order, and the table of the
    /// current allocation (rebuilt when it changes).
    base: Option<Arc<DraTable>>,
    current: Option<Arc<DraTable>>,
    /// Claims allocated over the run, and the most devices held at once.
    pub(super) claims: u64,
    pub(super) peak: u32,
}

/// The claim of pod `k` of job `j` (`ns/name`, as the resourceclaim controller names a
/// template's claim after its pod).
pub(super) fn claim_name(j: usize, k: usize) -> String {
    format!("{}/{j:08}-{k}-{ENTRY}", super::NS)
}

/// Whether the node can be mapped: whole NVIDIA GPUs only.
fn check_node(n: &NodeSpec) -> anyhow::Result<()> {
    let why = if n.sharing.shares() {
        Some(format!("shares its GPUs ({:?})", n.sharing))
    } else if let Some(r) = &n.device_resource {
        Some(format!("advertises {r}, not nvidia.com/gpu"))
    } else if !n.slices.is_empty() || n.gpus.iter().flatten().any(|g| g.mig) {
        Some("has GPUs in MIG mode".to_string())
    } else {
        None
    };
    match why {
        Some(why) => anyhow::bail!(
            "--dra: node {} {why}; only whole NVIDIA GPUs become DRA devices",
            n.name
        ),
        None => Ok(()),
    }
}

impl DraGpus {
    /// The devices of `nodes` (sorted by name, still advertising their GPUs) and the claims of
    /// the workload's GPU pods; refuses shares of a GPU.
    pub(super) fn new(nodes: &[NodeSpec], workload: &Workload) -> anyhow::Result<DraGpus> {
        let mut devices = Vec::new();
        let mut place = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            check_node(n)?;
            let count = shares::device_count(n);
            let label = n.labels.get(GPU_MODEL_LABEL);
            let mut gpus: Vec<basalt_engine::Gpu> = match &n.gpus {
                Some(g) if g.len() == count as usize => g.clone(),
                _ => (0..count).map(basalt_engine::Gpu::new).collect(),
            };
            gpus.retain(|g| g.healthy);
            let pool: Arc<str> = Arc::from(n.name.as_str());
            let mut node_devices: Vec<(DraDevice, u32)> = (gpus.iter())
                .map(|g| {
                    let mut attributes = BTreeMap::new();
                    let mut attr = |k: &str, v| attributes.insert(format!("{DRIVER}/{k}"), v);
                    attr("type", AttrValue::String("gpu".into()));
                    attr("index", AttrValue::Int(g.index as i64));
                    let uuid =
                        (g.uuid.clone()).unwrap_or_else(|| format!("{}-gpu{}", n.name, g.index));
                    attr("uuid", AttrValue::String(uuid));
                    if let Some(model) = g.model.as_ref().or(label) {
                        attr("productName", AttrValue::String(model.clone()));
                    }
                    let device = DraDevice {
                        driver: Arc::from(DRIVER),
                        pool: pool.clone(),
                        name: Arc::from(format!("gpu-{}", g.index)),
                        reach: Reach::Node(n.name.clone()),
                        attributes,
                        consumes: Vec::new(),
                    };
                    (device, g.index)
                })
                .collect();
            node_devices.sort_by(|a, b| a.0.name.cmp(&b.0.name));
            for (d, index) in node_devices {
                devices.push(d);
                place.push((i as u32, index));
            }
        }
        let by_name = (devices.iter().enumerate())
            .map(|(d, v)| ((v.pool.to_string(), v.name.to_string()), d as u32))
            .collect();
        let mut eligible = vec![(0..devices.len() as u32).collect::<DeviceSet>()];
        let mut sets: HashMap<Vec<String>, u32> = HashMap::new();
        let mut job_set = Vec::with_capacity(workload.jobs.len());
        let mut needs = HashMap::new();
        for job in &workload.jobs {
            if let Some(p) = job.pods.iter().find(|p| p.gpus > 0 && p.gpu_milli < 1000) {
                anyhow::bail!(
                    "--dra: job {} asks a share of a GPU (gpu_milli {}); only whole GPUs are \
                     asked through claims (replay it without --dra, with --gpu-share)",
                    job.name,
                    p.gpu_milli
                );
            }
            // The models of the whole job, as the device-plugin run's node affinity has them.
            let mut models: Vec<String> = (job.pods.iter())
                .flat_map(|p| p.gpu_models.iter().cloned())
                .collect();
            models.sort();
            models.dedup();
            let set = if models.is_empty() {
                0
            } else {
                *sets.entry(models).or_insert_with_key(|models| {
                    let key = format!("{DRIVER}/productName");
                    let matching = (devices.iter().enumerate())
                        .filter(|(_, d)| match d.attributes.get(&key) {
                            Some(AttrValue::String(m)) => models.contains(m),
                            _ => false,
                        })
                        .map(|(i, _)| i as u32)
                        .collect();
                    eligible.push(matching);
                    eligible.len() as u32 - 1
                })
            };
            job_set.push(set);
            for p in job.pods.iter().filter(|p| p.gpus > 0) {
                needs
                    .entry((set, p.gpus))
                    .or_insert_with(|| need(set, p.gpus));
            }
        }
        Ok(DraGpus {
            allocated: DeviceSet::default(),
            owner: vec![None; devices.len()],
            devices,
            eligible,
            by_name,
            place,
            held: BTreeMap::new(),
            job_set,
            needs,
            base: None,
            current: None,
            claims: 0,
            peak: 0,
        })
    }

    /// The node as a DRA cluster shows it: no `nvidia.com/gpu`, no GPU list.
    pub(super) fn strip(n: &mut NodeSpec) {
        n.allocatable.remove("nvidia.com/gpu");
        n.gpus = None;
    }

    /// The placement rules and claims of pod `k` of job `j` asking `gpus` GPUs (`job_rules`:
    /// the device-plugin run's, whose GPU model affinity the claim replaces).
    pub(super) fn pod_rules(
        &self,
        (j, k): (usize, usize),
        gpus: u32,
        placed: bool,
        job_rules: &PlacementRules,
    ) -> (PlacementRules, Vec<String>) {
        if gpus == 0 {
            return (job_rules.clone(), Vec::new());
        }
        let claims = (!placed).then(|| self.needs[&(self.job_set[j], gpus)].clone());
        let rules = PlacementRules {
            claims,
            ..Default::default()
        };
        (rules, vec![claim_name(j, k)])
    }

    /// The DRA part of the whole cluster's spec (the `--full-rebuild` path).
    pub(super) fn spec(&self) -> DraSpec {
        DraSpec {
            devices: self.devices.clone(),
            eligible: self.eligible.clone(),
            allocated: self.allocated.clone(),
            counters: Vec::new(),
        }
    }

    /// `snapshot` with the devices and the current allocation, as `Snapshot::build` gives it
    /// for the same specs with [`DraGpus::spec`] (a `SnapshotBuilder` carries no devices).
    pub(super) fn attach(&mut self, snapshot: &Snapshot) -> Snapshot {
        if self.devices.is_empty() {
            return snapshot.clone();
        }
        let nodes = snapshot.nodes.len();
        let base = match &self.base {
            Some(b) if b.reach.len() == nodes => b.clone(),
            _ => {
                let names: Vec<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
                let spec = DraSpec {
                    allocated: DeviceSet::default(),
                    ..self.spec()
                };
                self.current = None;
                self.base
                    .insert(Arc::new(DraTable::new(spec, &names)))
                    .clone()
            }
        };
        let table = self.current.get_or_insert_with(|| {
            Arc::new(DraTable {
                allocated: self.allocated.clone(),
                ..(*base).clone()
            })
        });
        let mut out = snapshot.clone();
        out.dra = table.clone();
        out
    }

    /// The devices each pod the plan binds gets, by pod name, from its claim allocations.
    pub(super) fn allocations(
        &self,
        allocations: &[ClaimAllocation],
    ) -> anyhow::Result<BTreeMap<String, Vec<u32>>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for a in allocations {
            for r in &a.results {
                let key = (r.pool.clone(), r.device.clone());
                let d = match self.by_name.get(&key) {
                    Some(&d) if r.driver == DRIVER && !r.admin_access => d,
                    _ => anyhow::bail!(
                        "the plan allocates device {}/{}/{} to claim {}: not a GPU of the replay",
                        r.driver,
                        r.pool,
                        r.device,
                        a.claim
                    ),
                };
                out.entry(a.pod.clone()).or_default().push(d);
            }
        }
        Ok(out)
    }

    /// Gives pod `k` of job `j`, bound to `node` for `gpus` GPUs, the devices its claim was
    /// allocated; returns their GPU indices. Refuses a device held by another claim, one of
    /// another node, or the wrong count.
    pub(super) fn take(
        &mut self,
        (j, k): (u32, u32),
        node: u32,
        gpus: u32,
        devices: Vec<u32>,
    ) -> anyhow::Result<Vec<u32>> {
        let pod = format!("{}/{j:08}-{k}", super::NS);
        anyhow::ensure!(
            devices.len() == gpus as usize,
            "pod {pod} asks {gpus} GPUs and its claim got {} devices",
            devices.len()
        );
        anyhow::ensure!(
            !self.held.contains_key(&(j, k)),
            "pod {pod} holds devices already"
        );
        for (i, &d) in devices.iter().enumerate() {
            let name = || {
                let v = &self.devices[d as usize];
                format!("{}/{}", v.pool, v.name)
            };
            if let Some((oj, ok)) = self.owner[d as usize] {
                anyhow::bail!(
                    "device {} given to pod {pod} is held by the claim of {}/{oj:08}-{ok}",
                    name(),
                    super::NS
                );
            }
            anyhow::ensure!(
                !devices[..i].contains(&d),
                "device {} given twice to pod {pod}",
                name()
            );
            let at = self.place[d as usize].0;
            anyhow::ensure!(
                at == node,
                "device {} is not on the node of pod {pod}",
                name()
            );
        }
        let mut indices = Vec::with_capacity(devices.len());
        for &d in &devices {
            self.owner[d as usize] = Some((j, k));
            self.allocated.insert(d);
            indices.push(self.place[d as usize].1);
        }
        self.held.insert((j, k), devices);
        self.current = None;
        self.claims += 1;
        self.peak = self.peak.max(self.allocated.len() as u32);
        Ok(indices)
    }

    /// Frees what the claim of pod `k` of job `j` holds (completed, or its job evicted).
    pub(super) fn free(&mut self, j: u32, k: u32) {
        if let Some(devices) = self.held.remove(&(j, k)) {
            for d in devices {
                debug_assert_eq!(self.owner[d as usize], Some((j, k)));
                self.owner[d as usize] = None;
                self.allocated.remove(d);
            }
            self.current = None;
        }
    }

    /// Whether the table agrees with itself and with the placed pods: every held device has
    /// one owner, the allocated set is exactly the held devices, and each placed pod's claim
    /// holds `gpus(j, k)` devices on its node (`placed(j, k)`), and every one of the
    /// `placed_gpu_pods` placed pods asking GPUs holds some.
    pub(super) fn consistent(
        &self,
        placed: impl Fn(u32, u32) -> Option<u32>,
        gpus: impl Fn(u32, u32) -> u32,
        placed_gpu_pods: usize,
    ) -> Result<(), String> {
        if self.held.len() != placed_gpu_pods {
            return Err(format!(
                "{} claims hold devices for {placed_gpu_pods} placed GPU pods",
                self.held.len()
            ));
        }
        let mut owned = DeviceSet::default();
        for (&(j, k), devices) in &self.held {
            let node = placed(j, k).ok_or_else(|| format!("{j}-{k} holds devices unplaced"))?;
            if devices.len() != gpus(j, k) as usize {
                return Err(format!("{j}-{k} holds {} devices", devices.len()));
            }
            for &d in devices {
                if owned.contains(d) || self.owner[d as usize] != Some((j, k)) {
                    return Err(format!("device {d} is held twice"));
                }
                if self.place[d as usize].0 != node {
                    return Err(format!("device {d} is on another node than {j}-{k}"));
                }
                owned.insert(d);
            }
        }
        let owners = self.owner.iter().filter(|o| o.is_some()).count();
        // (Compared by members: a set keeps the words of removed devices.)
        if !owned.iter().eq(self.allocated.iter()) || owners != owned.len() {
            return Err("the allocated set is not the devices held".into());
        }
        Ok(())
    }
}

/// One claim for `gpus` devices of eligible set `set`.
fn need(set: u32, gpus: u32) -> Arc<ClaimNeed> {
    Arc::new(ClaimNeed {
        claims: vec![ClaimAsk {
            label: ENTRY.into(),
            shared: None,
            state: ClaimState::Pending {
                requests: vec![RequestAsk {
                    name: ENTRY.into(),
                    alternatives: vec![Alternative {
                        name: ENTRY.into(),
                        eligible: set,
                        count: Count::Exactly(gpus),
                        admin_access: false,
                    }],
                }],
                constraints: vec![],
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::workload::{PodShape, TraceJob};

    fn node(name: &str, gpus: i64, model: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            labels: BTreeMap::from([(GPU_MODEL_LABEL.to_string(), model.to_string())]),
            allocatable: [("nvidia.com/gpu".to_string(), gpus)].into_iter().collect(),
            ..Default::default()
        }
    }

    fn job(name: &str, gpus: u32, milli: u32, models: &[&str]) -> TraceJob {
        TraceJob {
            name: name.into(),
            queue: "default".into(),
            priority: 0,
            submit_ms: 0,
            duration_ms: 1,
            pods: vec![PodShape {
                cpu_milli: 1000,
                memory: 1 << 30,
                gpus,
                gpu_milli: milli,
                gpu_models: models.iter().map(|m| m.to_string()).collect(),
            }],
            min_member: 0,
            tp_size: 0,
        }
    }

    #[test]
    fn devices_per_gpu_and_sets_per_model() {
        let nodes = [node("a", 2, "T4"), node("b", 12, "V100M32")];
        let w = Workload {
            jobs: vec![job("x", 1, 1000, &[]), job("y", 2, 1000, &["T4"])],
            ..Default::default()
        };
        let g = DraGpus::new(&nodes, &w).unwrap();
        assert_eq!(g.devices.len(), 14);
        // (driver, pool, name) order: gpu-10 before gpu-2.
        let names: Vec<&str> = g.devices.iter().map(|d| &*d.name).collect();
        assert_eq!(&names[..5], ["gpu-0", "gpu-1", "gpu-0", "gpu-1", "gpu-10"]);
        assert_eq!(g.place[4], (1, 10));
        assert_eq!(g.devices[0].reach, Reach::Node("a".into()));
        let product = &g.devices[2].attributes["gpu.nvidia.com/productName"];
        assert_eq!(*product, AttrValue::String("V100M32".into()));
        assert_eq!(g.eligible[0].len(), 14);
        assert_eq!(g.eligible[1].iter().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(g.job_set, [0, 1]);
        let (rules, claims) = g.pod_rules((1, 0), 2, false, &PlacementRules::default());
        assert_eq!(claims, ["sim/00000001-0-gpus"]);
        assert_eq!(rules.claims.as_deref(), Some(&*need(1, 2)));
        let (rules, _) = g.pod_rules((1, 0), 2, true, &PlacementRules::default());
        assert!(rules.claims.is_none());
    }

    #[test]
    fn a_device_is_never_given_twice_and_comes_back_when_freed() {
        let w = Workload {
            jobs: vec![job("x", 1, 1000, &[])],
            ..Default::default()
        };
        let mut g = DraGpus::new(&[node("a", 2, "T4")], &w).unwrap();
        assert_eq!(g.take((0, 0), 0, 1, vec![1]).unwrap(), [1]);
        let e = g.take((1, 0), 0, 1, vec![1]).unwrap_err().to_string();
        assert!(e.contains("held by the claim of sim/00000000-0"), "{e}");
        assert!(g.take((1, 0), 1, 1, vec![0]).is_err(), "another node");
        assert!(g.take((1, 0), 0, 2, vec![0]).is_err(), "the wrong count");
        g.consistent(|_, _| Some(0), |_, _| 1, 1).unwrap();
        g.free(0, 0);
        assert!(g.allocated.is_empty());
        g.take((1, 0), 0, 1, vec![1]).unwrap();
        assert_eq!((g.claims, g.peak), (2, 1));
    }

    #[test]
    fn shares_of_a_gpu_are_refused() {
        let w = Workload {
            jobs: vec![job("half", 1, 500, &[])],
            ..Default::default()
        };
        let e = DraGpus::new(&[node("a", 2, "T4")], &w).err().unwrap();
        assert!(
            e.to_string().contains("job half asks a share of a GPU"),
            "{e}"
        );
        let mut hami = shares::hami_node(node("h", 2, "T4"));
        let none = Workload::default();
        let e = DraGpus::new(std::slice::from_mut(&mut hami), &none)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("node h shares its GPUs (Hami)"),
            "{e}"
        );
    }
}

//! How the simulated cluster is shown to the engine: the specs of live jobs pod by pod, the
//! pinned pods that stand for folded ones, the queues, and each pod's request.

use super::*;

impl Simulator<'_> {
    /// The pinned pod a folded pod goes into: its queue's on its node, or its own when it
    /// holds a share of a device (on a HAMi node) or a replica (see the module docs).
    pub(super) fn pin_key(&self, queue: u32, j: usize, k: usize, node: u32) -> PinKey {
        let own = match self.nodes[node as usize].sharing {
            Sharing::Exclusive => false,
            // Whole devices on a HAMi node are all of each: they fold like unshared ones.
            Sharing::Hami => self.prepared[j].shared[k],
            // Replicas (and any other sharing): each pod with devices on its own, always exact.
            _ => self.prepared[j].gpus[k] > 0 || self.prepared[j].shared[k],
        };
        PinKey {
            queue,
            node,
            pod: own.then_some((j as u32, k as u32)),
        }
    }

    /// The whole cluster, every live job pod by pod (the `--full-rebuild` reference).
    pub(super) fn spec(&self) -> ClusterSpec {
        let mut pods = Vec::new();
        let mut groups = Vec::new();
        for (j, r) in self.records.iter().enumerate() {
            if matches!(r.status, Status::Pending | Status::Running) {
                let live = self.job_specs(j);
                groups.push(live.group);
                pods.extend(live.pods);
            }
        }
        ClusterSpec {
            now_ms: self.now,
            nodes: self.nodes.clone(),
            pods,
            groups,
            queues: self.queues.clone(),
            namespaces: Vec::new(),
            dra: self.dra.as_ref().map(|d| d.spec()).unwrap_or_default(),
            usage: self.usage.clone(),
            device_resource: basalt_crds::convert::device_names::GPU_NAME.to_string(),
        }
    }

    /// The PodGroup and pods of one job as the cluster shows them now.
    pub(super) fn job_specs(&self, j: usize) -> LiveJob {
        let t = &self.workload.jobs[j];
        let p = &self.prepared[j];
        let s = &self.state[j];
        let group = GroupSpec {
            namespace: NS.into(),
            name: format!("{j:08}"),
            queue: Some(t.queue.clone()),
            min_member: p.min_member as i64,
            min_task_member: BTreeMap::new(),
            min_resources: Some(p.min_resources.clone()),
            priority: Some(t.priority),
            created_ms: t.submit_ms,
            phase: s.phase,
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        };
        let pods = p
            .requests
            .iter()
            .enumerate()
            .map(|(k, req)| {
                let placed = s.pods[k].as_ref();
                let (rules, claims) = match &self.dra {
                    Some(d) => d.pod_rules((j, k), p.gpus[k], placed.is_some(), &p.rules),
                    None => (p.rules.clone(), Vec::new()),
                };
                PodSpec {
                    namespace: NS.into(),
                    name: format!("{j:08}-{k}"),
                    ours: true,
                    group: Some(format!("{j:08}")),
                    request: req.clone(),
                    devices: basalt_crds::device_ask(req),
                    rules,
                    claims,
                    priority: t.priority,
                    created_ms: t.submit_ms,
                    phase: if placed.is_some() {
                        PodPhase::Running
                    } else {
                        PodPhase::Pending
                    },
                    node: placed.map(|pl| self.nodes[pl.node as usize].name.clone()),
                    gpu_ids: placed.map(|pl| pl.gpu_ids.clone()).unwrap_or_default(),
                    held_devices: placed.map(|pl| pl.held_devices.clone()).unwrap_or_default(),
                    nominated_node: s.nominated[k]
                        .filter(|_| placed.is_none())
                        .map(|n| self.nodes[n as usize].name.clone()),
                    // As a pod's `status.startTime` tells the daemon (victims' lost work).
                    started_ms: placed.and(self.records[j].start_ms),
                    ..Default::default()
                }
            })
            .collect();
        LiveJob { group, pods }
    }
}

/// The pinned pod that stands for every folded pod of one queue on one node, or for one pod
/// holding a share.
pub(super) fn holder_name(key: PinKey) -> String {
    let PinKey { queue, node, pod } = key;
    match pod {
        None => format!("q{queue}-n{node}"),
        Some((j, k)) => format!("q{queue}-n{node}-{j:08}-{k}"),
    }
}

pub(super) fn pinned_pod(
    key: PinKey,
    queue_name: &str,
    node_name: &str,
    pinned: &Pinned,
) -> PodSpec {
    let mut request = pinned.request.clone();
    request.insert("pods".into(), pinned.count);
    let mask = pinned.mask;
    PodSpec {
        namespace: HOLDER_NS.into(),
        name: holder_name(key),
        ours: true,
        devices: basalt_crds::device_ask(&request),
        request,
        phase: PodPhase::Running,
        node: Some(node_name.to_string()),
        gpu_ids: (0..64).filter(|i| mask & (1u64 << i) != 0).collect(),
        held_devices: pinned.held_devices.clone(),
        pinned_queue: Some(queue_name.to_string()),
        ..Default::default()
    }
}

/// `sim/JJJJJJJJ-K` → (job, pod).
pub(super) fn parse_pod(name: &str) -> Option<(u32, usize)> {
    let rest = name.strip_prefix("sim/")?;
    let (j, k) = rest.split_once('-')?;
    Some((j.parse().ok()?, k.parse().ok()?))
}

/// The engine request of one pod.
pub fn request(p: &PodShape, share: GpuShare) -> ResourceList {
    let mut r: ResourceList = [
        ("cpu".to_string(), p.cpu_milli),
        ("memory".to_string(), p.memory),
    ]
    .into_iter()
    .collect();
    if p.gpus == 0 {
        return r;
    }
    let fractional = p.gpu_milli < 1000;
    match share {
        GpuShare::RoundUp => {
            r.insert("nvidia.com/gpu".into(), p.gpus as i64);
        }
        GpuShare::Pool if fractional => {
            r.insert(GPU_SHARE_RESOURCE.into(), p.gpu_milli as i64);
        }
        GpuShare::Pool => {
            r.insert("nvidia.com/gpu".into(), p.gpus as i64);
            r.insert(GPU_SHARE_RESOURCE.into(), p.gpus as i64 * 1000);
        }
        GpuShare::Hami if fractional => {
            // A share of one device: compute and memory in proportion (see `shares`).
            let pct = shares::share_percent(p.gpu_milli);
            r.insert("nvidia.com/gpu".into(), 1);
            r.insert(GPU_CORES_NAME.into(), pct);
            r.insert(GPU_MEMORY_PERCENT_NAME.into(), pct);
        }
        GpuShare::Hami => {
            r.insert("nvidia.com/gpu".into(), p.gpus as i64);
        }
    }
    r
}

/// Queues of the workload: weight from the trace; deserved = weight's share of the GPUs;
/// capability = the same under `--quota static`. A Queue object of the cluster manifests with
/// the same name replaces the generated one.
pub fn queue_specs(
    w: &Workload,
    manifest: &[QueueSpec],
    quota: Quota,
    total_gpus: u32,
) -> Vec<QueueSpec> {
    let sum: u64 = w.queues.iter().map(|q| q.weight as u64).sum::<u64>().max(1);
    let mut out: Vec<QueueSpec> = w
        .queues
        .iter()
        .map(|q| {
            if let Some(m) = manifest.iter().find(|m| m.name == q.name) {
                return m.clone();
            }
            let share = (total_gpus as u64 * q.weight as u64 / sum) as i64;
            let gpus: ResourceList = [("nvidia.com/gpu".to_string(), share)]
                .into_iter()
                .collect();
            let mut s = QueueSpec::new(q.name.clone());
            s.weight = q.weight;
            s.deserved = Some(gpus.clone());
            if quota == Quota::Static {
                s.capability = Some(gpus);
            }
            s
        })
        .collect();
    for m in manifest {
        if !out.iter().any(|q| q.name == m.name) {
            out.push(m.clone());
        }
    }
    out
}

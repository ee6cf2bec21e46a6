//! Building a simulator: the options and the cluster checked, each job's pods prepared once
//! (requests, placement rules, minimums), the snapshot builders and the arrival events.

use super::*;

impl<'a> Simulator<'a> {
    pub fn new(
        config: &'a Config,
        opts: Options,
        cluster: &Cluster,
        workload: &'a Workload,
        manifest_queues: &[QueueSpec],
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(opts.period_ms >= 1, "--period: must be at least 1 ms");
        anyhow::ensure!(
            !cluster.nodes.is_empty(),
            "{}: the cluster has no nodes",
            cluster.source
        );
        anyhow::ensure!(
            !opts.dra || opts.gpu_share == GpuShare::RoundUp,
            "--dra: GPUs become whole DRA devices; --gpu-share {} does not apply",
            opts.gpu_share.name()
        );
        // Folded pods are no tasks: a scorer learning shapes from the snapshot's tasks would
        // learn others than on the whole cluster, so folding would not be exact.
        let learns_from_tasks =
            config.node_order.fragmentation.enabled && opts.gpu_share == GpuShare::Hami;
        let fold = opts.fold_bound.unwrap_or(true) && !learns_from_tasks;
        let mut nodes = cluster.nodes.clone();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut node_ids = HashMap::new();
        let mut racks: BTreeMap<String, u32> = BTreeMap::new();
        let mut cliques: BTreeMap<String, u32> = BTreeMap::new();
        let (mut node_gpus, mut node_rack, mut node_clique) = (vec![], vec![], vec![]);
        for (i, n) in nodes.iter_mut().enumerate() {
            if opts.gpu_share == GpuShare::Hami {
                *n = shares::hami_node(std::mem::take(n));
            }
            anyhow::ensure!(
                node_ids.insert(n.name.clone(), i as u32).is_none(),
                "{}: node {} is listed twice",
                cluster.source,
                n.name
            );
            let g = shares::device_count(n);
            node_gpus.push(g);
            if opts.gpu_share == GpuShare::Pool {
                n.allocatable
                    .insert(GPU_SHARE_RESOURCE.into(), g as i64 * 1000);
            }
            n.allocatable
                .entry("pods".into())
                .or_insert(basalt_engine::DEFAULT_MAX_PODS);
            let id = |map: &mut BTreeMap<String, u32>, key: &str| {
                n.labels.get(key).map(|v| {
                    let next = map.len() as u32;
                    *map.entry(v.clone()).or_insert(next)
                })
            };
            node_rack.push(id(&mut racks, RACK_LABEL));
            node_clique.push(id(&mut cliques, CLIQUE_LABEL));
        }
        // Devices as the device plugin shows them (the report's GPU figures), then, with
        // `--dra`, the same GPUs as DRA devices and nodes without `nvidia.com/gpu`.
        let devices = DeviceTable::new(&nodes);
        let dra = match opts.dra {
            true => Some(dra::DraGpus::new(&nodes, workload)?),
            false => None,
        };
        if dra.is_some() {
            nodes.iter_mut().for_each(dra::DraGpus::strip);
        }
        let total_gpus: u32 = node_gpus.iter().sum();
        let queues = queue_specs(workload, manifest_queues, opts.quota, total_gpus);
        let qindex: HashMap<&str, u32> = workload
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.name.as_str(), i as u32))
            .collect();
        let mut prepared = Vec::with_capacity(workload.jobs.len());
        for j in &workload.jobs {
            anyhow::ensure!(!j.pods.is_empty(), "job {}: has no pods", j.name);
            let mut requests: Vec<ResourceList> =
                j.pods.iter().map(|p| request(p, opts.gpu_share)).collect();
            let mut models: Vec<String> = j
                .pods
                .iter()
                .flat_map(|p| p.gpu_models.iter().cloned())
                .collect();
            models.sort();
            models.dedup();
            let rules = if models.is_empty() {
                PlacementRules::default()
            } else {
                PlacementRules {
                    affinity: Some(RequiredNodeAffinity {
                        terms: vec![NodeSelectorTerm {
                            match_expressions: vec![SelectorRequirement {
                                key: GPU_MODEL_LABEL.into(),
                                operator: SelectorOperator::In,
                                values: models,
                            }],
                            match_fields: vec![],
                        }],
                    }),
                    ..Default::default()
                }
            };
            let min_member = j.min_member();
            let mut min_resources = ResourceList::new();
            for r in requests.iter().take(min_member as usize) {
                for (k, v) in r {
                    *min_resources.entry(k.clone()).or_default() += v;
                }
            }
            let gpus: Vec<u32> = requests
                .iter()
                .map(|r| r.get("nvidia.com/gpu").copied().unwrap_or(0) as u32)
                .collect();
            if opts.dra {
                // GPUs come through claims (`dra`): the pods ask for none by name.
                for r in &mut requests {
                    r.remove("nvidia.com/gpu");
                }
                min_resources.remove("nvidia.com/gpu");
            }
            let shared = requests
                .iter()
                .map(|r| {
                    [GPU_CORES_NAME, GPU_MEMORY_PERCENT_NAME, GPU_MEMORY_NAME]
                        .iter()
                        .any(|k| r.get(*k).is_some_and(|&v| v > 0))
                })
                .collect();
            prepared.push(Prepared {
                shared,
                total_gpus: gpus.iter().sum(),
                gpus,
                requests,
                rules,
                min_member,
                queue: qindex[j.queue.as_str()],
                min_resources,
            });
        }
        let state = workload
            .jobs
            .iter()
            .map(|j| JobState {
                phase: JobPhase::Pending,
                pods: vec![None; j.pods.len()],
                nominated: vec![None; j.pods.len()],
                bound: 0,
                epoch: 0,
                folded: false,
            })
            .collect();
        let records = workload
            .jobs
            .iter()
            .map(|_| JobRecord {
                status: Status::NotArrived,
                start_ms: None,
                first_start_ms: None,
                end_ms: None,
                evictions: 0,
                lost_gpu_ms: 0,
                one_rack: None,
                tp_groups: 0,
                tp_in_node: 0,
                tp_in_nvlink: 0,
            })
            .collect();
        let nq = workload.queues.len();
        let builder = || {
            SnapshotBuilder::new(basalt_crds::convert::device_names::GPU_NAME, nodes.clone())
                .map_err(|e| anyhow::anyhow!("{}: {e}", cluster.source))
        };
        let quick = fold.then(builder).transpose()?;
        let whole = (!fold || can_evict(config)).then(builder).transpose()?;
        let mut sim = Simulator {
            config,
            opts,
            workload,
            devices,
            node_used: vec![0; nodes.len()],
            nodes,
            node_ids,
            node_gpus,
            node_rack,
            node_clique,
            queues,
            prepared,
            state,
            records,
            active: BTreeSet::new(),
            pinned: BTreeMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            cycle_queued: false,
            now: 0,
            gpus_allocated: 0,
            milli_used: 0,
            demand: 0,
            pending: 0,
            running: 0,
            fragmented: 0,
            queue_gpus: vec![0; nq],
            queue_demand: vec![0; nq],
            samples: Vec::new(),
            cycles: 0,
            events: 0,
            bindings: 0,
            stats: CycleStats::default(),
            framework: None,
            quick,
            whole,
            redone: 0,
            quick_backoff: 0,
            quick_skip: 0,
            dirty_jobs: BTreeSet::new(),
            dirty_pinned: BTreeSet::new(),
            dra,
            usage: Vec::new(),
            usage_points: Vec::new(),
        };
        for (i, j) in workload.jobs.iter().enumerate() {
            sim.push(j.submit_ms, Kind::Arrival, i as u32, 0);
        }
        Ok(sim)
    }
}

//! A whole snapshot built from its specs: [`Snapshot::build`] and the builder's full build.

use super::*;

impl Snapshot {
    pub fn build(spec: ClusterSpec) -> Result<Snapshot, SnapshotError> {
        let ClusterSpec {
            now_ms,
            nodes,
            pods,
            groups,
            mut queues,
            namespaces,
            dra,
            usage,
        } = spec;
        let mut nodes: Vec<NodeSpec> = nodes.into_iter().map(devices::with_share_totals).collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let pods = sorted_pods(&pods);
        let groups = sorted_groups(&groups);
        queues.sort_by(|a, b| a.name.cmp(&b.name));

        let mut all = workload_resource_names(&pods, &groups, &queues);
        all.extend(
            nodes
                .iter()
                .flat_map(|n| n.allocatable.keys().map(String::as_str)),
        );
        let names = ResourceNames::new(all);
        let needs_default = needs_default_queue(groups.iter().copied(), pods.iter().copied());
        let queues = build_queues(&names, &mut queues, needs_default)?;

        // Nodes.
        let mut node_ids: HashMap<&str, NodeId> = HashMap::new();
        let mut built_nodes = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if node_ids.insert(n.name.as_str(), id).is_some() {
                return Err(duplicate_node(&n.name));
            }
            built_nodes.push(build_node(&names, id, n)?);
        }
        let node_id = |n: &str| node_ids.get(n).copied();
        let mut metas = MetaInterner::default();
        let pod_facts: Vec<PodFacts> = (pods.iter())
            .map(|&p| PodFacts::of(&names, p, &node_id, &mut metas))
            .collect();
        let group_facts: Vec<GroupFacts> =
            groups.iter().map(|&g| GroupFacts::of(&names, g)).collect();
        assemble(
            now_ms,
            names,
            queues,
            BuiltNodes {
                nodes: built_nodes,
                recycled: None,
                lineage: Lineage::default(),
                buffers: Buffers::default(),
            },
            &pods.iter().copied().zip(&pod_facts).collect::<Vec<_>>(),
            false,
            &groups.iter().copied().zip(&group_facts).collect::<Vec<_>>(),
        )
        .map(|a| {
            let dra = (!dra.is_empty()).then(|| {
                let names: Vec<&str> = a.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
                Arc::new(crate::dra::DraTable::new(dra, &names))
            });
            Snapshot {
                namespaces: sorted_namespaces(namespaces),
                dra: dra.unwrap_or_default(),
                usage: Arc::new(usage),
                ..a.snapshot
            }
        })
    }
}

/// The node part of a snapshot being assembled.
pub(super) struct BuiltNodes {
    pub(super) nodes: Vec<Node>,
    /// Usage buffers of an earlier snapshot of the same nodes and resource names, to reuse.
    pub(super) recycled: Option<(Vec<Resources>, Vec<u64>)>,
    pub(super) lineage: Lineage,
    pub(super) buffers: Buffers,
}

/// The task and job vectors of earlier snapshots, emptied and filled again: a big cluster's
/// are megabytes, and a fresh allocation every cycle costs page faults. Tasks alternate between
/// two vectors so that a task can take its name from the last snapshot's task (found at its
/// pod's `slot`) instead of cloning it: a clone or drop of a name touches its reference count,
/// a cache miss per pod per cycle in a big cluster.
#[derive(Default)]
pub(super) struct Buffers {
    /// The last snapshot's tasks.
    pub(super) last_tasks: Vec<Task>,
    /// The vector to fill (its old tasks' names already taken or about to be dropped).
    pub(super) tasks: Vec<Task>,
    pub(super) jobs: Vec<Job>,
}

/// What a task taken name leaves behind: one shared, always-cached reference count.
pub(super) static TAKEN: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

/// What [`assemble`] gives.
pub(super) struct Assembled {
    pub(super) snapshot: Snapshot,
    /// The last snapshot's task vector, emptied, to fill next time.
    pub(super) spare_tasks: Vec<Task>,
    /// Every bound pod holds the GPUs it names (see [`claim_gpus`] and `devices::named_shared`).
    pub(super) claims_as_named: bool,
    /// What each pinned pod holds, by its index in the pods.
    pub(super) pinned: Vec<(usize, PinnedUse)>,
}

/// Everything of a snapshot but its nodes, from pods and groups sorted by namespace and name
/// and queues already resolved. `node_id` finds a node by name.
pub(super) fn assemble(
    now_ms: i64,
    names: ResourceNames,
    queues: Vec<Queue>,
    nodes: BuiltNodes,
    pods: &[(&PodSpec, &PodFacts)],
    pods_unique: bool,
    groups: &[(&GroupSpec, &GroupFacts)],
) -> Result<Assembled, SnapshotError> {
    let BuiltNodes {
        nodes: mut built_nodes,
        recycled,
        lineage,
        buffers,
    } = nodes;
    let mut device_use = vec![DeviceUse::default(); devices::assign_bases(&mut built_nodes)];
    let (queue_ids, has_children) = queue_lookup(&queues);
    // Jobs from PodGroups, then implicit groups of one.
    // (hash, draft) by job key; hashes come with the facts.
    let mut job_keys: hashbrown::HashTable<(u64, usize)> =
        hashbrown::HashTable::with_capacity(groups.len() + pods.len());
    struct Draft<'g> {
        spec: std::borrow::Cow<'g, GroupSpec>,
        name: &'g Arc<str>,
        min_resources: Option<&'g Resources>,
        implicit: bool,
    }
    fn draft_key<'a>(drafts: &'a [Draft], d: usize) -> JobKey<'a> {
        JobKey(&drafts[d].spec.namespace, &drafts[d].spec.name)
    }
    let mut drafts: Vec<Draft> = Vec::with_capacity(groups.len());
    for &(g, facts) in groups {
        check_group(g, &facts.key)?;
        let key = JobKey(&g.namespace, &g.name);
        let same = |&(_, d): &(u64, usize)| draft_key(&drafts, d) == key;
        match job_keys.entry(facts.hash, same, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(_) => {
                return Err(err(
                    "PodGroup",
                    &facts.key,
                    "metadata.name",
                    "duplicate PodGroup".into(),
                ));
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert((facts.hash, drafts.len()));
            }
        }
        drafts.push(Draft {
            spec: std::borrow::Cow::Borrowed(g),
            name: &facts.key,
            min_resources: facts.min_resources.as_ref(),
            implicit: false,
        });
    }
    // Pods come sorted by namespace and name: a duplicate follows its twin (a builder's pods
    // are keyed by namespace and name, so none has one).
    let mut last_pod: Option<(&str, &str)> = None;
    // Per pod of ours, in order: the draft of its job (looked up once, used again below).
    let mut pod_drafts: Vec<usize> = Vec::with_capacity(pods.len());
    for &(p, facts) in pods.iter().filter(|(p, _)| p.is_member()) {
        let this = (p.namespace.as_str(), p.name.as_str());
        if !pods_unique && last_pod.replace(this) == Some(this) {
            return Err(err(
                "Pod",
                &facts.key,
                "metadata.name",
                "duplicate pod".into(),
            ));
        }
        match &p.group {
            Some(g) => match job_keys.find(facts.job_hash, |&(_, d)| {
                draft_key(&drafts, d) == JobKey(&p.namespace, g)
            }) {
                Some(&(_, d)) => pod_drafts.push(d),
                None => {
                    return Err(err(
                        "Pod",
                        &facts.key,
                        "metadata.labels/annotations (pod group)",
                        format!("names PodGroup {}/{g}, which does not exist", p.namespace),
                    ));
                }
            },
            None => {
                let key = JobKey(&p.namespace, &p.name);
                let same = |&(_, d): &(u64, usize)| draft_key(&drafts, d) == key;
                if job_keys.find(facts.job_hash, same).is_some() {
                    return Err(err(
                        "Pod",
                        &facts.key,
                        "metadata.name",
                        format!(
                            "has no PodGroup but a PodGroup named {} exists; name the group explicitly",
                            facts.key
                        ),
                    ));
                }
                job_keys.insert_unique(facts.job_hash, (facts.job_hash, drafts.len()), |e| e.0);
                pod_drafts.push(drafts.len());
                drafts.push(Draft {
                    spec: std::borrow::Cow::Owned(implicit_group(p)),
                    name: &facts.key,
                    min_resources: None,
                    implicit: true,
                });
            }
        }
    }
    // Jobs sorted by name (groups come sorted, implicit groups after them: two sorted runs).
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by(|&a, &b| draft_key(&drafts, a).cmp(&draft_key(&drafts, b)));
    let mut job_index = vec![JobId(0); drafts.len()];
    for (pos, &d) in order.iter().enumerate() {
        job_index[d] = JobId(pos as u32);
    }
    // Tasks and node usage.
    let mut rules_ids: Map<PlacementRules, RulesId> = Map::default();
    let mut rules: Vec<PlacementRules> = Vec::new();
    let mut shape_ids: Map<(RulesId, Resources), ShapeId> = Map::default();
    let mut shapes: Vec<(RulesId, Resources)> = Vec::new();
    // Usage buffers of an earlier snapshot with the same nodes and names, zeroed in place.
    let zero = Resources::zero(names.len());
    let (mut node_used, mut node_gpus_used) = match recycled {
        Some((mut used, mut gpus)) if used.len() == built_nodes.len() => {
            used.fill(zero.clone());
            gpus.fill(0);
            (used, gpus)
        }
        _ => (
            vec![zero.clone(); built_nodes.len()],
            vec![0u64; built_nodes.len()],
        ),
    };
    // GPUs in MIG mode are never free whole devices; their slices are tracked beside.
    let mig = built_nodes
        .iter()
        .any(|n| !n.slices.is_empty() || n.mig_gpus() != 0);
    let mut slice_used = vec![0u64; if mig { built_nodes.len() } else { 0 }];
    if mig {
        for n in &built_nodes {
            node_gpus_used[n.id.index()] = n.mig_gpus();
        }
    }
    let mut last_tasks = buffers.last_tasks;
    let mut tasks = buffers.tasks;
    tasks.clear();
    tasks.reserve(pods.len());
    let mut task_labels: Vec<&BTreeMap<String, String>> = Vec::with_capacity(pods.len());
    // Task lists of the earlier snapshot's jobs, emptied and filled again.
    let mut jobs = buffers.jobs;
    let mut spare: Vec<Vec<TaskId>> = (jobs.iter_mut())
        .map(|j| std::mem::take(&mut j.tasks))
        .collect();
    jobs.clear();
    let mut job_tasks: Vec<Vec<TaskId>> = (0..order.len())
        .map(|_| {
            let mut list = spare.pop().unwrap_or_default();
            list.clear();
            list
        })
        .collect();
    let mut foreign_pods = 0;
    let mut foreign = Vec::new();
    let mut claims_as_named = true;
    let mut last_rules: Option<(&PlacementRules, RulesId)> = None;
    let mut last_shape: Option<(RulesId, &Resources, ShapeId)> = None;
    let mut queue_pinned = vec![Resources::zero(names.len()); queues.len()];
    let mut pinned = Vec::new();
    for (pod_index, &(p, facts)) in pods.iter().enumerate() {
        let request = &facts.request;
        let node = bound_node(p, facts)?;
        let (mut gpus, mut slices) = (0u64, 0u64);
        if let Some(nid) = node {
            node_used[nid.index()].add(request);
            let n = &built_nodes[nid.index()];
            if !n.slices.is_empty() {
                let used = &mut slice_used[nid.index()];
                slices = crate::devices::pick_slices(&n.slices, *used, request);
                *used |= slices;
            }
            let want = request.get(n.device_kind).max(0) as usize;
            if n.sharing.shares() {
                let base = n.device_base as usize;
                let usage = &mut device_use[base..base + n.gpus.len()];
                let as_named;
                (gpus, as_named) =
                    devices::claim_shared(n, usage, &p.held_devices, &p.gpu_ids, want, facts.share);
                claims_as_named &= as_named;
            } else {
                let as_named;
                (gpus, as_named) = claim_gpus(
                    &mut node_gpus_used[nid.index()],
                    n.gpus.len(),
                    &p.gpu_ids,
                    want,
                );
                claims_as_named &= as_named;
            }
        }
        if let Some(queue) = &p.pinned_queue {
            let (queue, node) = pinned_at(&queue_ids, &has_children, facts, queue, node)?;
            queue_pinned[queue.index()].add(request);
            let request = request.clone();
            pinned.push((
                pod_index,
                PinnedUse {
                    node,
                    queue,
                    request,
                    gpus,
                    share: facts.share,
                    held_differs: facts.held_differs,
                },
            ));
            continue;
        }
        if !p.ours {
            if let Some(node) = node {
                foreign_pods += 1;
                foreign.push(ForeignPod {
                    node,
                    meta: facts.meta.clone(),
                    constraints: p.constraints.clone(),
                });
            }
            continue;
        }
        let job = job_index[pod_drafts[tasks.len()]];
        // Look up before inserting: most pods share rules and shapes (a gang's members come
        // one after another), so clone only new ones.
        let rid = match last_rules {
            Some((rules, id)) if *rules == p.rules => id,
            _ => match rules_ids.get(&p.rules) {
                Some(&id) => id,
                None => {
                    let id = RulesId(rules.len() as u32);
                    rules.push(p.rules.clone());
                    rules_ids.insert(p.rules.clone(), id);
                    id
                }
            },
        };
        last_rules = Some((&p.rules, rid));
        let shape = match last_shape {
            Some((r, req, id)) if r == rid && req == request => id,
            _ => {
                let shape_key = (rid, request.clone());
                match shape_ids.get(&shape_key) {
                    Some(&id) => id,
                    None => {
                        let id = ShapeId(shapes.len() as u32);
                        shapes.push(shape_key.clone());
                        shape_ids.insert(shape_key, id);
                        id
                    }
                }
            }
        };
        last_shape = Some((rid, request, shape));
        let id = TaskId(tasks.len() as u32);
        let name = match last_tasks.get_mut(facts.slot.get() as usize) {
            Some(t) if Arc::ptr_eq(&t.name, &facts.key) => {
                std::mem::replace(&mut t.name, TAKEN.clone())
            }
            _ => facts.key.clone(),
        };
        facts.slot.set(id.0);
        job_tasks[job.index()].push(id);
        task_labels.push(&p.labels);
        tasks.push(new_task(
            p,
            facts,
            TaskRefs {
                id,
                name,
                job,
                rules: rid,
                shape,
                node,
                gpus,
                slices,
            },
        ));
    }
    jobs.reserve(order.len());
    for (pos, &d) in order.iter().enumerate() {
        let Draft {
            spec: g,
            name,
            min_resources,
            implicit,
        } = &drafts[d];
        let queue = job_queue(&queue_ids, &has_children, g, name)?;
        let task_ids = std::mem::take(&mut job_tasks[pos]);
        let labels = |t: TaskId| task_labels[t.index()];
        let job = JobRefs {
            id: JobId(pos as u32),
            name: Arc::clone(name),
            queue,
            min_resources: min_resources.cloned(),
            implicit: *implicit,
        };
        jobs.push(new_job(g, job, task_ids, &mut tasks, labels));
    }
    for n in built_nodes.iter().filter(|n| n.sharing.shares()) {
        let base = n.device_base as usize;
        let usage = &device_use[base..base + n.gpus.len()];
        node_gpus_used[n.id.index()] = devices::closed_devices(n, usage);
    }
    let share_names = ShareNames::of(&names);
    let largest_shared_device_mib = (built_nodes.iter().filter(|n| n.sharing.shares()))
        .flat_map(|n| n.gpus.iter().map(|g| g.memory_mib.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    let mut device_kinds: Vec<ResourceId> = built_nodes.iter().map(|n| n.device_kind).collect();
    device_kinds.push(GPU);
    device_kinds.sort_unstable();
    device_kinds.dedup();
    let dims = names.len();
    let allocatable_total = sum(built_nodes.iter().map(|n| &n.allocatable), dims);
    let used_total = sum(&node_used, dims);
    Ok(Assembled {
        snapshot: Snapshot {
            now_ms,
            resources: names,
            nodes: built_nodes,
            tasks,
            jobs,
            queues,
            rules,
            shapes,
            allocatable_total,
            used_total,
            node_used,
            node_gpus_used,
            device_use,
            slice_used,
            share_names,
            device_kinds,
            largest_shared_device_mib,
            queue_pinned,
            foreign_pods,
            foreign: Arc::new(foreign),
            namespaces: Arc::default(),
            dra: Arc::default(),
            usage: Arc::default(),
            lineage,
        },
        spare_tasks: last_tasks,
        claims_as_named,
        pinned,
    })
}

/// The sum of resource vectors of `dims` dimensions.
pub(super) fn sum<'r>(items: impl IntoIterator<Item = &'r Resources>, dims: usize) -> Resources {
    let mut total = Resources::zero(dims);
    for r in items {
        total.add(r);
    }
    total
}

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
            device_resource,
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
        let names = ResourceNames::new(&device_resource, all);
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
        let shares = devices::share_ids(&names, &nodes);
        assemble(
            now_ms,
            names,
            queues,
            BuiltNodes {
                shares,
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
    /// The ids of the nodes' share resources (see [`devices::share_ids`]).
    pub(super) shares: ShareNames,
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

impl Buffers {
    /// The vectors to fill, emptied, for `pods` pods and `jobs` jobs: the last snapshot's
    /// tasks (to take names from), the tasks, the jobs, and a task list per job (the earlier
    /// snapshot's jobs' lists, emptied).
    fn emptied(
        self,
        pods: usize,
        jobs: usize,
    ) -> (Vec<Task>, Vec<Task>, Vec<Job>, Vec<Vec<TaskId>>) {
        let mut tasks = self.tasks;
        tasks.clear();
        tasks.reserve(pods);
        let mut old_jobs = self.jobs;
        let mut spare: Vec<Vec<TaskId>> = (old_jobs.iter_mut())
            .map(|j| std::mem::take(&mut j.tasks))
            .collect();
        old_jobs.clear();
        let job_tasks = (0..jobs)
            .map(|_| {
                let mut list = spare.pop().unwrap_or_default();
                list.clear();
                list
            })
            .collect();
        (self.last_tasks, tasks, old_jobs, job_tasks)
    }
}

/// The resources devices are advertised as, on any of `nodes` (`GPU` always first).
fn device_kinds(nodes: &[Node]) -> Vec<ResourceId> {
    let mut kinds: Vec<ResourceId> = nodes.iter().map(|n| n.device_kind).collect();
    kinds.push(GPU);
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// What a task taken name leaves behind: one shared, always-cached reference count.
pub(super) static TAKEN: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

/// What [`assemble`] gives.
pub(super) struct Assembled {
    pub(super) snapshot: Snapshot,
    /// The last snapshot's task vector, emptied, to fill next time.
    pub(super) spare_tasks: Vec<Task>,
    /// Every bound pod holds the GPUs it names (see [`claim_devices`]).
    pub(super) claims_as_named: bool,
    /// What each pinned pod holds, by its index in the pods.
    pub(super) pinned: Vec<(usize, PinnedUse)>,
}

/// Everything of a snapshot but its nodes, from pods and groups sorted by namespace and name
/// and queues already resolved.
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
        shares: share_names,
        recycled,
        lineage,
        buffers,
    } = nodes;
    let device_count = devices::assign_bases(&mut built_nodes);
    let lookup = QueueLookup::new(&queues);
    let (drafts, pod_drafts) = draft_jobs(groups, pods, pods_unique)?;
    // Jobs sorted by name (groups come sorted, implicit groups after them: two sorted runs).
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by(|&a, &b| drafts[a].key().cmp(&drafts[b].key()));
    let mut job_index = vec![JobId(0); drafts.len()];
    for (pos, &d) in order.iter().enumerate() {
        job_index[d] = JobId(pos as u32);
    }
    let mut held = Holdings::new(&built_nodes, recycled, names.len(), device_count);
    let mut placed = Placed::new(buffers, pods.len(), order.len(), queues.len(), names.len());
    for (pod_index, &pod) in pods.iter().enumerate() {
        // Per pod of ours, in order, its job (see `draft_jobs`).
        let job = |member: usize| job_index[pod_drafts[member]];
        placed.place(pod_index, pod, job, (&built_nodes, &mut held), &lookup)?;
    }
    let jobs = placed.jobs(&drafts, &order, &lookup)?;
    held.close_shared(&built_nodes);
    let largest_shared_device_mib = (built_nodes.iter().filter(|n| n.sharing.shares()))
        .flat_map(|n| n.gpus.iter().map(|g| g.memory_mib.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    let device_kinds = device_kinds(&built_nodes);
    let dims = names.len();
    let allocatable_total = sum(built_nodes.iter().map(|n| &n.allocatable), dims);
    let used_total = sum(&held.nodes.used, dims);
    let (rules, shapes) = placed.shapes.into_parts();
    Ok(Assembled {
        snapshot: Snapshot {
            now_ms,
            resources: names,
            nodes: built_nodes,
            tasks: placed.tasks,
            jobs,
            queues,
            rules,
            shapes,
            allocatable_total,
            used_total,
            node_used: held.nodes.used,
            node_gpus_used: held.nodes.gpus,
            device_use: held.device_use,
            slice_used: held.slice_used,
            share_names,
            device_kinds,
            largest_shared_device_mib,
            queue_pinned: placed.queue_pinned,
            foreign_pods: placed.foreign.len(),
            foreign: Arc::new(placed.foreign),
            namespaces: Arc::default(),
            dra: Arc::default(),
            usage: Arc::default(),
            lineage,
        },
        spare_tasks: placed.last_tasks,
        claims_as_named: held.claims_as_named,
        pinned: placed.pinned,
    })
}

/// The pods of a full build, placed one after another: the tasks of ours (with their labels
/// and per job its members), the pods of other schedulers, what pinned pods hold.
struct Placed<'s> {
    shapes: ShapeTable,
    /// The last snapshot's tasks, to take names from (see [`Buffers`]).
    last_tasks: Vec<Task>,
    tasks: Vec<Task>,
    task_labels: Vec<&'s BTreeMap<String, String>>,
    /// An earlier snapshot's job vector, emptied.
    jobs: Vec<Job>,
    job_tasks: Vec<Vec<TaskId>>,
    foreign: Vec<ForeignPod>,
    queue_pinned: Vec<Resources>,
    pinned: Vec<(usize, PinnedUse)>,
}

impl<'s> Placed<'s> {
    /// Nothing placed yet, in `buffers`, for `pods` pods, `jobs` jobs and `queues` queues of
    /// `dims` resources.
    fn new(buffers: Buffers, pods: usize, jobs: usize, queues: usize, dims: usize) -> Self {
        let (last_tasks, tasks, old_jobs, job_tasks) = buffers.emptied(pods, jobs);
        Placed {
            shapes: ShapeTable::default(),
            last_tasks,
            tasks,
            task_labels: Vec::with_capacity(pods),
            jobs: old_jobs,
            job_tasks,
            foreign: Vec::new(),
            queue_pinned: vec![Resources::zero(dims); queues],
            pinned: Vec::new(),
        }
    }

    /// Places pod `pod_index` on its node, if bound, charging what it holds there to `held`:
    /// as a pinned pod, a pod of another scheduler or a task of its job (`job` gives the job of
    /// the n-th pod of ours).
    fn place(
        &mut self,
        pod_index: usize,
        (p, facts): (&'s PodSpec, &'s PodFacts),
        job: impl Fn(usize) -> JobId,
        (nodes, held): (&[Node], &mut Holdings),
        lookup: &QueueLookup,
    ) -> Result<(), SnapshotError> {
        let node = bound_node(p, facts)?;
        let claim = match node {
            Some(n) => held.hold(&nodes[n.index()], p, facts),
            None => (0, 0),
        };
        if let Some(queue) = &p.pinned_queue {
            let used = PinnedUse::of(lookup, queue, facts, node, claim.0)?;
            used.charge_queue(&mut self.queue_pinned, true);
            self.pinned.push((pod_index, used));
            return Ok(());
        }
        if !p.ours {
            if let Some(node) = node {
                self.foreign.push(ForeignPod {
                    node,
                    meta: facts.meta.clone(),
                    constraints: p.constraints.clone(),
                });
            }
            return Ok(());
        }
        let id = TaskId(self.tasks.len() as u32);
        let job = job(id.index());
        let member = Member::new((p, facts), node, claim, &mut self.shapes);
        let name = match self.last_tasks.get_mut(facts.slot.get() as usize) {
            Some(t) if Arc::ptr_eq(&t.name, &facts.key) => {
                std::mem::replace(&mut t.name, TAKEN.clone())
            }
            _ => facts.key.clone(),
        };
        self.job_tasks[job.index()].push(id);
        self.task_labels.push(&p.labels);
        self.tasks.push(member.task(id, job, name));
        Ok(())
    }

    /// The jobs of `drafts`, in `order` (their ids), with their members.
    fn jobs(
        &mut self,
        drafts: &[JobDraft],
        order: &[usize],
        lookup: &QueueLookup,
    ) -> Result<Vec<Job>, SnapshotError> {
        let mut jobs = std::mem::take(&mut self.jobs);
        jobs.reserve(order.len());
        for (pos, &d) in order.iter().enumerate() {
            let draft = &drafts[d];
            let queue = draft.queue(lookup)?;
            let task_ids = std::mem::take(&mut self.job_tasks[pos]);
            let labels = |t: TaskId| self.task_labels[t.index()];
            let id = JobId(pos as u32);
            jobs.push(draft.build(id, queue, task_ids, &mut self.tasks, labels));
        }
        Ok(jobs)
    }
}

/// The jobs of `groups` and of the pods of ours without one, checked (a group's spec,
/// duplicates, the group a pod names), and per pod of ours in order the index of its job.
fn draft_jobs<'s>(
    groups: &[(&'s GroupSpec, &'s GroupFacts)],
    pods: &[(&'s PodSpec, &'s PodFacts)],
    pods_unique: bool,
) -> Result<(Vec<JobDraft<'s>>, Vec<usize>), SnapshotError> {
    // (hash, draft) by job key; hashes come with the facts.
    let mut job_keys: hashbrown::HashTable<(u64, usize)> =
        hashbrown::HashTable::with_capacity(groups.len() + pods.len());
    let mut drafts: Vec<JobDraft> = Vec::with_capacity(groups.len());
    for &(g, facts) in groups {
        let draft = JobDraft::of_group(g, facts)?;
        let same = |&(_, d): &(u64, usize)| drafts[d].key() == draft.key();
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
        drafts.push(draft);
    }
    // Pods come sorted by namespace and name: a duplicate follows its twin (a builder's pods
    // are keyed by namespace and name, so none has one).
    let mut last_pod: Option<(&str, &str)> = None;
    // Per pod of ours, in order: the draft of its job (looked up once, used again by the caller).
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
        // Its job's key: its group's, or its own (only groups are drafted before a pod
        // without one, pods being named apart).
        let key = JobKey(&p.namespace, p.group.as_deref().unwrap_or(&p.name));
        let found = job_keys.find(facts.job_hash, |&(_, d)| drafts[d].key() == key);
        check_member(p, facts, found.is_some())?;
        match found {
            Some(&(_, d)) => pod_drafts.push(d),
            None => {
                job_keys.insert_unique(facts.job_hash, (facts.job_hash, drafts.len()), |e| e.0);
                pod_drafts.push(drafts.len());
                drafts.push(JobDraft::of_pod(p, facts));
            }
        }
    }
    Ok((drafts, pod_drafts))
}

/// The sum of resource vectors of `dims` dimensions.
pub(super) fn sum<'r>(items: impl IntoIterator<Item = &'r Resources>, dims: usize) -> Resources {
    let mut total = Resources::zero(dims);
    for r in items {
        total.add(r);
    }
    total
}

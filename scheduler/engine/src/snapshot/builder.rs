//! [`SnapshotBuilder`]'s methods: told the changes of a cluster, it gives the snapshot
//! [`Snapshot::build`] would, patching its last one where that is exact (`patch.rs`).

use super::*;

/// Snapshots of one set of nodes and a changing workload, cycle after cycle, redoing only
/// what changed: the nodes are validated, sorted and interned once and kept while the resource
/// names stay the same (a node that changes is rebuilt alone, [`SnapshotBuilder::update_node`]);
/// the builder holds the pods and PodGroups, told of each change ([`SnapshotBuilder::set_pod`],
/// [`SnapshotBuilder::remove_pod`], and the same for groups), and converts a spec once, not
/// every cycle.
///
/// `builder.build(now, queues)` equals
/// `Snapshot::build(ClusterSpec { now_ms: now, nodes, pods, groups, queues, device_resource, .. })`
/// with `nodes`, `pods` and `groups` the builder's current specs, field by field, errors included (node
/// errors are reported by [`SnapshotBuilder::new`] and [`SnapshotBuilder::update_node`]
/// instead; pods and groups are keyed by namespace and name, so a duplicate replaces).
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// The cluster's whole-device resource (see [`ClusterSpec::device_resource`]).
    pub(super) device_resource: String,
    /// Sorted by name; index = node id.
    pub(super) specs: Vec<NodeSpec>,
    pub(super) ids: HashMap<String, NodeId>,
    /// Resource name → how many nodes state it in `allocatable`.
    pub(super) node_names: BTreeMap<String, usize>,
    /// Nodes built for these names (taken back from the last snapshot).
    pub(super) table: Option<(ResourceNames, Vec<Node>)>,
    /// Nodes changed since `table` was built.
    pub(super) dirty: BTreeSet<usize>,
    pub(super) last: Option<Snapshot>,
    /// The versions of the nodes' specs and labels (see [`Lineage`]).
    pub(super) nodes_version: Version,
    pub(super) labels_version: Version,
    pub(super) pods: ConvertedMap<Arc<PodSpec>, PodFacts>,
    pub(super) groups: ConvertedMap<GroupSpec, GroupFacts>,
    pub(super) held: HeldCounts,
    /// The names the kept facts were converted under.
    pub(super) facts_names: Option<ResourceNames>,
    /// The task vector of the snapshot before last (see [`Buffers`]).
    pub(super) spare_tasks: Vec<Task>,
    /// Every bound pod of the last snapshot holds the GPUs it names (see [`claim_devices`]).
    pub(super) claims_as_named: bool,
    /// Snapshots built by patching the last one (see [`SnapshotBuilder::patched`]).
    pub(super) patched: u64,
    /// What each pinned pod held in the last snapshot.
    pub(super) pinned_uses: HashMap<(String, String), PinnedUse>,
    /// Snapshots built so far (see [`Lineage`]).
    pub(super) generation: u64,
    /// Namespaces with their labels (see [`SnapshotBuilder::set_namespaces`]).
    pub(super) namespaces: Arc<Vec<NamespaceSpec>>,
    /// The pods' metadata values, shared between pods alike.
    pub(super) metas: MetaInterner,
    /// DRA's devices and claims (see [`SnapshotBuilder::set_dra`]).
    pub(super) dra: Arc<crate::dra::DraTable>,
    /// What each queue used (see [`SnapshotBuilder::set_usage`]).
    pub(super) usage: Arc<Vec<crate::QueueUsage>>,
    /// Whether anything changed since the last snapshot (see [`SnapshotBuilder::build`]).
    pub(super) changed: bool,
    /// The queues the last snapshot was built with, sorted by name.
    pub(super) last_queues: Vec<QueueSpec>,
}

impl SnapshotBuilder {
    /// Validates and interns `nodes` (any order; duplicate names and too many GPUs are errors),
    /// whole devices advertised as `device_resource` (see [`ClusterSpec::device_resource`]).
    pub fn new(device_resource: &str, nodes: Vec<NodeSpec>) -> Result<Self, SnapshotError> {
        let mut nodes: Vec<NodeSpec> = nodes.into_iter().map(devices::with_share_totals).collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut ids = HashMap::with_capacity(nodes.len());
        let mut node_names: BTreeMap<String, usize> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if ids.insert(n.name.clone(), NodeId(i as u32)).is_some() {
                return Err(duplicate_node(&n.name));
            }
            for k in n.allocatable.keys() {
                *node_names.entry(k.clone()).or_default() += 1;
            }
        }
        let names = ResourceNames::new(device_resource, node_names.keys().map(String::as_str));
        let built = build_nodes(&names, &nodes)?;
        Ok(SnapshotBuilder {
            device_resource: device_resource.to_string(),
            specs: nodes,
            ids,
            node_names,
            table: Some((names, built)),
            dirty: BTreeSet::new(),
            last: None,
            nodes_version: Version::default(),
            labels_version: Version::default(),
            pods: BTreeMap::new(),
            groups: BTreeMap::new(),
            held: HeldCounts::untracked(),
            facts_names: None,
            spare_tasks: Vec::new(),
            claims_as_named: false,
            patched: 0,
            pinned_uses: HashMap::new(),
            generation: 0,
            namespaces: Arc::default(),
            metas: MetaInterner::default(),
            dra: Arc::default(),
            usage: Arc::default(),
            changed: true,
            last_queues: Vec::new(),
        })
    }

    /// The namespaces and their labels, for `namespaceSelector` ([`ClusterSpec::namespaces`]);
    /// none until told.
    pub fn set_namespaces(&mut self, namespaces: Vec<NamespaceSpec>) {
        self.namespaces = sorted_namespaces(namespaces);
        self.changed = true;
    }

    /// What each queue used ([`ClusterSpec::usage`]); none until told. Read only by a
    /// framework with a usage half-life, and never a reason to assemble anew.
    pub fn set_usage(&mut self, usage: Vec<crate::QueueUsage>) {
        self.usage = Arc::new(usage);
    }

    /// DRA's devices and claims ([`ClusterSpec::dra`]); none until told.
    pub fn set_dra(&mut self, dra: crate::dra::DraSpec) {
        self.dra = if dra.is_empty() {
            Arc::default()
        } else {
            let names: Vec<&str> = self.specs.iter().map(|n| n.name.as_str()).collect();
            Arc::new(crate::dra::DraTable::new(dra, &names))
        };
        self.changed = true;
    }

    /// The node specs, sorted by name (index = [`NodeId`]).
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.specs
    }

    /// The id of a node by name.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.ids.get(name).copied()
    }

    /// Replaces the node of the same name (labels, taints, allocatable, GPUs may change; nodes
    /// are neither added nor removed, so ids stay). Only that node is rebuilt.
    pub fn update_node(&mut self, spec: NodeSpec) -> Result<(), SnapshotError> {
        let spec = devices::with_share_totals(spec);
        let Some(&id) = self.ids.get(&spec.name) else {
            return Err(err(
                "Node",
                &spec.name,
                "metadata.name",
                "not a node of this builder".into(),
            ));
        };
        // Validate before changing anything.
        build_node(
            &ResourceNames::new(
                &self.device_resource,
                spec.allocatable.keys().map(String::as_str),
            ),
            id,
            &spec,
        )?;
        let old = std::mem::replace(&mut self.specs[id.index()], spec);
        // Carried topologies depend on labels; a carried node index (capacity classes, keys,
        // filter results) on the whole spec.
        if old.labels != self.specs[id.index()].labels {
            self.labels_version = Version::default();
        }
        if old != self.specs[id.index()] {
            self.nodes_version = Version::default();
        }
        for k in old.allocatable.keys() {
            if let Some(c) = self.node_names.get_mut(k) {
                *c -= 1;
                if *c == 0 {
                    self.node_names.remove(k);
                }
            }
        }
        for k in self.specs[id.index()].allocatable.keys() {
            *self.node_names.entry(k.clone()).or_default() += 1;
        }
        self.dirty.insert(id.index());
        self.changed = true;
        Ok(())
    }

    /// How many snapshots were patched from the last one rather than assembled anew: the jobs
    /// that changed since are rebuilt and the rest renumbered, which is exact (the same
    /// snapshot either way) and, when few jobs changed, several times quicker. A builder
    /// assembles anew after node, resource-name or queue changes, when a pod of another
    /// scheduler changed, when many jobs changed, when the result would be an error, when
    /// some bound pod's GPUs (whole or shared) are not the ones it names, and on MIG slices.
    pub fn patched(&self) -> u64 {
        self.patched
    }

    /// The pods held, as (namespace, name), in order.
    pub fn pod_names(&self) -> Vec<(String, String)> {
        self.pods.keys().cloned().collect()
    }

    /// The PodGroups held, as (namespace, name), in order.
    pub fn group_names(&self) -> Vec<(String, String)> {
        self.groups.keys().cloned().collect()
    }

    /// The last snapshot built, if any.
    pub fn last(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    /// How many pods and PodGroups are held.
    pub fn len(&self) -> (usize, usize) {
        (self.pods.len(), self.groups.len())
    }

    /// Adds a pod, or replaces the one of the same namespace and name. The spec may be shared
    /// (an `Arc` its converter keeps too): the builder only reads it, so one copy serves both.
    pub fn set_pod(&mut self, pod: impl Into<Arc<PodSpec>>) {
        let pod = pod.into();
        let key = (pod.namespace.clone(), pod.name.clone());
        self.changed |= upsert(&mut self.pods, &mut self.held, key, pod);
    }

    /// The pod of this namespace and name, as last told.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodSpec> {
        let key = (namespace.to_string(), name.to_string());
        self.pods.get(&key).map(|c| &*c.spec)
    }

    /// Removes a pod; returns it if it was there.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Option<Arc<PodSpec>> {
        let old = take(&mut self.pods, &mut self.held, namespace, name);
        self.changed |= old.is_some();
        old
    }

    /// Adds a PodGroup, or replaces the one of the same namespace and name.
    pub fn set_group(&mut self, group: GroupSpec) {
        let key = (group.namespace.clone(), group.name.clone());
        self.changed |= upsert(&mut self.groups, &mut self.held, key, group);
    }

    /// The PodGroup of this namespace and name, as last told.
    pub fn group(&self, namespace: &str, name: &str) -> Option<&GroupSpec> {
        let key = (namespace.to_string(), name.to_string());
        self.groups.get(&key).map(|c| &c.spec)
    }

    /// Removes a PodGroup; returns it if it was there.
    pub fn remove_group(&mut self, namespace: &str, name: &str) -> Option<GroupSpec> {
        let old = take(&mut self.groups, &mut self.held, namespace, name);
        self.changed |= old.is_some();
        old
    }

    /// The snapshot of the builder's nodes, pods and groups with these queues at `now_ms`.
    /// When nothing changed since the last one, that one at `now_ms` (a snapshot depends on
    /// the instant only through [`Snapshot::now_ms`]).
    pub fn build(&mut self, now_ms: i64, queues: &[QueueSpec]) -> Result<&Snapshot, SnapshotError> {
        let mut queues = queues.to_vec();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        let unchanged = !self.changed && self.last_queues == queues;
        if !(unchanged && self.last.is_some()) {
            let built = self.assemble_or_patch(now_ms, &queues).map(|_| ());
            // An error leaves the builder to try again next time.
            self.changed = built.is_err();
            self.last_queues = queues;
            built?;
        }
        let last = self.last.as_mut().expect("a snapshot was built");
        last.now_ms = now_ms;
        last.dra = self.dra.clone();
        last.usage = self.usage.clone();
        Ok(last)
    }

    fn assemble_or_patch(
        &mut self,
        now_ms: i64,
        queues: &[QueueSpec],
    ) -> Result<&mut Snapshot, SnapshotError> {
        let mut queues = queues.to_vec();
        let mut all: Vec<&str> = (self.held.names.keys())
            .chain(self.node_names.keys())
            .map(String::as_str)
            .collect();
        for q in &queues {
            for list in [&q.capability, &q.guarantee, &q.deserved]
                .into_iter()
                .flatten()
            {
                all.extend(list.keys().map(String::as_str));
            }
        }
        let names = ResourceNames::new(&self.device_resource, all);
        let built_queues = build_queues(&names, &mut queues, self.held.default_queue_users > 0)?;
        if self.facts_names.as_ref() != Some(&names) {
            self.pods.values_mut().for_each(|c| c.facts = None);
            self.groups.values_mut().for_each(|c| c.facts = None);
            self.facts_names = Some(names.clone());
        }
        let before = self.last.as_ref().and_then(|s| s.lineage.generation);
        if let Some((mut snapshot, changed)) = patch::patch(self, now_ms, &built_queues) {
            self.held.built();
            self.patched += 1;
            self.generation += 1;
            snapshot.lineage = self.lineage(before.map(|g| (g, changed)));
            return Ok(self.last.insert(snapshot));
        }
        self.held.built();
        let ids = &self.ids;
        let node_id = |n: &str| ids.get(n).copied();
        let metas = &mut self.metas;
        metas.prune(self.pods.len());
        let pods: Vec<(&PodSpec, &PodFacts)> = (self.pods.values_mut())
            .map(|c| c.convert(&names, &node_id, metas))
            .collect();
        let groups: Vec<(&GroupSpec, &GroupFacts)> = (self.groups.values_mut())
            .map(|c| c.convert(&names))
            .collect();
        let (mut recycled, mut reused) = (None, false);
        let mut buffers = Buffers::default();
        if let Some(last) = self.last.take() {
            self.table = Some((last.resources, last.nodes));
            recycled = Some((last.node_used, last.node_gpus_used));
            buffers = Buffers {
                last_tasks: last.tasks,
                tasks: std::mem::take(&mut self.spare_tasks),
                jobs: last.jobs,
            };
        }
        let nodes = match self.table.take() {
            Some((table_names, mut nodes)) if table_names == names => {
                reused = true;
                for &i in &self.dirty {
                    nodes[i] = build_node(&names, NodeId(i as u32), &self.specs[i])?;
                }
                nodes
            }
            _ => build_nodes(&names, &self.specs)?,
        };
        self.dirty.clear();
        let shares = devices::share_ids(&names, &self.specs);
        let assembled = assemble(
            now_ms,
            names,
            built_queues,
            BuiltNodes {
                shares,
                nodes,
                recycled: recycled.filter(|_| reused),
                lineage: Lineage::default(),
                buffers,
            },
            &pods,
            true,
            &groups,
        )?;
        self.spare_tasks = assembled.spare_tasks;
        self.claims_as_named = assembled.claims_as_named;
        let keys: Vec<&(String, String)> = self.pods.keys().collect();
        self.pinned_uses = (assembled.pinned.into_iter())
            .map(|(i, used)| (keys[i].clone(), used))
            .collect();
        self.generation += 1;
        let mut snapshot = assembled.snapshot;
        snapshot.lineage = self.lineage(None);
        snapshot.namespaces = self.namespaces.clone();
        Ok(self.last.insert(snapshot))
    }

    /// The lineage of the snapshot just built (`self.generation`), with the nodes whose usage
    /// changed since the one before, when known.
    fn lineage(&self, changed: Option<(u64, Vec<NodeId>)>) -> Lineage {
        Lineage {
            nodes: self.nodes_version.clone(),
            labels: self.labels_version.clone(),
            generation: Some(self.generation),
            changed,
        }
    }
}

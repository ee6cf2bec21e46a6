//! Telling the engine's `SnapshotBuilder` what changed: which nodes, pods and PodGroups an
//! update wants, what the builder was told before, and the difference.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use basalt_engine::{
    GroupSpec, NamespaceSpec, NodeSpec, PodSpec, QueueSpec, QueueUsage, SnapshotBuilder,
};

use super::{HashMap, Identity};
use crate::convert::device_names::GPU_NAME;
use crate::convert::{Context, ConvertError, Converted};
use crate::tolerant::{judge_references, Fate, Judged, LeftOut};

/// How a pod goes to the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Form {
    /// As converted.
    Converted,
    /// As converted, but as another scheduler's (its PodGroup is missing or bad).
    Unowned,
    /// Converted as another scheduler's pod (its own fields are bad).
    Foreign,
}

/// The builder and what it was told.
pub(super) struct Fed {
    pub(super) builder: SnapshotBuilder,
    /// Node name → what its spec came from and whether it was cordoned.
    pub(super) nodes: HashMap<String, (Identity, bool, u64)>,
    pub(super) pods: Told<(Identity, Form)>,
    pub(super) groups: Told<GroupTag>,
    pub(super) namespaces: Vec<NamespaceSpec>,
    /// The queues of the last build.
    pub(super) queues: Vec<QueueSpec>,
}

/// A PodGroup's source: a shared object, or one made from a workload (keyed by its name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum GroupTag {
    Shared(Identity),
    Made(String, String),
}

/// The specs a builder holds, by what each came from: its key there and the update that last
/// gave it.
pub(super) struct Told<T> {
    pub(super) by: HashMap<T, ((String, String), u64)>,
    /// Keys set in the current update (an entry no longer given is removed unless its key was).
    pub(super) set: HashSet<(String, String), foldhash::fast::RandomState>,
}

impl<T> Default for Told<T> {
    fn default() -> Self {
        Told {
            by: HashMap::default(),
            set: HashSet::default(),
        }
    }
}

impl<T: Hash + Eq> Told<T> {
    /// Marks `tag` given in update `generation`; false when it was not told yet.
    pub(super) fn see(&mut self, tag: &T, generation: u64) -> bool {
        match self.by.get_mut(tag) {
            Some((_, seen)) => {
                *seen = generation;
                true
            }
            None => false,
        }
    }

    /// Records `tag` told under `key`; `replacing` when the builder may hold the key from
    /// another tag (not so for a new builder).
    pub(super) fn tell(&mut self, tag: T, key: (String, String), generation: u64, replacing: bool) {
        if replacing {
            self.set.insert(key.clone());
        }
        self.by.insert(tag, (key, generation));
    }

    /// The keys no longer given in update `generation` (and not set again in it).
    pub(super) fn sweep(&mut self, generation: u64) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        let set = std::mem::take(&mut self.set);
        self.by.retain(|_, (key, seen)| {
            let keep = *seen == generation;
            if !keep && !set.contains(key) {
                gone.push(key.clone());
            }
            keep
        });
        gone
    }
}

/// The parts of the snapshot an update wants, borrowed from the conversions.
#[derive(Default)]
pub(super) struct Wanted<'a> {
    pub(super) nodes: Vec<(&'a NodeSpec, Option<Identity>)>,
    pub(super) pods: Vec<(&'a Arc<PodSpec>, Identity, Form)>,
    pub(super) groups: Vec<(&'a GroupSpec, GroupTag)>,
    pub(super) queues: Vec<&'a QueueSpec>,
    /// What the queues' statuses say they used.
    pub(super) usage: Vec<QueueUsage>,
    pub(super) namespaces: Vec<&'a NamespaceSpec>,
    pub(super) left_out: LeftOut,
}

/// One update's telling of the builder.
pub(super) struct Feed<'u> {
    pub(super) wanted: &'u Wanted<'u>,
    pub(super) fates: &'u [Fate],
    pub(super) context: &'u Context,
    /// The context was read again (its devices may have changed).
    pub(super) context_changed: bool,
    pub(super) now_ms: i64,
    pub(super) generation: u64,
}

impl Feed<'_> {
    /// Tells the builder in `slot` (a new one when the nodes are not its nodes) what changed,
    /// and builds; `None` when the whole build must do.
    pub(super) fn into(self, slot: &mut Option<Fed>) -> Option<()> {
        let Feed {
            wanted,
            fates,
            context,
            context_changed,
            now_ms,
            generation,
        } = self;
        let mut new = false;
        let fed = match slot
            .take()
            .map(|mut fed| (fed.holds_nodes(wanted, generation), fed))
        {
            Some((true, mut fed)) => {
                if context_changed {
                    fed.builder.set_dra(context.dra.spec());
                }
                slot.insert(fed)
            }
            _ => {
                let nodes = (wanted.nodes.iter())
                    .map(|(n, _)| cordon((*n).clone(), &wanted.left_out.cordoned))
                    .collect();
                new = true;
                let mut builder = SnapshotBuilder::new(GPU_NAME, nodes).ok()?;
                builder.set_dra(context.dra.spec());
                let nodes = (wanted.nodes.iter())
                    .map(|(n, id)| {
                        let cordoned = wanted.left_out.cordoned.contains(&n.name);
                        (
                            n.name.clone(),
                            (id.unwrap_or_default(), cordoned, generation),
                        )
                    })
                    .collect();
                slot.insert(Fed {
                    builder,
                    nodes,
                    pods: Told::default(),
                    groups: Told::default(),
                    namespaces: Vec::new(),
                    queues: Vec::new(),
                })
            }
        };
        for (n, id) in &wanted.nodes {
            let cordoned = wanted.left_out.cordoned.contains(&n.name);
            let id = id.unwrap_or_default();
            let told = fed.nodes.get_mut(n.name.as_str()).expect("the same nodes");
            // A new context may convert the same object differently.
            if context_changed || (told.0, told.1) != (id, cordoned) {
                let spec = cordon((*n).clone(), &wanted.left_out.cordoned);
                let held =
                    (fed.builder.node_id(&spec.name)).map(|i| &fed.builder.nodes()[i.index()]);
                if held != Some(&spec) {
                    fed.builder.update_node(spec).ok()?;
                }
                *told = (id, cordoned, generation);
            }
        }
        let mut pods = 0;
        for ((p, id, form), fate) in wanted.pods.iter().zip(fates) {
            let form = match (fate, form) {
                (Fate::Drop, _) => continue,
                (Fate::Foreign, Form::Converted) => Form::Unowned,
                _ => *form,
            };
            pods += 1;
            if !context_changed && fed.pods.see(&(*id, form), generation) {
                continue;
            }
            let mut spec = Arc::clone(p);
            if form == Form::Unowned {
                let spec = Arc::make_mut(&mut spec);
                spec.ours = false;
                spec.group = None;
            }
            let key = (spec.namespace.clone(), spec.name.clone());
            fed.builder.set_pod(spec);
            fed.pods.tell((*id, form), key, generation, !new);
        }
        for (ns, name) in fed.pods.sweep(generation) {
            fed.builder.remove_pod(&ns, &name);
        }
        let mut groups = 0;
        for (g, tag) in &wanted.groups {
            groups += 1;
            let shared = matches!(tag, GroupTag::Shared(_));
            if shared && !context_changed && fed.groups.see(tag, generation) {
                continue;
            }
            let key = (g.namespace.clone(), g.name.clone());
            fed.builder.set_group((*g).clone());
            fed.groups.tell(tag.clone(), key, generation, !new);
        }
        for (ns, name) in fed.groups.sweep(generation) {
            fed.builder.remove_group(&ns, &name);
        }
        // Two pods or PodGroups of one name: the builder keeps one, the engine refuses both.
        if fed.builder.len() != (pods, groups) {
            return None;
        }
        if fed.namespaces.len() != wanted.namespaces.len()
            || !(fed.namespaces.iter().zip(&wanted.namespaces)).all(|(a, b)| a == *b)
        {
            fed.namespaces = wanted.namespaces.iter().map(|n| (*n).clone()).collect();
            fed.builder.set_namespaces(fed.namespaces.clone());
        }
        fed.queues = wanted.queues.iter().map(|q| (*q).clone()).collect();
        fed.builder.set_usage(wanted.usage.clone());
        fed.builder.build(now_ms, &fed.queues).ok()?;
        Some(())
    }
}

impl Fed {
    /// Whether the builder holds exactly the wanted nodes (by name); marks them seen.
    pub(super) fn holds_nodes(&mut self, wanted: &Wanted, generation: u64) -> bool {
        let mut seen = 0;
        for (n, _) in &wanted.nodes {
            match self.nodes.get_mut(n.name.as_str()) {
                Some(told) if told.2 != generation => {
                    told.2 = generation;
                    seen += 1;
                }
                // New, or a second node of the name.
                _ => return false,
            }
        }
        seen == self.nodes.len()
    }
}

impl<'a> Wanted<'a> {
    pub(super) fn add(&mut self, c: &'a Converted, id: Option<Identity>, form: Form) {
        match c {
            Converted::Node(n) => self.nodes.push((n, id)),
            Converted::Pod(p) => {
                let id = id.expect("pods are shared objects");
                self.pods.push((p, id, form));
            }
            Converted::Group(g) => {
                let tag = match id {
                    Some(id) => GroupTag::Shared(id),
                    None => GroupTag::Made(g.namespace.clone(), g.name.clone()),
                };
                self.groups.push((g, tag));
            }
            Converted::Queue(q, usage) => {
                self.queues.push(q);
                self.usage.extend(usage.iter().cloned());
            }
            Converted::Namespace(n) => self.namespaces.push(n),
        }
    }

    /// The reference checks of the whole build: queues and PodGroups left out go, each pod's
    /// fate.
    pub(super) fn judge(&mut self, errors: &mut Vec<ConvertError>) -> Vec<Fate> {
        let groups: Vec<&GroupSpec> = self.groups.iter().map(|(g, _)| *g).collect();
        let pods: Vec<&PodSpec> = self.pods.iter().map(|(p, _, _)| &***p).collect();
        let nodes: HashSet<&str> = self.nodes.iter().map(|(n, _)| n.name.as_str()).collect();
        let Judged {
            queues,
            groups: keep,
            fates,
        } = judge_references(
            &self.queues,
            &groups,
            &nodes,
            &pods,
            &mut self.left_out,
            errors,
        );
        let mut queues = queues.into_iter();
        self.queues.retain(|_| queues.next() == Some(true));
        let mut keep = keep.into_iter();
        self.groups.retain(|_| keep.next() == Some(true));
        fates
    }
}

/// The node as the snapshot has it: closed to new pods when a pod's usage there is unknown.
pub(super) fn cordon(mut n: NodeSpec, cordoned: &HashSet<String>) -> NodeSpec {
    if cordoned.contains(&n.name) {
        n.unschedulable = true;
    }
    n
}

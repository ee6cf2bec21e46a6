//! The snapshot of a changing cluster, kept up to date from one cycle to the next instead of
//! built anew: what a live scheduler needs when its watches change a few objects of 100,000.
//!
//! [`IncrementalSnapshot::update`] takes the objects as they are now, as
//! [`build_snapshot_tolerant`] does, and gives the same snapshot, errors and warnings (a
//! property test holds it to that after any sequence of watch events). What it saves:
//! - Each object held in an `Arc` (a watch cache's: every event replaces it) is converted once
//!   while it stays the same object; the kinds held by value (queues, namespaces, workloads)
//!   are few and converted every time.
//! - The context of a conversion (priority classes, volumes, DRA devices, HyperNodes' labels,
//!   ...) is read again only when an object it is read from changed: for a node only its name
//!   and labels count, for a pod only one that uses volume claims (or any pod while workload
//!   objects are given).
//! - The engine's [`SnapshotBuilder`] is told only of the nodes, pods and PodGroups that
//!   changed, so it patches its last snapshot and the session's node state carries over.
//!
//! Whatever it does not do incrementally falls back to the whole build, which is exact by
//! definition: a node added or removed (a new builder), and anything the engine refuses (the
//! tolerant build's rounds leave such objects out).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use basalt_engine::{
    GroupSpec, NamespaceSpec, NodeSpec, PodSpec, QueueSpec, Snapshot, SnapshotBuilder,
};

use crate::convert::{volumes, Context, ConvertError, ConvertOptions, Converted};
use crate::read::Object;
use crate::tolerant::{self, judge_references, live_node, Fate};

/// foldhash: several times faster than SipHash on the short keys looked up per object and
/// update, and still seeded per process. Nothing iterates these maps where order could leak.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A snapshot kept up to date from the objects of each cycle (see the module documentation).
#[derive(Default)]
pub struct IncrementalSnapshot {
    /// The options everything kept was converted under, at instant 0.
    options: Option<ConvertOptions>,
    context: Option<KeptContext>,
    /// Conversions of shared objects, by identity.
    memo: Memos,
    /// Counts updates: what an update saw carries its number.
    generation: u64,
    fed: Option<Fed>,
    /// The snapshot of an update that fell back to the whole build.
    fallback: Option<Snapshot>,
    /// The last update's objects and outcome, for one that is given the very same objects.
    last: Option<(Vec<(String, Object)>, Update)>,
}

/// What an update found besides its snapshot, as [`crate::TolerantSnapshot`] has them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Update {
    pub warnings: Vec<String>,
    pub errors: Vec<ConvertError>,
    /// Whether the snapshot is the last update's, moved to the new instant (the objects were
    /// the very same).
    pub unchanged: bool,
}

/// A shared object's kind and address. Its conversion keeps the object, so no other object
/// takes the address while the entry lives.
type Identity = (&'static str, usize);

fn identity(object: &Object) -> Option<Identity> {
    let address = match object {
        Object::Node(n) => Arc::as_ptr(n) as usize,
        Object::Pod(p) => Arc::as_ptr(p) as usize,
        Object::PodGroup(g) => Arc::as_ptr(g) as usize,
        _ => return None,
    };
    Some((object.kind(), address))
}

struct KeptContext {
    context: Context,
    /// The objects it was read from.
    informers: Vec<Object>,
    errors: Vec<ConvertError>,
    warnings: Vec<String>,
}

/// One object's conversion.
struct Memo {
    _object: Object,
    seen: u64,
    converted: Converted1,
    /// A bad bound pod of ours converted as another scheduler's, when it came to that.
    foreign: Option<Converted1>,
}

/// The conversions kept, each under its object's identity.
#[derive(Default)]
struct Memos {
    slots: Vec<Option<Memo>>,
    free: Vec<usize>,
    index: HashMap<Identity, usize>,
}

impl Memos {
    /// The slot of `id`'s conversion, made by `convert` when there is none; marked seen.
    fn slot(&mut self, id: Identity, generation: u64, convert: impl FnOnce() -> Memo) -> usize {
        let slot = match self.index.get(&id) {
            Some(&slot) => slot,
            None => {
                let memo = Some(convert());
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.slots[slot] = memo;
                        slot
                    }
                    None => {
                        self.slots.push(memo);
                        self.slots.len() - 1
                    }
                };
                self.index.insert(id, slot);
                slot
            }
        };
        if let Some(m) = self.slots[slot].as_mut() {
            m.seen = generation;
        }
        slot
    }

    fn get(&self, slot: usize) -> &Memo {
        self.slots[slot].as_ref().expect("a live slot")
    }

    fn get_mut(&mut self, slot: usize) -> &mut Memo {
        self.slots[slot].as_mut().expect("a live slot")
    }

    /// Drops the conversions not seen in update `generation`.
    fn sweep(&mut self, generation: u64) {
        let (slots, free) = (&mut self.slots, &mut self.free);
        self.index.retain(|_, &mut slot| {
            let keep = slots[slot].as_ref().is_some_and(|m| m.seen == generation);
            if !keep {
                slots[slot] = None;
                free.push(slot);
            }
            keep
        });
    }

    fn clear(&mut self) {
        *self = Memos::default();
    }
}

/// A conversion's result and the warnings it gave.
#[derive(Clone)]
struct Converted1 {
    result: Result<Option<Converted>, ConvertError>,
    warnings: Vec<String>,
}

impl Converted1 {
    fn of(context: &Context, origin: &str, object: &Object, options: &ConvertOptions) -> Self {
        let mut warnings = Vec::new();
        let result = context.convert(origin, object, options, &mut warnings);
        Converted1 { result, warnings }
    }
}

/// Where an object's conversion is in an update.
#[derive(Clone, Copy)]
enum Source {
    /// Kept from update to update, in this slot of the memo.
    Kept(usize),
    /// Made in this update, at this index.
    Made(usize),
}

/// How a pod goes to the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Form {
    /// As converted.
    Converted,
    /// As converted, but as another scheduler's (its PodGroup is missing or bad).
    Unowned,
    /// Converted as another scheduler's pod (its own fields are bad).
    Foreign,
}

/// The builder and what it was told.
struct Fed {
    builder: SnapshotBuilder,
    /// Node name → what its spec came from and whether it was cordoned.
    nodes: HashMap<String, (Identity, bool, u64)>,
    pods: Told<(Identity, Form)>,
    groups: Told<GroupTag>,
    namespaces: Vec<NamespaceSpec>,
    /// The queues of the last build.
    queues: Vec<QueueSpec>,
}

/// A PodGroup's source: a shared object, or one made from a workload (keyed by its name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum GroupTag {
    Shared(Identity),
    Made(String, String),
}

/// The specs a builder holds, by what each came from: its key there and the update that last
/// gave it.
struct Told<T> {
    by: HashMap<T, ((String, String), u64)>,
    /// Keys set in the current update (an entry no longer given is removed unless its key was).
    set: HashSet<(String, String), foldhash::fast::RandomState>,
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
    fn see(&mut self, tag: &T, generation: u64) -> bool {
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
    fn tell(&mut self, tag: T, key: (String, String), generation: u64, replacing: bool) {
        if replacing {
            self.set.insert(key.clone());
        }
        self.by.insert(tag, (key, generation));
    }

    /// The keys no longer given in update `generation` (and not set again in it).
    fn sweep(&mut self, generation: u64) -> Vec<(String, String)> {
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
struct Wanted<'a> {
    nodes: Vec<(&'a NodeSpec, Option<Identity>)>,
    pods: Vec<(&'a PodSpec, Identity, Form)>,
    groups: Vec<(&'a GroupSpec, GroupTag)>,
    queues: Vec<&'a QueueSpec>,
    namespaces: Vec<&'a NamespaceSpec>,
    cordoned: HashSet<String>,
    bad_groups: HashSet<String>,
}

impl IncrementalSnapshot {
    pub fn new() -> Self {
        Self::default()
    }

    /// The snapshot of the last update (`None` only when the engine refused something no
    /// object stands for).
    pub fn snapshot(&self) -> Option<&Snapshot> {
        match (&self.fallback, &self.fed) {
            (Some(s), _) => Some(s),
            (None, Some(fed)) => fed.builder.last(),
            (None, None) => None,
        }
    }

    /// Brings the snapshot up to date with `objects` under `options` (see the module
    /// documentation); the snapshot is then [`IncrementalSnapshot::snapshot`].
    pub fn update(&mut self, objects: Vec<(String, Object)>, options: &ConvertOptions) -> Update {
        let timeless = ConvertOptions {
            now_ms: 0,
            ..options.clone()
        };
        if self.options.as_ref() != Some(&timeless) {
            *self = IncrementalSnapshot {
                options: Some(timeless),
                ..Self::default()
            };
        } else if let Some(update) = self.same_objects(&objects, options.now_ms) {
            return update;
        }
        self.generation += 1;
        let update = match self.incremental(&objects, options) {
            Some(update) => update,
            None => self.whole(&objects, options),
        };
        self.last = Some((objects, update.clone()));
        update
    }

    /// The last update's outcome at `now_ms` when `objects` are its very objects.
    fn same_objects(&mut self, objects: &[(String, Object)], now_ms: i64) -> Option<Update> {
        let (last, update) = self.last.as_ref()?;
        let same = last.len() == objects.len()
            && last.iter().zip(objects).all(|((oa, a), (ob, b))| {
                oa == ob
                    && match (identity(a), identity(b)) {
                        (Some(x), Some(y)) => x == y,
                        _ => a == b,
                    }
            });
        if !same {
            return None;
        }
        let update = Update {
            unchanged: true,
            ..update.clone()
        };
        match (&mut self.fallback, &mut self.fed) {
            (Some(s), _) => s.now_ms = now_ms,
            (None, Some(fed)) => {
                fed.builder.build(now_ms, &fed.queues).ok()?;
            }
            (None, None) => {}
        }
        Some(update)
    }

    /// The whole tolerant build; the builder starts afresh next time.
    fn whole(&mut self, objects: &[(String, Object)], options: &ConvertOptions) -> Update {
        self.fed = None;
        let built = tolerant::build_snapshot_tolerant(objects, options);
        self.fallback = built.snapshot;
        Update {
            warnings: built.warnings,
            errors: built.errors,
            unchanged: false,
        }
    }

    /// `None` when the update needs the whole build.
    fn incremental(
        &mut self,
        objects: &[(String, Object)],
        options: &ConvertOptions,
    ) -> Option<Update> {
        let generation = self.generation;
        let context_changed = self.refresh_context(objects);
        let kept = self.context.as_ref().expect("refreshed");
        // Per object, its kept conversion's slot (shared objects) or its conversion made now.
        let mut made: Vec<Converted1> = Vec::new();
        let mut sources: Vec<Source> = Vec::with_capacity(objects.len());
        for (origin, object) in objects {
            let Some(id) = identity(object) else {
                sources.push(Source::Made(made.len()));
                made.push(Converted1::of(&kept.context, origin, object, options));
                continue;
            };
            let slot = self.memo.slot(id, generation, || Memo {
                _object: object.clone(),
                seen: generation,
                converted: Converted1::of(&kept.context, origin, object, options),
                foreign: None,
            });
            sources.push(Source::Kept(slot));
            let memo = self.memo.get_mut(slot);
            if let (Object::Pod(p), Err(_), None) = (object, &memo.converted.result, &memo.foreign)
            {
                if live_node(p).is_some() {
                    let foreign = ConvertOptions {
                        scheduler_names: Vec::new(),
                        ..options.clone()
                    };
                    memo.foreign = Some(Converted1::of(&kept.context, origin, object, &foreign));
                }
            }
        }
        self.memo.sweep(generation);

        let mut warnings = kept.warnings.clone();
        let mut errors = kept.errors.clone();
        let mut wanted = Wanted::default();
        for ((_, object), source) in objects.iter().zip(&sources) {
            let (converted, memo) = match *source {
                Source::Made(i) => (&made[i], None),
                Source::Kept(slot) => {
                    let m = self.memo.get(slot);
                    (&m.converted, Some(m))
                }
            };
            let id = identity(object);
            warnings.extend(converted.warnings.iter().cloned());
            let e = match &converted.result {
                Ok(Some(c)) => {
                    wanted.add(c, id, Form::Converted);
                    continue;
                }
                Ok(None) => continue,
                Err(e) => e,
            };
            errors.push(e.clone());
            match object {
                Object::PodGroup(_) => {
                    wanted.bad_groups.insert(object.key());
                }
                Object::Pod(p) => {
                    let Some(node) = live_node(p) else { continue };
                    let foreign = memo.and_then(|m| m.foreign.as_ref());
                    warnings.extend(foreign.iter().flat_map(|f| f.warnings.iter().cloned()));
                    match foreign.map(|f| &f.result) {
                        Some(Ok(Some(c))) => wanted.add(c, id, Form::Foreign),
                        _ => {
                            wanted.cordoned.insert(node.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        let fates = wanted.judge(&mut errors);
        self.fallback = None;
        let fed = Feed {
            wanted: &wanted,
            fates: &fates,
            context: &kept.context,
            context_changed,
            now_ms: options.now_ms,
            generation,
        };
        fed.into(&mut self.fed)?;
        tolerant::name_origins(objects, &mut errors);
        Some(Update {
            warnings,
            errors,
            unchanged: false,
        })
    }

    /// Reads the context again when an object it is read from changed; whether it did.
    fn refresh_context(&mut self, objects: &[(String, Object)]) -> bool {
        let workloads = objects
            .iter()
            .any(|(_, o)| matches!(o, Object::Workload(_)));
        let informs = |o: &Object| match o {
            Object::Pod(p) => workloads || p.spec.as_ref().is_some_and(volumes::uses_claims),
            o => tolerant::informs_context(o),
        };
        if let Some(kept) = &self.context {
            let mut now = objects.iter().map(|(_, o)| o).filter(|o| informs(o));
            let same = kept
                .informers
                .iter()
                .all(|a| now.next().is_some_and(|b| same_informer(a, b)))
                && now.next().is_none();
            if same {
                return false;
            }
        }
        let mut errors = Vec::new();
        let (context, warnings) = tolerant::context(objects, &mut errors);
        let informers = (objects.iter())
            .map(|(_, o)| o)
            .filter(|o| informs(o))
            .cloned()
            .collect();
        self.context = Some(KeptContext {
            context,
            informers,
            errors,
            warnings,
        });
        self.memo.clear();
        true
    }
}

/// One update's telling of the builder.
struct Feed<'u> {
    wanted: &'u Wanted<'u>,
    fates: &'u [Fate],
    context: &'u Context,
    /// The context was read again (its devices may have changed).
    context_changed: bool,
    now_ms: i64,
    generation: u64,
}

impl Feed<'_> {
    /// Tells the builder in `slot` (a new one when the nodes are not its nodes) what changed,
    /// and builds; `None` when the whole build must do.
    fn into(self, slot: &mut Option<Fed>) -> Option<()> {
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
                    .map(|(n, _)| cordon((*n).clone(), &wanted.cordoned))
                    .collect();
                new = true;
                let mut builder = SnapshotBuilder::new(nodes).ok()?;
                builder.set_dra(context.dra.spec());
                let nodes = (wanted.nodes.iter())
                    .map(|(n, id)| {
                        let cordoned = wanted.cordoned.contains(&n.name);
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
            let cordoned = wanted.cordoned.contains(&n.name);
            let id = id.unwrap_or_default();
            let told = fed.nodes.get_mut(n.name.as_str()).expect("the same nodes");
            // A new context may convert the same object differently.
            if context_changed || (told.0, told.1) != (id, cordoned) {
                let spec = cordon((*n).clone(), &wanted.cordoned);
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
            let mut spec = (*p).clone();
            if form == Form::Unowned {
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
        fed.builder.build(now_ms, &fed.queues).ok()?;
        Some(())
    }
}

impl Fed {
    /// Whether the builder holds exactly the wanted nodes (by name); marks them seen.
    fn holds_nodes(&mut self, wanted: &Wanted, generation: u64) -> bool {
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
    fn add(&mut self, c: &'a Converted, id: Option<Identity>, form: Form) {
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
            Converted::Queue(q) => self.queues.push(q),
            Converted::Namespace(n) => self.namespaces.push(n),
        }
    }

    /// The reference checks of the whole build: PodGroups left out go, each pod's fate.
    fn judge(&mut self, errors: &mut Vec<ConvertError>) -> Vec<Fate> {
        let groups: Vec<&GroupSpec> = self.groups.iter().map(|(g, _)| *g).collect();
        let pods: Vec<&PodSpec> = self.pods.iter().map(|(p, _, _)| *p).collect();
        let nodes: HashSet<&str> = self.nodes.iter().map(|(n, _)| n.name.as_str()).collect();
        let (keep, fates) = judge_references(
            &self.queues,
            &groups,
            &nodes,
            &pods,
            &mut self.bad_groups,
            errors,
        );
        let mut keep = keep.into_iter();
        self.groups.retain(|_| keep.next() == Some(true));
        fates
    }
}

/// The node as the snapshot has it: closed to new pods when a pod's usage there is unknown.
fn cordon(mut n: NodeSpec, cordoned: &HashSet<String>) -> NodeSpec {
    if cordoned.contains(&n.name) {
        n.unschedulable = true;
    }
    n
}

/// Whether a context object is still the one the context was read from: a shared object the
/// same `Arc`, a node the same name and labels, anything else equal.
fn same_informer(a: &Object, b: &Object) -> bool {
    match (a, b) {
        (Object::Node(x), Object::Node(y)) => {
            Arc::ptr_eq(x, y)
                || (x.metadata.name == y.metadata.name && x.metadata.labels == y.metadata.labels)
        }
        (Object::Pod(x), Object::Pod(y)) => Arc::ptr_eq(x, y),
        (Object::DeviceClass(x), Object::DeviceClass(y)) => Arc::ptr_eq(x, y) || x == y,
        (Object::ResourceSlice(x), Object::ResourceSlice(y)) => Arc::ptr_eq(x, y) || x == y,
        (Object::ResourceClaim(x), Object::ResourceClaim(y)) => Arc::ptr_eq(x, y) || x == y,
        (x, y) => x == y,
    }
}

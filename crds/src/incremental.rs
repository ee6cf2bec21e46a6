//! The snapshot of a changing cluster, kept up to date from one cycle to the next instead of
//! built anew: what a live scheduler needs when its watches change a few objects of 100,000.
//!
//! It keeps the objects it was given, each with its conversion. A caller that knows what
//! changed says so ([`IncrementalSnapshot::update_changes`]: objects set or removed, per kind,
//! or a kind relisted); one that does not gives every object ([`IncrementalSnapshot::update`],
//! which finds what changed by identity and equality). Either way it gives what
//! [`build_snapshot_tolerant`] gives for the objects it holds, in their order: the same
//! snapshot, errors and warnings (a property test holds it to that after any sequence of watch
//! events, told both ways). What it saves:
//! - Each object is converted once while it stays the same object (a watch cache's `Arc` is
//!   replaced on every event; an object held by value, while it stays equal).
//! - The context of a conversion (priority classes, volumes, DRA devices, HyperNodes' labels,
//!   ...) is read again only when an object it is read from changed: for a node only its name
//!   and labels count, for a pod only one that uses volume claims (or any pod while workload
//!   objects are given).
//! - The engine's [`SnapshotBuilder`] is told only of the nodes, pods and PodGroups that
//!   changed, so it patches its last snapshot and the session's node state carries over.
//!
//! - An update that changed only pods and PodGroups, cleanly (each converts without an error
//!   or a warning, its references hold, no unchanged pod names a PodGroup that comes or goes),
//!   is told to the builder from the changed objects alone (`delta.rs`): the errors and
//!   warnings are the last update's. Any other update walks every kept object once: collecting
//!   what the snapshot wants, the reference checks and the comparison with what the builder
//!   was told.
//!
//! Whatever it does not do incrementally falls back to the whole build, which is exact by
//! definition: a node added or removed (a new builder), and anything the engine refuses (the
//! tolerant build's rounds leave such objects out).

mod delta;
mod feed;
mod shared;
mod store;

use std::sync::{Arc, OnceLock};

use basalt_engine::{QueueUsage, Snapshot};

use crate::convert::{volumes, Context, ConvertError, ConvertOptions};
use crate::read::Object;
use crate::tolerant;
use delta::References;
use feed::{Fed, Feed, Form, Wanted};
pub use shared::{usable_spec, ConvertedObjects, UsableSpec};
use store::{identity, Identity, Replaced, Store};
pub use store::{Change, Origin};

/// foldhash: several times faster than SipHash on the short keys looked up per object and
/// update, and still seeded per process. Nothing iterates these maps where order could leak.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The objects of an update, each with its source, shared.
pub type Objects = Arc<Vec<(String, Object)>>;

/// A snapshot kept up to date from the objects of each cycle (see the module documentation).
#[derive(Default)]
pub struct IncrementalSnapshot {
    /// The options everything kept was converted under, at instant 0.
    options: Option<ConvertOptions>,
    context: Option<KeptContext>,
    /// The objects and their conversions.
    store: Store,
    /// Counts updates: what an update saw carries its number.
    generation: u64,
    fed: Option<Fed>,
    /// The snapshot of an update that fell back to the whole build.
    fallback: Option<Snapshot>,
    /// The last update's outcome, for one that changes nothing.
    last: Option<Update>,
    /// The objects of the last update with their conversions, made when first asked for and
    /// shared: a reader off the scheduling path (the forecast) takes them without a copy.
    listed: OnceLock<Arc<ConvertedObjects>>,
    /// What the changes since the last update replaced (`None`: not known, every object was
    /// given), and what the last whole walk's reference checks decided: an update that changed
    /// only pods and PodGroups is told from these (`delta.rs`).
    replaced: Option<Vec<Replaced>>,
    references: Option<References>,
    /// Updates told from the changes alone (for tests).
    deltas: u64,
}

/// What an update found besides its snapshot, as [`crate::TolerantSnapshot`] has them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Update {
    pub warnings: Vec<String>,
    pub errors: Vec<ConvertError>,
    /// Whether the snapshot is the last update's, moved to the new instant (nothing changed).
    pub unchanged: bool,
}

struct KeptContext {
    /// Shared with [`ConvertedObjects`].
    context: Arc<Context>,
    /// The objects it was read from.
    informers: Vec<Object>,
    errors: Vec<ConvertError>,
    warnings: Vec<String>,
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

    /// Brings the snapshot up to date with `objects`, all of them, under `options`; the
    /// snapshot is then [`IncrementalSnapshot::snapshot`]. Walks every object to find what
    /// changed: a caller that knows calls [`IncrementalSnapshot::update_changes`].
    pub fn update(&mut self, objects: Vec<(String, Object)>, options: &ConvertOptions) -> Update {
        if self.same_options(options) && self.same_objects(&objects) {
            return self.unchanged(options.now_ms);
        }
        self.store.replace_all(objects);
        self.replaced = None;
        let context_changed = !self.same_informers();
        self.run(context_changed, options)
    }

    /// Brings the snapshot up to date with what changed since the last update (for the first,
    /// every object: each a [`Change::Set`]), under `options`. Objects are told apart by kind
    /// and key; one set again replaces the kept one in its place, a new one goes last. Only
    /// the objects changed are converted again (all of them when one the context is read from
    /// changed, see the module documentation).
    pub fn update_changes(
        &mut self,
        changes: impl IntoIterator<Item = Change>,
        options: &ConvertOptions,
    ) -> Update {
        self.same_options(options);
        let changes: Vec<Change> = changes.into_iter().collect();
        // A relist: what was kept of the kind and not set again is gone. The slots set are
        // noted (no key made per object), and looked into only when the kind keeps more.
        let mut relisted: HashMap<&'static str, Vec<usize>> = (changes.iter())
            .filter_map(|c| match c {
                Change::Everything(kind) => Some((*kind, Vec::new())),
                _ => None,
            })
            .collect();
        let mut context_changed = self.context.is_none();
        let mut changed = false;
        let mut log = self.replaced.take();
        let mut note = |this: &Self, r: Option<Replaced>| {
            if let Some(r) = r {
                changed = true;
                context_changed |= this.informs(&r);
                if let Some(log) = &mut log {
                    log.push(r);
                }
            }
        };
        for change in changes {
            let replaced = match change {
                Change::Set(origin, object) => {
                    let kind = object.kind();
                    let (slot, replaced) = self.store.set(origin, object);
                    if let Some(slots) = relisted.get_mut(kind) {
                        slots.push(slot);
                    }
                    replaced
                }
                Change::Removed(kind, key) => self.store.remove(kind, &key),
                Change::Everything(_) => None,
            };
            note(self, replaced);
        }
        for (kind, mut listed) in relisted {
            // A slot set and then removed (or taken by another object) lists nothing.
            listed.retain(|&slot| self.store.holds(kind, slot));
            listed.sort_unstable();
            listed.dedup();
            if self.store.len_of(kind) == listed.len() {
                continue;
            }
            for key in self.store.keys_besides(kind, &listed) {
                let replaced = self.store.remove(kind, &key);
                note(self, replaced);
            }
        }
        self.replaced = log;
        if !changed && self.last.is_some() {
            return self.unchanged(options.now_ms);
        }
        self.run(context_changed, options)
    }

    /// Whether no update was made yet: the first must give every object.
    pub fn is_new(&self) -> bool {
        self.last.is_none()
    }

    /// The objects of the last update, in order, shared (the same list until an update
    /// changes something).
    pub fn objects(&self) -> Option<Objects> {
        Some(self.converted()?.objects())
    }

    /// The objects of the last update with the conversions kept for them, shared (the same
    /// until an update changes something): [`ConvertedObjects::usable_spec`] assembles the
    /// cluster's spec from them on another thread. Costs this one a list of shared pointers.
    pub fn converted(&self) -> Option<Arc<ConvertedObjects>> {
        self.last.as_ref()?;
        let kept = self.context.as_ref()?;
        let listed = self.listed.get_or_init(|| {
            let whole_context = kept.errors.is_empty();
            let options = self.options.clone().unwrap_or_default();
            let context = kept.context.clone();
            Arc::new(ConvertedObjects::of(
                &self.store,
                context,
                options,
                whole_context,
            ))
        });
        Some(listed.clone())
    }

    /// Gives the last update's snapshot `usage` in place of what the Queues' statuses said:
    /// for a scheduler that carries its plans' usage from cycle to cycle, fresher than its
    /// own status writes seen back through a watch. Until the next update.
    pub fn set_usage(&mut self, usage: Vec<QueueUsage>) {
        match (&mut self.fallback, &mut self.fed) {
            (Some(s), _) => s.usage = Arc::new(usage),
            (None, Some(fed)) => {
                fed.builder.set_usage(usage);
                let now_ms = fed.builder.last().map(|s| s.now_ms);
                // The snapshot is built already: this only hands it the usage.
                if let Some(now_ms) = now_ms {
                    let _ = fed.builder.build(now_ms, &fed.queues);
                }
            }
            (None, None) => {}
        }
    }

    /// Whether everything kept was converted under `options` (at any instant); if not, starts
    /// afresh under them, keeping only the objects.
    fn same_options(&mut self, options: &ConvertOptions) -> bool {
        if self.options_kept(options) {
            return true;
        }
        let mut store = std::mem::take(&mut self.store);
        store.forget_conversions();
        *self = IncrementalSnapshot {
            options: Some(ConvertOptions {
                now_ms: 0,
                ..options.clone()
            }),
            store,
            ..Self::default()
        };
        false
    }

    fn options_kept(&self, options: &ConvertOptions) -> bool {
        let timeless = ConvertOptions {
            now_ms: 0,
            ..options.clone()
        };
        self.options.as_ref() == Some(&timeless)
    }

    /// Whether `objects` are the very objects kept, in the same order, from the same origins.
    fn same_objects(&self, objects: &[(String, Object)]) -> bool {
        self.last.is_some()
            && self.store.len() == objects.len()
            && (self.store.entries().zip(objects))
                .all(|(e, (origin, o))| *e.origin == **origin && store::same_object(&e.object, o))
            && self.store.entries().count() == objects.len()
    }

    /// The last update's outcome at `now_ms`, nothing having changed.
    fn unchanged(&mut self, now_ms: i64) -> Update {
        let update = Update {
            unchanged: true,
            ..self.last.clone().unwrap_or_default()
        };
        match (&mut self.fallback, &mut self.fed) {
            (Some(s), _) => s.now_ms = now_ms,
            (None, Some(fed)) => {
                if fed.builder.build(now_ms, &fed.queues).is_err() {
                    // Refused at another instant: the whole build says why.
                    return self.run(false, &options_at(self.options.as_ref(), now_ms));
                }
            }
            (None, None) => {}
        }
        update
    }

    /// Converts what changed and updates the snapshot, incrementally where it can.
    fn run(&mut self, context_changed: bool, options: &ConvertOptions) -> Update {
        self.generation += 1;
        self.listed = OnceLock::new();
        let replaced = self.replaced.replace(Vec::new());
        self.store.compact();
        if context_changed {
            self.read_context();
        }
        let delta = replaced.filter(|_| !context_changed);
        let update = match delta.and_then(|r| self.delta(&r, options)) {
            Some(update) => update,
            None => match self.incremental(context_changed, options) {
                Some(update) => update,
                None => self.whole(options),
            },
        };
        self.last = Some(update.clone());
        update
    }

    /// The update told from what `replaced` names alone (`delta.rs`); `None` when it does not
    /// apply and the whole walk must run.
    fn delta(&mut self, replaced: &[Replaced], options: &ConvertOptions) -> Option<Update> {
        if self.fallback.is_some() || self.store.has_workloads() || self.store.has_duplicates() {
            return None;
        }
        let last = self.last.clone()?;
        let kept = self.context.as_ref()?;
        let (fed, references) = (self.fed.as_mut()?, self.references.as_mut()?);
        self.store.convert(&kept.context, options);
        delta::apply(replaced, &self.store, fed, references, self.generation)?;
        fed.builder.build(options.now_ms, &fed.queues).ok()?;
        self.deltas += 1;
        Some(Update {
            unchanged: false,
            ..last
        })
    }

    /// How many updates were told from the changes alone.
    #[cfg(test)]
    pub(crate) fn deltas(&self) -> u64 {
        self.deltas
    }

    /// The whole tolerant build; the builder starts afresh next time.
    fn whole(&mut self, options: &ConvertOptions) -> Update {
        self.fed = None;
        self.references = None;
        let objects: Vec<(String, Object)> = (self.store.entries())
            .map(|e| (e.origin.to_string(), e.object.clone()))
            .collect();
        let built = tolerant::build_snapshot_tolerant(&objects, options);
        self.fallback = built.snapshot;
        Update {
            warnings: built.warnings,
            errors: built.errors,
            unchanged: false,
        }
    }

    /// `None` when the update needs the whole build.
    fn incremental(&mut self, context_changed: bool, options: &ConvertOptions) -> Option<Update> {
        let generation = self.generation;
        let kept = self.context.as_ref().expect("refreshed");
        self.store.convert(&kept.context, options);
        let mut warnings = kept.warnings.clone();
        let mut errors = kept.errors.clone();
        let mut wanted = Wanted::default();
        for entry in self.store.entries() {
            let object = &entry.object;
            let converted = entry.converted.as_ref().expect("converted");
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
            let as_foreign = || {
                let foreign = entry.foreign.as_ref()?;
                warnings.extend(foreign.warnings.iter().cloned());
                foreign.result.as_ref().ok()?.as_ref()
            };
            if let Some(c) = (wanted.left_out).failed(object, &entry.key, Some(e), as_foreign) {
                wanted.add(c, id, Form::Foreign);
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
        self.references = Some(References::of(&wanted));
        // Errors made here name their object's origin, as conversion errors do.
        for e in errors.iter_mut().filter(|e| e.origin.is_none()) {
            e.origin = self.store.origin(&e.kind, &e.object).map(str::to_string);
        }
        Some(Update {
            warnings,
            errors,
            unchanged: false,
        })
    }

    /// Whether the object `r` replaced or removed, or the one it put, is read by the context
    /// in a way that changed.
    fn informs(&self, r: &Replaced) -> bool {
        let workloads = self.store.has_workloads();
        let informs = |o: &Object| informs(o, workloads);
        match (&r.old, &r.new) {
            (Some(a), Some(b)) => (informs(a) || informs(b)) && !same_informer(a, b),
            (Some(o), None) | (None, Some(o)) => informs(o),
            (None, None) => false,
        }
    }

    /// Whether the context objects are the ones it was read from, in the same order.
    fn same_informers(&self) -> bool {
        let Some(kept) = &self.context else {
            return false;
        };
        let workloads = self.store.has_workloads();
        let mut now = (self.store.entries())
            .map(|e| &e.object)
            .filter(|o| informs(o, workloads));
        kept.informers
            .iter()
            .all(|a| now.next().is_some_and(|b| same_informer(a, b)))
            && now.next().is_none()
    }

    /// Reads the context again from the objects that inform it; every object is converted
    /// again in it.
    fn read_context(&mut self) {
        let workloads = self.store.has_workloads();
        let informers: Vec<(String, Object)> = (self.store.entries())
            .filter(|e| informs(&e.object, workloads))
            .map(|e| (e.origin.to_string(), e.object.clone()))
            .collect();
        let mut errors = Vec::new();
        let (context, warnings) = tolerant::context(&informers, &mut errors);
        self.context = Some(KeptContext {
            context: Arc::new(context),
            informers: informers.into_iter().map(|(_, o)| o).collect(),
            errors,
            warnings,
        });
        self.store.forget_conversions();
    }
}

fn options_at(options: Option<&ConvertOptions>, now_ms: i64) -> ConvertOptions {
    ConvertOptions {
        now_ms,
        ..options.cloned().unwrap_or_default()
    }
}

/// Whether the context is read from `o` (pods: those using volume claims, or any while
/// workload objects are kept).
fn informs(o: &Object, workloads: bool) -> bool {
    match o {
        Object::Pod(p) => workloads || p.spec.as_ref().is_some_and(volumes::uses_claims),
        o => tolerant::informs_context(o),
    }
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

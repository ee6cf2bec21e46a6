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

mod feed;
mod memo;

use std::sync::Arc;

use basalt_engine::{QueueUsage, Snapshot};

use crate::convert::{volumes, Context, ConvertError, ConvertOptions};
use crate::read::Object;
use crate::tolerant::{self, live_node};
use feed::{Fed, Feed, Form, Wanted};
use memo::{Conversion, Memo, Memos};

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
    /// Conversions of shared objects, by identity.
    memo: Memos,
    /// Counts updates: what an update saw carries its number.
    generation: u64,
    fed: Option<Fed>,
    /// The snapshot of an update that fell back to the whole build.
    fallback: Option<Snapshot>,
    /// The last update's objects and outcome, for one that is given the very same objects.
    /// Shared: a reader off the scheduling path (the forecast) takes them without a copy.
    last: Option<(Objects, Update)>,
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

/// Where an object's conversion is in an update.
#[derive(Clone, Copy)]
enum Source {
    /// Kept from update to update, in this slot of the memo.
    Kept(usize),
    /// Made in this update, at this index.
    Made(usize),
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
        self.last = Some((Arc::new(objects), update.clone()));
        update
    }

    /// The objects of the last update (the very same as the objects given since, when they
    /// were), shared.
    pub fn objects(&self) -> Option<Objects> {
        self.last.as_ref().map(|(objects, _)| objects.clone())
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
        let mut made: Vec<Conversion> = Vec::new();
        let mut sources: Vec<Source> = Vec::with_capacity(objects.len());
        for (origin, object) in objects {
            let Some(id) = identity(object) else {
                sources.push(Source::Made(made.len()));
                made.push(Conversion::of(&kept.context, origin, object, options));
                continue;
            };
            let slot = self.memo.slot(id, generation, || Memo {
                _object: object.clone(),
                seen: generation,
                converted: Conversion::of(&kept.context, origin, object, options),
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
                    memo.foreign = Some(Conversion::of(&kept.context, origin, object, &foreign));
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
                Object::Queue(_) => {
                    let reason = tolerant::queue_reason(Some(e));
                    wanted.bad_queues.insert(object.key(), reason);
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

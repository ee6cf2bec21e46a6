//! The objects an incremental snapshot was last given, each with its conversion, kept from
//! update to update: a change replaces or removes the objects it names and leaves every other
//! object's conversion as it was.

use std::borrow::Cow;
use std::sync::Arc;

use super::HashMap;
use crate::convert::{Context, ConvertError, ConvertOptions, Converted};
use crate::read::Object;
use crate::tolerant::{foreign_options, live_node};

/// Where an object came from, for the messages naming it: usually a constant, so a caller
/// handing 100,000 objects over allocates nothing for it.
pub type Origin = Cow<'static, str>;

/// What changed since the last update (see [`super::IncrementalSnapshot::update_changes`]).
#[derive(Clone, Debug)]
pub enum Change {
    /// An object added or modified: it as it is now.
    Set(Origin, Object),
    /// An object deleted: its kind ([`Object::kind`]) and key ([`Object::key`]).
    Removed(&'static str, String),
    /// Every object of the kind is among this update's [`Change::Set`]s (a relist): any other
    /// kept object of the kind is gone.
    Everything(&'static str),
}

/// One object and its conversion.
pub(super) struct Entry {
    pub(super) origin: Origin,
    pub(super) object: Object,
    pub(super) key: String,
    /// `None` until converted in this context; shared with [`super::ConvertedObjects`].
    pub(super) converted: Option<Arc<Conversion>>,
    /// A bad bound pod of ours converted as another scheduler's.
    pub(super) foreign: Option<Conversion>,
    /// Its place in the order, unique: a removed entry's place is skipped.
    place: u64,
}

/// The kept objects, in the order given (new ones last).
#[derive(Default)]
pub(super) struct Store {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Slots in order, with the place each had when put there (stale once it differs).
    order: Vec<(u64, usize)>,
    next_place: u64,
    /// The last slot of each kind and key.
    index: HashMap<&'static str, HashMap<String, usize>>,
    len: usize,
    /// Slots whose object is new since they were last converted.
    unconverted: Vec<usize>,
    workloads: usize,
}

/// What a change did, for deciding whether the context must be read again.
pub(super) struct Replaced {
    /// The object's key (its kind is either object's).
    pub(super) key: String,
    pub(super) old: Option<Object>,
    /// The old object's conversion, if it was converted.
    pub(super) old_converted: Option<Arc<Conversion>>,
    pub(super) new: Option<Object>,
}

impl Store {
    /// The objects in order, each with its entry.
    pub(super) fn entries(&self) -> impl Iterator<Item = &Entry> {
        (self.order.iter())
            .filter_map(|&(place, slot)| (self.slots[slot].as_ref()).filter(|e| e.place == place))
    }

    /// How many keys are kept.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn slot(&self, kind: &str, key: &str) -> Option<usize> {
        self.index.get(kind)?.get(key).copied()
    }

    /// The entry of the object of `kind` and `key`.
    pub(super) fn get(&self, kind: &str, key: &str) -> Option<&Entry> {
        self.slots[self.slot(kind, key)?].as_ref()
    }

    /// Whether two kept objects share a kind and key (only [`Store::replace_all`] keeps both).
    pub(super) fn has_duplicates(&self) -> bool {
        self.slots.len() - self.free.len() != self.len
    }

    /// Whether a workload object is kept (then every pod informs the context).
    pub(super) fn has_workloads(&self) -> bool {
        self.workloads > 0
    }

    /// The origin of the object of `kind` and `key`.
    pub(super) fn origin(&self, kind: &str, key: &str) -> Option<&str> {
        let slot = self.slot(kind, key)?;
        self.slots[slot].as_ref().map(|e| &*e.origin)
    }

    /// Puts `object` in place of the kept one of its kind and key (at the same place) or
    /// last; returns its slot, and `None` when it is the very object kept, from the same
    /// origin.
    pub(super) fn set(&mut self, origin: Origin, object: Object) -> (usize, Option<Replaced>) {
        let key = object.key();
        if let Some(slot) = self.slot(object.kind(), &key) {
            let entry = self.slots[slot].as_mut().expect("indexed");
            if entry.origin == origin && same_object(&entry.object, &object) {
                return (slot, None);
            }
            let old = std::mem::replace(&mut entry.object, object.clone());
            entry.origin = origin;
            let old_converted = entry.converted.take();
            entry.foreign = None;
            self.unconverted.push(slot);
            self.count(&old, -1);
            self.count(&object, 1);
            let replaced = Replaced {
                key,
                old: Some(old),
                old_converted,
                new: Some(object),
            };
            return (slot, Some(replaced));
        }
        let slot = self.push(origin, object.clone(), key.clone());
        let replaced = Replaced {
            key,
            old: None,
            old_converted: None,
            new: Some(object),
        };
        (slot, Some(replaced))
    }

    /// Removes the object of `kind` and `key`, if kept.
    pub(super) fn remove(&mut self, kind: &str, key: &str) -> Option<Replaced> {
        let slot = self.index.get_mut(kind)?.remove(key)?;
        self.len -= 1;
        let entry = self.slots[slot].take().expect("indexed");
        self.free.push(slot);
        self.count(&entry.object, -1);
        Some(Replaced {
            key: entry.key,
            old: Some(entry.object),
            old_converted: entry.converted,
            new: None,
        })
    }

    /// The keys of the objects of `kind` kept in slots other than `slots` (sorted).
    pub(super) fn keys_besides(&self, kind: &str, slots: &[usize]) -> Vec<String> {
        (self.index.get(kind).into_iter())
            .flat_map(|keys| keys.iter())
            .filter(|(_, slot)| slots.binary_search(slot).is_err())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Whether `slot` holds the object kept for its kind and key, of `kind`.
    pub(super) fn holds(&self, kind: &str, slot: usize) -> bool {
        let Some(e) = self.slots.get(slot).and_then(Option::as_ref) else {
            return false;
        };
        e.object.kind() == kind && self.slot(kind, &e.key) == Some(slot)
    }

    /// How many keys of `kind` are kept.
    pub(super) fn len_of(&self, kind: &str) -> usize {
        self.index.get(kind).map_or(0, |keys| keys.len())
    }

    /// Exactly `objects`, in their order, each keeping its conversion when it is the very
    /// object kept before (a shared one) or an equal one (one held by value).
    pub(super) fn replace_all(&mut self, objects: Vec<(String, Object)>) {
        let mut old = std::mem::take(self);
        let mut by_identity: HashMap<(&'static str, usize), usize> = HashMap::default();
        for (slot, e) in old.slots.iter().enumerate() {
            if let Some(id) = e.as_ref().and_then(|e| identity(&e.object)) {
                by_identity.insert(id, slot);
            }
        }
        for (origin, object) in objects {
            let slot = match identity(&object) {
                Some(id) => by_identity.get(&id).copied(),
                None => old.slot(object.kind(), &object.key()),
            };
            let kept = slot.and_then(|slot| {
                let e = old.slots[slot].as_ref()?;
                (*e.origin == *origin && same_object(&e.object, &object)).then_some(slot)
            });
            let key = object.key();
            let slot = self.push(Cow::Owned(origin), object, key);
            if let Some(e) = kept.and_then(|k| old.slots[k].take()) {
                let entry = self.slots[slot].as_mut().expect("just put");
                entry.converted = e.converted;
                entry.foreign = e.foreign;
                self.unconverted.pop();
            }
        }
    }

    /// Converts what is not converted yet (everything after [`Store::forget_conversions`]).
    pub(super) fn convert(&mut self, context: &Context, options: &ConvertOptions) {
        for slot in std::mem::take(&mut self.unconverted) {
            let Some(e) = self.slots[slot].as_mut() else {
                continue;
            };
            if e.converted.is_some() {
                continue;
            }
            let converted = Conversion::of(context, &e.origin, &e.object, options);
            e.foreign = match (&e.object, &converted.result) {
                (Object::Pod(p), Err(_)) if live_node(p).is_some() => {
                    let foreign = foreign_options(options);
                    Some(Conversion::of(context, &e.origin, &e.object, &foreign))
                }
                _ => None,
            };
            e.converted = Some(Arc::new(converted));
        }
    }

    /// Every object is converted again (the context changed).
    pub(super) fn forget_conversions(&mut self) {
        self.unconverted.clear();
        for (slot, e) in self.slots.iter_mut().enumerate() {
            if let Some(e) = e {
                e.converted = None;
                e.foreign = None;
                self.unconverted.push(slot);
            }
        }
    }

    /// Drops the places of removed objects from the order once they are many.
    pub(super) fn compact(&mut self) {
        if self.order.len() > 2 * self.len + 64 {
            let slots = &self.slots;
            self.order
                .retain(|&(place, slot)| (slots[slot].as_ref()).is_some_and(|e| e.place == place));
        }
    }

    fn push(&mut self, origin: Origin, object: Object, key: String) -> usize {
        self.count(&object, 1);
        let place = self.next_place;
        self.next_place += 1;
        let kind = object.kind();
        let entry = Some(Entry {
            origin,
            object,
            key: key.clone(),
            converted: None,
            foreign: None,
            place,
        });
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = entry;
                slot
            }
            None => {
                self.slots.push(entry);
                self.slots.len() - 1
            }
        };
        self.order.push((place, slot));
        if self
            .index
            .entry(kind)
            .or_default()
            .insert(key, slot)
            .is_none()
        {
            self.len += 1;
        }
        self.unconverted.push(slot);
        slot
    }

    fn count(&mut self, object: &Object, by: isize) {
        if matches!(object, Object::Workload(_)) {
            self.workloads = self.workloads.saturating_add_signed(by);
        }
    }
}

/// A shared object's kind and address. Its entry keeps the object, so no other object takes
/// the address while the entry lives.
pub(super) type Identity = (&'static str, usize);

pub(super) fn identity(object: &Object) -> Option<Identity> {
    let address = match object {
        Object::Node(n) => Arc::as_ptr(n) as usize,
        Object::Pod(p) => Arc::as_ptr(p) as usize,
        Object::PodGroup(g) => Arc::as_ptr(g) as usize,
        _ => return None,
    };
    Some((object.kind(), address))
}

/// The very object (shared) or an equal one (held by value).
pub(super) fn same_object(a: &Object, b: &Object) -> bool {
    match (identity(a), identity(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a == b,
        _ => false,
    }
}

/// A conversion's result and the warnings it gave.
#[derive(Clone)]
pub(super) struct Conversion {
    pub(super) result: Result<Option<Converted>, ConvertError>,
    pub(super) warnings: Vec<String>,
}

impl Conversion {
    fn of(context: &Context, origin: &str, object: &Object, options: &ConvertOptions) -> Self {
        let mut warnings = Vec::new();
        let result = context.convert(origin, object, options, &mut warnings);
        Conversion { result, warnings }
    }
}

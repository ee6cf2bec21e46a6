//! Each shared object's conversion, kept while the cache holds the same object.

use super::{HashMap, Identity};
use crate::convert::{Context, ConvertError, ConvertOptions, Converted};
use crate::read::Object;

/// One object's conversion.
pub(super) struct Memo {
    pub(super) _object: Object,
    pub(super) seen: u64,
    pub(super) converted: Conversion,
    /// A bad bound pod of ours converted as another scheduler's, when it came to that.
    pub(super) foreign: Option<Conversion>,
}

/// The conversions kept, each under its object's identity.
#[derive(Default)]
pub(super) struct Memos {
    pub(super) slots: Vec<Option<Memo>>,
    pub(super) free: Vec<usize>,
    pub(super) index: HashMap<Identity, usize>,
}

impl Memos {
    /// The slot of `id`'s conversion, made by `convert` when there is none; marked seen.
    pub(super) fn slot(
        &mut self,
        id: Identity,
        generation: u64,
        convert: impl FnOnce() -> Memo,
    ) -> usize {
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

    pub(super) fn get(&self, slot: usize) -> &Memo {
        self.slots[slot].as_ref().expect("a live slot")
    }

    pub(super) fn get_mut(&mut self, slot: usize) -> &mut Memo {
        self.slots[slot].as_mut().expect("a live slot")
    }

    /// Drops the conversions not seen in update `generation`.
    pub(super) fn sweep(&mut self, generation: u64) {
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

    pub(super) fn clear(&mut self) {
        *self = Memos::default();
    }
}

/// A conversion's result and the warnings it gave.
#[derive(Clone)]
pub(super) struct Conversion {
    pub(super) result: Result<Option<Converted>, ConvertError>,
    pub(super) warnings: Vec<String>,
}

impl Conversion {
    pub(super) fn of(
        context: &Context,
        origin: &str,
        object: &Object,
        options: &ConvertOptions,
    ) -> Self {
        let mut warnings = Vec::new();
        let result = context.convert(origin, object, options, &mut warnings);
        Conversion { result, warnings }
    }
}

//! What the watches changed since a cycle last looked: per watched kind, the objects added,
//! modified or deleted (namespace and name), or everything after a list. The watches mark it
//! as they put each event in their store (`reflect.rs`); a cycle takes it whole, so work that depends on one kind alone runs only
//! when that kind changed, and can be told which objects did.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// An object's address: namespace (none for a cluster-scoped kind) and name.
pub type Key = (Option<String>, String);

/// What changed of one kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Changed {
    /// A list (the first, or after a watch was lost): any object may have changed.
    Everything,
    Objects(BTreeSet<Key>),
}

/// The changes since the last [`ChangeLog::take`], by kind (the watch's resource name).
#[derive(Default)]
pub struct ChangeLog(Mutex<BTreeMap<&'static str, Changed>>);

/// One cycle's changes, taken from the log.
#[derive(Debug, Default, PartialEq)]
pub struct Changes(BTreeMap<&'static str, Changed>);

/// What one watch event changed of its kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    /// An object added, modified or deleted.
    Object(Key),
    /// The store now holds a new list: any object may have changed.
    Everything,
}

impl ChangeLog {
    fn log(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Changed>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a watch event in its store (`apply`) and logs what it changed (`mark`) in one
    /// step, under the log's lock: a cycle takes the log before both or after both. Logged
    /// after the store alone, a change the cycle already read was told again to the next one:
    /// after a list (the cycle that waited for the store's readiness runs as soon as the list
    /// is in), a second cycle over every object.
    pub fn apply(&self, kind: &'static str, mark: Option<Mark>, apply: impl FnOnce()) {
        let mut log = self.log();
        apply();
        match mark {
            Some(Mark::Everything) => {
                log.insert(kind, Changed::Everything);
            }
            Some(Mark::Object(key)) => {
                match log.entry(kind).or_insert(Changed::Objects(BTreeSet::new())) {
                    Changed::Everything => {}
                    Changed::Objects(keys) => {
                        keys.insert(key);
                    }
                }
            }
            None => {}
        }
    }

    /// The changes since the last call; the log starts empty again.
    pub fn take(&self) -> Changes {
        Changes(std::mem::take(&mut *self.log()))
    }
}

impl Changes {
    /// What changed of `kind` (`None`: nothing).
    pub fn of(&self, kind: &str) -> Option<&Changed> {
        self.0.get(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> Key {
        (Some(ns.into()), name.into())
    }

    impl ChangeLog {
        fn object(&self, kind: &'static str, key: Key) {
            self.apply(kind, Some(Mark::Object(key)), || {});
        }

        fn everything(&self, kind: &'static str) {
            self.apply(kind, Some(Mark::Everything), || {});
        }
    }

    #[test]
    fn a_cycle_takes_the_objects_changed_per_kind_and_a_list_means_everything() {
        let log = ChangeLog::default();
        assert_eq!(log.take().of("pods"), None);
        log.object("pods", key("a", "p1"));
        log.object("pods", key("a", "p1"));
        log.object("pods", key("b", "p2"));
        log.object("nodes", (None, "n1".into()));
        let changes = log.take();
        assert!(changes.of("nodes").is_some());
        assert_eq!(changes.of("podgroups"), None);
        let pods = BTreeSet::from([key("a", "p1"), key("b", "p2")]);
        assert_eq!(changes.of("pods"), Some(&Changed::Objects(pods)));
        assert_eq!(log.take(), Changes::default(), "taken whole");
        // A list: every object of the kind, whatever came before or after it.
        log.object("pods", key("a", "p1"));
        log.everything("pods");
        log.object("pods", key("a", "p3"));
        assert_eq!(log.take().of("pods"), Some(&Changed::Everything));
    }
}

//! Watches: replayed history or the current objects, then live events, bookmarks, and the
//! fault injection that closes streams.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::*;

impl Store {
    /// Opens a watch. Replayed and initial events go into the channel now, under the lock, so
    /// nothing committed later can overtake them.
    pub fn watch(
        &mut self,
        res: ResId,
        filter: Filter,
        from: WatchFrom,
        bookmarks: bool,
        initial_events_end: bool,
    ) -> mpsc::UnboundedReceiver<WatchMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut w = Watcher {
            res,
            filter,
            bookmarks,
            tx,
            remaining: self.drop_watches_after,
        };
        match from {
            WatchFrom::Now => {
                let objs: Vec<(String, Arc<Value>)> = self.resources[res]
                    .objects
                    .iter()
                    .map(|((ns, _), o)| (ns.clone(), o.clone()))
                    .collect();
                let mut open = true;
                for (ns, o) in objs {
                    open = open && deliver(&mut w, EventType::Added, &ns, None, &o, self.rv);
                }
                if !open {
                    return rx;
                }
                if initial_events_end {
                    let _ = w.tx.send(WatchMsg::Bookmark(self.rv, true));
                }
            }
            WatchFrom::After(rv) if rv < self.compacted => {
                let _ = w.tx.send(WatchMsg::Error(
                    ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted
                    ))
                    .status(),
                ));
                return rx;
            }
            WatchFrom::After(rv) => {
                for e in self.history.iter().filter(|e| e.rv > rv && e.res == res) {
                    if !deliver(&mut w, e.kind, &e.namespace, e.old.as_ref(), &e.obj, e.rv) {
                        return rx;
                    }
                }
            }
        }
        self.watchers.push(w);
        rx
    }

    /// Sends a bookmark at the current resourceVersion to every watch that asked for them.
    pub fn bookmark(&mut self) {
        let rv = self.rv;
        self.watchers
            .retain(|w| !w.bookmarks || w.tx.send(WatchMsg::Bookmark(rv, false)).is_ok());
    }

    /// Closes every open watch stream now.
    pub fn drop_watches(&mut self) -> usize {
        let n = self.watchers.len();
        self.watchers.clear();
        n
    }

    /// Sets (or clears) the event budget of open and future watches.
    pub fn set_drop_watches_after(&mut self, n: Option<u64>) {
        self.drop_watches_after = n;
        for w in &mut self.watchers {
            w.remaining = n;
        }
    }

    pub fn open_watches(&self) -> usize {
        self.watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }
}

/// Sends one change to a watcher if its filter cares; false when the watcher is done.
pub(super) fn deliver(
    w: &mut Watcher,
    kind: EventType,
    namespace: &str,
    old: Option<&Arc<Value>>,
    obj: &Arc<Value>,
    rv: u64,
) -> bool {
    let now = w.filter.matches(namespace, obj);
    let before = old.is_some_and(|o| w.filter.matches(namespace, o));
    let event = match kind {
        EventType::Added if now => Some(("ADDED", obj.clone())),
        EventType::Deleted if before || now => Some(("DELETED", obj.clone())),
        EventType::Modified => match (before, now) {
            (true, true) => Some(("MODIFIED", obj.clone())),
            (false, true) => Some(("ADDED", obj.clone())),
            (true, false) => {
                // Left the filter: DELETED with the last matching state at this version.
                let mut o = (**old.expect("before implies old")).clone();
                meta_mut(&mut o).insert("resourceVersion".into(), json!(rv.to_string()));
                Some(("DELETED", Arc::new(o)))
            }
            (false, false) => None,
        },
        _ => None,
    };
    let Some((t, o)) = event else {
        return !w.tx.is_closed();
    };
    if w.tx.send(WatchMsg::Event(t, o)).is_err() {
        return false;
    }
    match w.remaining.as_mut() {
        Some(n) => {
            *n = n.saturating_sub(1);
            *n > 0
        }
        None => true,
    }
}

//! One watch in its own task: the reflector that keeps its cache, the health of the core
//! watches (`/readyz`), and what each event changed (`changes.rs`). `stores.rs` starts the core
//! watches with it; the optional APIs (`optional_api.rs` and the peers' kinds) theirs.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::changes::{ChangeLog, Mark};

/// A watch fails for this long without one good answer: its cache is stale.
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// kube's watcher retries at least every 30 s (its backoff's cap): a watch that has said no
/// error for longer has recovered, even when no object changed since (a resumed watch that
/// sees no change says nothing).
const QUIET: Duration = Duration::from_secs(45);

/// Failing streaks of the watches, by resource: the first and the last error since the last
/// good answer (an event of any kind).
#[derive(Default)]
pub struct WatchHealth(Mutex<HashMap<&'static str, (Instant, Instant)>>);

impl WatchHealth {
    fn streaks(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, (Instant, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn answered(&self, what: &'static str) {
        self.streaks().remove(what);
    }

    fn failed(&self, what: &'static str, now: Instant) {
        self.streaks().entry(what).or_insert((now, now)).1 = now;
    }

    /// The watches failing for longer than `STALE_AFTER` and failing still, sorted.
    pub fn stale(&self, now: Instant) -> Vec<&'static str> {
        let mut out: Vec<_> = self
            .streaks()
            .iter()
            .filter(|(_, (first, last))| {
                now.duration_since(*first) >= STALE_AFTER && now.duration_since(*last) < QUIET
            })
            .map(|(what, _)| *what)
            .collect();
        out.sort_unstable();
        out
    }
}

/// What a core watch reports besides its objects.
pub struct Core {
    pub health: Arc<WatchHealth>,
    pub changes: Arc<ChangeLog>,
}

/// Where a watch reports that its resource is not served (404).
#[derive(Clone)]
pub struct OnNotFound {
    pub flag: Arc<AtomicBool>,
    pub notify: Arc<Notify>,
}

/// A reflector in its own task (abort the handle to stop it). With `on_404`, a 404 from the
/// watch is not logged as a warning but raised on `on_404`, whose owner decides.
pub fn reflect_task<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    on_404: Option<OnNotFound>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    spawn_reflector(api, what, changed, on_404, None)
}

/// The reflector task; with `core`, its errors and answers are counted there and its changes
/// logged.
pub(crate) fn spawn_reflector<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    on_404: Option<OnNotFound>,
    core: Option<Core>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, writer) = reflector::store();
    let changed = changed.clone();
    // Every event, list pages and their end included: each one is a good answer. The
    // objects are kept without `managedFields`, which the scheduler never reads (it sends only
    // merge patches and creates, never a whole object back) and which is often a third of an
    // object's size.
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.meta_mut().managed_fields = None);
    let task = tokio::spawn(async move {
        let mut writer = writer;
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if let Ok(event) = &item {
                put(&mut writer, core.as_ref().map(|c| &*c.changes), what, event);
            }
            if let Some(core) = &core {
                match &item {
                    Ok(_) => core.health.answered(what),
                    Err(_) => core.health.failed(what, Instant::now()),
                }
            }
            match item {
                Ok(_) => changed.notify_one(),
                Err(e) => match &on_404 {
                    Some(hook) if not_found(&e) => {
                        tracing::debug!(resource = what, error = %e, "not served");
                        hook.flag.store(true, Ordering::Relaxed);
                        hook.notify.notify_one();
                    }
                    // The watcher backs off and re-lists by itself; say why it had to.
                    _ => tracing::warn!(resource = what, error = %e, "watch error"),
                },
            }
        }
    });
    (store, task)
}

/// Puts a watch event in the store and, with `changes`, logs what it changed in the same step
/// (`ChangeLog::apply`).
fn put<K>(
    writer: &mut Writer<K>,
    changes: Option<&ChangeLog>,
    what: &'static str,
    event: &watcher::Event<K>,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    match changes {
        Some(changes) => changes.apply(what, mark(event), || writer.apply_watcher_event(event)),
        None => writer.apply_watcher_event(event),
    }
}

/// What a watch event changes in the store: an object, or everything when a list's end puts
/// the listed objects in (a list's start and pages go to the store's buffer, not the store).
fn mark<K: Resource>(event: &watcher::Event<K>) -> Option<Mark> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
            let meta = o.meta();
            let name = meta.name.clone().unwrap_or_default();
            Some(Mark::Object((meta.namespace.clone(), name)))
        }
        watcher::Event::InitDone => Some(Mark::Everything),
        watcher::Event::Init | watcher::Event::InitApply(_) => None,
    }
}

fn not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_logged_once_with_the_store_that_holds_it() {
        use k8s_openapi::api::core::v1::Pod;
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};

        use crate::changes::Changed;

        let pod = |name: &str| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("ml".into());
            p
        };
        let (store, mut writer) = reflector::store::<Pod>();
        let log = ChangeLog::default();
        let key = |name: &str| (Some("ml".to_string()), name.to_string());
        let objects = |names: &[&str]| {
            let keys = names.iter().map(|n| key(n)).collect();
            Some(Changed::Objects(keys))
        };
        // What a cycle taking the log after each event is told, and how many pods it reads.
        let steps = [
            (Init, None, 0),
            (InitApply(pod("a")), None, 0),
            (InitApply(pod("b")), None, 0),
            (InitDone, Some(Changed::Everything), 2),
            (Apply(pod("c")), objects(&["c"]), 3),
            (Delete(pod("a")), objects(&["a"]), 2),
            // A relist: nothing changes in the store until its end.
            (Init, None, 2),
            (InitApply(pod("b")), None, 2),
            (InitDone, Some(Changed::Everything), 1),
        ];
        for (i, (event, told, held)) in steps.into_iter().enumerate() {
            put(&mut writer, Some(&log), "pods", &event);
            assert_eq!(log.take().of("pods"), told.as_ref(), "step {i}");
            assert_eq!(store.state().len(), held, "step {i}");
        }
    }

    #[test]
    fn a_watch_is_stale_after_failing_a_minute_and_fresh_again_once_answered_or_quiet() {
        let h = WatchHealth::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        h.failed("pods", t0);
        h.failed("pods", at(30));
        assert!(h.stale(at(59)).is_empty(), "not yet a minute");
        h.failed("pods", at(60));
        assert_eq!(h.stale(at(61)), vec!["pods"]);
        // No error for longer than the watcher's longest backoff: it recovered quietly.
        assert!(h.stale(at(60 + 46)).is_empty());
        h.answered("pods");
        h.failed("nodes", at(0));
        h.failed("nodes", at(70));
        assert_eq!(h.stale(at(71)), vec!["nodes"]);
        h.answered("nodes");
        assert!(h.stale(at(71)).is_empty());
    }
}

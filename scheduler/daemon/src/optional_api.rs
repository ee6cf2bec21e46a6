//! API groups the cluster may or may not serve (Volcano's, scheduler-plugins'): discovery
//! decides at start and again every interval while a group is not served, so installing its
//! CRDs later is noticed without a restart and without a failing watch logging every few
//! seconds. When a watch of them answers 404 the group is looked up again at once and, if gone,
//! its watches stop and its objects leave the snapshot.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kube::Client;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::reflect::{reflect_task, OnNotFound};

/// One optional API group version, whose kinds are watched while the cluster serves
/// them.
pub trait Kinds: Send + Sync + Sized + 'static {
    /// `group/version`, asked of discovery.
    const API_VERSION: &'static str;
    /// The plurals watched when served.
    const PLURALS: &'static [&'static str];
    /// What the log calls them.
    const WHAT: &'static str;
    /// Starts the watches of the served plurals (`served[i]` for `PLURALS[i]`).
    fn start(
        client: &Client,
        served: &[bool],
        changed: &Arc<Notify>,
        on_404: OnNotFound,
    ) -> (Self, Vec<JoinHandle<()>>);
    /// Resolves once every started watch has its first list.
    fn ready(&self) -> impl Future<Output = ()> + Send + '_;
}

/// The watches of one optional group version, stopped when dropped.
pub struct Watched<K> {
    pub kinds: K,
    tasks: Vec<JoinHandle<()>>,
}

impl<K> Drop for Watched<K> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Which of an optional group's kinds the cluster serves, watched while it does.
pub struct Optional<K> {
    current: RwLock<Option<Arc<Watched<K>>>>,
    /// True once discovery has answered (served or not) for the first time.
    decided: watch::Sender<bool>,
    /// Set by a watch that got a 404: look the group up again now.
    gone: Arc<AtomicBool>,
    gone_notify: Arc<Notify>,
}

/// Which of `K`'s plurals are served, or `None` when none is (or the group is not served).
async fn discover<K: Kinds>(client: &Client) -> Result<Option<Vec<bool>>, kube::Error> {
    match client.list_api_group_resources(K::API_VERSION).await {
        Ok(list) => {
            let served: Vec<bool> = K::PLURALS
                .iter()
                .map(|plural| list.resources.iter().any(|r| r.name == *plural))
                .collect();
            Ok(served.iter().any(|s| *s).then_some(served))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

impl<K: Kinds> Optional<K> {
    pub fn new() -> Self {
        Optional {
            current: RwLock::new(None),
            decided: watch::channel(false).0,
            gone: Arc::new(AtomicBool::new(false)),
            gone_notify: Arc::new(Notify::new()),
        }
    }

    /// The watches in effect now (full lists in hand), if the kinds are served.
    pub fn current(&self) -> Option<Arc<Watched<K>>> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    /// Returns once discovery has answered and, when the kinds are served, their first lists
    /// are in.
    pub async fn wait_decided(&self) {
        let mut rx = self.decided.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Drops the watches in effect, if any, and has them started afresh, each with a new
    /// list, which [`Optional::wait_decided`] then waits for: a replica that has just become
    /// leader must see what the API says now, not a cache kept while another replica wrote.
    pub fn relist(&self) {
        if self.current().is_none() {
            return;
        }
        self.decided.send_replace(false);
        self.set(None);
        self.gone.store(true, Ordering::Relaxed);
        self.gone_notify.notify_one();
    }

    fn set(&self, stores: Option<Arc<Watched<K>>>) {
        if let Ok(mut c) = self.current.write() {
            *c = stores;
        }
    }

    /// Runs forever: discovery, then watches while the kinds are served.
    pub async fn supervise(self: Arc<Self>, client: Client, every: Duration, changed: Arc<Notify>) {
        let api = K::API_VERSION;
        let what = K::WHAT;
        let mut failing = false;
        loop {
            let watching = self.current().is_some();
            let gone = self.gone.swap(false, Ordering::Relaxed);
            if !watching || gone {
                match discover::<K>(&client).await {
                    Ok(Some(served)) => {
                        failing = false;
                        if !watching {
                            let kinds: Vec<&str> = K::PLURALS
                                .iter()
                                .zip(&served)
                                .filter(|(_, s)| **s)
                                .map(|(p, _)| *p)
                                .collect();
                            tracing::info!(kinds = ?kinds, "{api} is served; watching {what}");
                            let stores = self.start(&client, &served, &changed).await;
                            self.set(Some(Arc::new(stores)));
                            changed.notify_one();
                        }
                        self.decided.send_replace(true);
                    }
                    Ok(None) => {
                        failing = false;
                        if watching {
                            tracing::info!("{api} is no longer served; {what} left out");
                            self.set(None);
                            changed.notify_one();
                        } else if !*self.decided.borrow() {
                            tracing::debug!("{api} is not served");
                        }
                        self.decided.send_replace(true);
                    }
                    Err(e) => {
                        // Said once per outage; the check is repeated.
                        if !failing {
                            tracing::warn!(error = %e, "cannot look up {api}; retrying");
                        }
                        failing = true;
                        if gone {
                            self.gone.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            if self.gone.load(Ordering::Relaxed) && !failing {
                continue;
            }
            let pause = if failing {
                every.min(Duration::from_secs(5))
            } else {
                every
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.gone_notify.notified() => {}
            }
        }
    }

    /// Starts the watches and waits for their first lists, so a cycle never sees an object
    /// missing that is only not listed yet.
    async fn start(&self, client: &Client, served: &[bool], changed: &Arc<Notify>) -> Watched<K> {
        let on_404 = OnNotFound {
            flag: self.gone.clone(),
            notify: self.gone_notify.clone(),
        };
        let (kinds, tasks) = K::start(client, served, changed, on_404);
        // A 404 meanwhile (the CRDs removed again) ends the wait; the caller looks again.
        tokio::select! {
            _ = kinds.ready() => {}
            _ = self.gone_notify.notified() => {}
        }
        Watched { kinds, tasks }
    }
}

/// A watch of one kind of an optional group, when the cluster serves it (its task joins
/// `tasks`, so the group's watches stop together).
pub fn watch<K>(
    client: &Client,
    served: bool,
    what: &'static str,
    changed: &Arc<Notify>,
    on_404: &OnNotFound,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Option<kube::runtime::reflector::Store<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K: Send + Sync + 'static,
{
    served.then(|| {
        let (store, task) = reflect_task(
            kube::Api::all(client.clone()),
            what,
            changed,
            Some(on_404.clone()),
        );
        tasks.push(task);
        store
    })
}

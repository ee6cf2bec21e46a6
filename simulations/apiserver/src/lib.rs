//! basalt-apiserver: a small in-memory Kubernetes API server for tests and local trials.
//!
//! It speaks enough of the real protocol for kube-rs (clients, watchers, reflectors) and
//! `kubectl` (discovery, create, get, get -w, apply, delete): JSON objects stored by resource,
//! one global resourceVersion, list + watch with resumption and 410 Gone, label and field
//! selectors, status subresources, `pods/binding`, `pods/eviction` with disruption budgets,
//! CRD registration, fault injection (latency, stalls, errors by verb, resource and client,
//! dropped watches) and a log of the writes answered, by client.
//!
//! Depends on no other Basalt crate: it is test support that knows Kubernetes, not Basalt.
//!
//! ```no_run
//! # async fn demo() -> Result<(), basalt_apiserver::Error> {
//! let server = basalt_apiserver::ApiServer::start(Default::default()).await?;
//! server.write_kubeconfig("/tmp/kubeconfig".as_ref())?;
//! println!("serving on {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod discovery;
mod dra;
mod error;
mod faults;
mod patch;
mod printers;
mod protobuf;
mod requests;
mod resources;
mod selectors;
mod server;
mod store;
mod tables;
mod timestamps;
mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use error::{ApiError, Error};
pub use faults::{FaultRule, Faults, Verb};
pub use patch::PatchKind;
pub use requests::{RequestRecord, REQUEST_LOG_CAPACITY};
pub use resources::{PrinterColumn, ResourceInfo};
pub use selectors::{FieldSelector, LabelSelector};
pub use store::REFUSE_EVICTION_ANNOTATION;

use server::Shared;
use store::{Store, StoreOptions};

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Port 0 picks a free port; `Handle::addr` tells which.
    pub listen: SocketAddr,
    /// Seeds fault draws and generated names.
    pub seed: u64,
    pub faults: Faults,
    /// Changes kept for watch resumption; a watch from an older resourceVersion gets 410 Gone.
    pub history: usize,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Serve Basalt's and Volcano's scheduling kinds without posting their CRDs first.
    pub preinstall_crds: bool,
    /// Bound pods become Running and Ready at once, as if a kubelet started them.
    pub run_bound_pods: bool,
    /// Serve Dynamic Resource Allocation's `resource.k8s.io/v1` (DeviceClass, ResourceSlice,
    /// ResourceClaim, ResourceClaimTemplate), as Kubernetes 1.34 does. Off: a cluster without
    /// DRA, where the group is absent from discovery and its paths are 404.
    pub serve_dra: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: 0,
            faults: Faults::default(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(1),
            preinstall_crds: true,
            run_bound_pods: false,
            serve_dra: true,
        }
    }
}

/// Entry point.
pub struct ApiServer;

impl ApiServer {
    /// Binds, then serves in the background on the current tokio runtime.
    pub async fn start(config: Config) -> Result<Handle, Error> {
        config.faults.validate()?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let mut store = Store::new(
            StoreOptions {
                history: config.history.max(1),
                run_bound_pods: config.run_bound_pods,
                serve_dra: config.serve_dra,
            },
            config.preinstall_crds,
            config.seed,
        );
        store.set_drop_watches_after(config.faults.drop_watches_after);
        let shared = Shared {
            store: Arc::new(Mutex::new(store)),
            faults: Arc::new(Mutex::new(faults::FaultState::new(
                config.faults,
                config.seed,
            ))),
            server: format!("http://{addr}").into(),
            released: Arc::new(tokio::sync::watch::channel(0).0),
            requests: Default::default(),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let app = server::router(shared.clone());
        let bookmarks = {
            let shared = shared.clone();
            let every = config.bookmark_interval.max(Duration::from_millis(10));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    shared.store().bookmark();
                }
            })
        };
        let stopping = shared.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                    // Open watch streams and stalled requests would hold graceful shutdown forever.
                    stopping.store().drop_watches();
                    stopping.release_stalled();
                })
                .await;
            bookmarks.abort();
            if let Err(e) = served {
                tracing::error!("basalt-apiserver stopped: {e}");
            }
        });
        Ok(Handle {
            addr,
            shared,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }
}

/// A running server. Dropping it stops the server too (without waiting).
pub struct Handle {
    addr: SocketAddr,
    shared: Shared,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Handle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig (YAML) whose current context points at this server, namespace `default`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: basalt-apiserver\n  cluster:\n    server: {url}\ncontexts:\n- name: basalt-apiserver\n  context:\n    cluster: basalt-apiserver\n    user: basalt\n    namespace: default\ncurrent-context: basalt-apiserver\npreferences: {{}}\nusers:\n- name: basalt\n  user: {{}}\n",
            url = self.url()
        )
    }

    /// Writes the kubeconfig through a temporary file, so a reader never sees half of it.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let err = |source| Error::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension("tmp-basalt-apiserver");
        std::fs::write(&tmp, self.kubeconfig()).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }

    // --- faults ---

    /// Replaces the fault settings (and the watch event budget of open watches).
    pub fn set_faults(&self, faults: Faults) -> Result<(), Error> {
        faults.validate()?;
        self.shared.replace_faults(faults);
        Ok(())
    }

    pub fn faults(&self) -> Faults {
        self.shared.faults().faults.clone()
    }

    pub fn add_fault(&self, rule: FaultRule) -> Result<(), Error> {
        let mut f = self.faults();
        f.rules.push(rule);
        self.set_faults(f)
    }

    /// No faults any more; stalled requests go on.
    pub fn clear_faults(&self) {
        self.shared.replace_faults(Faults::default());
    }

    /// The writes (create, update, patch, delete, subresources included) answered so far, in
    /// the order answered, each with the client's `User-Agent` and the status code; the newest
    /// `REQUEST_LOG_CAPACITY` are kept. Also served as `GET /admin/requests`.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.request_log().entries()
    }

    /// Requests failed by fault rules so far.
    pub fn injected_faults(&self) -> u64 {
        self.shared.faults().injected
    }

    /// Closes every open watch stream now; returns how many there were.
    pub fn drop_watches(&self) -> usize {
        self.shared.store().drop_watches()
    }

    /// Watches opened and not yet closed.
    pub fn open_watches(&self) -> usize {
        self.shared.store().open_watches()
    }

    // --- direct store access for assertions and setup ---

    /// The current (global) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// The served resources (for assertions on discovery).
    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.shared.store().resources().cloned().collect()
    }

    /// One object by apiVersion and kind (`"v1", "Pod"`); namespace is ignored for cluster-scoped kinds.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let st = self.shared.store();
        let res = st.find_kind(api_version, kind)?;
        st.get(res, namespace, name).ok().map(|o| (*o).clone())
    }

    /// Every object of a kind, in (namespace, name) order.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let st = self.shared.store();
        match st.find_kind(api_version, kind) {
            Some(res) => st.all(res).into_iter().map(|o| (*o).clone()).collect(),
            None => Vec::new(),
        }
    }

    /// Creates an object as a client would (its apiVersion, kind and metadata.namespace say where).
    pub fn create(&self, obj: Value) -> Result<Value, ApiError> {
        let mut st = self.shared.store();
        let (av, kind) = (
            obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            obj.get("kind").and_then(Value::as_str).unwrap_or(""),
        );
        let res = served(&st, av, kind)?;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        st.create(res, &ns, obj).map(|o| (*o).clone())
    }

    /// Deletes an object as a client would, without preconditions.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut st = self.shared.store();
        let res = served(&st, api_version, kind)?;
        st.delete(res, namespace, name, &Value::Null)
            .map(|o| (*o).clone())
    }

    /// Patches an object as a client would (`kind` says how the body reads), e.g. a merge patch
    /// `{"spec": {"schedulingGates": null}}` that ungates a pod.
    pub fn patch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: PatchKind,
        body: &Value,
    ) -> Result<Value, ApiError> {
        self.patch_part(
            api_version,
            kind,
            (namespace, name),
            patch,
            body,
            store::Part::Main,
        )
    }

    /// Patches an object's status subresource as a controller would (a claim's `phase: Bound`).
    pub fn patch_status(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: PatchKind,
        body: &Value,
    ) -> Result<Value, ApiError> {
        self.patch_part(
            api_version,
            kind,
            (namespace, name),
            patch,
            body,
            store::Part::Status,
        )
    }

    fn patch_part(
        &self,
        api_version: &str,
        kind: &str,
        (namespace, name): (&str, &str),
        patch: PatchKind,
        body: &Value,
        part: store::Part,
    ) -> Result<Value, ApiError> {
        let mut st = self.shared.store();
        let res = served(&st, api_version, kind)?;
        st.patch(res, namespace, name, patch, body, part)
            .map(|(o, _)| (*o).clone())
    }

    /// Stops serving: closes watches, finishes in-flight requests, releases the port.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// The resource serving `api_version` / `kind`, or the 404 a client would get.
fn served(st: &Store, api_version: &str, kind: &str) -> Result<store::ResId, ApiError> {
    st.find_kind(api_version, kind).ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            format!("no resource serves apiVersion {api_version:?} kind {kind:?}"),
        )
    })
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

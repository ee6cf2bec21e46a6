//! The object store: JSON objects by resource, namespace and name; one global resourceVersion
//! counter; a bounded history of changes for watch resumption; the open watches.
//!
//! Everything runs under one mutex held by the caller (the server or a test helper): writes
//! are serialised, so resourceVersions are strictly increasing in commit order and every watcher
//! sees events in that order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::dra;
use crate::error::ApiError;
use crate::patch::{self, PatchKind};
pub use crate::resources::Part;
use crate::resources::{self, ResourceInfo};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::timestamps::now_rfc3339;

mod checks;
mod pods;
mod watch;
mod writes;

use checks::{check_type, crd_object, prepare_create, validate_storage_class};
use pods::{gate_names, validate_gates_update, validate_pod};
use watch::deliver;

/// Index of a resource in the table.
pub type ResId = usize;

/// Pods carrying this annotation (value `"true"`) refuse eviction with 429, as if a
/// PodDisruptionBudget forbade it.
pub const REFUSE_EVICTION_ANNOTATION: &str = "apiserver.basalt.dev/refuse-eviction";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// What a watch stream carries.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    Event(&'static str, Arc<Value>),
    /// A bookmark at this resourceVersion; `true` marks the end of the initial events.
    Bookmark(u64, bool),
    /// An ERROR event (a Status), after which the stream ends.
    Error(Value),
}

struct HistEvent {
    rv: u64,
    res: ResId,
    namespace: String,
    kind: EventType,
    old: Option<Arc<Value>>,
    obj: Arc<Value>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// No resourceVersion or "0": ADDED for every current object, then live changes.
    Now,
    /// Changes after this resourceVersion (replayed from history).
    After(u64),
}

/// Filters of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    fn matches(&self, namespace: &str, obj: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

struct Watcher {
    res: ResId,
    filter: Filter,
    bookmarks: bool,
    tx: mpsc::UnboundedSender<WatchMsg>,
    /// Events left before the stream is closed (fault injection).
    remaining: Option<u64>,
}

pub struct Resource {
    pub info: ResourceInfo,
    /// Served (false once its CRD is deleted).
    pub served: bool,
    objects: BTreeMap<(String, String), Arc<Value>>,
}

/// A page of a list.
pub struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

/// Options of a store, fixed at start.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Changes kept for watch resumption; older resourceVersions get 410 Gone.
    pub history: usize,
    /// Pods become Running and Ready when bound, as if a kubelet started them.
    pub run_bound_pods: bool,
    /// Serve `resource.k8s.io/v1` (Dynamic Resource Allocation).
    pub serve_dra: bool,
}

pub struct Store {
    resources: Vec<Resource>,
    rv: u64,
    uids: u64,
    history: VecDeque<HistEvent>,
    /// Events at or below this resourceVersion have left the history.
    compacted: u64,
    watchers: Vec<Watcher>,
    options: StoreOptions,
    /// Events a new watch may send before it is closed (fault injection).
    pub drop_watches_after: Option<u64>,
    /// Random source for generated names; drawn from the seeded fault state.
    name_seed: u64,
}

fn meta(obj: &Value, field: &str) -> String {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("made an object above")
}

/// The object without the fields a write does not "change" (resourceVersion, managedFields).
fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    o
}

/// The part of an object whose change bumps metadata.generation: all but metadata and status.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    o
}

fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl Store {
    pub fn new(options: StoreOptions, preinstall_crds: bool, seed: u64) -> Self {
        let mut s = Store {
            resources: Vec::new(),
            rv: 0,
            uids: 0,
            history: VecDeque::new(),
            compacted: 0,
            watchers: Vec::new(),
            options,
            drop_watches_after: None,
            name_seed: seed ^ 0x5EED,
        };
        let dra = if s.options.serve_dra {
            resources::dra()
        } else {
            Vec::new()
        };
        for info in resources::builtins().into_iter().chain(dra) {
            s.resources.push(Resource {
                info,
                served: true,
                objects: BTreeMap::new(),
            });
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns_res = s.find("", "namespaces").expect("built in");
            s.create(
                ns_res,
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .expect("fresh store accepts the standard namespaces");
        }
        if preinstall_crds {
            let crd_res = s
                .find("apiextensions.k8s.io", "customresourcedefinitions")
                .expect("built in");
            for crd in resources::preinstalled_crds(crd_object) {
                s.create(crd_res, "", crd)
                    .expect("fresh store accepts the preinstalled CRDs");
            }
        }
        s
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn resources(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.resources.iter().filter(|r| r.served).map(|r| &r.info)
    }

    pub fn info(&self, res: ResId) -> &ResourceInfo {
        &self.resources[res].info
    }

    /// The resource of this group and plural, if served.
    pub fn find(&self, group: &str, plural: &str) -> Option<ResId> {
        self.resources
            .iter()
            .position(|r| r.served && r.info.group == group && r.info.plural == plural)
    }

    /// The resource of this group, version and plural, if served in that version.
    pub fn find_version(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.find(group, plural)
            .filter(|&r| self.resources[r].info.versions.iter().any(|v| v == version))
    }

    /// The resource serving this apiVersion and kind.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<ResId> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.resources.iter().position(|r| {
            r.served
                && r.info.group == group
                && r.info.kind == kind
                && r.info.versions.iter().any(|v| v == version)
        })
    }

    fn not_found(&self, res: ResId, name: &str) -> ApiError {
        let i = &self.resources[res].info;
        ApiError::not_found(&i.group, &i.plural, name)
    }

    fn key(&self, res: ResId, namespace: &str, name: &str) -> (String, String) {
        let ns = if self.resources[res].info.namespaced {
            namespace
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    pub fn get(&self, res: ResId, namespace: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.resources[res]
            .objects
            .get(&self.key(res, namespace, name))
            .cloned()
            .ok_or_else(|| self.not_found(res, name))
    }

    /// Lists in key order (namespace, name), `limit` at a time; the continue token carries the
    /// resourceVersion of the first page, so a watch from the list's version replays whatever
    /// changed while the pages were read.
    pub fn list(
        &self,
        res: ResId,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let (rv, start) = match continue_token {
            None => (self.rv, None),
            Some(tok) => {
                let bad = || ApiError::bad_request(format!("invalid continue token {tok:?}"));
                let (rv, rest) = tok.split_once(':').ok_or_else(bad)?;
                let rv: u64 = rv.parse().map_err(|_| bad())?;
                let (ns, name) = rest.split_once('/').ok_or_else(bad)?;
                if rv < self.compacted {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some((ns.to_string(), name.to_string())))
            }
        };
        let objects = &self.resources[res].objects;
        let lower = match &start {
            None => std::ops::Bound::Unbounded,
            Some(k) => std::ops::Bound::Excluded(k),
        };
        let range = objects.range::<(String, String), _>((lower, std::ops::Bound::Unbounded));
        let mut items = Vec::new();
        let mut continue_token = None;
        for ((ns, _), obj) in range {
            if !filter.matches(ns, obj) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() == l) {
                // Another matching item exists: the page ends at the previous one.
                let last: &Arc<Value> = items.last().expect("limit > 0");
                continue_token = Some(format!(
                    "{rv}:{}/{}",
                    meta(last, "namespace"),
                    meta(last, "name")
                ));
                break;
            }
            items.push(obj.clone());
        }
        Ok(ListPage {
            items,
            resource_version: rv,
            continue_token,
        })
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uids)
    }

    fn random_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| {
                self.name_seed = self
                    .name_seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ALPHABET[((self.name_seed >> 33) % ALPHABET.len() as u64) as usize] as char
            })
            .collect()
    }

    /// Records a change and tells the watchers.
    fn commit(
        &mut self,
        res: ResId,
        namespace: &str,
        kind: EventType,
        old: Option<Arc<Value>>,
        obj: Arc<Value>,
    ) {
        let rv = self.rv;
        let namespace = namespace.to_string();
        self.watchers.retain_mut(|w| {
            if w.res != res {
                return !w.tx.is_closed();
            }
            deliver(w, kind, &namespace, old.as_ref(), &obj, rv)
        });
        self.history.push_back(HistEvent {
            rv,
            res,
            namespace,
            kind,
            old,
            obj,
        });
        while self.history.len() > self.options.history {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
    }

    /// Every object of a resource, in key order.
    pub fn all(&self, res: ResId) -> Vec<Arc<Value>> {
        self.resources[res].objects.values().cloned().collect()
    }
}

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

    /// Creates an object; `namespace` is the request's (empty for cluster-scoped resources).
    pub fn create(
        &mut self,
        res: ResId,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.resources[res].info.clone();
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                info.kind
            )));
        }
        check_type(&info, &obj)?;
        let m = meta_mut(&mut obj);
        let body_ns = m
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if info.namespaced {
            if namespace.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "{} is namespaced: create it under /namespaces/NAMESPACE/",
                    info.plural
                )));
            }
            if !body_ns.is_empty() && body_ns != namespace {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
                )));
            }
            m.insert("namespace".into(), json!(namespace));
        } else {
            m.remove("namespace");
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generate = m
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() && !generate.is_empty() {
            // Retry on collision, as the real server's clients would.
            for _ in 0..8 {
                let candidate = format!("{generate}{}", self.random_suffix());
                if !self.resources[res]
                    .objects
                    .contains_key(&self.key(res, namespace, &candidate))
                {
                    name = candidate;
                    break;
                }
            }
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                &info.kind,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        // Event names carry dots and timestamps; everything else must be a DNS subdomain.
        if !(is_dns_name(&name) || info.plural == "events") {
            return Err(ApiError::invalid(
                &info.kind,
                &name,
                &format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
            ));
        }
        if info.namespaced {
            let ns_res = self.find("", "namespaces").expect("built in");
            match self.resources[ns_res].objects.get(&(String::new(), namespace.to_string())) {
                None => return Err(ApiError::not_found("", "namespaces", namespace)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::new(403, "Forbidden", format!(
                        "{} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated", info.plural
                    )))
                }
                Some(_) => {}
            }
        }
        let key = self.key(res, namespace, &name);
        if self.resources[res].objects.contains_key(&key) {
            return Err(ApiError::already_exists(&info.group, &info.plural, &name));
        }
        prepare_create(&info, &mut obj);
        dra::on_create(&info, &name, &mut obj)?;
        if info.is_core("pods") {
            validate_pod(&name, &obj)?;
            let bound = obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if bound && !gate_names(&obj).is_empty() {
                return Err(ApiError::invalid(
                    "Pod",
                    &name,
                    "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
        if info.group == "storage.k8s.io" && info.plural == "storageclasses" {
            validate_storage_class(&name, &obj)?;
        }
        let registered = if info.group == "apiextensions.k8s.io" {
            let row = resources::from_crd(&obj)?;
            obj["status"] = resources::crd_established_status(&row);
            Some(row)
        } else {
            None
        };
        let uid = self.next_uid();
        let rv = self.next_rv();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        let obj = Arc::new(obj);
        self.resources[res].objects.insert(key, obj.clone());
        self.commit(res, namespace, EventType::Added, None, obj.clone());
        if let Some(row) = registered {
            self.register(row);
        }
        Ok(obj)
    }

    /// Serves a CRD's kind (or updates the row of one already served).
    fn register(&mut self, info: ResourceInfo) {
        if let Some(i) = self
            .resources
            .iter()
            .position(|r| r.info.group == info.group && r.info.plural == info.plural)
        {
            self.resources[i].info = info;
            self.resources[i].served = true;
        } else {
            self.resources.push(Resource {
                info,
                served: true,
                objects: BTreeMap::new(),
            });
        }
    }

    /// PUT: replaces the object (or, for `Part::Status`, its status).
    pub fn update(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        new: Value,
        part: Part,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(res, namespace, name)?;
        let info = &self.resources[res].info;
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                info.kind
            )));
        }
        check_type(info, &new)?;
        let body_name = meta(&new, "name");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta(&new, "namespace");
        if info.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        let precondition = meta(&new, "resourceVersion");
        self.write(res, namespace, name, &old, new, part, &precondition)
    }

    /// PATCH in any of the four formats; `apply` creates the object when absent.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        part: Part,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let info = self.resources[res].info.clone();
        let old = match self.get(res, namespace, name) {
            Ok(o) => o,
            Err(_) if kind == PatchKind::Apply && part == Part::Main => {
                let mut obj = body.clone();
                let body_name = meta(&obj, "name");
                if !body_name.is_empty() && body_name != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create(res, namespace, obj).map(|o| (o, true));
            }
            Err(e) => return Err(e),
        };
        let mut new = (*old).clone();
        match kind {
            PatchKind::Merge => patch::merge_patch(&mut new, body),
            PatchKind::Json => patch::json_patch(&mut new, body).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch on {} {name:?} failed: {e}", info.plural),
                )
            })?,
            PatchKind::Strategic => {
                if info.custom {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("strategic merge patch is not supported for custom resource {}; use a merge patch", info.qualified()),
                    ));
                }
                patch::strategic_merge(&mut new, body)
            }
            PatchKind::Apply => {
                check_type(&info, body)?;
                patch::apply_merge(&mut new, body)
            }
        }
        // A resourceVersion in the patch is a precondition, as in Kubernetes.
        let precondition = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !precondition.is_empty() && precondition != meta(&old, "resourceVersion") {
            return Err(ApiError::conflict(&info.group, &info.plural, name, "the object has been modified; please apply your changes to the latest version and try again"));
        }
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            json!(meta(&old, "resourceVersion")),
        );
        self.write(res, namespace, name, &old, new, part, "")
            .map(|o| (o, false))
    }

    /// The common tail of update and patch.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        old: &Arc<Value>,
        mut new: Value,
        part: Part,
        precondition: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.resources[res].info.clone();
        if !precondition.is_empty() && precondition != meta(old, "resourceVersion") {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut result = match part {
            Part::Status => {
                // A status write changes status only.
                let mut r = (**old).clone();
                match new.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        if let Some(o) = r.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                r
            }
            Part::Main => {
                if info.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                // Fields the server owns.
                let om = old.get("metadata").cloned().unwrap_or_default();
                let m = meta_mut(&mut new);
                for k in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "namespace",
                    "name",
                ] {
                    match om.get(k) {
                        Some(v) => m.insert(k.into(), v.clone()),
                        None => m.remove(k),
                    };
                }
                new["apiVersion"] = old.get("apiVersion").cloned().unwrap_or_default();
                new["kind"] = json!(info.kind);
                new
            }
        };
        if info.is_core("pods") && part == Part::Main {
            validate_pod(name, &result)?;
            validate_gates_update(name, old, &result)?;
            if old.pointer("/spec/nodeName") != result.pointer("/spec/nodeName")
                && old
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty())
            {
                return Err(ApiError::invalid("Pod", name, "spec.nodeName: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`"));
            }
        }
        dra::on_write(&info, name, old, &mut result, part)?;
        if comparable(&result) == comparable(old) {
            // A no-op write changes nothing, not even the resourceVersion.
            return Ok(old.clone());
        }
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bumped = if spec_part(&result) != spec_part(old) {
            generation + 1
        } else {
            generation
        };
        let registered = if info.group == "apiextensions.k8s.io" && part == Part::Main {
            let row = resources::from_crd(&result)?;
            result["status"] = resources::crd_established_status(&row);
            Some(row)
        } else {
            None
        };
        let rv = self.next_rv();
        let m = meta_mut(&mut result);
        m.insert("generation".into(), json!(bumped));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.remove("managedFields");
        // The last finalizer gone from an object being deleted: it goes now.
        let finalizers_done = m.get("deletionTimestamp").is_some()
            && m.get("finalizers")
                .and_then(Value::as_array)
                .is_none_or(|f| f.is_empty());
        let result = Arc::new(result);
        let key = self.key(res, namespace, name);
        if finalizers_done {
            self.resources[res].objects.remove(&key);
            self.commit(
                res,
                namespace,
                EventType::Deleted,
                Some(old.clone()),
                result.clone(),
            );
            self.after_delete(res, &result);
        } else {
            self.resources[res].objects.insert(key, result.clone());
            self.commit(
                res,
                namespace,
                EventType::Modified,
                Some(old.clone()),
                result.clone(),
            );
        }
        if let Some(row) = registered {
            self.register(row);
        }
        Ok(result)
    }

    /// DELETE. Preconditions (uid, resourceVersion) come from DeleteOptions. An object with
    /// finalizers is only marked (deletionTimestamp) until they are removed.
    pub fn delete(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        options: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(res, namespace, name)?;
        let info = self.resources[res].info.clone();
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            if let Some(want) = options
                .pointer(&format!("/preconditions/{field}"))
                .and_then(Value::as_str)
            {
                let have = meta(&old, field);
                if want != have {
                    return Err(ApiError::conflict(
                        &info.group,
                        &info.plural,
                        name,
                        &format!("Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"),
                    ));
                }
            }
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let key = self.key(res, namespace, name);
        let rv = self.next_rv();
        let mut obj = (*old).clone();
        let m = meta_mut(&mut obj);
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if has_finalizers {
            if m.contains_key("deletionTimestamp") {
                self.rv -= 1; // nothing changed
                return Ok(old);
            }
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            let obj = Arc::new(obj);
            self.resources[res].objects.insert(key, obj.clone());
            self.commit(res, namespace, EventType::Modified, Some(old), obj.clone());
            return Ok(obj);
        }
        let obj = Arc::new(obj);
        self.resources[res].objects.remove(&key);
        self.commit(res, namespace, EventType::Deleted, Some(old), obj.clone());
        self.after_delete(res, &obj);
        Ok(obj)
    }

    /// Cascades: a namespace takes its objects with it; a CRD its kind and objects.
    fn after_delete(&mut self, res: ResId, obj: &Value) {
        let info = self.resources[res].info.clone();
        let name = meta(obj, "name");
        if info.is_core("namespaces") {
            for r in 0..self.resources.len() {
                if !self.resources[r].info.namespaced {
                    continue;
                }
                let keys: Vec<_> = self.resources[r]
                    .objects
                    .keys()
                    .filter(|(ns, _)| *ns == name)
                    .cloned()
                    .collect();
                for (ns, n) in keys {
                    self.force_delete(r, &ns, &n);
                }
            }
        } else if info.group == "apiextensions.k8s.io" {
            let group = obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Some(r) = self.find(group, plural) {
                let keys: Vec<_> = self.resources[r].objects.keys().cloned().collect();
                for (ns, n) in keys {
                    self.force_delete(r, &ns, &n);
                }
                self.resources[r].served = false;
                // Watches on the kind end, as they do when a CRD goes away.
                self.watchers.retain(|w| w.res != r);
            }
        }
    }

    fn force_delete(&mut self, res: ResId, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(old) = self.resources[res].objects.remove(&key) {
            let rv = self.next_rv();
            let mut obj = (*old).clone();
            meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
            self.commit(res, namespace, EventType::Deleted, Some(old), Arc::new(obj));
        }
    }

    /// `pods/binding`: sets spec.nodeName (409 when already bound or gated) and copies the binding's
    /// annotations onto the pod, as the real binding REST does.
    pub fn bind(
        &mut self,
        namespace: &str,
        name: &str,
        binding: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let pods = self.find("", "pods").expect("built in");
        let old = self.get(pods, namespace, name)?;
        let conflict = |why: String| ApiError::conflict("", "pods/binding", name, &why);
        let target = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if target.is_empty() {
            return Err(ApiError::invalid(
                "Binding",
                name,
                "target.name: Required value",
            ));
        }
        let tkind = binding
            .pointer("/target/kind")
            .and_then(Value::as_str)
            .unwrap_or("Node");
        if !(tkind.is_empty() || tkind == "Node") {
            return Err(ApiError::invalid(
                "Binding",
                name,
                &format!("target.kind: Unsupported value: {tkind:?}: supported values: \"Node\""),
            ));
        }
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str) {
            if uid != meta(&old, "uid") {
                return Err(conflict(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old, "uid")
                )));
            }
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(node) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} is already assigned to node {node:?}"
            )));
        }
        // A pod is not ready for scheduling while it has gates.
        if old
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} has non-empty .spec.schedulingGates"
            )));
        }
        let mut pod = (*old).clone();
        pod["spec"]["nodeName"] = json!(target);
        if let Some(a) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let m = meta_mut(&mut pod);
            let pa = m.entry("annotations").or_insert_with(|| json!({}));
            for (k, v) in a {
                pa[k] = v.clone();
            }
        }
        let now = now_rfc3339();
        set_condition(&mut pod, "PodScheduled", "True", &now);
        if self.options.run_bound_pods {
            pod["status"]["phase"] = json!("Running");
            pod["status"]["startTime"] = json!(now);
            set_condition(&mut pod, "Initialized", "True", &now);
            set_condition(&mut pod, "ContainersReady", "True", &now);
            set_condition(&mut pod, "Ready", "True", &now);
        }
        let rv = self.next_rv();
        meta_mut(&mut pod).insert("resourceVersion".into(), json!(rv.to_string()));
        let pod = Arc::new(pod);
        let key = self.key(pods, namespace, name);
        self.resources[pods].objects.insert(key, pod.clone());
        self.commit(pods, namespace, EventType::Modified, Some(old), pod.clone());
        Ok(pod)
    }

    /// `pods/eviction`: deletes the pod unless a PodDisruptionBudget (or the test annotation)
    /// forbids it, in which case the answer is 429 TooManyRequests.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        eviction: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let pods = self.find("", "pods").expect("built in");
        let pod = self.get(pods, namespace, name)?;
        let refuse = |cause: String| {
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}));
            e
        };
        if pod
            .pointer(&format!(
                "/metadata/annotations/{}",
                REFUSE_EVICTION_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true")
        {
            return Err(refuse(format!(
                "pod {name} carries {REFUSE_EVICTION_ANNOTATION}=true"
            )));
        }
        // As in Kubernetes, budgets guard only running pods: pending or finished ones go freely.
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        if phase == "Running" && pod.pointer("/metadata/deletionTimestamp").is_none() {
            if let Some(pdbs) = self.find("policy", "poddisruptionbudgets") {
                let budgets: Vec<Arc<Value>> = self.resources[pdbs]
                    .objects
                    .iter()
                    .filter(|((ns, _), _)| ns == namespace)
                    .map(|(_, v)| v.clone())
                    .collect();
                for pdb in budgets {
                    if let Some(why) = self.budget_forbids(&pdb, namespace, &pod)? {
                        return Err(refuse(why));
                    }
                }
            }
        }
        let options = eviction.get("deleteOptions").cloned().unwrap_or_default();
        self.delete(pods, namespace, name, &options)
    }

    /// Whether evicting `pod` would take `pdb`'s selected pods below what it allows.
    fn budget_forbids(
        &self,
        pdb: &Value,
        namespace: &str,
        pod: &Value,
    ) -> Result<Option<String>, ApiError> {
        let pdb_name = meta(pdb, "name");
        let Some(sel) = pdb.pointer("/spec/selector") else {
            return Ok(None);
        };
        let selector = LabelSelector::from_object(sel).map_err(|e| {
            ApiError::invalid("PodDisruptionBudget", &pdb_name, &format!("spec.{e}"))
        })?;
        if !selector.matches(pod) {
            return Ok(None);
        }
        let pods = self.find("", "pods").expect("built in");
        let selected: Vec<&Arc<Value>> = self.resources[pods]
            .objects
            .iter()
            .filter(|((ns, _), p)| ns == namespace && selector.matches(p))
            .map(|(_, p)| p)
            .collect();
        let expected = selected.len() as i64;
        let healthy = selected.iter().filter(|p| is_ready(p)).count() as i64;
        let resolve = |v: &Value| -> Option<i64> {
            match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<i64>().ok())
                    .map(|p| (p * expected + 99) / 100),
                _ => None,
            }
        };
        let desired_healthy = if let Some(min) = pdb.pointer("/spec/minAvailable").and_then(resolve)
        {
            min
        } else if let Some(max) = pdb.pointer("/spec/maxUnavailable").and_then(resolve) {
            expected - max
        } else {
            return Ok(None);
        };
        let allowed = healthy - desired_healthy;
        // Evicting a pod that is not healthy costs the budget nothing.
        if allowed <= 0 && is_ready(pod) {
            return Ok(Some(format!(
                "The disruption budget {pdb_name} needs {desired_healthy} healthy pods and has {healthy} currently"
            )));
        }
        Ok(None)
    }

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

    /// Every object of a resource, in key order.
    pub fn all(&self, res: ResId) -> Vec<Arc<Value>> {
        self.resources[res].objects.values().cloned().collect()
    }
}

/// Sends one change to a watcher if its filter cares; false when the watcher is done.
fn deliver(
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

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

fn set_condition(pod: &mut Value, kind: &str, status: &str, now: &str) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds = pod["status"]
        .as_object_mut()
        .expect("made an object above")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let list = conds.as_array_mut().expect("made a list above");
    let c =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    match list.iter_mut().find(|x| x["type"] == kind) {
        Some(x) => *x = c,
        None => list.push(c),
    }
}

/// The body's apiVersion and kind, when given, must be the resource's.
fn check_type(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        if kind != info.kind {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({kind}) does not match the resource {} (kind {})",
                info.qualified(),
                info.kind
            )));
        }
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let ok = info.versions.iter().any(|v| info.api_version(v) == av);
        if !ok {
            return Err(ApiError::bad_request(format!(
                "the apiVersion of the object ({av}) is not served by {} ({})",
                info.qualified(),
                info.versions
                    .iter()
                    .map(|v| info.api_version(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// Status and defaults the server sets on create.
fn prepare_create(info: &ResourceInfo, obj: &mut Value) {
    if obj.get("apiVersion").and_then(Value::as_str).is_none() {
        obj["apiVersion"] = json!(info.api_version(&info.versions[0]));
    }
    obj["kind"] = json!(info.kind);
    if info.is_core("pods") {
        // Pods start Pending whatever the client sent.
        obj["status"] = json!({"phase": "Pending"});
    } else if info.is_core("namespaces") {
        obj["status"] = json!({"phase": "Active"});
    } else if info.is_core("persistentvolumeclaims") || info.is_core("persistentvolumes") {
        // Claims and volumes start Pending; the PV controller moves them on.
        obj["status"] = json!({"phase": "Pending"});
    } else if info.group == "storage.k8s.io" && info.plural == "storageclasses" {
        for (field, default) in [
            ("volumeBindingMode", "Immediate"),
            ("reclaimPolicy", "Delete"),
        ] {
            if obj.get(field).is_none_or(Value::is_null) {
                obj[field] = json!(default);
            }
        }
    } else if info.custom && info.status_subresource {
        // Custom resources with a status subresource ignore status on create.
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
}

fn validate_pod(name: &str, pod: &Value) -> Result<(), ApiError> {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        return Err(ApiError::invalid(
            "Pod",
            name,
            "spec.containers: Required value",
        ));
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        if c.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::invalid(
                "Pod",
                name,
                &format!("spec.containers[{i}].name: Required value"),
            ));
        }
    }
    Ok(())
}

/// The names of a pod's `spec.schedulingGates`.
fn gate_names(pod: &Value) -> Vec<&str> {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("name").and_then(Value::as_str))
        .collect()
}

/// As kube-apiserver: scheduling gates may only be removed from an existing pod, never added.
fn validate_gates_update(name: &str, old: &Value, new: &Value) -> Result<(), ApiError> {
    let before = gate_names(old);
    match gate_names(new).into_iter().find(|g| !before.contains(g)) {
        Some(added) => Err(ApiError::invalid(
            "Pod",
            name,
            &format!(
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate '{added}'"
            ),
        )),
        None => Ok(()),
    }
}

fn validate_storage_class(name: &str, class: &Value) -> Result<(), ApiError> {
    if class
        .get("provisioner")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::invalid(
            "StorageClass",
            name,
            "provisioner: Required value",
        ));
    }
    let mode = class.get("volumeBindingMode").and_then(Value::as_str);
    if !matches!(mode, Some("Immediate" | "WaitForFirstConsumer")) {
        return Err(ApiError::invalid(
            "StorageClass",
            name,
            &format!("volumeBindingMode: Unsupported value: {}: supported values: \"Immediate\", \"WaitForFirstConsumer\"", class.get("volumeBindingMode").cloned().unwrap_or(Value::Null)),
        ));
    }
    Ok(())
}

/// A minimal CRD object for a kind served at start.
fn crd_object(info: &ResourceInfo) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", info.plural, info.group)},
        "spec": {
            "group": info.group,
            "names": {"kind": info.kind, "plural": info.plural, "singular": info.singular,
                      "shortNames": info.short_names, "listKind": format!("{}List", info.kind)},
            "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
            "versions": info.versions.iter().enumerate().map(|(i, v)| json!({
                "name": v, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": if info.status_subresource { json!({"status": {}}) } else { json!({}) },
            })).collect::<Vec<_>>(),
        },
    })
}

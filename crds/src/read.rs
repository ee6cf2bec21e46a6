//! Reading Kubernetes objects from manifest text: multi-document YAML or JSON, with `List`
//! documents (`kubectl get -o yaml`) expanded.
//!
//! Each document is first read as an untyped value to learn its `apiVersion` and `kind`, then
//! deserialized into its typed form. Kinds Basalt does not read are skipped with a warning.
//! Errors name the file, the document, the object when its name is known, and the field.

use std::sync::Arc;

use std::fmt;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use crate::limits;
use crate::types::volcano::HyperNode;
use crate::types::{self, NodeTopology, PodGroup, Queue};

mod list;

/// One Kubernetes object Basalt understands. Volcano's PodGroup and Queue are converted to
/// Basalt's on read; Volcano's HyperNode is kept as it is.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// Shared: a live scheduler hands its watch caches' objects over without copying them.
    Node(Arc<Node>),
    Pod(Arc<Pod>),
    PriorityClass(Box<PriorityClass>),
    PodGroup(Arc<PodGroup>),
    Queue(Box<Queue>),
    NodeTopology(Box<NodeTopology>),
    HyperNode(Box<HyperNode>),
    /// Read for its labels (`namespaceSelector` of pod affinity terms).
    Namespace(Box<Namespace>),
    /// Claims, volumes and classes: what a pod's volumes allow (kube-scheduler's VolumeBinding).
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    PersistentVolume(Box<PersistentVolume>),
    StorageClass(Box<StorageClass>),
    /// DRA (`resource.k8s.io/v1`): classes, the devices slices publish, and claims.
    DeviceClass(Arc<DeviceClass>),
    ResourceSlice(Arc<ResourceSlice>),
    ResourceClaim(Arc<ResourceClaim>),
    /// Read so that a pod whose template's claim is not made yet can say whether the template
    /// exists (the resourceclaim controller makes claims from it, not the scheduler).
    ResourceClaimTemplate(Arc<ResourceClaimTemplate>),
    /// A training workload whose spec states a gang (`crate::workloads`): its pods join one
    /// PodGroup made for it.
    Workload(Box<WorkloadObject>),
}

/// A workload as read: its kind and spec, untyped.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadObject {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: Value,
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Node(_) => "Node",
            Object::Pod(_) => "Pod",
            Object::PriorityClass(_) => "PriorityClass",
            Object::PodGroup(_) => "PodGroup",
            Object::Queue(_) => "Queue",
            Object::NodeTopology(_) => "NodeTopology",
            Object::HyperNode(_) => "HyperNode",
            Object::Namespace(_) => "Namespace",
            Object::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
            Object::PersistentVolume(_) => "PersistentVolume",
            Object::StorageClass(_) => "StorageClass",
            Object::DeviceClass(_) => "DeviceClass",
            Object::ResourceSlice(_) => "ResourceSlice",
            Object::ResourceClaim(_) => "ResourceClaim",
            Object::ResourceClaimTemplate(_) => "ResourceClaimTemplate",
            Object::Workload(w) => {
                crate::workloads::workload_kind(&w.api_version, &w.kind).unwrap_or("Workload")
            }
        }
    }

    /// `namespace/name` for namespaced kinds (namespace `default` when absent), else `name`;
    /// `<unnamed>` stands for a missing name.
    pub fn key(&self) -> String {
        let (meta, namespaced) = match self {
            Object::Node(o) => (&o.metadata, false),
            Object::Pod(o) => (&o.metadata, true),
            Object::PriorityClass(o) => (&o.metadata, false),
            Object::PodGroup(o) => (&o.metadata, true),
            Object::Queue(o) => (&o.metadata, false),
            Object::NodeTopology(o) => (&o.metadata, false),
            Object::HyperNode(o) => (&o.metadata, false),
            Object::Namespace(o) => (&o.metadata, false),
            Object::PersistentVolumeClaim(o) => (&o.metadata, true),
            Object::PersistentVolume(o) => (&o.metadata, false),
            Object::StorageClass(o) => (&o.metadata, false),
            Object::DeviceClass(o) => (&o.metadata, false),
            Object::ResourceSlice(o) => (&o.metadata, false),
            Object::ResourceClaim(o) => (&o.metadata, true),
            Object::ResourceClaimTemplate(o) => (&o.metadata, true),
            Object::Workload(o) => (&o.metadata, true),
        };
        let name = meta
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("<unnamed>");
        if namespaced {
            format!("{}/{name}", meta.namespace.as_deref().unwrap_or("default"))
        } else {
            name.to_string()
        }
    }
}

/// What one file held: its objects, each with a source label (`FILE: document N`, plus
/// `: items[I]` inside a list), and warnings about skipped documents.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    pub objects: Vec<(String, Object)>,
    pub warnings: Vec<String>,
    /// Objects that could not be read, each named (left out of `objects`). Only
    /// [`read_objects_lenient`] returns any: [`read_objects`] fails on the first.
    pub errors: Vec<ReadError>,
}

/// A document that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct ReadError {
    pub file: String,
    /// 1-based document number in the file.
    pub document: usize,
    /// Index inside a `List` document's `items`.
    pub item: Option<usize>,
    /// `Kind namespace/name`, when known.
    pub object: Option<String>,
    /// The field path, when known (`spec.containers[0].resources`).
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)?;
        if let Some(i) = self.item {
            write!(f, ": items[{i}]")?;
        }
        if let Some(o) = &self.object {
            write!(f, ": {o}")?;
        }
        if let Some(p) = &self.field {
            write!(f, ": {p}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Where in the file a value came from, for labels and errors.
#[derive(Clone, Copy)]
struct Place<'a> {
    file: &'a str,
    document: usize,
    item: Option<usize>,
}

impl Place<'_> {
    fn label(&self) -> String {
        match self.item {
            Some(i) => format!("{}: document {}: items[{i}]", self.file, self.document),
            None => format!("{}: document {}", self.file, self.document),
        }
    }

    fn error(&self, object: Option<String>, field: Option<String>, message: String) -> ReadError {
        ReadError {
            file: self.file.to_string(),
            document: self.document,
            item: self.item,
            object,
            field,
            message,
        }
    }
}

/// Reads every object of a manifest file. `file_label` names the file in labels and errors.
/// The text is checked against [`crate::limits`] first. The first object that cannot be read
/// fails the read.
pub fn read_objects(file_label: &str, text: &str) -> Result<Loaded, ReadError> {
    let loaded = read_objects_lenient(file_label, text)?;
    match loaded.errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(Loaded {
            errors: Vec::new(),
            ..loaded
        }),
    }
}

/// As [`read_objects`], but an object that cannot be read (a field of the wrong type, an
/// integer out of range) is left out and returned in [`Loaded::errors`], so the rest is read:
/// one bad object affects only itself. What is not an object at all (invalid YAML or JSON, a
/// document without `kind`) still fails the read.
pub fn read_objects_lenient(file_label: &str, text: &str) -> Result<Loaded, ReadError> {
    limits::check(file_label, text).map_err(|e| ReadError {
        file: file_label.to_string(),
        document: e.line.map_or(1, |line| document_at(text, line)),
        item: None,
        object: None,
        field: None,
        message: match e.line {
            Some(line) => format!("line {line}: {}", e.message),
            None => e.message,
        },
    })?;
    let mut loaded = Loaded::default();
    // JSON is read with serde_json (YAML parsers reject some valid JSON, such as tab indents);
    // `kubectl get -o json` prints one value, but a stream of values is accepted too. A stream
    // with YAML document markers is YAML, even when its documents are JSON-style `{...}`.
    if is_json(text) {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for (i, doc) in stream.enumerate() {
            let place = Place {
                file: file_label,
                document: i + 1,
                item: None,
            };
            let value = doc.map_err(|e| place.error(None, None, format!("invalid JSON: {e}")))?;
            read_document(place, value, &mut loaded)?;
        }
    } else if let Some(read) = list::read_by_item(file_label, text) {
        // A `kubectl get -o yaml` dump, read item by item.
        return read;
    } else {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let place = Place {
                file: file_label,
                document: i + 1,
                item: None,
            };
            let value = Value::deserialize(doc).map_err(|e| {
                let message = match e.location() {
                    Some(l) => {
                        // The parser repeats the position inside its message; say it once.
                        let at = format!(" at line {} column {}", l.line(), l.column());
                        let text = e.to_string().replacen(&at, "", 1);
                        format!("invalid YAML{at}: {text}")
                    }
                    None => format!("invalid YAML: {e}"),
                };
                place.error(None, None, message)
            })?;
            read_document(place, value, &mut loaded)?;
        }
    }
    Ok(loaded)
}

/// Whether the text is JSON: it opens with `{` or `[` and has no YAML document marker (`---` or
/// `...` opening a line, which JSON never has outside a string, and its strings hold no line
/// breaks).
fn is_json(text: &str) -> bool {
    let trimmed = text.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{FEFF}');
    trimmed.starts_with(['{', '[']) && !text.lines().any(is_document_marker)
}

fn is_document_marker(line: &str) -> bool {
    (line.starts_with("---") || line.starts_with("..."))
        && line[3..].chars().next().is_none_or(char::is_whitespace)
}

/// The 1-based document that holds a 1-based line: documents are separated by markers after
/// some content (a marker opening the file starts the first document).
fn document_at(text: &str, line: usize) -> usize {
    let mut document = 1;
    let mut content = false;
    for l in text.lines().take(line.saturating_sub(1)) {
        if is_document_marker(l) {
            document += usize::from(content);
            content = !l[3..].trim().is_empty();
        } else if !l.trim().is_empty() && !l.trim_start().starts_with('#') {
            content = true;
        }
    }
    document
}

/// A top-level document: empty (skipped), a JSON array of objects, or one object.
fn read_document(place: Place, value: Value, out: &mut Loaded) -> Result<(), ReadError> {
    match value {
        Value::Null => Ok(()),
        Value::Array(items) => read_items(place, items, None, out),
        v => read_value(place, v, None, out),
    }
}

fn read_items(
    place: Place,
    items: Vec<Value>,
    inherited: Option<(&str, &str)>,
    out: &mut Loaded,
) -> Result<(), ReadError> {
    for (i, item) in items.into_iter().enumerate() {
        let place = Place {
            item: Some(i),
            ..place
        };
        if !item.is_null() {
            read_value(place, item, inherited, out)?;
        }
    }
    Ok(())
}

/// One object, or a `List` / `*List` whose items are read in turn. `inherited` is the
/// `(apiVersion, kind)` a typed list (`PodList`) gives items that omit their own, as the API
/// server's list responses do.
fn read_value(
    place: Place,
    mut value: Value,
    inherited: Option<(&str, &str)>,
    out: &mut Loaded,
) -> Result<(), ReadError> {
    let Some(map) = value.as_object_mut() else {
        return Err(place.error(
            None,
            None,
            "expected a Kubernetes object (a mapping with apiVersion and kind)".into(),
        ));
    };
    if let Some((api, kind)) = inherited {
        map.entry("apiVersion").or_insert_with(|| api.into());
        map.entry("kind").or_insert_with(|| kind.into());
    }
    let kind = string_field(map, "kind");
    let api_version = string_field(map, "apiVersion");
    let (Some(kind), Some(api_version)) = (kind, api_version) else {
        return Err(place.error(None, None, "missing apiVersion or kind".into()));
    };

    if let Some(item_kind) = kind.strip_suffix("List") {
        if let Some(items) = map.get_mut("items") {
            let items = match items.take() {
                Value::Array(items) => items,
                Value::Null => Vec::new(),
                _ => {
                    return Err(place.error(
                        Some(kind.clone()),
                        Some("items".into()),
                        "expected a list".into(),
                    ))
                }
            };
            let inherit = (!item_kind.is_empty()).then_some((api_version.as_str(), item_kind));
            return read_items(place, items, inherit, out);
        }
    }

    let namespaced = matches!(kind.as_str(), "Pod" | "PodGroup" | "PersistentVolumeClaim")
        || crate::workloads::is_workload(&api_version, &kind);
    let object_name = describe(&kind, map, namespaced);
    // Volcano's own top queue: Basalt's is implicit, and a Queue of that name is refused.
    if api_version == types::volcano::API_VERSION && kind == "Queue" && object_name == "Queue root"
    {
        out.warnings.push(format!(
            "{}: skipped {api_version} Queue root: Volcano's top queue, implicit in Basalt",
            place.label()
        ));
        return Ok(());
    }
    let mut warnings = Vec::new();
    let mut parse = |value: Value| -> Result<Option<Object>, ReadError> {
        let object =
            match (api_version.as_str(), kind.as_str()) {
                ("v1", "Node") => {
                    Object::Node(Arc::from(typed::<Node>(place, &object_name, value)?))
                }
                ("v1", "Pod") => Object::Pod(Arc::from(typed::<Pod>(place, &object_name, value)?)),
                ("v1", "Namespace") => Object::Namespace(typed(place, &object_name, value)?),
                ("v1", "PersistentVolumeClaim") => {
                    Object::PersistentVolumeClaim(typed(place, &object_name, value)?)
                }
                ("v1", "PersistentVolume") => {
                    Object::PersistentVolume(typed(place, &object_name, value)?)
                }
                ("resource.k8s.io/v1", "DeviceClass") => {
                    Object::DeviceClass(Arc::from(typed::<DeviceClass>(
                        place,
                        &object_name,
                        value,
                    )?))
                }
                ("resource.k8s.io/v1", "ResourceSlice") => Object::ResourceSlice(Arc::from(
                    typed::<ResourceSlice>(place, &object_name, value)?,
                )),
                ("resource.k8s.io/v1", "ResourceClaimTemplate") => Object::ResourceClaimTemplate(
                    Arc::from(typed::<ResourceClaimTemplate>(place, &object_name, value)?),
                ),
                ("resource.k8s.io/v1", "ResourceClaim") => Object::ResourceClaim(Arc::from(
                    typed::<ResourceClaim>(place, &object_name, value)?,
                )),
                ("storage.k8s.io/v1", "StorageClass") => {
                    Object::StorageClass(typed(place, &object_name, value)?)
                }
                ("scheduling.k8s.io/v1", "PriorityClass") => {
                    Object::PriorityClass(typed(place, &object_name, value)?)
                }
                (types::API_VERSION, "PodGroup") => Object::PodGroup(Arc::from(typed::<PodGroup>(
                    place,
                    &object_name,
                    with_spec(value),
                )?)),
                (types::volcano::API_VERSION, "PodGroup") => {
                    let g: Box<types::volcano::PodGroup> =
                        typed(place, &object_name, with_spec(value))?;
                    peer_group(place, &object_name, g.into_basalt(), &mut warnings)?
                }
                (types::scheduler_plugins::API_VERSION, "PodGroup") => {
                    let g: Box<types::scheduler_plugins::PodGroup> =
                        typed(place, &object_name, with_spec(value))?;
                    peer_group(place, &object_name, g.into_basalt(), &mut warnings)?
                }
                (types::API_VERSION, "Queue") => {
                    Object::Queue(typed(place, &object_name, with_spec(value))?)
                }
                (types::volcano::API_VERSION, "Queue") => {
                    let q: Box<types::volcano::Queue> = typed(place, &object_name, value)?;
                    let q = q.into_basalt().map_err(|(field, message)| {
                        place.error(Some(object_name.clone()), Some(field.into()), message)
                    })?;
                    Object::Queue(Box::new(q))
                }
                (types::API_VERSION, "NodeTopology") => {
                    Object::NodeTopology(typed(place, &object_name, with_spec(value))?)
                }
                (types::volcano::TOPOLOGY_API_VERSION, "HyperNode") => {
                    Object::HyperNode(typed(place, &object_name, with_spec(value))?)
                }
                (a, k) if crate::workloads::is_workload(a, k) => {
                    #[derive(serde::Deserialize)]
                    struct Untyped {
                        #[serde(default)]
                        metadata: ObjectMeta,
                        #[serde(default)]
                        spec: Value,
                    }
                    let w: Box<Untyped> = typed(place, &object_name, value)?;
                    Object::Workload(Box::new(WorkloadObject {
                        api_version: a.to_string(),
                        kind: k.to_string(),
                        metadata: w.metadata,
                        spec: w.spec,
                    }))
                }
                _ => return Ok(None),
            };
        Ok(Some(object))
    };
    let parsed = match parse(value) {
        Ok(parsed) => parsed,
        // Named (kind and name): left out alone.
        Err(e) => {
            out.errors.push(e);
            return Ok(());
        }
    };
    out.warnings.append(&mut warnings);
    match parsed {
        Some(object) => out.objects.push((place.label(), object)),
        None => out
            .warnings
            .push(match crate::workloads::runs_through(&api_version, &kind) {
                Some(through) => format!(
                    "{}: skipped {api_version} {object_name}: its gang is read from {through}",
                    place.label()
                ),
                None => format!(
                    "{}: skipped {api_version} {object_name}: not a kind Basalt reads",
                    place.label()
                ),
            }),
    }
    Ok(())
}

/// A peer's PodGroup in Basalt's form, the fields Basalt does not honour as warnings; or the
/// error naming the field that cannot be read.
fn peer_group(
    place: Place,
    object: &str,
    converted: Result<(PodGroup, Vec<types::Issue>), types::Issue>,
    warnings: &mut Vec<String>,
) -> Result<Object, ReadError> {
    let (g, issues) = converted
        .map_err(|(field, message)| place.error(Some(object.to_string()), Some(field), message))?;
    for (field, message) in issues {
        warnings.push(format!("{}: {object}: {field}: {message}", place.label()));
    }
    Ok(Object::PodGroup(Arc::new(g)))
}

fn string_field(map: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_string)
}

/// `Kind namespace/name` from the untyped object, for messages about it.
fn describe(kind: &str, map: &serde_json::Map<String, Value>, namespaced: bool) -> String {
    let meta = map.get("metadata");
    let get = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let name = get("name").unwrap_or("<unnamed>");
    if namespaced {
        format!("{kind} {}/{name}", get("namespace").unwrap_or("default"))
    } else {
        format!("{kind} {name}")
    }
}

/// kube's derived resources require `spec`; a Queue written with metadata alone is valid.
fn with_spec(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        let spec = map.entry("spec").or_insert(Value::Null);
        if spec.is_null() {
            *spec = Value::Object(Default::default());
        }
    }
    value
}

fn typed<T: DeserializeOwned>(
    place: Place,
    object: &str,
    value: Value,
) -> Result<Box<T>, ReadError> {
    serde_path_to_error::deserialize(value)
        .map(Box::new)
        .map_err(|e| {
            let path = e.path().to_string();
            let field = (path != ".").then_some(path);
            place.error(Some(object.to_string()), field, e.into_inner().to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_comment_documents_are_skipped() {
        let loaded = read_objects("f.yaml", "---\n# nothing\n---\n\n").unwrap();
        assert!(loaded.objects.is_empty());
        assert!(loaded.warnings.is_empty());
        assert!(read_objects("f.yaml", "").unwrap().objects.is_empty());
    }

    #[test]
    fn typed_list_items_inherit_kind() {
        let text = r#"{"apiVersion":"v1","kind":"NodeList","items":[{"metadata":{"name":"n1"}}]}"#;
        let loaded = read_objects("nodes.json", text).unwrap();
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(loaded.objects[0].0, "nodes.json: document 1: items[0]");
        assert_eq!(loaded.objects[0].1.key(), "n1");
    }

    #[test]
    fn scalar_document_is_an_error() {
        let err = read_objects("f.yaml", "just a string\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f.yaml: document 1: expected a Kubernetes object (a mapping with apiVersion and kind)"
        );
    }

    #[test]
    fn type_error_names_the_path() {
        let text = "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {minMember: lots}\n";
        let err = read_objects("g.yaml", text).unwrap_err();
        assert_eq!(err.object.as_deref(), Some("PodGroup ml/g"));
        assert_eq!(err.field.as_deref(), Some("spec.minMember"));
        assert!(
            err.to_string()
                .starts_with("g.yaml: document 1: PodGroup ml/g: spec.minMember: invalid type"),
            "{err}"
        );
    }
}

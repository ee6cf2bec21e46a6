//! Basalt's own kinds (PodGroup, Queue, NodeTopology) as watched: each object decoded on its
//! own, so one that does not decode is kept as its metadata and the reason, reported on itself
//! and left out, while the rest of its list is scheduled.
//!
//! A real API server stores what the CRD's schema admits, and `format: int32` is not enforced
//! on write: `minMember: 2147483648` is accepted. Watched through the typed list, such an
//! object would fail the whole list's decoding, and after any re-list nothing would be
//! scheduled anywhere. Volcano's and scheduler-plugins' kinds are read per object likewise
//! (`volcano.rs`, `scheduler_plugins.rs`).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use basalt_crds::ConvertError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// One watched object: its metadata always, its typed form when that decodes.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    pub metadata: ObjectMeta,
    pub decoded: Result<Arc<K>, Undecodable>,
}

/// Why an object did not decode: the field (a JSON path, `.` for the object itself) and the
/// decoder's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    pub field: String,
    pub message: String,
}

impl<K: Resource<DynamicType = ()>> Lenient<K> {
    /// `namespace/name`, or `name` for a cluster-scoped kind.
    pub fn key(&self) -> String {
        let name = self.metadata.name.as_deref().unwrap_or("");
        match &self.metadata.namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }

    /// The typed object, or the error that reports it (`origin: Kind key: field: message`).
    pub fn typed(&self, origin: &str) -> Result<&Arc<K>, ConvertError> {
        self.decoded.as_ref().map_err(|u| ConvertError {
            origin: Some(origin.to_string()),
            kind: K::kind(&()).into_owned(),
            object: self.key(),
            field: u.field.clone(),
            message: u.message.clone(),
        })
    }
}

impl<K: DeserializeOwned + Resource<DynamicType = ()>> Lenient<K> {
    /// Decodes one object; only a value that is not an object at all is an error (the watch
    /// reports that as any undecodable answer).
    pub fn decode(mut value: Value) -> Result<Self, String> {
        let Some(map) = value.as_object_mut() else {
            return Err(format!("a {} that is not an object", K::kind(&())));
        };
        // Never read, often a third of an object (the reflector drops it too).
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
        }
        // kube's derived kinds require `spec`; one written with metadata alone is valid.
        let spec = map.entry("spec").or_insert(Value::Null);
        if spec.is_null() {
            *spec = Value::Object(Default::default());
        }
        let metadata = metadata_of(map.get("metadata"));
        let decoded = serde_path_to_error::deserialize::<_, K>(&value)
            .map(Arc::new)
            .map_err(|e| Undecodable {
                field: e.path().to_string(),
                message: e.into_inner().to_string(),
            });
        Ok(Lenient { metadata, decoded })
    }
}

/// A stored peer object's conversion (or the error that reports it), made the first time it
/// is asked for and kept while the object is stored. A watch event stores a new object (a new
/// resourceVersion), so the conversion lives exactly as long as that version; a clone starts
/// empty, so a changed copy is never served the original's conversion.
pub struct Converted<T>(OnceLock<Result<T, ConvertError>>);

impl<T: Clone> Converted<T> {
    pub fn get(
        &self,
        convert: impl FnOnce() -> Result<T, ConvertError>,
    ) -> Result<T, ConvertError> {
        self.0.get_or_init(convert).clone()
    }
}

impl<T> Default for Converted<T> {
    fn default() -> Self {
        Converted(OnceLock::new())
    }
}

impl<T> Clone for Converted<T> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<T> fmt::Debug for Converted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Converted"
        } else {
            "Converted(not yet)"
        })
    }
}

/// A peer's `spec` (Volcano, scheduler-plugins) read as `T`, a null one as empty; on error the
/// field is the path inside it (`spec.minMember`).
pub fn spec_of<T: DeserializeOwned>(spec: &Value) -> Result<T, Undecodable> {
    let empty = Value::Object(Default::default());
    let spec = if spec.is_null() { &empty } else { spec };
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        Undecodable {
            field: match path.as_str() {
                "." => "spec".to_string(),
                p => format!("spec.{p}"),
            },
            message: e.into_inner().to_string(),
        }
    })
}

/// The metadata as far as it reads: an API server validates it, so a failure here means an
/// odd client; the name and namespace are still kept, so the object is reported by name.
fn metadata_of(meta: Option<&Value>) -> ObjectMeta {
    let Some(meta) = meta else {
        return ObjectMeta::default();
    };
    ObjectMeta::deserialize(meta).unwrap_or_else(|_| {
        let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
        ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            resource_version: text("resourceVersion"),
            uid: text("uid"),
            ..Default::default()
        }
    })
}

impl<'de, K: DeserializeOwned + Resource<DynamicType = ()>> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::decode(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_crds::{NodeTopology, PodGroup, Queue};
    use serde_json::json;

    #[test]
    fn an_out_of_range_integer_leaves_one_object_undecoded_and_names_its_field() {
        let items: Vec<Lenient<PodGroup>> = serde_json::from_value(json!([
            {"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "big", "namespace": "ml", "managedFields": [{}]},
             "spec": {"minMember": 2147483648u64}},
            {"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "ok", "namespace": "ml"}, "spec": {"minMember": 2}},
        ]))
        .expect("a list with one bad item still decodes");
        let e = items[0].typed("cluster").unwrap_err();
        assert_eq!((e.kind.as_str(), e.object.as_str()), ("PodGroup", "ml/big"));
        assert_eq!(e.field, "spec.minMember");
        assert!(e
            .to_string()
            .starts_with("cluster: PodGroup ml/big: spec.minMember: "));
        assert_eq!(items[1].typed("cluster").unwrap().spec.min_member, 2);
        assert_eq!(items[1].key(), "ml/ok");
    }

    #[test]
    fn queues_and_topologies_decode_alone_and_a_queue_needs_no_spec() {
        let q: Lenient<Queue> = serde_json::from_value(json!({
            "metadata": {"name": "team"}, "spec": {"priority": 2147483648u64}}))
        .unwrap();
        let e = q.typed("cluster").unwrap_err();
        assert_eq!((e.kind.as_str(), e.object.as_str()), ("Queue", "team"));
        assert_eq!(e.field, "spec.priority");
        let bare: Lenient<Queue> =
            serde_json::from_value(json!({"metadata": {"name": "bare"}})).unwrap();
        assert!(bare.decoded.is_ok());

        let t: Lenient<NodeTopology> = serde_json::from_value(json!({
            "metadata": {"name": "n1"}, "spec": {"islands": [[-1]]}}))
        .unwrap();
        let e = t.typed("cluster").unwrap_err();
        assert_eq!(e.kind, "NodeTopology");
        assert!(e.field.starts_with("spec.islands"), "{e}");
    }
}

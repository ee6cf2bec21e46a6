//! Namespaces: their labels (for `namespaceSelector`) and the queue they name for their jobs.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{ConvertError, Cx, QUEUE};
use crate::read::Object;
use basalt_engine::NamespaceSpec;

/// The queue a Namespace names for its jobs ([`QUEUE`]): its label first, then its
/// annotation; empty values ignored.
pub fn namespace_queue(namespace: &ObjectMeta) -> Option<&str> {
    fn get(map: &Option<BTreeMap<String, String>>) -> Option<&str> {
        (map.as_ref()?.get(QUEUE))
            .filter(|q| !q.is_empty())
            .map(String::as_str)
    }
    get(&namespace.labels).or_else(|| get(&namespace.annotations))
}

pub(super) fn namespace_queues(objects: &[(String, Object)]) -> HashMap<String, String> {
    let mut queues = HashMap::new();
    for (_, o) in objects {
        let Object::Namespace(n) = o else { continue };
        if let (Some(name), Some(q)) = (&n.metadata.name, namespace_queue(&n.metadata)) {
            queues.insert(name.clone(), q.to_string());
        }
    }
    queues
}

/// A namespace and its labels; the API server always sets `kubernetes.io/metadata.name`, so it
/// is added where a manifest leaves it out.
pub(super) fn namespace_spec(cx: &Cx, n: &Namespace) -> Result<NamespaceSpec, ConvertError> {
    let name = cx.name(&n.metadata)?.to_string();
    let mut labels = n.metadata.labels.clone().unwrap_or_default();
    (labels.entry(basalt_engine::NAMESPACE_NAME_LABEL.to_string())).or_insert_with(|| name.clone());
    Ok(NamespaceSpec { name, labels })
}

//! Objects' keys as the engine's plan and the daemon's parts name them: `namespace/name`
//! (`default` for an object without a namespace). Made and split here alone, so that every
//! part agrees on them.

use basalt_crds::convert::explicit_group;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A namespaced object's key.
pub fn key_of(meta: &ObjectMeta) -> String {
    let ns = meta.namespace.as_deref().unwrap_or("default");
    format!("{ns}/{}", meta.name.as_deref().unwrap_or(""))
}

pub fn pod_key(p: &Pod) -> String {
    key_of(&p.metadata)
}

/// The key of the PodGroup `p` names (Basalt's label or annotation, Volcano's annotation or
/// scheduler-plugins' label: `basalt_crds::convert::explicit_group`), in the pod's namespace.
pub fn group_key(p: &Pod) -> Option<String> {
    let group = explicit_group(&p.metadata)?;
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    Some(format!("{ns}/{group}"))
}

/// A key's namespace and name; a key without a namespace is in `default`.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_made_and_split_alike() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
        }))
        .unwrap();
        assert_eq!(pod_key(&pod), "default/p");
        assert_eq!(group_key(&pod).as_deref(), Some("default/g"));
        assert_eq!(split_key(&pod_key(&pod)), ("default", "p"));
        assert_eq!(split_key("p"), ("default", "p"));
    }
}

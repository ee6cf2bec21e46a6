//! What a create or update must be, kind by kind: the object's type, the defaults a create
//! fills in, StorageClasses' rules, and the CRD objects of kinds served at start.

use serde_json::{json, Value};

use super::*;

/// The body's apiVersion and kind, when given, must be the resource's.
pub(super) fn check_type(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
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
pub(super) fn prepare_create(info: &ResourceInfo, obj: &mut Value) {
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

pub(super) fn validate_storage_class(name: &str, class: &Value) -> Result<(), ApiError> {
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
pub(super) fn crd_object(info: &ResourceInfo) -> Value {
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

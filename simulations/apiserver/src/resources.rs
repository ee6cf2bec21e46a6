//! The resource table: which kinds the server serves, under which group, version and plural.
//!
//! Built-in kinds are listed here; CustomResourceDefinitions add rows at run time.

use serde_json::{json, Value};

use crate::error::ApiError;

/// Dynamic Resource Allocation's API group.
pub const DRA_GROUP: &str = "resource.k8s.io";

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// One servable resource (a row of discovery).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// Served versions; the first is the preferred (storage) one.
    pub versions: Vec<String>,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Has a `/status` subresource: main-resource writes keep the stored status,
    /// status writes change only status.
    pub status_subresource: bool,
    /// Registered through a CustomResourceDefinition (merge-patch only; no strategic merge).
    pub custom: bool,
    /// A CRD's `additionalPrinterColumns`, by version (what `kubectl get` shows).
    pub printer_columns: Vec<(String, Vec<PrinterColumn>)>,
}

/// One of a CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl PrinterColumn {
    fn from_json(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        PrinterColumn {
            name: s("name"),
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            priority: v.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: s("jsonPath"),
        }
    }
}

impl ResourceInfo {
    fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceInfo {
            group: group.to_string(),
            versions: vec![version.to_string()],
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            short_names: Vec::new(),
            status_subresource: false,
            custom: false,
            printer_columns: Vec::new(),
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Names the resource in messages the way Kubernetes does: `pods`, `podgroups.scheduling.basalt.dev`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Subresources named in discovery, with the kind each one takes and returns.
    pub fn subresources(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.status_subresource {
            out.push(("status", self.kind.clone()));
        }
        if self.is_core("pods") {
            out.push(("binding", "Binding".to_string()));
            out.push(("eviction", "Eviction".to_string()));
        }
        out
    }

    /// A core-group (`/api/v1`) resource of this plural.
    pub fn is_core(&self, plural: &str) -> bool {
        self.group.is_empty() && self.plural == plural
    }
}

/// Kinds the server knows at start.
pub fn builtins() -> Vec<ResourceInfo> {
    vec![
        ResourceInfo::builtin("", "v1", "Namespace", "namespaces", false)
            .short(&["ns"])
            .with_status(),
        ResourceInfo::builtin("", "v1", "Node", "nodes", false)
            .short(&["no"])
            .with_status(),
        ResourceInfo::builtin("", "v1", "Pod", "pods", true)
            .short(&["po"])
            .with_status(),
        ResourceInfo::builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        )
        .short(&["pvc"])
        .with_status(),
        ResourceInfo::builtin("", "v1", "PersistentVolume", "persistentvolumes", false)
            .short(&["pv"])
            .with_status(),
        ResourceInfo::builtin("", "v1", "Event", "events", true).short(&["ev"]),
        ResourceInfo::builtin("", "v1", "ConfigMap", "configmaps", true).short(&["cm"]),
        ResourceInfo::builtin("events.k8s.io", "v1", "Event", "events", true).short(&["ev"]),
        ResourceInfo::builtin("coordination.k8s.io", "v1", "Lease", "leases", true),
        ResourceInfo::builtin(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            false,
        )
        .short(&["pc"]),
        ResourceInfo::builtin(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
        )
        .short(&["sc"]),
        ResourceInfo::builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
        )
        .short(&["pdb"])
        .with_status(),
        ResourceInfo::builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        )
        .short(&["crd", "crds"])
        .with_status(),
    ]
}

/// Dynamic Resource Allocation's GA group, `resource.k8s.io/v1` (Kubernetes 1.34), served unless
/// `Config::serve_dra` is off. No short names: the real API declares none for these kinds.
pub fn dra() -> Vec<ResourceInfo> {
    let g = DRA_GROUP;
    vec![
        ResourceInfo::builtin(g, "v1", "DeviceClass", "deviceclasses", false),
        ResourceInfo::builtin(g, "v1", "ResourceClaim", "resourceclaims", true).with_status(),
        ResourceInfo::builtin(
            g,
            "v1",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            true,
        ),
        ResourceInfo::builtin(g, "v1", "ResourceSlice", "resourceslices", false),
    ]
}

/// Basalt's CRDs as shipped (`deploy/crds`, generated from `basalt-crds`): preinstalled from the
/// same files `kubectl apply -f deploy/crds/` reads, so `kubectl get podgroups` shows their
/// printer columns from the start.
const BASALT_CRDS: [(&str, &str); 3] = [
    (
        "podgroups.scheduling.basalt.dev.yaml",
        include_str!("../../../deploy/crds/podgroups.scheduling.basalt.dev.yaml"),
    ),
    (
        "queues.scheduling.basalt.dev.yaml",
        include_str!("../../../deploy/crds/queues.scheduling.basalt.dev.yaml"),
    ),
    (
        "nodetopologies.scheduling.basalt.dev.yaml",
        include_str!("../../../deploy/crds/nodetopologies.scheduling.basalt.dev.yaml"),
    ),
];

/// The CRD objects served without registering them first: Basalt's (as shipped) and minimal
/// ones for Volcano's scheduling kinds (`crd_object` builds a CRD from a row).
pub fn preinstalled_crds(crd_object: impl Fn(&ResourceInfo) -> Value) -> Vec<Value> {
    // Compiled in from the repository (a unit test reads them): skipped, not fatal, if bad.
    let basalt = BASALT_CRDS.iter().filter_map(|(file, text)| {
        serde_yaml::from_str::<Value>(text)
            .map_err(|e| tracing::error!("deploy/crds/{file} is not YAML: {e}"))
            .ok()
    });
    let volcano = volcano_crds();
    basalt.chain(volcano.iter().map(crd_object)).collect()
}

/// Volcano's PodGroup and Queue, which Basalt also reads.
fn volcano_crds() -> Vec<ResourceInfo> {
    let crd =
        |group: &str, version: &str, kind: &str, plural: &str, namespaced: bool, short: &[&str]| {
            let mut r = ResourceInfo::builtin(group, version, kind, plural, namespaced)
                .short(short)
                .with_status();
            r.custom = true;
            r
        };
    vec![
        crd(
            "scheduling.volcano.sh",
            "v1beta1",
            "PodGroup",
            "podgroups",
            true,
            &["podgroup-v1beta1"],
        ),
        crd(
            "scheduling.volcano.sh",
            "v1beta1",
            "Queue",
            "queues",
            false,
            &["q", "queue-v1beta1"],
        ),
    ]
}

/// Reads a CustomResourceDefinition (apiextensions.k8s.io/v1) into a resource row.
pub fn from_crd(crd: &Value) -> Result<ResourceInfo, ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let invalid = |field: &str, msg: &str| {
        ApiError::invalid("CustomResourceDefinition", name, &format!("{field}: {msg}"))
    };
    let str_at = |ptr: &str| crd.pointer(ptr).and_then(Value::as_str).unwrap_or("");
    let group = str_at("/spec/group");
    if group.is_empty() {
        return Err(invalid("spec.group", "Required value"));
    }
    let kind = str_at("/spec/names/kind");
    let plural = str_at("/spec/names/plural");
    if kind.is_empty() {
        return Err(invalid("spec.names.kind", "Required value"));
    }
    if plural.is_empty() {
        return Err(invalid("spec.names.plural", "Required value"));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name",
            &format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = str_at("/spec/scope");
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(invalid(
                "spec.scope",
                &format!(
                    "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ),
            ))
        }
    };
    let versions: Vec<&Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(invalid(
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    // Preferred (storage) version first, then the other served versions.
    let mut served: Vec<(bool, String, bool)> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v.get("name").and_then(Value::as_str).unwrap_or("");
        if vname.is_empty() {
            return Err(invalid(
                &format!("spec.versions[{i}].name"),
                "Required value",
            ));
        }
        let is_served = v.get("served").and_then(Value::as_bool).unwrap_or(false);
        let storage = v.get("storage").and_then(Value::as_bool).unwrap_or(false);
        let status = v.pointer("/subresources/status").is_some();
        if is_served {
            served.push((storage, vname.to_string(), status));
        }
    }
    served.sort_by_key(|(storage, _, _)| !storage);
    let status_subresource = served.iter().any(|(_, _, s)| *s);
    let str_list = |ptr: &str| -> Vec<String> {
        crd.pointer(ptr)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let printer_columns = versions
        .iter()
        .filter_map(|v| {
            let name = v.get("name").and_then(Value::as_str)?;
            let cols = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)?;
            Some((
                name.to_string(),
                cols.iter().map(PrinterColumn::from_json).collect(),
            ))
        })
        .collect();
    let singular = match str_at("/spec/names/singular") {
        "" => kind.to_ascii_lowercase(),
        s => s.to_string(),
    };
    Ok(ResourceInfo {
        group: group.to_string(),
        versions: served.into_iter().map(|(_, v, _)| v).collect(),
        kind: kind.to_string(),
        plural: plural.to_string(),
        singular,
        namespaced,
        short_names: str_list("/spec/names/shortNames"),
        status_subresource,
        custom: true,
        printer_columns,
    })
}

/// The status a registered CRD reports (so `kubectl wait --for condition=established` works).
pub fn crd_established_status(info: &ResourceInfo) -> Value {
    json!({
        "acceptedNames": {
            "kind": info.kind,
            "plural": info.plural,
            "singular": info.singular,
            "shortNames": info.short_names,
            "listKind": format!("{}List", info.kind),
        },
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "storedVersions": [info.versions.first().cloned().unwrap_or_default()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basalts_shipped_crds_are_preinstalled_with_their_printer_columns() {
        let crds = preinstalled_crds(|_| json!({}));
        assert_eq!(crds.len(), BASALT_CRDS.len() + volcano_crds().len());
        let podgroups = from_crd(&crds[0]).unwrap();
        assert_eq!(podgroups.short_names, vec!["pg"]);
        let (version, columns) = &podgroups.printer_columns[0];
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(version, "v1alpha1");
        assert_eq!(
            names,
            ["Phase", "MinMember", "Running", "Queue", "Reason", "Age"]
        );
    }
}

//! The generated CRDs under deploy/crds must match the code, and must be structural.

use std::path::Path;

use basalt_crds::crdgen;
use serde_json::Value;

fn deploy_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crdgen::DEFAULT_DIR)
}

#[test]
fn deploy_crds_are_up_to_date() {
    if let Err(e) = crdgen::check(&deploy_dir()) {
        panic!("{e}");
    }
}

#[test]
fn check_reports_a_stale_file() {
    let dir = std::env::temp_dir().join(format!("basalt-crdgen-test-{}", std::process::id()));
    crdgen::write(&dir).unwrap();
    crdgen::check(&dir).unwrap();
    let stale = dir.join("queues.scheduling.basalt.dev.yaml");
    std::fs::write(&stale, "# edited by hand\n").unwrap();
    let msg = crdgen::check(&dir).unwrap_err().to_string();
    assert!(
        msg.contains("queues.scheduling.basalt.dev.yaml: stale"),
        "{msg}"
    );
    std::fs::remove_file(&stale).unwrap();
    let msg = crdgen::check(&dir).unwrap_err().to_string();
    assert!(
        msg.contains("queues.scheduling.basalt.dev.yaml: missing"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn names_scopes_and_subresources() {
    let crds = crdgen::crds();
    let files: Vec<&str> = crds.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        files,
        [
            "podgroups.scheduling.basalt.dev.yaml",
            "queues.scheduling.basalt.dev.yaml",
            "nodetopologies.scheduling.basalt.dev.yaml",
        ]
    );
    let pg = &crds[0].1.spec;
    assert_eq!(pg.scope, "Namespaced");
    assert_eq!(
        pg.names.short_names.as_deref(),
        Some(&["pg".to_string()][..])
    );
    assert!(pg.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .status
        .is_some());
    assert_eq!(crds[1].1.spec.scope, "Cluster");
    assert!(crds[1].1.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .status
        .is_some());
    assert_eq!(crds[2].1.spec.scope, "Cluster");
}

/// A rough check of Kubernetes' structural-schema rules: every node states a type (or is an
/// int-or-string), no references remain, and no type hides under anyOf/oneOf/allOf/not.
fn assert_structural(path: &str, schema: &Value) {
    let obj = schema
        .as_object()
        .unwrap_or_else(|| panic!("{path}: not an object"));
    assert!(!obj.contains_key("$ref"), "{path}: $ref");
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    assert!(obj.contains_key("type") || int_or_string, "{path}: no type");
    for key in ["anyOf", "oneOf", "allOf", "not"] {
        assert!(!obj.contains_key(key), "{path}: {key}");
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, sub) in props {
            assert_structural(&format!("{path}.{name}"), sub);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = obj.get(key) {
            assert_structural(&format!("{path}.{key}"), sub);
        }
    }
}

#[test]
fn schemas_are_structural() {
    for (file, crd) in crdgen::crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        assert_structural(&file, &schema);
    }
}

#[test]
fn pod_group_topology_schema_validates_what_it_can() {
    let crds = crdgen::crds();
    let schema = serde_json::to_value(
        crds[0].1.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    let spec = &schema["properties"]["spec"]["properties"];
    for tier in ["required", "preferred"] {
        assert_eq!(spec["topology"]["properties"][tier]["type"], "string");
        assert_eq!(spec["topology"]["properties"][tier]["minLength"], 1);
    }
    let sub_groups = &spec["subGroups"];
    // A list keyed by name: the API server itself rejects two sub-groups of one name.
    assert_eq!(sub_groups["x-kubernetes-list-type"], "map");
    assert_eq!(
        sub_groups["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    let item = &sub_groups["items"];
    assert_eq!(item["required"], serde_json::json!(["name", "size"]));
    assert_eq!(item["properties"]["name"]["minLength"], 1);
    assert_eq!(item["properties"]["size"]["minimum"], 1.0);
    assert_eq!(item["properties"]["matchLabelKeys"]["type"], "array");
    assert!(item["properties"]["topology"]["properties"]["required"].is_object());
    assert!(
        item["properties"]["size"]["description"]
            .as_str()
            .unwrap()
            .contains("rank order"),
        "doc comments become descriptions"
    );
}

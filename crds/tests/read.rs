//! Reading manifest files: documents, lists, Volcano objects, skipped kinds, syntax errors.

mod common;

use basalt_crds::types::{PodGroupPhase, QueueState};
use basalt_crds::{read_objects, Object};
use common::data;

#[test]
fn multi_document_file() {
    let loaded = data("cluster.yaml");
    let summary: Vec<(String, &str, String)> = loaded
        .objects
        .iter()
        .map(|(src, o)| (src.clone(), o.kind(), o.key()))
        .collect();
    let expect = [
        ("cluster.yaml: document 1", "Node", "gpu-a"),
        ("cluster.yaml: document 2", "Node", "cpu-b"),
        ("cluster.yaml: document 3", "NodeTopology", "gpu-a"),
        ("cluster.yaml: document 4", "PriorityClass", "training"),
        ("cluster.yaml: document 5", "PriorityClass", "background"),
        ("cluster.yaml: document 6", "Queue", "research"),
        ("cluster.yaml: document 7", "PodGroup", "ml/llm"),
        ("cluster.yaml: document 8", "Pod", "ml/llm-worker-0"),
        ("cluster.yaml: document 9", "Pod", "ml/llm-worker-1"),
        ("cluster.yaml: document 10", "Pod", "kube-system/coredns"),
    ];
    let expect: Vec<(String, &str, String)> = expect
        .iter()
        .map(|(s, k, n)| (s.to_string(), *k, n.to_string()))
        .collect();
    assert_eq!(summary, expect);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn list_documents_are_expanded_and_unknown_kinds_warned() {
    let loaded = data("podlist.yaml");
    let keys: Vec<(String, String)> = loaded
        .objects
        .iter()
        .map(|(s, o)| (s.clone(), o.key()))
        .collect();
    assert_eq!(
        keys,
        [
            (
                "podlist.yaml: document 1: items[0]".to_string(),
                "default/a".to_string()
            ),
            (
                "podlist.yaml: document 1: items[1]".to_string(),
                "default/b".to_string()
            ),
        ]
    );
    assert_eq!(
        loaded.warnings,
        ["podlist.yaml: document 1: items[2]: skipped v1 ConfigMap settings: not a kind Basalt reads"]
    );
}

#[test]
fn volcano_objects_read_unchanged() {
    let loaded = data("volcano.yaml");
    assert_eq!(loaded.objects.len(), 3);
    let Object::Queue(q) = &loaded.objects[0].1 else {
        panic!("expected a Queue")
    };
    assert_eq!(q.spec.weight, 2);
    assert!(!q.spec.reclaimable);
    assert_eq!(q.spec.parent.as_deref(), Some("root"));
    assert_eq!(q.spec.priority, 7);
    assert_eq!(
        q.spec.guarantee["memory"].0, "20Gi",
        "guarantee.resource is flattened"
    );
    assert_eq!(q.spec.capability["nvidia.com/gpu"].0, "32");
    assert_eq!(q.status.as_ref().unwrap().state, QueueState::Closed);

    let Object::PodGroup(g) = &loaded.objects[1].1 else {
        panic!("expected a PodGroup")
    };
    assert_eq!(g.spec.min_member, 3);
    assert_eq!(g.spec.min_task_member["worker"], 2);
    assert_eq!(g.spec.queue.as_deref(), Some("team-a"));
    // networkTopology {mode: hard, highestTierAllowed: 1}
    assert_eq!(g.spec.topology.required.as_deref(), Some("volcano-tier-1"));
    assert_eq!(g.spec.topology.preferred, None);
    let status = g.status.as_ref().unwrap();
    assert_eq!(status.phase, PodGroupPhase::Running);
    assert_eq!(status.conditions[0].type_, "Scheduled");
}

#[test]
fn json_list_and_json_stream() {
    let text = r#"{
	"apiVersion": "v1",
	"kind": "PodList",
	"items": [{"metadata": {"name": "p", "namespace": "x"}, "spec": {"containers": []}}]
}
{"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}}"#;
    let loaded = read_objects("dump.json", text).unwrap();
    let keys: Vec<_> = loaded
        .objects
        .iter()
        .map(|(s, o)| (s.as_str(), o.kind()))
        .collect();
    assert_eq!(
        keys,
        [
            ("dump.json: document 1: items[0]", "Pod"),
            ("dump.json: document 2", "Queue")
        ]
    );
}

#[test]
fn unknown_kinds_and_versions_are_skipped_with_a_warning() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n\
                apiVersion: scheduling.basalt.dev/v1beta9\nkind: Queue\nmetadata: {name: q}\n";
    let loaded = read_objects("mixed.yaml", text).unwrap();
    assert!(loaded.objects.is_empty());
    assert_eq!(
        loaded.warnings,
        [
            "mixed.yaml: document 1: skipped apps/v1 Deployment web: not a kind Basalt reads",
            "mixed.yaml: document 2: skipped scheduling.basalt.dev/v1beta9 Queue q: not a kind Basalt reads",
        ]
    );
}

#[test]
fn broken_yaml_names_file_document_and_line() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n";
    let err = read_objects("cluster.yaml", text).unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.document, 2);
    assert!(
        msg.starts_with("cluster.yaml: document 2: invalid YAML at line "),
        "{msg}"
    );
}

#[test]
fn broken_json_names_file_and_position() {
    let err = read_objects("dump.json", "{\"kind\": \"Pod\",\n  oops}").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("dump.json: document 1: invalid JSON: "),
        "{msg}"
    );
    assert!(msg.contains("line 2 column 3"), "{msg}");
}

#[test]
fn missing_kind_is_an_error() {
    let err = read_objects("x.yaml", "metadata: {name: a}\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "x.yaml: document 1: missing apiVersion or kind"
    );
}

#[test]
fn typed_field_errors_name_object_and_path() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: w-0, namespace: default}\n\
                spec:\n  containers:\n  - name: c\n    resources:\n      requests: [1, 2]\n";
    let err = read_objects("cluster.yaml", text).unwrap_err();
    assert_eq!(err.object.as_deref(), Some("Pod default/w-0"));
    assert_eq!(
        err.field.as_deref(),
        Some("spec.containers[0].resources.requests")
    );
    assert!(
        err.to_string().starts_with(
            "cluster.yaml: document 1: Pod default/w-0: spec.containers[0].resources.requests: "
        ),
        "{err}"
    );
}

#[test]
fn volcano_negative_weight_is_an_error() {
    let text = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec: {weight: -1}\n";
    let err = read_objects("v.yaml", text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "v.yaml: document 1: Queue q: spec.weight: must not be negative, got -1"
    );
}

#[test]
fn queue_without_spec_gets_defaults() {
    let objs = common::objects(
        "q.yaml",
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\n",
    );
    let Object::Queue(q) = &objs[0].1 else {
        panic!()
    };
    assert_eq!(q.spec.weight, 1);
    assert!(q.spec.reclaimable);
}

#[test]
fn yaml_stream_of_json_style_documents() {
    // Valid YAML that kubectl reads: JSON-style documents between `---` markers.
    let text = "{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"a\"}}\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"b\"}}\n";
    let loaded = read_objects("nodes.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<_> = loaded
        .objects
        .iter()
        .map(|(label, o)| (label.as_str(), o.key()))
        .collect();
    assert_eq!(
        keys,
        [
            ("nodes.yaml: document 1", "a".to_string()),
            ("nodes.yaml: document 2", "b".to_string())
        ]
    );
    // A broken second document is reported as YAML, at its document and line.
    let broken = text.replace("\"b\"}}", "\"b\"}");
    let err = read_objects("nodes.yaml", &broken).unwrap_err().to_string();
    assert!(
        err.starts_with("nodes.yaml: document 2: invalid YAML at line "),
        "{err}"
    );
}

#[test]
fn deep_nesting_is_refused_before_parsing() {
    // 250 KB of nested flow maps: 45 s in the YAML parser (debug build) before this check.
    let text = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {}1{}\n",
        "{a: ".repeat(50_000),
        "}".repeat(50_000)
    );
    let err = read_objects("deep.yaml", &text).unwrap_err().to_string();
    assert_eq!(
        err,
        "deep.yaml: document 2: line 8: nested more than 64 deep, the limit"
    );
    let seqs = format!("a: {}\n", "[".repeat(100_000));
    let err = read_objects("deep.yaml", &seqs).unwrap_err().to_string();
    assert!(err.contains("line 1: nested more than 64 deep"), "{err}");
}

#[test]
fn binary_file_gets_one_message() {
    let path = std::env::temp_dir().join(format!("basalt-binary-{}.yaml", std::process::id()));
    std::fs::write(&path, b"apiVersion: v1\n\xff\xfe\x00binary").unwrap();
    let err = basalt_crds::read_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: not a text file: invalid UTF-8 at byte 15 (line 2)",
            path.display()
        )
    );
    // Nothing repeats it where the error chain is printed (`{:#}` in the command-line tools).
    assert!(std::error::Error::source(&err).is_none());
}

//! Fields Basalt needs only for its own pods are read leniently on other schedulers' pods (a
//! warning, not an error), and quantities beyond Basalt's limit are refused on its own pods and
//! clamped where they describe what is already there.

mod common;

use basalt_crds::quantity::MAX_QUANTITY;
use basalt_crds::{
    build_snapshot_with_warnings, cluster_spec_with_warnings, read_objects, ConvertOptions,
};
use basalt_engine::Snapshot;

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '8', memory: 32Gi, pods: '110', nvidia.com/gpu: '1'}}\n---\n";

/// A pod bound to `n`, scheduled by `scheduler`, with extra metadata and spec lines.
fn pod(scheduler: &str, metadata: &str, spec: &str) -> String {
    format!(
        "{NODE}apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n{metadata}spec:\n  schedulerName: {scheduler}\n  nodeName: n\n{spec}status: {{phase: Running}}\n"
    )
}

fn convert(text: &str) -> Result<(Snapshot, Vec<String>), String> {
    let loaded = read_objects("c.yaml", text).map_err(|e| e.to_string())?;
    build_snapshot_with_warnings(&loaded.objects, &ConvertOptions::default())
        .map_err(|e| e.to_string())
}

fn spec_of(text: &str) -> basalt_engine::ClusterSpec {
    let loaded = read_objects("c.yaml", text).unwrap();
    cluster_spec_with_warnings(&loaded.objects, &ConvertOptions::default())
        .unwrap()
        .0
}

const CONTAINERS: &str = "  containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n";

/// Each field that matters only for Basalt's own pods, malformed, with the field's name.
fn malformed() -> Vec<(String, String, &'static str)> {
    let mut cases = vec![
        (
            "  annotations: {scheduling.basalt.dev/gpu-ids: '0,x'}\n".to_string(),
            CONTAINERS.to_string(),
            "metadata.annotations[scheduling.basalt.dev/gpu-ids]",
        ),
        (
            String::new(),
            format!("  priorityClassName: nope\n{CONTAINERS}"),
            "spec.priorityClassName",
        ),
        (
            String::new(),
            format!("  tolerations: [{{key: a, operator: Maybe}}]\n{CONTAINERS}"),
            "spec.tolerations[0].operator",
        ),
        (
            String::new(),
            format!("  affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{{matchExpressions: [{{key: a, operator: Near}}]}}]}}}}}}\n{CONTAINERS}"),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
    ];
    for key in basalt_crds::convert::RANK_LABELS {
        cases.push((
            format!("  labels: {{{key}: minus-one}}\n"),
            CONTAINERS.to_string(),
            "metadata.labels[",
        ));
    }
    cases
}

#[test]
fn a_foreign_pod_with_a_malformed_field_converts_with_a_warning() {
    for (metadata, spec, field) in malformed() {
        let text = pod("default-scheduler", &metadata, &spec);
        let (snapshot, warnings) = convert(&text).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(snapshot.nodes.len(), 1, "{field}: the node stays");
        let about: Vec<_> = warnings.iter().filter(|w| w.contains(field)).collect();
        assert_eq!(about.len(), 1, "{field}: one warning, got {warnings:?}");
        assert!(
            about[0].starts_with(&format!("c.yaml: document 2: Pod ns/p: {field}")),
            "{}",
            about[0]
        );
        assert!(
            about[0].ends_with("ignored on a pod of another scheduler"),
            "{}",
            about[0]
        );
    }
}

#[test]
fn our_pod_with_the_same_field_is_an_error_naming_it() {
    for (metadata, spec, field) in malformed() {
        let text = pod("basalt", &metadata, &spec);
        let err = convert(&text)
            .err()
            .unwrap_or_else(|| panic!("{field}: converted"));
        assert!(
            err.starts_with(&format!("c.yaml: document 2: Pod ns/p: {field}")),
            "{field}: {err}"
        );
    }
}

#[test]
fn a_foreign_pod_of_an_unknown_phase_holds_its_node() {
    let text = pod("other", "", CONTAINERS).replace("phase: Running", "phase: Exploded");
    let (snapshot, warnings) = convert(&text).unwrap();
    assert_eq!(snapshot.nodes.len(), 1);
    assert!(
        warnings.iter().any(|w| w.contains("status.phase")),
        "{warnings:?}"
    );
}

fn requests(resources: &str) -> String {
    format!("  containers:\n  - {{name: a, resources: {{requests: {resources}}}}}\n  - {{name: b, resources: {{requests: {resources}}}}}\n")
}

#[test]
fn our_pod_beyond_the_limit_is_refused_at_the_field() {
    // One value beyond 2^60.
    let text = pod("basalt", "", &requests("{cpu: 9223372036854775807m}"));
    let err = convert(&text).unwrap_err();
    assert!(
        err.starts_with("c.yaml: document 2: Pod ns/p: spec.containers[0].resources.requests[cpu]: invalid quantity \"9223372036854775807m\": larger than Basalt's limit of 2^60"),
        "{err}"
    );
    // Two values each within it whose sum is not (2 x 2^62 GPUs once wrapped to 0).
    let text = pod(
        "basalt",
        "",
        &requests("{nvidia.com/gpu: '1152921504606846976'}"),
    );
    let err = convert(&text).unwrap_err();
    assert!(
        err.starts_with("c.yaml: document 2: Pod ns/p: spec.containers[1].resources.requests[nvidia.com/gpu]: the pod's request sum larger than Basalt's limit"),
        "{err}"
    );
    // The overhead is named too.
    let spec = format!("  overhead: {{memory: 1Ei}}\n{}", requests("{memory: 1Gi}"));
    let err = convert(&pod("basalt", "", &spec)).unwrap_err();
    assert!(err.contains("Pod ns/p: spec.overhead[memory]: "), "{err}");
}

#[test]
fn a_foreign_pod_beyond_the_limit_is_clamped_and_fills_its_node() {
    let text = pod(
        "other",
        "",
        &requests("{memory: 8Ei, nvidia.com/gpu: '1152921504606846976'}"),
    );
    let (snapshot, warnings) = convert(&text).unwrap();
    assert_eq!(snapshot.nodes.len(), 1);
    let request = &spec_of(&text).pods[0].request;
    assert_eq!(request["memory"], MAX_QUANTITY);
    assert_eq!(request["nvidia.com/gpu"], MAX_QUANTITY);
    for field in [
        "spec.containers[0].resources.requests[memory]",
        "spec.containers[1].resources.requests[nvidia.com/gpu]",
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with(&format!("c.yaml: document 2: Pod ns/p: {field}: "))),
            "{field}: {warnings:?}"
        );
    }
}

#[test]
fn a_node_reporting_an_absurd_allocatable_is_clamped() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: 9223372036854775807m, memory: 1e30}}\n";
    let (snapshot, warnings) = convert(text).unwrap();
    assert_eq!(snapshot.nodes.len(), 1);
    assert_eq!(spec_of(text).nodes[0].allocatable["cpu"], MAX_QUANTITY);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("c.yaml: document 1: Node n: status.allocatable[cpu]: "),
        "{warnings:?}"
    );
}

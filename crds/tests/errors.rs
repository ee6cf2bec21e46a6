//! Bad input: every message names the file, the object and the field, and nothing panics.

mod common;

use std::path::PathBuf;

use basalt_crds::{
    build_snapshot, build_snapshot_with_warnings, cluster_spec, load_files, read_objects,
    ConvertOptions, Error,
};

/// Reads `text` as `file` and builds a snapshot, returning the error message.
fn fail(file: &str, text: &str) -> String {
    let objects = match read_objects(file, text) {
        Ok(l) => l.objects,
        Err(e) => return e.to_string(),
    };
    build_snapshot(&objects, &ConvertOptions::default())
        .map(|_| ())
        .expect_err("expected an error")
        .to_string()
}

fn assert_prefix(msg: &str, prefix: &str) {
    assert!(
        msg.starts_with(prefix),
        "message:  {msg}\nexpected: {prefix}..."
    );
}

#[test]
fn invalid_quantity_in_a_container() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: m}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: w-0, namespace: default}\n\
                spec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: abc}}\n";
    assert_eq!(
        fail("cluster.yaml", text),
        "cluster.yaml: document 3: Pod default/w-0: spec.containers[0].resources.requests[cpu]: \
         invalid quantity \"abc\": expected a number"
    );
}

#[test]
fn invalid_quantities_elsewhere() {
    let cases = [
        (
            "spec:\n  initContainers:\n  - name: i\n    resources: {limits: {memory: 1Qi}}\n  containers: []\n",
            "p.yaml: document 1: Pod ns/p: spec.initContainers[0].resources.limits[memory]: invalid quantity \"1Qi\": unknown suffix \"Qi\"",
        ),
        (
            "spec:\n  overhead: {cpu: '-1'}\n  containers: []\n",
            "p.yaml: document 1: Pod ns/p: spec.overhead[cpu]: invalid quantity \"-1\": must not be negative",
        ),
    ];
    for (spec, want) in cases {
        let text =
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\n{spec}");
        assert_eq!(fail("p.yaml", &text), want);
    }
    let node =
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: 1.2.3}}\n";
    assert_eq!(
        fail("n.yaml", node),
        "n.yaml: document 1: Node n: status.allocatable[memory]: invalid quantity \"1.2.3\": more than one decimal point"
    );
    let queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec: {guarantee: {resource: {cpu: lots}}}\n";
    assert_eq!(
        fail("q.yaml", queue),
        "q.yaml: document 1: Queue q: spec.guarantee[cpu]: invalid quantity \"lots\": expected a number"
    );
    let group = "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\nspec: {minResources: {nvidia.com/gpu: x}}\n";
    assert_eq!(
        fail("g.yaml", group),
        "g.yaml: document 1: PodGroup default/g: spec.minResources[nvidia.com/gpu]: invalid quantity \"x\": expected a number"
    );
}

#[test]
fn broken_yaml() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: b\n   bad: indent\n";
    assert_prefix(
        &fail("cluster.yaml", text),
        "cluster.yaml: document 2: invalid YAML at line 9 column ",
    );
}

#[test]
fn negative_min_member_reaches_engine_validation() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\n\
                apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {minMember: -1}\n";
    assert_eq!(
        fail("groups.yaml", text),
        "groups.yaml: document 2: PodGroup ml/g: spec.minMember: must not be negative, got -1",
    );
    // 0 is Volcano's "no gang minimum", legal in both formats.
    for api in [
        "scheduling.basalt.dev/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
    ] {
        let text = format!("apiVersion: {api}\nkind: PodGroup\nmetadata: {{name: g, namespace: ml}}\nspec: {{minMember: 0}}\n");
        let objects = read_objects("groups.yaml", &text).unwrap().objects;
        let snapshot = build_snapshot(&objects, &ConvertOptions::default()).unwrap();
        assert_eq!(snapshot.jobs[0].min_member, 0, "{api}");
    }
}

#[test]
fn pod_naming_a_missing_pod_group() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w\n  namespace: ml\n  annotations: {scheduling.basalt.dev/pod-group: nope}\n\
                spec: {schedulerName: basalt, containers: []}\n";
    let msg = fail("pods.yaml", text);
    assert_prefix(&msg, "pods.yaml: document 1: Pod ml/w: ");
    assert!(msg.contains("ml/nope"), "{msg}");
}

#[test]
fn queue_with_a_missing_parent() {
    let text = "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: top}\n---\n\
                apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: child}\nspec: {parent: ghost}\n";
    let msg = fail("queues.yaml", text);
    assert_prefix(&msg, "queues.yaml: document 2: Queue child: spec.parent: ");
    assert!(msg.contains("ghost"), "{msg}");
}

#[test]
fn missing_priority_class() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {schedulerName: basalt, priorityClassName: gold, containers: []}\n";
    assert_eq!(
        fail("p.yaml", pod),
        "p.yaml: document 1: Pod ns/p: spec.priorityClassName: names PriorityClass gold, which does not exist"
    );
}

/// A PodGroup naming a PriorityClass that does not exist is legal (Volcano gives it the default
/// priority): a warning, the globalDefault class's value, else 0.
#[test]
fn pod_group_with_a_missing_priority_class_gets_the_default() {
    let group = |api: &str| {
        format!("apiVersion: {api}\nkind: PodGroup\nmetadata: {{name: g, namespace: ns}}\nspec: {{priorityClassName: gold}}\n")
    };
    let default_class = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: std}\nvalue: 7\nglobalDefault: true\n---\n";
    for api in [
        "scheduling.basalt.dev/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
    ] {
        for (classes, want) in [("", 0), (default_class, 7)] {
            let text = format!("{classes}{}", group(api));
            let objects = read_objects("g.yaml", &text).unwrap().objects;
            let (snapshot, warnings) =
                build_snapshot_with_warnings(&objects, &ConvertOptions::default()).unwrap();
            assert_eq!(snapshot.jobs[0].priority, want, "{api}");
            let doc = if classes.is_empty() { 1 } else { 2 };
            assert_eq!(
                warnings,
                [format!("g.yaml: document {doc}: PodGroup ns/g: spec.priorityClassName: names PriorityClass gold, which does not exist; the default priority {want} is used")]
            );
        }
    }
}

#[test]
fn bad_enumerations_and_annotations() {
    let cases = [
        (
            "spec:\n  tolerations: [{key: a, operator: Maybe}]\n  containers: []\n",
            "spec.tolerations[0].operator: unknown operator \"Maybe\"",
        ),
        (
            "spec:\n  tolerations: [{key: a, effect: NoFun}]\n  containers: []\n",
            "spec.tolerations[0].effect: unknown effect \"NoFun\"",
        ),
        (
            "spec:\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Near}]}]}}}\n  containers: []\n",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Near\"",
        ),
        (
            "spec:\n  containers: []\nstatus: {phase: Exploded}\n",
            "status.phase: unknown phase \"Exploded\"",
        ),
    ];
    for (rest, want) in cases {
        // Pods of ours: another scheduler's pod is read leniently (tests/foreign.rs).
        let rest = rest.replacen("spec:\n", "spec:\n  schedulerName: basalt\n", 1);
        let text =
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\n{rest}");
        assert_eq!(
            fail("p.yaml", &text),
            format!("p.yaml: document 1: Pod ns/p: {want}")
        );
    }
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {scheduling.basalt.dev/gpu-ids: '0,x'}\nspec: {schedulerName: basalt, containers: []}\n";
    assert_eq!(
        fail("p.yaml", text),
        "p.yaml: document 1: Pod default/p: metadata.annotations[scheduling.basalt.dev/gpu-ids]: expected comma-separated GPU indices, got \"0,x\""
    );
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: k, effect: Sometimes}]}\n";
    assert_eq!(
        fail("n.yaml", node),
        "n.yaml: document 1: Node n: spec.taints[0].effect: unknown effect \"Sometimes\""
    );
}

#[test]
fn bad_node_topology() {
    let head =
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: NodeTopology\nmetadata: {name: n}\n";
    let cases = [
        (
            "spec: {gpus: [{index: 0}, {index: 0}]}",
            "spec.gpus[1].index: duplicate GPU index 0",
        ),
        (
            "spec: {gpus: [{index: 0, uuid: GPU-a}, {index: 1, uuid: GPU-b}, {index: 2, uuid: GPU-a}]}",
            "spec.gpus[2].uuid: duplicate GPU UUID GPU-a (also spec.gpus[0])",
        ),
        (
            "spec: {gpus: [{index: 0}, {index: 5}]}",
            "spec.gpus[1].index: GPU index 5 out of range: indices must be 0..2",
        ),
        (
            "spec: {gpus: [{index: 0}, {index: 1}], islands: [[0], [1, 2]]}",
            "spec.islands[1][1]: GPU index 2 is not in spec.gpus",
        ),
        (
            "spec: {gpus: [{index: 0}, {index: 1}], islands: [[0, 1], [1]]}",
            "spec.islands[1][0]: GPU 1 is already in island 0",
        ),
    ];
    for (spec, want) in cases {
        let msg = fail("t.yaml", &format!("{head}{spec}\n"));
        assert_eq!(msg, format!("t.yaml: document 1: NodeTopology n: {want}"));
    }
}

#[test]
fn duplicates_are_reported_where_the_second_copy_is() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n";
    let text = format!("{node}---\n{node}");
    assert_prefix(
        &fail("nodes.yaml", &text),
        "nodes.yaml: document 2: Node n: metadata.name: ",
    );
}

#[test]
fn object_without_a_name() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {}\n";
    assert_eq!(
        fail("n.yaml", text),
        "n.yaml: document 1: Node <unnamed>: metadata.name: missing"
    );
}

#[test]
fn garbage_never_panics() {
    // Odd but parseable inputs must come back as errors or objects, never a panic.
    for text in [
        "[1, 2, 3]",
        "- a\n- b\n",
        "apiVersion: v1\nkind: List\nitems: 7\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: 1e999}}}]}\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: 99999999999999999}}}]}\n",
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: NodeTopology\nmetadata: {name: n}\nspec: {gpus: [{index: 4000000000}]}\n",
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\nspec: null\nstatus: {phase: Nope}\n",
        "\u{feff}apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
        "{",
        "kind: [",
    ] {
        if let Ok(l) = read_objects("x.yaml", text) {
            let _ = build_snapshot(&l.objects, &ConvertOptions::default());
        }
    }
    let spec = cluster_spec(&[], &ConvertOptions::default()).unwrap();
    assert!(spec.nodes.is_empty());
}

#[test]
fn load_files_names_the_path() {
    let missing = PathBuf::from("/nonexistent/cluster.yaml");
    let err = load_files(&[missing], &ConvertOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert_prefix(&err.to_string(), "/nonexistent/cluster.yaml: cannot read: ");
}

#[test]
fn load_files_across_files() {
    let dir = std::env::temp_dir().join(format!("basalt-crds-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("queues.yaml");
    let b = dir.join("groups.yaml");
    std::fs::write(
        &a,
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: research}\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n\
         apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {queue: missing}\n",
    )
    .unwrap();
    let err = load_files(&[a.clone(), b.clone()], &ConvertOptions::default()).unwrap_err();
    assert_prefix(
        &err.to_string(),
        &format!("{}: document 2: PodGroup ml/g: spec.queue: ", b.display()),
    );

    std::fs::write(
        &b,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n\
         apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {queue: research}\n",
    )
    .unwrap();
    let (snap, warnings) = load_files(&[a, b.clone()], &ConvertOptions::default()).unwrap();
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(
        warnings,
        [format!(
            "{}: document 1: skipped apps/v1 Deployment web: not a kind Basalt reads",
            b.display()
        )]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn basalt_queue_rejects_volcanos_nested_guarantee() {
    let text = "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec: {guarantee: {resource: {cpu: 1}}}\n";
    assert_prefix(
        &fail("q.yaml", text),
        "q.yaml: document 1: Queue q: spec.guarantee.resource: invalid type: map",
    );
}

//! A cluster with bad objects: each is reported and left out alone, and what it holds on its
//! node still counts (`build_snapshot_tolerant`).

mod common;

use basalt_crds::{build_snapshot, build_snapshot_tolerant, ConvertOptions};
use basalt_engine::Snapshot;
use common::objects;

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8"}}
---
apiVersion: v1
kind: Node
metadata: {name: n3}
status: {allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8"}}
---
apiVersion: scheduling.basalt.dev/v1alpha1
kind: Queue
metadata: {name: team}
spec: {weight: 1}
---
apiVersion: scheduling.basalt.dev/v1alpha1
kind: PodGroup
metadata: {name: good, namespace: ml}
spec: {minMember: 2, queue: team}
---
apiVersion: v1
kind: Pod
metadata: {name: good-0, namespace: ml, labels: {scheduling.basalt.dev/pod-group: good}}
spec: {schedulerName: basalt, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: good-1, namespace: ml, labels: {scheduling.basalt.dev/pod-group: good}}
spec: {schedulerName: basalt, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
---
# Names a queue that does not exist: left out, its bound pod still counts on n1.
apiVersion: scheduling.basalt.dev/v1alpha1
kind: PodGroup
metadata: {name: lost, namespace: ml}
spec: {minMember: 2, queue: nope}
---
apiVersion: v1
kind: Pod
metadata: {name: lost-0, namespace: ml, labels: {scheduling.basalt.dev/pod-group: lost}}
spec: {schedulerName: basalt, nodeName: n1, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: lost-1, namespace: ml, labels: {scheduling.basalt.dev/pod-group: lost}}
spec: {schedulerName: basalt, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
---
# The engine refuses a negative minimum: left out, its bound pod counts.
apiVersion: scheduling.basalt.dev/v1alpha1
kind: PodGroup
metadata: {name: zero, namespace: ml}
spec: {minMember: -1, queue: team}
---
apiVersion: v1
kind: Pod
metadata: {name: zero-0, namespace: ml, labels: {scheduling.basalt.dev/pod-group: zero}}
spec: {schedulerName: basalt, nodeName: n2, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "3"}}}]}
status: {phase: Running}
---
# A request that cannot be read, on a bound pod: n3 takes no new pods.
apiVersion: v1
kind: Pod
metadata: {name: garbled, namespace: ml}
spec: {schedulerName: basalt, nodeName: n3, containers: [{name: c, resources: {requests: {cpu: lots}}}]}
status: {phase: Running}
---
# Bound to a node that does not exist: left out.
apiVersion: v1
kind: Pod
metadata: {name: stray, namespace: ml}
spec: {schedulerName: basalt, nodeName: gone, containers: [{name: c}]}
status: {phase: Running}
"#;

fn gpus_used(s: &Snapshot, node: &str) -> i64 {
    let id = s.nodes.iter().position(|n| n.name == node).unwrap();
    let gpu = s.resources.id("nvidia.com/gpu").unwrap();
    s.node_used[id].get(gpu)
}

#[test]
fn bad_objects_are_left_out_alone_and_their_bound_pods_still_count() {
    let objects = objects("cluster.yaml", CLUSTER);
    // The strict build refuses the whole cluster.
    assert!(build_snapshot(&objects, &ConvertOptions::default()).is_err());

    let built = build_snapshot_tolerant(&objects, &ConvertOptions::default());
    let snapshot = built.snapshot.expect("a snapshot");
    let errors: Vec<String> = built.errors.iter().map(|e| e.to_string()).collect();
    let said = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        said("cluster.yaml: document 8: PodGroup ml/lost: spec.queue: names queue nope"),
        "{errors:#?}"
    );
    assert!(said("Pod ml/lost-1: metadata.labels/annotations (pod group): its PodGroup ml/lost is invalid"), "{errors:#?}");
    assert!(said("PodGroup ml/zero: spec.minMember"), "{errors:#?}");
    assert!(
        said("Pod ml/garbled: spec.containers[0].resources.requests"),
        "{errors:#?}"
    );
    assert!(
        said("Pod ml/stray: spec.nodeName: names node gone"),
        "{errors:#?}"
    );
    // Each bad object is said once.
    let mut unique = errors.clone();
    unique.dedup();
    assert_eq!(unique.len(), errors.len(), "{errors:#?}");

    // The good gang is there, whole; nothing of the bad ones is a task.
    let names: Vec<&str> = snapshot.tasks.iter().map(|t| &*t.name).collect();
    assert!(
        names.contains(&"ml/good-0") && names.contains(&"ml/good-1"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("lost") || n.contains("zero")),
        "{names:?}"
    );
    // What the left-out bound pods hold still counts on their nodes.
    assert_eq!(gpus_used(&snapshot, "n1"), 4);
    assert_eq!(gpus_used(&snapshot, "n2"), 3);
    let n3 = snapshot.nodes.iter().find(|n| n.name == "n3").unwrap();
    assert!(n3.unschedulable, "n3's usage is unknown");
    let n1 = snapshot.nodes.iter().find(|n| n.name == "n1").unwrap();
    assert!(!n1.unschedulable);
}

#[test]
fn a_good_cluster_builds_the_same_snapshot_either_way() {
    let objects = objects(
        "cluster.yaml",
        &CLUSTER[..CLUSTER.find("# Names a queue").unwrap()],
    );
    let strict = build_snapshot(&objects, &ConvertOptions::default()).unwrap();
    let built = build_snapshot_tolerant(&objects, &ConvertOptions::default());
    assert!(built.errors.is_empty(), "{:?}", built.errors);
    let tolerant = built.snapshot.unwrap();
    assert_eq!(format!("{strict:?}"), format!("{tolerant:?}"));
}

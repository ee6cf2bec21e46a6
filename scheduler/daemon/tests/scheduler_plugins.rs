//! scheduler-plugins' coscheduling PodGroups (`scheduling.x-k8s.io/v1alpha1`) end to end: with
//! their CRD installed, pods labelled `scheduling.x-k8s.io/pod-group` are one gang with the
//! group's `minMember`, all or nothing; the group's status is left to scheduler-plugins'
//! controller, and why a gang waits reaches its pods as Events.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::{json, Value};

/// scheduler-plugins' PodGroup CRD, as its chart installs it (status subresource declared).
fn coscheduling_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
        "spec": {"group": "scheduling.x-k8s.io", "scope": "Namespaced",
                 "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup",
                           "shortNames": ["pg", "pgs"]},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

fn coscheduling_group(name: &str, min_member: u32) -> Value {
    json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 30},
    })
}

fn coscheduling_pod(name: &str, group: &str, gpus: u32) -> Value {
    let mut p = pod(name, group, gpus);
    p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": group});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coscheduling_podgroups_are_gangs_and_their_status_is_left_alone() {
    let c = cluster(Config::default()).await;
    c.create(coscheduling_crd());
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(coscheduling_group("pair", 2));
    for i in 0..2 {
        c.create(coscheduling_pod(&format!("pair-{i}"), "pair", 4));
    }
    // Three members of 8 GPUs on two 8-GPU nodes: never two of them without the third.
    c.create(coscheduling_group("big", 3));
    for i in 0..3 {
        c.create(coscheduling_pod(&format!("big-{i}"), "big", 8));
    }
    let (_s, logs) = c.start_logged(&[]);

    eventually("the coscheduling gang bound", || {
        (0..2).all(|i| c.node_of(&format!("pair-{i}")).is_some())
    })
    .await;
    eventually(
        "a FailedScheduling Event on a member of the gang that cannot start",
        || !c.events("FailedScheduling", "big-0").is_empty(),
    )
    .await;
    assert!(
        (0..3).all(|i| c.node_of(&format!("big-{i}")).is_none()),
        "nothing of a gang below its minMember is bound"
    );
    for name in ["pair", "big"] {
        let g = c
            .server
            .get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "default", name)
            .unwrap();
        assert!(
            g["status"].is_null(),
            "{name}: status left to scheduler-plugins"
        );
    }
    assert!(
        c.server
            .get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                "pair"
            )
            .is_none(),
        "no Basalt PodGroup made up for a group that exists"
    );
    // The schedule timeout is honoured: no warning about it.
    assert!(
        !(logs.problems().iter()).any(|l| l.contains("scheduleTimeoutSeconds")),
        "{:?}",
        logs.problems()
    );
}

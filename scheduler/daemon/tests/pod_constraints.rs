//! Pod constraints end to end through the real binary: a gang with required hostname
//! anti-affinity on its own label is spread one member per node (binpack alone would stack
//! them), and another scheduler's pod holding a host port keeps ours off its node. Namespaces
//! are watched: an anti-affinity term's `namespaceSelector` sees a namespace's labels.

mod common;

use std::collections::BTreeSet;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

fn one_per_node(mut pod: serde_json::Value, job: &str) -> serde_json::Value {
    pod["metadata"]["labels"]["job"] = json!(job);
    pod["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"job": job}},
            "topologyKey": "kubernetes.io/hostname",
        }],
    }});
    pod
}

fn labelled_node(name: &str, gpus: u32) -> serde_json::Value {
    let mut n = node(name, gpus);
    n["metadata"]["labels"] = json!({"kubernetes.io/hostname": name});
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anti_affinity_gang_lands_one_member_per_node() {
    let c = cluster(Config::default()).await;
    for i in 0..4 {
        c.create(labelled_node(&format!("n{i}"), 8));
    }
    c.create(queue("q"));
    c.create(group("spread", 4, "q"));
    for m in 0..4 {
        c.create(one_per_node(
            pod(&format!("spread-{m}"), "spread", 1),
            "spread",
        ));
    }
    // A gang without the rule, to show what binpack does on its own.
    c.create(group("stack", 2, "q"));
    c.create(pod("stack-0", "stack", 1));
    c.create(pod("stack-1", "stack", 1));

    let _s = c.start_scheduler();
    eventually("both gangs are bound", || {
        (0..4).all(|m| c.node_of(&format!("spread-{m}")).is_some())
            && c.node_of("stack-0").is_some()
            && c.node_of("stack-1").is_some()
    })
    .await;
    let nodes: BTreeSet<String> = (0..4)
        .map(|m| c.node_of(&format!("spread-{m}")).unwrap())
        .collect();
    assert_eq!(nodes.len(), 4, "one member per node: {nodes:?}");
    assert_eq!(
        c.node_of("stack-0"),
        c.node_of("stack-1"),
        "without the rule binpack stacks them"
    );
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_too_wide_for_its_anti_affinity_waits_and_says_why() {
    let c = cluster(Config::default()).await;
    c.create(labelled_node("n0", 8));
    c.create(labelled_node("n1", 8));
    c.create(queue("q"));
    c.create(group("wide", 3, "q"));
    for m in 0..3 {
        c.create(one_per_node(pod(&format!("wide-{m}"), "wide", 1), "wide"));
    }
    let _s = c.start_scheduler();
    eventually("the PodGroup says anti-affinity keeps it out", || {
        c.group("wide")["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter().any(|k| {
                    k["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("didn't match pod anti-affinity rules"))
                })
            })
    })
    .await;
    assert!((0..3).all(|m| c.node_of(&format!("wide-{m}")).is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_reads_the_namespace_labels() {
    let c = cluster(Config::default()).await;
    c.create(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "ml", "labels": {"team": "ml"}}}));
    c.create(labelled_node("n0", 8));
    c.create(labelled_node("n1", 8));
    // Another scheduler's pod on n0 repels pods labelled app=shy from namespaces of team ml.
    let mut guard = busy_pod("guard", "n0", 4, None);
    guard["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "shy"}},
            "namespaceSelector": {"matchLabels": {"team": "ml"}},
            "topologyKey": "kubernetes.io/hostname",
        }],
    }});
    c.create(guard);
    c.create(queue("q"));
    // A pod without a PodGroup (a group of one), in namespace ml.
    let mut shy = pod("shy", "", 1);
    shy["metadata"]["namespace"] = json!("ml");
    shy["metadata"]["labels"] = json!({"app": "shy"});
    c.create(shy);
    let _s = c.start_scheduler();
    eventually("the shy pod is bound", || {
        c.server
            .get("v1", "Pod", "ml", "shy")
            .is_some_and(|p| p["spec"]["nodeName"].is_string())
    })
    .await;
    let p = c.server.get("v1", "Pod", "ml", "shy").unwrap();
    assert_eq!(
        p["spec"]["nodeName"], "n1",
        "binpack prefers n0, the guard keeps it off"
    );
}

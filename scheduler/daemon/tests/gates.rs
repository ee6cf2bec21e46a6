//! Scheduling gates end to end: a gang of 2 with one member gated is not bound at all (not even
//! its ungated member), its PodGroup says which pod is gated, and no binding is even tried (the
//! API server would refuse it); once the gate is removed the gang binds whole. (A pod whose DRA
//! claim is not made yet waits likewise: `tests/dra.rs`.)

mod common;

use basalt_apiserver::{Config, PatchKind};
use common::*;
use serde_json::{json, Value};

fn condition(c: &Cluster, group: &str, reason: &str) -> Option<Value> {
    c.group(group)["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|k| k["reason"] == reason)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_gang_waits_whole_and_binds_whole_once_ungated() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    c.create(group("g", 2, "q"));
    c.create(pod("g-0", "g", 4));
    let mut gated = pod("g-1", "g", 4);
    gated["spec"]["schedulingGates"] = json!([{"name": "example.com/quota"}]);
    c.create(gated);

    let _s = c.start_scheduler();
    eventually("the PodGroup names the gated pod", || {
        condition(&c, "g", "SchedulingGated").is_some()
    })
    .await;
    let cond = condition(&c, "g", "SchedulingGated").unwrap();
    assert_eq!(cond["type"], "Unschedulable");
    assert_eq!(
        cond["message"],
        "1 pod(s) gated: default/g-1 (example.com/quota)"
    );
    // The cycle that wrote the condition bound nothing of the gang and tried no binding.
    assert_eq!(
        c.node_of("g-0"),
        None,
        "the ungated member waits with its gang"
    );
    assert_eq!(c.node_of("g-1"), None);
    assert!(
        !c.server
            .requests()
            .iter()
            .any(|r| r.resource == "pods/binding"),
        "no binding is tried while a member is gated"
    );

    eventually("a FailedScheduling Event on the gated pod says why", || {
        c.events("FailedScheduling", "g-1").iter().any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("SchedulingGated: 1 pod(s) gated"))
        })
    })
    .await;

    // The gate's controller removes it, as `kubectl patch` would.
    c.server
        .patch(
            "v1",
            "Pod",
            "default",
            "g-1",
            PatchKind::Merge,
            &json!({"spec": {"schedulingGates": null}}),
        )
        .expect("ungate g-1");
    eventually("the gang is bound whole", || {
        c.node_of("g-0").is_some() && c.node_of("g-1").is_some()
    })
    .await;
    eventually("the condition clears", || {
        condition(&c, "g", "SchedulingGated").is_none()
    })
    .await;
    c.assert_no_node_over_capacity();
}

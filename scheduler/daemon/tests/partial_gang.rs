//! A gang found partly bound (one member bound by a scheduler that stopped mid-gang, its
//! capacity then taken by another scheduler's pod) is rolled back after
//! `--partial-gang-timeout`: its bound member is evicted, so the gang holds nothing while it
//! cannot start, and starts whole once there is room.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_bound_gang_that_cannot_complete_is_wholly_unbound_within_the_timeout() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 4));
    c.create(node("n2", 4));
    c.create(queue("q"));
    c.create(group("g", 2, "q"));
    // Member 0 was bound before the crash; member 1 never was, and n2 went to someone else.
    let mut bound = pod("g-0", "g", 4);
    bound["spec"]["nodeName"] = json!("n1");
    bound["metadata"]["annotations"] = json!({"scheduling.basalt.dev/gpu-ids": "0,1,2,3"});
    c.create(bound);
    c.create(pod("g-1", "g", 4));
    c.create(busy_pod("other", "n2", 4, None));

    let _s = c.start_with(&["--partial-gang-timeout", "5s"]);
    let partly_bound = |c: &Cluster| {
        c.group("g")["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k["type"] == "PartiallyBound" && k["status"] == "True")
    };
    eventually("the PodGroup says it is partly bound", || partly_bound(&c)).await;
    let message = c.group("g")["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["type"] == "PartiallyBound")
        .unwrap()["message"]
        .to_string();
    assert!(
        message.contains("1 of the minimum 2 members are bound"),
        "{message}"
    );
    // Still there before the timeout: the gang is given its time.
    assert!(c.server.get("v1", "Pod", "default", "g-0").is_some());

    eventually("the bound member is evicted", || {
        c.server.get("v1", "Pod", "default", "g-0").is_none()
    })
    .await;
    // The Events follow the eviction (the pod's, then the group's once all are evicted).
    eventually("GangRollback Events on the member and the group", || {
        !c.events("GangRollback", "g-0").is_empty() && !c.events("GangRollback", "g").is_empty()
    })
    .await;
    assert_eq!(c.node_of("g-1"), None, "the other member was never bound");
    eventually("the condition clears", || !partly_bound(&c)).await;

    // Room again, and the member made anew (as its controller would): the gang starts whole.
    c.server
        .delete("v1", "Pod", "default", "other")
        .expect("delete the other scheduler's pod");
    c.create(pod("g-0", "g", 4));
    eventually("the gang is bound whole", || {
        c.node_of("g-0").is_some() && c.node_of("g-1").is_some()
    })
    .await;
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_bind_leaves_no_gpu_ids_on_the_pod() {
    use basalt_apiserver::{FaultRule, Verb};
    let c = cluster(Config::default()).await;
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 1.0, 500))
        .unwrap();
    c.create(node("n1", 4));
    c.create(queue("q"));
    c.create(group("g", 1, "q"));
    c.create(pod("g-0", "g", 2));
    let _s = c.start_scheduler();
    eventually("a bind is tried and fails", || {
        c.group("g")["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k["type"] == "BindFailed")
    })
    .await;
    let p = c.pod("g-0");
    assert!(p["spec"]["nodeName"].is_null());
    assert!(
        p["metadata"]["annotations"]["scheduling.basalt.dev/gpu-ids"].is_null(),
        "a failed bind left GPU ids behind: {}",
        p["metadata"]
    );
}

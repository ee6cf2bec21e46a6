//! A node whose bound pods request more than it has (from any cause: here another scheduler's
//! pods) is reported with a Warning Event and gets nothing more bound until it is back under
//! capacity; a gang with a member that can only go there waits whole, and the rest of the
//! cluster schedules on.

mod common;

use std::time::Duration;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

fn pinned(mut p: serde_json::Value, node: &str) -> serde_json::Value {
    p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_over_capacity_is_reported_and_gets_no_binds_until_it_is_back_under() {
    let c = cluster(Config::default()).await;
    for n in ["n0", "n1"] {
        let mut node = node(n, 8);
        node["metadata"]["labels"] = json!({"kubernetes.io/hostname": n});
        c.create(node);
    }
    c.create(queue("q"));
    // 10 GPUs bound on an 8-GPU node.
    c.create(busy_pod("other-a", "n0", 5, None));
    c.create(busy_pod("other-b", "n0", 5, None));
    let _s = c.start_scheduler();

    // A gang of two CPU pods, one of which only n0 takes; and a pod for n1 alone.
    c.create(group("pair", 2, "q"));
    c.create(pinned(pod("pair-0", "pair", 0), "n0"));
    c.create(pinned(pod("pair-1", "pair", 0), "n1"));
    c.create(group("solo", 1, "q"));
    c.create(pinned(pod("solo-0", "solo", 0), "n1"));

    eventually("the node is reported over capacity", || {
        c.events("OverCapacity", "n0").iter().any(|e| {
            e["type"] == "Warning"
                && e["involvedObject"]["kind"] == "Node"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("nvidia.com/gpu 10 of 8"))
        })
    })
    .await;
    eventually("the rest of the cluster schedules", || {
        c.node_of("solo-0").is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(c.node_of("pair-0"), None, "bound on a node over capacity");
    assert_eq!(c.node_of("pair-1"), None, "a gang started in part");
    assert_eq!(c.events("OverCapacity", "n0").len(), 1, "said once");

    // Back under capacity: the gang binds whole.
    c.server.delete("v1", "Pod", "default", "other-b").unwrap();
    eventually(
        "the gang binds once the node is back under capacity",
        || c.node_of("pair-0").is_some() && c.node_of("pair-1").is_some(),
    )
    .await;
    assert_eq!(c.node_of("pair-0").as_deref(), Some("n0"));
}

//! Beside Volcano: Basalt writes nothing to a PodGroup that is not its own. A Volcano PodGroup
//! whose pods name Volcano keeps the status Volcano wrote, with no Basalt Event on it, while
//! Basalt schedules its own gangs beside it; one whose pods name both schedulers gets one
//! Warning Event and is otherwise left alone.

mod common;

use std::time::Duration;

use basalt_apiserver::{Config, PatchKind};
use common::*;
use serde_json::json;

const VOLCANO: &str = "scheduling.volcano.sh/v1beta1";

/// A pod Volcano bound: its scheduler name is Volcano's.
fn volcano_bound(name: &str, group: &str, node: &str) -> serde_json::Value {
    let mut p = volcano_pod(name, group, 1);
    p["spec"]["schedulerName"] = json!("volcano");
    p["spec"]["nodeName"] = json!(node);
    p["status"] = json!({"phase": "Running"});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_scheduler_s_podgroups_are_never_written() {
    let c = cluster(Config::default()).await;
    c.create(node("n0", 8));
    c.create(node("n1", 8));
    c.create(volcano_queue("vq"));
    c.create(queue("q"));
    // Volcano's job, running, its status as Volcano wrote it.
    c.create(volcano_group("vj", 2, "vq"));
    for i in 0..2 {
        c.create(volcano_bound(&format!("vj-{i}"), "vj", "n0"));
    }
    let running = json!({"status": {"phase": "Running", "running": 2}});
    (c.server)
        .patch_status(
            VOLCANO,
            "PodGroup",
            "default",
            "vj",
            PatchKind::Merge,
            &running,
        )
        .unwrap();
    // A group whose pods name both schedulers.
    c.create(volcano_group("mix", 2, "vq"));
    c.create(volcano_pod("mix-0", "mix", 1));
    let mut theirs = volcano_pod("mix-1", "mix", 1);
    theirs["spec"]["schedulerName"] = json!("volcano");
    c.create(theirs);

    let _s = c.start_scheduler();
    c.create(group("g", 2, "q"));
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 4));
    }
    eventually("Basalt's own gang binds", || {
        (0..2).all(|i| c.node_of(&format!("g-{i}")).is_some())
    })
    .await;
    eventually("the shared group is told once", || {
        !c.events("SchedulerConflict", "mix").is_empty()
    })
    .await;
    // 20 cycles of 200 ms.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let vj = c.volcano_group("vj");
    assert_eq!(vj["status"], running["status"], "Volcano's status kept");
    let about = |name: &str| {
        (c.server.list("v1", "Event").into_iter())
            .filter(|e| e["involvedObject"]["name"] == name)
            .count()
    };
    assert_eq!(about("vj"), 0, "no Basalt Event on Volcano's group");
    assert_eq!(about("mix"), 1, "one Warning on the shared group");
    assert!(
        c.volcano_group("mix")["status"].is_null(),
        "shared group untouched"
    );
    c.assert_no_node_over_capacity();
}

/// A Volcano PodGroup that arrives before its Queue (one `kubectl apply`, two watches) is
/// valid: it waits quietly for the queue, never reported `InvalidObject`, and runs once the
/// queue is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podgroup_seen_before_its_queue_is_not_reported_invalid() {
    let c = cluster(Config::default()).await;
    c.create(node("n0", 8));
    let _s = c.start_scheduler();
    c.create(volcano_group("early", 1, "later"));
    c.create(volcano_pod("early-0", "early", 1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        c.events("InvalidObject", "early").is_empty(),
        "a valid group reported invalid"
    );
    c.create(volcano_queue("later"));
    eventually("the group runs once its queue is seen", || {
        c.node_of("early-0").is_some()
    })
    .await;
    assert!(c.events("InvalidObject", "early").is_empty());
}

//! A namespace names the queue of its jobs that name none (`scheduling.basalt.dev/queue`):
//! a PodGroup without a queue and a groupless pod (whose auto PodGroup states none) are
//! admitted through it, and the Queue's status counts them.

mod common;

use basalt_apiserver::{Config, PatchKind};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_naming_no_queue_go_to_their_namespace_s_queue() {
    let c = cluster(Config::default()).await;
    c.server
        .patch(
            "v1",
            "Namespace",
            "",
            "default",
            PatchKind::Merge,
            &json!({"metadata": {"labels": {"scheduling.basalt.dev/queue": "research"}}}),
        )
        .expect("label the namespace");
    c.create(node("n1", 8));
    c.create(queue("research"));
    let mut g = group("g", 2, "research");
    g["spec"].as_object_mut().unwrap().remove("queue");
    c.create(g);
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 2));
    }
    let mut solo = pod("solo", "none", 1);
    solo["metadata"].as_object_mut().unwrap().remove("labels");
    c.create(solo);
    let _s = c.start_scheduler();

    eventually("the gang and the groupless pod bound", || {
        ["g-0", "g-1", "solo"]
            .iter()
            .all(|p| c.node_of(p).is_some())
    })
    .await;
    eventually("Queue research counts both jobs and their 5 GPUs", || {
        let q = c
            .server
            .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "research")
            .expect("queue exists");
        q["status"]["running"] == 2 && q["status"]["allocated"]["nvidia.com/gpu"] == "5"
    })
    .await;
    assert!(
        c.server
            .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "default")
            .is_none_or(|q| q["status"]["running"].as_i64().unwrap_or(0) == 0),
        "nothing went to the default queue"
    );
}

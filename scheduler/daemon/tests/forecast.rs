//! Issue 33 item 2 end to end, through the real scheduler and the in-memory API server: a
//! waiting gang's `status.forecast` says when it starts, from the stated run time of the pod
//! that holds its node; an expected-runtime that does not read gets a Warning Event.

use basalt_apiserver::{Config, PatchKind};
use serde_json::json;

mod common;

use common::*;

/// The scheduler's `--period` in `common` (the forecast's cycle grid).
const PERIOD_MS: i64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gang_is_forecast_to_start_when_the_stated_run_time_ends() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("q"));
    // Started a minute ago (a whole second), stated to run 10 minutes.
    let started = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 60).unwrap();
    let mut holder = busy_pod("holder", "n1", 8, None);
    holder["metadata"]["annotations"] = json!({"scheduling.basalt.dev/expected-runtime": "10m"});
    c.create(holder);
    let running = json!({"status": {"phase": "Running", "startTime": started.to_string()}});
    (c.server)
        .patch_status("v1", "Pod", "default", "holder", PatchKind::Merge, &running)
        .expect("holder's status written");
    // Its own run time does not read: reported, and no matter to when it starts.
    let mut wait = group("wait", 1, "q");
    wait["metadata"]["annotations"] =
        json!({"scheduling.basalt.dev/expected-runtime": "ten minutes"});
    c.create(wait);
    c.create(pod("wait-0", "wait", 8));
    let _s = c.start_with(&["--forecast-interval", "1s"]);
    let expected = started.as_millisecond() + 10 * 60 * 1000;
    eventually(
        "wait's status.forecast is exact, at the holder's end",
        || {
            let g = c.group("wait");
            let f = &g["status"]["forecast"];
            let start = (f["start"].as_str()).and_then(|s| s.parse::<jiff::Timestamp>().ok());
            f["method"] == "exact"
                && f["computedAt"].is_string()
                && start.is_some_and(|s| {
                    let ms = s.as_millisecond();
                    (expected..=expected + PERIOD_MS).contains(&ms)
                })
        },
    )
    .await;
    eventually(
        "the bad annotation is a Warning Event on its PodGroup",
        || {
            (c.events("InvalidExpectedRuntime", "wait").iter()).any(|e| {
                e["type"] == "Warning"
                    && e["message"].as_str().is_some_and(|m| {
                        m.contains("PodGroup default/wait")
                            && m.contains("scheduling.basalt.dev/expected-runtime")
                    })
            })
        },
    )
    .await;
    assert!(c.node_of("wait-0").is_none(), "the gang still waits");
}

//! An idle scheduler runs no cycle, and what is timed still happens on time without an event
//! (`src/wake.rs`); with usage on too, though its usage grows while a queue holds GPUs: the
//! Queue status it writes comes back as a watch event, and must not wake a cycle that writes
//! again (issue 36).

mod common;

use std::time::Duration;

use basalt_apiserver::Config;
use common::*;

fn cycles(addr: &str) -> f64 {
    let text = http_get(addr, "/metrics").unwrap_or_default();
    let name = "basalt_scheduler_cycle_duration_seconds_count ";
    (text.lines())
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// The scheduler's own writes come back as watch events, a cycle or two; then nothing: over
/// fifteen periods (200 ms) with nothing changed, not one cycle.
async fn assert_idle(addr: &str) {
    let mut settled = cycles(addr);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cycles(addr);
        if now == settled {
            break;
        }
        settled = now;
    }
    assert!(settled >= 1.0, "cycles ran: {settled}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = cycles(addr);
    assert_eq!(after - settled, 0.0, "cycles ran with nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_scheduler_runs_no_cycle_and_a_grace_still_ends_on_time() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 2, "research"));
    c.create(pod("g-0", "g", 1));
    c.create(pod("g-1", "g", 1));
    let addr = free_addr();
    let _s = c.start_with(&["--listen", &addr]);
    eventually("the gang bound and Running", || {
        c.group("g")["status"]["phase"] == "Running"
    })
    .await;
    assert_idle(&addr).await;
    let health = http_get(&addr, "/healthz").unwrap_or_default();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    // A group naming a queue the watches have not shown waits 5 s quietly, then is reported:
    // no event comes at the end of that grace, its deadline wakes the cycle.
    c.create(group("orphan", 1, "no-such-queue"));
    c.create(pod("orphan-0", "orphan", 1));
    eventually(
        "an InvalidObject event on the group once its grace ended",
        || {
            c.events("InvalidObject", "orphan")
                .iter()
                .any(|e| (e["message"].as_str()).is_some_and(|m| m.contains("no-such-queue")))
        },
    )
    .await;
    assert_eq!(c.node_of("orphan-0"), None);
}

/// A queue holding GPUs, nothing pending, usage on: its usage grows with time alone, which is
/// no reason to cycle (the record's instant and holding say it at any later instant).
async fn idle_with_usage(half_life: &str) {
    let c = cluster(Config::default()).await;
    let path = c.dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!("fairness:\n  usage:\n    halfLife: {half_life}\n"),
    )
    .unwrap();
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 1, "research"));
    c.create(pod("g-0", "g", 4));
    let addr = free_addr();
    let _s = c.start_with(&["--config", path.to_str().unwrap(), "--listen", &addr]);
    let research = || {
        (c.server)
            .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "research")
            .unwrap_or_default()
    };
    eventually("the group Running and its queue's usage recorded", || {
        c.group("g")["status"]["phase"] == "Running"
            && research()["status"]["usage"]["takenAt"].is_string()
    })
    .await;
    assert_idle(&addr).await;
    // The record says what the queue holds from its instant on: the usage at any later one.
    let usage = &research()["status"]["usage"];
    assert_eq!(usage["held"]["nvidia.com/gpu"], "4", "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_scheduler_with_usage_over_an_hour_runs_no_cycle() {
    idle_with_usage("1h").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_scheduler_with_usage_over_ten_seconds_runs_no_cycle() {
    idle_with_usage("10s").await;
}

//! An idle scheduler runs no cycle, and what is timed still happens on time without an event
//! (`src/wake.rs`).

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
    // The scheduler's own writes come back as watch events, a cycle or two; then nothing.
    let mut settled = cycles(&addr);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cycles(&addr);
        if now == settled {
            break;
        }
        settled = now;
    }
    assert!(settled >= 1.0, "cycles ran: {settled}");
    // Fifteen periods (200 ms) with nothing changed: not one cycle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cycles(&addr), settled, "cycles ran with nothing changed");
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

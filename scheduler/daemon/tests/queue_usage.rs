//! Fairness over time survives a restart (issue 36): with `fairness.usage.halfLife` set, a
//! queue running a workload gets `status.usage` with the instant it was taken, the gauge
//! `basalt_scheduler_queue_usage` says the same, and a scheduler started again goes on from
//! the status (decayed from it), not from nothing; so does a follower that takes the lease
//! over from a leader gone.

mod common;

use basalt_apiserver::Config;
use common::*;
use k8s_openapi::jiff::Timestamp;

const HALF_LIFE_MS: f64 = 10_000.0;

/// The research queue's GPU usage and the instant it was taken, once written.
fn usage(c: &Cluster) -> Option<(f64, i64)> {
    let q = c
        .server
        .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "research")?;
    let u = &q["status"]["usage"];
    let gpus: f64 = u["resources"]["nvidia.com/gpu"].as_str()?.parse().ok()?;
    let at: Timestamp = u["takenAt"].as_str()?.parse().ok()?;
    Some((gpus, at.as_millisecond()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_written_to_queue_status_and_read_back_after_a_restart() {
    let c = cluster(Config::default()).await;
    let path = c.dir.path().join("config.yaml");
    std::fs::write(&path, "fairness:\n  usage:\n    halfLife: 10s\n").unwrap();
    let config = ["--config", path.to_str().unwrap()];
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g1", 1, "research"));
    c.create(pod("g1-0", "g1", 4));
    let metrics_at = free_addr();
    let mut args = config.to_vec();
    args.extend(["--listen", &metrics_at]);
    let s = c.start_with(&args);

    // Holding 4 GPUs from the first record on: 4·(1 − 2^(−t/10 s)) climbs past 1 in ~4 s.
    eventually("Queue research records usage over 1 GPU", || {
        usage(&c).is_some_and(|(gpus, _)| gpus > 1.0)
    })
    .await;
    eventually("the gauge shows the research queue's usage", || {
        http_get(&metrics_at, "/metrics").is_some_and(|m| {
            m.lines().any(|l| {
                l.starts_with(
                    r#"basalt_scheduler_queue_usage{queue="research",resource="nvidia.com/gpu"} "#,
                )
            })
        })
    })
    .await;

    // Stopped, the workload gone: the queue holds nothing from the last record on.
    drop(s);
    let (before, taken) = usage(&c).expect("written");
    c.server
        .delete("v1", "Pod", "default", "g1-0")
        .expect("pod deleted");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _s = c.start_with(&config);

    // Read back, the usage only decays: before·2^(−age/halfLife) at the new instant. Started
    // from nothing it would stay 0.
    let mut after = None;
    eventually("a usage written after the restart", || {
        after = usage(&c).filter(|&(_, at)| at > taken);
        after.is_some()
    })
    .await;
    let (gpus, at) = after.unwrap();
    let expected = before * 0.5f64.powf((at - taken) as f64 / HALF_LIFE_MS);
    assert!(
        gpus > 0.0 && gpus < before,
        "{gpus} after {before}: decayed from the status, not started anew"
    );
    // Four digits written each time.
    assert!(
        (gpus - expected).abs() <= expected * 2e-3,
        "{gpus} written {} ms after {before}, expected {expected}",
        at - taken
    );
}

/// Leader change: replica `one` leads and records usage; `two` follows (it runs no cycles, so
/// it carries nothing of its own). `one` goes away with the workload, `two` takes the lease
/// when it expires and writes a usage decayed from `one`'s record: before·2^(−age/halfLife).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_read_back_from_queue_status_on_leader_change() {
    let c = cluster(Config::default()).await;
    let path = c.dir.path().join("config.yaml");
    std::fs::write(&path, "fairness:\n  usage:\n    halfLife: 10s\n").unwrap();
    let replica = |identity: &'static str| {
        let config = path.to_str().unwrap().to_string();
        let args = [
            "--config",
            &config,
            "--leader-elect",
            "--lease-duration",
            "3s",
            "--identity",
            identity,
        ];
        c.start_with(&args)
    };
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g1", 1, "research"));
    c.create(pod("g1-0", "g1", 4));
    let one = replica("one");
    eventually("the leader records usage over 1 GPU", || {
        usage(&c).is_some_and(|(gpus, _)| gpus > 1.0)
    })
    .await;
    let _two = replica("two");
    std::thread::sleep(std::time::Duration::from_millis(500));

    drop(one);
    let (before, taken) = usage(&c).expect("written");
    c.server
        .delete("v1", "Pod", "default", "g1-0")
        .expect("pod deleted");
    let mut after = None;
    eventually("the new leader writes a usage", || {
        after = usage(&c).filter(|&(_, at)| at > taken);
        after.is_some()
    })
    .await;
    let (gpus, at) = after.unwrap();
    let expected = before * 0.5f64.powf((at - taken) as f64 / HALF_LIFE_MS);
    assert!(
        gpus > 0.0 && gpus < before,
        "{gpus} after {before}: decayed from the status, not started anew"
    );
    assert!(
        (gpus - expected).abs() <= expected * 2e-3,
        "{gpus} written {} ms after {before}, expected {expected}",
        at - taken
    );
}

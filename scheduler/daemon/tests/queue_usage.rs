//! Fairness over time survives a restart (issue 36): with `fairness.usage.halfLife` set, a
//! queue running a workload gets `status.usage` with the instant it was taken and what it held
//! from then on (rewritten when that changes: the record says the usage at any later instant),
//! the gauge `basalt_scheduler_queue_usage` says it too, and a scheduler started again goes on
//! from the status, not from nothing; so does a follower that takes the lease over from a
//! leader gone.

mod common;

use basalt_apiserver::Config;
use common::*;
use k8s_openapi::jiff::Timestamp;

const HALF_LIFE_MS: f64 = 10_000.0;

/// The research queue's usage record, once written: GPUs used, the instant taken, and GPUs
/// held from then on.
fn record(c: &Cluster) -> Option<(f64, i64, f64)> {
    let q = c
        .server
        .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "research")?;
    let u = &q["status"]["usage"];
    let gpus: f64 =
        (u["resources"]["nvidia.com/gpu"].as_str()).map_or(Some(0.0), |t| t.parse().ok())?;
    let at: Timestamp = u["takenAt"].as_str()?.parse().ok()?;
    let held: f64 = (u["held"]["nvidia.com/gpu"].as_str()).map_or(Some(0.0), |t| t.parse().ok())?;
    Some((gpus, at.as_millisecond(), held))
}

/// The GPU usage the record says at `now_ms`: `used·d + held·(1 − d)`, `d = 2^(−age/halfLife)`.
fn usage_at((used, at, held): (f64, i64, f64), now_ms: i64) -> f64 {
    let d = 0.5f64.powf((now_ms - at) as f64 / HALF_LIFE_MS);
    used * d + held * (1.0 - d)
}

/// The research queue's usage now and the instant its record was taken, once written.
fn usage(c: &Cluster) -> Option<(f64, i64)> {
    let r = record(c)?;
    Some((usage_at(r, Timestamp::now().as_millisecond()), r.1))
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
    let before = record(&c).expect("written");
    let taken = before.1;
    c.server
        .delete("v1", "Pod", "default", "g1-0")
        .expect("pod deleted");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _s = c.start_with(&config);

    // Read back: the record charged to the new instant, `used·d + held·(1 − d)`. Started from
    // nothing it would stay 0.
    let mut after = None;
    eventually("a usage written after the restart", || {
        after = record(&c).filter(|&(_, at, _)| at > taken);
        after.is_some()
    })
    .await;
    let (gpus, at, held) = after.unwrap();
    // The old record charged to the new instant: what it held since, on the usage it had.
    let expected = usage_at(before, at);
    assert_eq!(held, 0.0, "nothing held from the new record on");
    assert!(
        gpus > 1.0,
        "{gpus} after {before:?}: read back from the status, not started anew"
    );
    // Four digits written each time.
    assert!(
        (gpus - expected).abs() <= expected * 2e-3,
        "{gpus} written {} ms after {before:?}, expected {expected}",
        at - taken
    );
}

/// Leader change: replica `one` leads and records usage; `two` follows (it runs no cycles, so
/// it carries nothing of its own). `one` goes away with the workload, `two` takes the lease
/// when it expires and writes a usage read back from `one`'s record, charged to its instant.
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
    let before = record(&c).expect("written");
    let taken = before.1;
    c.server
        .delete("v1", "Pod", "default", "g1-0")
        .expect("pod deleted");
    let mut after = None;
    eventually("the new leader writes a usage", || {
        after = record(&c).filter(|&(_, at, _)| at > taken);
        after.is_some()
    })
    .await;
    let (gpus, at, held) = after.unwrap();
    // The old record charged to the new instant: what it held since, on the usage it had.
    let expected = usage_at(before, at);
    assert_eq!(held, 0.0, "nothing held from the new record on");
    assert!(
        gpus > 1.0,
        "{gpus} after {before:?}: read back from the status, not started anew"
    );
    assert!(
        (gpus - expected).abs() <= expected * 2e-3,
        "{gpus} written {} ms after {before:?}, expected {expected}",
        at - taken
    );
}

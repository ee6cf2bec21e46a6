//! `basalt-sim replay` and `compare` through the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("basalt-replay-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sim(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("basalt-sim runs")
}

fn sample(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn default_replay_writes_a_complete_report() {
    let dir = workdir("default");
    let out = sim(&dir, &["replay"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("jobs finished") && stdout.contains("600/600"),
        "{stdout}"
    );
    assert!(!stdout.contains("PARTIAL"));
    assert!(stderr.contains("events/s"), "{stderr}");
    let report = dir.join("basalt-report");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["complete"], true);
    assert_eq!(summary["jobs"], 600);
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.starts_with("# Basalt replay report\n"), "{md}");
    assert!(!md.contains("PARTIAL"));
    for f in [
        "allocation.svg",
        "allocation.png",
        "jct_cdf.svg",
        "jct_cdf.png",
        "queue_share.svg",
        "queue_share.png",
        "timeseries.csv",
        "queue_share.csv",
        "jobs.csv",
    ] {
        assert!(report.join(f).is_file(), "{f} missing");
        assert!(md.contains(f), "report.md does not link {f}");
    }
    let png = std::fs::read(report.join("allocation.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let svg = std::fs::read_to_string(report.join("allocation.svg")).unwrap();
    assert!(svg.contains("GPU allocation over time"));
    // Same inputs, same summary bytes.
    let first = std::fs::read(report.join("summary.json")).unwrap();
    let again = sim(&dir, &["replay"]);
    assert!(
        again.status.success(),
        "second run: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(first, std::fs::read(report.join("summary.json")).unwrap());
}

#[test]
fn compare_prints_one_column_per_config() {
    let dir = workdir("compare");
    std::fs::write(dir.join("binpack.yaml"), "nodeOrder: {policy: binpack}\n").unwrap();
    std::fs::write(dir.join("spread.yaml"), "nodeOrder: {policy: spread}\n").unwrap();
    let trace = sample("native-sample.csv");
    let out = sim(
        &dir,
        &[
            "compare",
            "--config",
            "binpack.yaml",
            "--config",
            "spread.yaml",
            "--trace",
            &trace,
            "--nodes",
            "4",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header = stdout.lines().next().unwrap();
    assert!(
        header.contains("binpack") && header.contains("spread"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("JCT p99 (s)")),
        "{stdout}"
    );
    let report = dir.join("basalt-compare");
    assert!(report.join("report.md").is_file());
    assert!(report.join("run-1/summary.json").is_file());
    assert!(report.join("run-2/summary.json").is_file());
    assert!(report.join("jct_cdf.png").is_file());
}

/// Exit 2, empty stdout, stderr containing every fragment, and no report written.
fn assert_rejected(dir: &Path, out: &Output, fragments: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for f in fragments {
        assert!(stderr.contains(f), "stderr lacks {f:?}: {stderr}");
    }
    assert!(!dir.join("basalt-report").exists());
}

#[test]
fn bad_input_is_rejected_without_a_report() {
    let dir = workdir("bad");
    std::fs::write(
        dir.join("t.csv"),
        "job,submit_s,duration_s,cpu,memory\nj,0,10,1,lots\n",
    )
    .unwrap();
    let out = sim(&dir, &["replay", "--trace", "t.csv"]);
    assert_rejected(&dir, &out, &["t.csv", "line 2", "memory"]);
    std::fs::write(dir.join("c.yaml"), "nodeOrder: {policy: roundrobin}\n").unwrap();
    let out = sim(&dir, &["replay", "--config", "c.yaml"]);
    assert_rejected(&dir, &out, &["c.yaml", "roundrobin"]);
    let out = sim(&dir, &["replay", "--quota", "elastic"]);
    assert_rejected(&dir, &out, &["elastic"]);
    let out = sim(&dir, &["replay", "--trace", "missing.csv"]);
    assert_rejected(&dir, &out, &["missing.csv"]);
}

#[test]
fn a_trace_value_that_would_wrap_is_rejected_without_a_report() {
    let dir = workdir("wrap");
    std::fs::write(
        dir.join("trace.csv"),
        "job,submit_s,duration_s,cpu,memory,min_member\nj,0,10,1,1Gi,1\nk,0,10,1,1Gi,4294967297\n",
    )
    .unwrap();
    let out = sim(&dir, &["replay", "--trace", "trace.csv"]);
    assert_rejected(
        &dir,
        &out,
        &["trace.csv: line 3: min_member: 4294967297 is out of range"],
    );
    std::fs::write(
        dir.join("trace.json"),
        r#"{"queues": [{"name": "a"}, {"name": "a"}], "jobs": [{"name": "j", "queue": "a", "submit": 0, "duration": 1, "pods": [{"cpu": "1", "memory": "1Gi"}]}]}"#,
    )
    .unwrap();
    let out = sim(&dir, &["replay", "--trace", "trace.json"]);
    assert_rejected(
        &dir,
        &out,
        &[r#"trace.json: queues[1].name: duplicate queue "a" (first at queues[0])"#],
    );
    let out = sim(
        &dir,
        &["compare", "--trace", "trace.json", "--config", "default"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("queues[1].name"));
    assert!(!dir.join("basalt-compare").exists());
}

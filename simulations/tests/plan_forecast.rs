//! `basalt-sim plan --explain NS/JOB` ends with the job's forecast, through the binary: the
//! same engine call as the daemon's forecast, with pod ends read from the dump.

use std::process::Command;

/// One 8-GPU node held by `ml/holder` (started 12:00, `deadline` seconds allowed, when given)
/// and `ml/waiter`, a one-pod gang of 8 GPUs that waits for it.
fn dump(deadline: Option<u32>) -> String {
    let deadline = deadline
        .map(|s| format!("activeDeadlineSeconds: {s}, "))
        .unwrap_or_default();
    let pod = |name: &str, spec: &str, status: &str| {
        format!(
            "- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}-0, namespace: ml, labels: \
             {{scheduling.basalt.dev/pod-group: {name}}}}}, spec: {{schedulerName: basalt, \
             {spec}containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: \
             \"8\"}}}}}}]}}{status}}}\n"
        )
    };
    let group = |name: &str| {
        format!(
            "- {{apiVersion: scheduling.basalt.dev/v1alpha1, kind: PodGroup, metadata: {{name: \
             {name}, namespace: ml}}, spec: {{minMember: 1}}}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {{apiVersion: v1, kind: Node, metadata: {{name: n0}}, status: {{allocatable: {{cpu: \
         \"64\", memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"8\"}}}}}}\n{}{}{}{}",
        group("holder"),
        pod(
            "holder",
            &format!("nodeName: n0, {deadline}"),
            ", status: {phase: Running, startTime: \"2026-01-01T12:00:00Z\"}"
        ),
        group("waiter"),
        pod("waiter", "", ""),
    )
}

fn explain(dump: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.yaml");
    std::fs::write(&file, dump).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(["plan", "--snapshot", file.to_str().unwrap()])
        .args(["--now", "2026-01-01T12:10:00Z", "--explain", "ml/waiter"])
        .output()
        .expect("basalt-sim runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn explain_prints_the_exact_start_at_the_holders_deadline() {
    let out = explain(&dump(Some(3600)));
    assert!(out.contains("WHY ml/waiter"), "{out}");
    let forecast = &out[out.find("\nFORECAST\n").expect("a FORECAST section")..];
    assert!(
        forecast.contains("ml/waiter: starts 2026-01-01T13:00:00Z (exact)"),
        "{out}"
    );
}

#[test]
fn explain_says_unknown_when_the_holder_has_no_known_end() {
    let out = explain(&dump(None));
    assert!(out.contains("\nFORECAST\nml/waiter: unknown"), "{out}");
}

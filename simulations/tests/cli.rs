//! The `basalt-sim` binary on bad input: a message naming the file, the object and the field,
//! exit code 2, and nothing on stdout.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bad(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/bad")
        .join(name)
}

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(args)
        .output()
        .expect("basalt-sim runs")
}

/// `plan --strict`: the whole dump refused at its first bad object.
fn plan(file: &Path) -> Output {
    sim(&[
        "plan",
        "--strict",
        "--output",
        "json",
        "--snapshot",
        file.to_str().unwrap(),
    ])
}

/// Without `--strict`, as the scheduler reads a cluster: each bad object is left out with an
/// error naming it and its field, and the rest is planned.
#[test]
fn plan_leaves_one_bad_object_out_and_plans_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.yaml");
    let example = include_str!("../../examples/cluster.yaml");
    let bad = "---\napiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\n\
               metadata: {name: big, namespace: default}\nspec: {minMember: 2147483648}\n";
    std::fs::write(&file, format!("{example}\n{bad}")).unwrap();
    let out = sim(&["plan", "--snapshot", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("PodGroup default/big: spec.minMember") && stderr.contains("left out"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("BINDINGS ("), "{stdout}");
    assert!(
        !stdout.contains("BINDINGS (0)"),
        "the rest is planned: {stdout}"
    );
}

/// A PodGroup naming a parent queue is reported and left out with its pod; the rest is
/// planned (issue 32: one bad group does not sink `plan`).
#[test]
fn a_group_in_a_parent_queue_is_left_out_and_the_rest_planned() {
    let file = bad("group-in-parent-queue.yaml");
    let out = sim(&[
        "plan",
        "--output",
        "json",
        "--snapshot",
        file.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("PodGroup ml/wrong: spec.queue: queue org has child queues"),
        "{stderr}"
    );
    let planned: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bindings = planned["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 1, "{planned}");
    assert_eq!(bindings[0]["pod"], "ml/b", "{planned}");
    assert_rejected(
        &plan(&file),
        &[
            "group-in-parent-queue.yaml",
            "PodGroup ml/wrong",
            "child queues",
        ],
    );
}

/// A pod whose owner (a training job) is not in the dump is planned alone: said, with the fix.
#[test]
fn plan_says_when_a_pods_owner_is_not_in_the_dump() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.yaml");
    let dump = r#"
apiVersion: v1
kind: Node
metadata: {name: n0}
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "8"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: train-worker-0
  namespace: ml
  ownerReferences:
  - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: train, uid: u1, controller: true}
spec:
  schedulerName: basalt
  containers: [{name: main, image: t, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
"#;
    std::fs::write(&file, dump).unwrap();
    let out = sim(&["plan", "--snapshot", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("PyTorchJob ml/train")
            && stderr.contains("kubectl get pytorchjob.kubeflow.org -A -o yaml"),
        "{stderr}"
    );
}

/// Exit 2, empty stdout, and stderr containing every fragment.
fn assert_rejected(out: &Output, fragments: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout not empty: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for f in fragments {
        assert!(stderr.contains(f), "stderr lacks {f:?}: {stderr}");
    }
}

#[test]
fn broken_yaml_names_file_and_position() {
    assert_rejected(
        &plan(&bad("broken-yaml.yaml")),
        &["broken-yaml.yaml", "line"],
    );
}

#[test]
fn min_member_negative() {
    // 0 is legal (no gang minimum, see scenarios/min-member-zero); below 0 is not.
    assert_rejected(
        &plan(&bad("min-member-negative.yaml")),
        &[
            "min-member-negative.yaml",
            "PodGroup team/broken",
            "spec.minMember: must not be negative, got -1",
        ],
    );
}

#[test]
fn pod_naming_missing_podgroup() {
    assert_rejected(
        &plan(&bad("missing-podgroup.yaml")),
        &[
            "missing-podgroup.yaml",
            "Pod team/lost",
            "pod group",
            "team/nowhere",
        ],
    );
}

#[test]
fn queue_with_missing_parent() {
    assert_rejected(
        &plan(&bad("queue-missing-parent.yaml")),
        &[
            "queue-missing-parent.yaml",
            "Queue team-a",
            "spec.parent",
            "org",
        ],
    );
}

#[test]
fn unparsable_quantity() {
    assert_rejected(
        &plan(&bad("bad-quantity.yaml")),
        &[
            "bad-quantity.yaml",
            "Pod team/greedy",
            "requests",
            "cpu",
            "lots",
        ],
    );
}

#[test]
fn missing_file() {
    assert_rejected(&plan(&bad("does-not-exist.yaml")), &["does-not-exist.yaml"]);
}

/// Over the size limit: refused before it is held (an endless stream included).
#[test]
fn a_snapshot_over_the_size_limit_is_refused() {
    let zero = Path::new("/dev/zero");
    if zero.exists() {
        assert_rejected(
            &plan(zero),
            &["/dev/zero: more than 67108864 bytes, the limit of 64 MiB a file"],
        );
    }
}

#[test]
fn config_unknown_field_is_named() {
    let config = bad("unknown-config-field.config.yaml");
    let out = sim(&[
        "plan",
        "--config",
        config.to_str().unwrap(),
        "--snapshot",
        bad("min-member-zero.yaml").to_str().unwrap(),
    ]);
    assert_rejected(&out, &["unknown-config-field.config.yaml", "weigths"]);
}

#[test]
fn allocate_only_config_is_valid() {
    let config = bad("allocate-only.config.yaml");
    let out = sim(&["plan", "--config", config.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn default_run_plans_the_builtin_example() {
    let out = sim(&["plan"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("research/llama-pretrain  Running"), "{text}");
    assert!(text.contains("0/6 nodes are available"), "{text}");
}

#[test]
fn same_input_gives_identical_json() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster.yaml");
    let a = plan(&example);
    let b = plan(&example);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn bench_reports_json() {
    let out = sim(&[
        "bench",
        "--nodes",
        "50",
        "--pods",
        "80",
        "--gang-size",
        "8",
        "--runs",
        "1",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["podsPlaced"], 80);
    assert_eq!(v["gangsRunning"], 10);
    assert!(
        v.get("unconstrainedCycleMs").is_none(),
        "only a constrained bench has one"
    );
}

/// The plan digest: the same sharing backlog gives the same digest in one cycle or in the third
/// (the runs carry their node state in a `Warm`, which never changes a plan), another backlog
/// another digest.
#[test]
fn bench_plan_digest_names_the_plan() {
    let digest = |args: &[&str]| {
        let base = [
            "bench", "--nodes", "40", "--pods", "200", "--output", "json",
        ];
        let out = sim(&[&base[..], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let digest = v["planDigest"].as_str().unwrap().to_string();
        assert!(digest.len() == 16 && digest.chars().all(|c| c.is_ascii_hexdigit()));
        digest
    };
    let once = digest(&["--sharing", "--runs", "1"]);
    assert_eq!(digest(&["--sharing", "--runs", "3"]), once);
    assert_ne!(digest(&["--runs", "1"]), once);
}

/// The constrained backlog: every job fits when the rules are kept (320 nodes of 8 GPUs in ten
/// zones of a rack each, for 80 gangs of eight 1-GPU pods: 16 of them one pod per node, 16
/// spread over the zones).
#[test]
fn bench_constrained_backlog_places_every_gang() {
    let out = sim(&[
        "bench",
        "--nodes",
        "320",
        "--pods",
        "640",
        "--constrained",
        "--runs",
        "1",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["constrained"], true);
    assert_eq!(v["podsPlaced"], 640);
    assert_eq!(v["gangsRunning"], 80);
    // The same backlog without its constraints is timed beside it, for the ratio.
    assert!(v["unconstrainedCycleMs"]
        .as_f64()
        .is_some_and(|ms| ms > 0.0));
    let both = sim(&["bench", "--constrained", "--fabric"]);
    assert!(
        !both.status.success(),
        "--constrained with --fabric is refused"
    );
}

/// A pod asking 2^63-1 of memory, milli-CPU or GPUs, or two containers summing past 2^60: `plan`
/// finishes (it used to loop forever in the fair-share water-filling) with an error naming the
/// pod and the field.
#[test]
fn requests_of_two_to_the_sixty_three_finish_with_the_pod_named() {
    for (file, field) in [
        (
            "huge-memory.yaml",
            "spec.containers[0].resources.requests[memory]",
        ),
        (
            "huge-cpu.yaml",
            "spec.containers[0].resources.requests[cpu]",
        ),
        (
            "huge-nvidia-com-gpu.yaml",
            "spec.containers[0].resources.requests[nvidia.com/gpu]",
        ),
        (
            "huge-sum.yaml",
            "spec.containers[1].resources.requests[memory]",
        ),
    ] {
        let pod = if file == "huge-sum.yaml" {
            "Pod team/pair"
        } else {
            "Pod team/greedy"
        };
        assert_rejected(&plan(&bad(file)), &[file, pod, field]);
    }
}

/// Prior usage comes from the Queues' status in the dump and `--now` decays it: `a`'s 8 GPUs
/// and `b`'s 4, one half-life old, read 4 and 2 (the queues hold nothing since). The QUEUES
/// table shows them with the adjusted weights: u = 2/3 and 1/3 of the usage against w = 1/2
/// each, so `a` 1/2 + (1/2 − 2/3) = 1/3 and `b` 2/3.
#[test]
fn plan_shows_usage_read_from_queue_status_and_the_adjusted_weight() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.yaml");
    let config = dir.path().join("config.yaml");
    let queue = |name: &str, gpus: u32| {
        format!(
            "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\n\
             spec: {{weight: 1}}\n\
             status: {{usage: {{takenAt: \"2026-01-01T12:00:00Z\", resources: {{nvidia.com/gpu: \"{gpus}\"}}}}}}\n---\n"
        )
    };
    let dump = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: n0}}\n\
         status: {{allocatable: {{cpu: \"64\", memory: 256Gi, pods: \"110\", nvidia.com/gpu: \"16\"}}}}\n---\n{}{}",
        queue("a", 8),
        queue("b", 4)
    );
    std::fs::write(&file, dump).unwrap();
    std::fs::write(&config, "fairness:\n  usage:\n    halfLife: 10m\n").unwrap();
    let out = sim(&[
        "plan",
        "--snapshot",
        file.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--now",
        "2026-01-01T12:10:00Z",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |name: &str| {
        let line = stdout.lines().find(|l| l.starts_with(&format!("{name} ")));
        let cells: Vec<String> = line
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        cells
    };
    assert!(stdout.contains("USAGE-WEIGHT"), "{stdout}");
    let (a, b) = (row("a"), row("b"));
    assert_eq!(a[a.len() - 2..], ["nvidia.com/gpu=4", "0.333"], "{stdout}");
    assert_eq!(b[b.len() - 2..], ["nvidia.com/gpu=2", "0.667"], "{stdout}");
}

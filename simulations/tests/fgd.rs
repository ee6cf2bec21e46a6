//! `basalt-sim fgd` through the binary: the JSON shape, the default run on the bundled sample,
//! determinism, and bad input (exit 2, a message naming the file and line, the policy or the
//! column, nothing on stdout).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(args)
        .output()
        .expect("basalt-sim runs")
}

fn json(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces/openb-sample")
        .join(name)
        .display()
        .to_string()
}

/// A scratch file holding `text`, unique per test.
fn scratch(name: &str, text: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fgd-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn assert_rejected(out: &Output, fragments: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for f in fragments {
        assert!(stderr.contains(f), "stderr lacks {f:?}: {stderr}");
    }
}

fn check_curve(v: &Value, policy: &str) {
    let obj = v.as_object().expect("an object per policy");
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    assert_eq!(keys, ["points", "policy"]);
    assert_eq!(v["policy"], policy);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 26);
    for (i, p) in points.iter().enumerate() {
        let obj = p.as_object().unwrap();
        assert_eq!(obj.len(), 2);
        assert_eq!(p["arrived_gpu_pct"].as_u64(), Some(5 * (i as u64 + 1)));
        let u = p["unallocated_gpu_pct"].as_f64().expect("a number");
        assert!((0.0..=100.0).contains(&u), "{u}");
    }
    // Nearly everything fits at 5 % load; at 5 % arrived, unallocated is about 95 %.
    let first = points[0]["unallocated_gpu_pct"].as_f64().unwrap();
    assert!((first - 95.0).abs() < 2.0, "{first}");
}

#[test]
fn default_run_uses_the_bundled_sample_and_one_policy_is_one_object() {
    let out = sim(&[
        "fgd", "--policy", "fgd", "--seeds", "42,43", "--output", "json",
    ]);
    let v = json(&out);
    check_curve(&v, "fgd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bundled sample"), "{stderr}");
}

#[test]
fn explicit_files_equal_the_default_sample() {
    let a = sim(&[
        "fgd", "--policy", "bestfit", "--seeds", "1-3", "--output", "json",
    ]);
    let b = sim(&[
        "fgd",
        "--nodes",
        &sample("nodes.csv"),
        "--pods",
        &sample("pods.csv"),
        "--policy",
        "bestfit",
        "--seeds",
        "1-3",
        "--output",
        "json",
    ]);
    assert_eq!(json(&a), json(&b));
    assert!(!String::from_utf8_lossy(&b.stderr).contains("bundled sample"));
}

#[test]
fn several_policies_give_an_array_in_the_order_asked() {
    let v = json(&sim(&[
        "fgd",
        "--policy",
        "random,fgd",
        "--seeds",
        "42",
        "--output",
        "json",
    ]));
    let arr = v.as_array().expect("an array for several policies");
    assert_eq!(arr.len(), 2);
    check_curve(&arr[0], "random");
    check_curve(&arr[1], "fgd");
    let v = json(&sim(&[
        "fgd", "--policy", "all", "--seeds", "42", "--output", "json",
    ]));
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "random",
            "dotprod",
            "clustering",
            "packing",
            "bestfit",
            "fgd",
            "basalt"
        ]
    );
}

#[test]
fn same_arguments_same_output() {
    let args = ["fgd", "--seeds", "42-45", "--output", "json", "--jobs", "3"];
    let a = sim(&args);
    let b = sim(&args);
    assert_eq!(a.status.code(), Some(0));
    assert_eq!(a.stdout, b.stdout);
    // Fewer workers, same numbers.
    let c = sim(&["fgd", "--seeds", "42-45", "--output", "json", "--jobs", "1"]);
    assert_eq!(a.stdout, c.stdout);
}

#[test]
fn seeds_change_the_result() {
    let a = json(&sim(&[
        "fgd", "--policy", "random", "--seeds", "1", "--output", "json",
    ]));
    let b = json(&sim(&[
        "fgd", "--policy", "random", "--seeds", "2", "--output", "json",
    ]));
    assert_ne!(a, b);
}

#[test]
fn text_output_is_a_table() {
    let out = sim(&["fgd", "--policy", "fgd,bestfit", "--seeds", "42"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("arrived%"), "{text}");
    assert!(text.contains("fgd") && text.contains("bestfit"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("130 "))
            .count(),
        1
    );
}

#[test]
fn unknown_policy_is_named() {
    assert_rejected(
        &sim(&["fgd", "--policy", "fgd,worstfit"]),
        &["worstfit", "unknown policy"],
    );
}

#[test]
fn bad_seeds_are_named() {
    assert_rejected(&sim(&["fgd", "--seeds", "9-3"]), &["--seeds", "9-3"]);
}

#[test]
fn malformed_pod_row_names_file_and_line() {
    let pods = scratch(
        "bad-row.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\
         p0,1000,1024,1,500,\n\
         p1,1000,1024,one,500,\n",
    );
    assert_rejected(
        &sim(&["fgd", "--nodes", &sample("nodes.csv"), "--pods", &pods]),
        &["bad-row.csv: line 3", "num_gpu"],
    );
}

#[test]
fn short_node_row_names_file_and_line() {
    let nodes = scratch(
        "short-row.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,96000,393216\n",
    );
    assert_rejected(
        &sim(&["fgd", "--nodes", &nodes, "--pods", &sample("pods.csv")]),
        &["short-row.csv: line 3", "fields"],
    );
}

#[test]
fn missing_column_is_named() {
    let pods = scratch(
        "no-gpu-milli.csv",
        "name,cpu_milli,memory_mib,num_gpu\np0,1000,1024,1\n",
    );
    assert_rejected(
        &sim(&["fgd", "--nodes", &sample("nodes.csv"), "--pods", &pods]),
        &["no-gpu-milli.csv", "gpu_milli"],
    );
}

#[test]
fn missing_file_is_named() {
    assert_rejected(
        &sim(&[
            "fgd",
            "--nodes",
            "/nonexistent/nodes.csv",
            "--pods",
            &sample("pods.csv"),
        ]),
        &["/nonexistent/nodes.csv"],
    );
}

#[test]
fn nodes_without_pods_is_refused() {
    let out = sim(&["fgd", "--nodes", &sample("nodes.csv")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn node_list_without_gpus_is_refused() {
    let nodes = scratch(
        "cpu-only.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,1024,0,\n",
    );
    assert_rejected(
        &sim(&["fgd", "--nodes", &nodes, "--pods", &sample("pods.csv")]),
        &["no GPUs"],
    );
}

#[test]
fn quantities_that_would_overflow_a_score_are_refused() {
    // MiB × 2^20 (the basalt policy) and 50 · cpuFree · cpu (dotprod, in i128) overflowed.
    let nodes = scratch(
        "huge-memory.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,96000,8796093022208,8,G2\n",
    );
    assert_rejected(
        &sim(&[
            "fgd",
            "--nodes",
            &nodes,
            "--pods",
            &sample("pods.csv"),
            "--policy",
            "basalt",
        ]),
        &[
            "huge-memory.csv: line 3",
            "memory_mib",
            "8796093022208 MiB overflows (at most 1099511627776 MiB)",
        ],
    );
    let pods = scratch(
        "huge-cpu.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,2305843009213693951,1024,1,1000\n",
    );
    assert_rejected(
        &sim(&[
            "fgd",
            "--nodes",
            &sample("nodes.csv"),
            "--pods",
            &pods,
            "--policy",
            "dotprod",
        ]),
        &["huge-cpu.csv: line 2", "cpu_milli", "overflows"],
    );
}

/// A few bytes of trace that would take tens of millions of arrivals a seed (1 milli-GPU pods
/// on 64-GPU nodes) are refused at once, naming the files, the columns and the limit.
#[test]
fn a_tiny_trace_with_a_huge_workload_is_refused() {
    let nodes = scratch(
        "wide-nodes.csv",
        &format!(
            "sn,cpu_milli,memory_mib,gpu,model\n{}",
            (0..100)
                .map(|i| format!("n{i},96000,393216,64,G2\n"))
                .collect::<String>()
        ),
    );
    let pods = scratch(
        "thin-pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,0,0,1,1\n",
    );
    // Killed past 30 s: without the limit this runs for hours.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(["fgd", "--nodes", &nodes, "--pods", &pods, "--seeds", "42"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > 30 {
            child.kill().unwrap();
            panic!("still running after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_rejected(
        &child.wait_with_output().unwrap(),
        &[
            "wide-nodes.csv and ",
            "thin-pods.csv: seed 42: reaching 130 % of the node list's 6400 GPUs (column `gpu`) \
             takes more than 100000 arrivals, the limit a seed on 100 nodes (100000 arrivals, and \
             150000000 arrivals × nodes): the pod list's 1 pods ask 0.001 GPU each on average \
             (columns `num_gpu` × `gpu_milli`)",
        ],
    );
}

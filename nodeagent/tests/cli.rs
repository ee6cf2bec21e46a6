//! The binary: discover on every fixture, mig-plan success / impossible / unknown, bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt-nodeagent"))
        .args(args)
        .env_remove("NODE_NAME")
        .output()
        .unwrap()
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
        .display()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn discover_prints_a_node_topology_for_every_fixture() {
    let cases = [
        ("h100-hgx.yaml", 8, vec![vec![0, 1, 2, 3, 4, 5, 6, 7]], None),
        ("a100-mig.yaml", 8, vec![vec![0, 1, 2, 3, 4, 5, 6, 7]], None),
        (
            "pcie-nvlink-pairs.yaml",
            4,
            vec![vec![0, 1], vec![2, 3]],
            None,
        ),
        (
            "dgx1-v100.yaml",
            8,
            vec![vec![0, 1, 2, 3, 4, 5, 6, 7]],
            None,
        ),
        (
            "gb200-nvl72-tray.yaml",
            4,
            vec![vec![0, 1, 2, 3]],
            Some("c9d4b6a2-3f1e-4b8a-9d2c-7e5f1a0b3c4d.32766"),
        ),
        ("no-gpu.yaml", 0, vec![], None),
    ];
    for (name, gpus, islands, clique) in cases {
        let out = bin(&[
            "discover",
            "--fake",
            &fixture(name),
            "--output",
            "json",
            "--node-name",
            "n7",
        ]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["kind"], "NodeTopology", "{name}");
        assert_eq!(v["apiVersion"], "scheduling.basalt.dev/v1alpha1");
        assert_eq!(v["metadata"]["name"], "n7");
        let spec = &v["spec"];
        assert_eq!(spec["gpus"].as_array().map_or(0, Vec::len), gpus, "{name}");
        let got: Vec<Vec<u32>> = serde_json::from_value(
            spec.get("islands")
                .cloned()
                .unwrap_or(serde_json::json!([])),
        )
        .unwrap();
        assert_eq!(got, islands, "{name}");
        assert_eq!(spec["cliqueId"].as_str(), clique, "{name}");
        // YAML too.
        let out = bin(&["discover", "--fake", &fixture(name), "--node-name", "n7"]);
        assert!(out.status.success());
        assert!(text(&out.stdout)
            .starts_with("apiVersion: scheduling.basalt.dev/v1alpha1\nkind: NodeTopology\n"));
    }
}

#[test]
fn raw_output_round_trips_as_a_fixture() {
    let out = bin(&["discover", "--fake", &fixture("dgx1-v100.yaml"), "--raw"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = std::env::temp_dir().join(format!("basalt-nodeagent-raw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("saved.yaml");
    std::fs::write(&saved, &out.stdout).unwrap();
    let a = bin(&[
        "discover",
        "--fake",
        &fixture("dgx1-v100.yaml"),
        "--node-name",
        "x",
    ]);
    let b = bin(&[
        "discover",
        "--fake",
        saved.to_str().unwrap(),
        "--node-name",
        "x",
    ]);
    assert!(b.status.success(), "{}", text(&b.stderr));
    assert_eq!(a.stdout, b.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn discover_reports_bad_fixtures_and_missing_nvml() {
    let out = bin(&["discover", "--fake", "/nonexistent/x.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("/nonexistent/x.yaml: cannot read"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());

    let dir = std::env::temp_dir().join(format!("basalt-nodeagent-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: \"zz\"}\n",
    )
    .unwrap();
    let out = bin(&["discover", "--fake", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("gpus[0].pciBusId"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(dir);

    // No GPU on the machine running the tests (or, on one with a driver, a real discovery).
    let out = bin(&["discover"]);
    if !out.status.success() {
        assert!(
            text(&out.stderr).starts_with("error: no NVML:"),
            "{}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("panicked"));
    }
}

#[test]
fn mig_plan_success() {
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "3g.40gb=2,1g.10gb=1",
    ]);
    // The issue's own example: 7 compute slices fit, but two 3g.40gb take all 8 memory slices.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("needs 9 memory slices, H100-80GB has 8"));
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "3g.40gb=1,2g.20gb=1,1g.10gb=2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("3g.40gb      slices 0-3") || s.contains("3g.40gb      slices 4-7"),
        "{s}"
    );
    let out = bin(&[
        "mig-plan",
        "--model",
        "A100-40GB",
        "--profiles",
        "3g.20gb=1,2g.10gb=2",
        "--output",
        "json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let placements: Vec<(String, u64)> = v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["profile"].as_str().unwrap().to_string(),
                p["start"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        placements,
        vec![
            ("2g.10gb".into(), 0),
            ("2g.10gb".into(), 2),
            ("3g.20gb".into(), 4)
        ]
    );
    assert_eq!(v["computeSlicesUsed"], 7);
    assert_eq!(v["memorySlicesUsed"], 8);
}

#[test]
fn mig_plan_impossible_exits_2_with_the_reason() {
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "3g.40gb=3",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("no MIG layout on H100-80GB gives 3g.40gb=3: H100-80GB allows at most 2 3g.40gb instance(s), 3 wanted"), "{err}");
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "7g.80gb,1g.10gb",
        "--output",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["impossible"], true);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("needs 8 compute slices"));
}

#[test]
fn mig_plan_unknown_names_are_a_different_error() {
    let out = bin(&["mig-plan", "--model", "B300", "--profiles", "1g.10gb"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown GPU model \"B300\"; known models: A30-24GB, A100-40GB, A100-80GB, H100-80GB, H200-141GB"));
    let out = bin(&[
        "mig-plan",
        "--model",
        "H200-141GB",
        "--profiles",
        "3g.40gb=1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("H200-141GB has no MIG profile \"3g.40gb\"; its profiles: 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"));
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "3g.40gb=x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("bad profile list"));
    // Usage errors are neither.
    let out = bin(&["mig-plan", "--model", "H100-80GB"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn run_needs_a_node_name_and_a_valid_interval() {
    let out = bin(&[
        "run",
        "--fake",
        &fixture("no-gpu.yaml"),
        "--node-name",
        "n",
        "--interval",
        "0s",
    ]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("must be more than zero"));
    // n × 60 overflowed a u64 (a panic, or a wrapped interval in release); absurd ones too.
    for interval in ["307445734561825861m", "18446744073709551615ms", "25h"] {
        let out = bin(&[
            "run",
            "--fake",
            &fixture("no-gpu.yaml"),
            "--node-name",
            "n",
            "--interval",
            interval,
        ]);
        assert_eq!(out.status.code(), Some(64), "{interval}");
        assert!(
            text(&out.stderr).contains(&format!("{interval:?}: must be at most 24h")),
            "{}",
            text(&out.stderr)
        );
    }
    let out = bin(&["run", "--fake", &fixture("no-gpu.yaml")]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("--node-name"));
}

#[test]
fn mig_plan_exits_2_for_counts_no_gpu_holds() {
    // Impossible layouts all exit 2, as the help says; 8 × 1g.10gb on an H100 exited 1.
    for (profiles, count) in [
        ("1g.10gb=8", "8"),
        ("3g.40gb=4294967295", "4294967295"),
        ("3g.40gb=99999999999999999999", "99999999999999999999"),
        ("1g.10gb=4,1g.10gb=4", "8"),
    ] {
        let out = bin(&["mig-plan", "--model", "H100-80GB", "--profiles", profiles]);
        assert_eq!(out.status.code(), Some(2), "{profiles}");
        let profile = profiles.split('=').next().unwrap();
        assert_eq!(
            text(&out.stderr),
            format!("error: {profile}: {count} instances wanted; no GPU holds more than 7 of one profile\n")
        );
        assert!(out.stdout.is_empty());
    }
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "1g.10gb=8",
        "--output",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["impossible"], true);
    // Within what a GPU can hold but over this model's limit: impossible too.
    let out = bin(&[
        "mig-plan",
        "--model",
        "H100-80GB",
        "--profiles",
        "3g.40gb=7",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("at most 2 3g.40gb instance(s), 7 wanted"));
}

#[test]
fn metrics_default_to_loopback_and_probes_to_the_pod_address() {
    let out = bin(&["run", "--help"]);
    // Wrapped to the terminal's width: compared with the whitespace collapsed.
    let help = text(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("--metrics-bind-address") && help.contains("[default: 127.0.0.1:9401]"),
        "{help}"
    );
    assert!(help.contains("[default: 0.0.0.0:9400]"), "{help}");
}

//! The replay with a usage half-life: each queue's usage, adjusted share and GPUs held over
//! time (`queue_usage.csv`), worked out by hand; without a half-life nothing new is written.

mod common;

use basalt_sim::replay::report::{write_replay, Inputs, RunReport};
use common::{load, run_with, tmp};

/// One 8-GPU node. A (queue a, all 8 GPUs) runs 0–100; B (queue b, 8 GPUs) arrives at 50 and
/// waits for it, running 100–150; C (queue b) arrives at 200. A cycle runs at 0, 50, 100 and
/// 200 (each arrival or completion while a job waits).
const HELD_THEN_GONE: &str = "\
job,queue,submit_s,duration_s,pods,cpu,memory,gpus
A,a,0,100,1,1,1Gi,8
B,b,50,50,1,1,1Gi,8
C,b,200,10,1,1,1Gi,8
";

fn config(yaml: &str) -> basalt_plugins::Config {
    basalt_plugins::Config::from_yaml("c.yaml", yaml).expect("config")
}

/// The replay's report folder for this config.
fn report(yaml: &str) -> std::path::PathBuf {
    let trace = tmp("held.csv", HELD_THEN_GONE);
    let loaded = load(&["--trace", trace.to_str().unwrap(), "--nodes", "1"]);
    let (o, s) = run_with(&loaded, &config(yaml));
    assert_eq!(s.finished, 3);
    let names: Vec<String> = loaded
        .workload
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect();
    let dir = trace.with_file_name("report");
    std::fs::create_dir_all(&dir).unwrap();
    let run = RunReport {
        label: "usage".into(),
        outcome: &o,
        summary: &s,
        job_names: &names,
    };
    let inputs = Inputs {
        trace: "held.csv".into(),
        cluster: "1 node".into(),
        options: String::new(),
        notes: vec![],
    };
    write_replay(&dir, &run, &inputs).expect("writes");
    dir
}

#[test]
fn usage_rises_while_a_queue_holds_the_cluster_and_decays_after() {
    let dir = report("fairness:\n  usage:\n    halfLife: 100s\n");
    let text = std::fs::read_to_string(dir.join("queue_usage.csv")).expect("queue_usage.csv");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,queue,usage,usage_fraction,adjusted_share,allocated_gpus")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let row = |t: &str, q: &str| {
        rows.iter()
            .find(|r| r[0] == t && r[1] == q)
            .unwrap_or_else(|| panic!("no row at {t} s for {q}:\n{text}"))
    };
    let num = |v: &str| v.parse::<f64>().unwrap();
    let near = |v: &str, want: f64| assert!((num(v) - want).abs() < 1e-6, "{v} != {want}");
    let sqrt2 = 2f64.sqrt();
    // Usage u' = u·d + held·(1 − d), d = 2^(−Δt/100 s), charging over each span what the
    // queue held from its record on: a plan's record says what it holds once carried out, and a
    // completion between cycles advances its queue's record. a from nothing at 0: 0; at 50 it
    // held 8 for half a half-life: 8(1 − 2^−½) = 8 − 4√2; A ends at 100 (before that cycle):
    // 8 held for a whole half-life from 0, 8·½ = 4; at 200, a half-life of nothing: 2.
    let a = [
        ("0", 0.0, 8),
        ("50", 8.0 - 4.0 * sqrt2, 8),
        ("100", 4.0, 0),
        ("200", 2.0, 0),
    ];
    for (t, usage, held) in a {
        let r = row(t, "a");
        near(r[2], usage);
        near(r[3], usage / 8.0);
        assert_eq!(r[5], held.to_string(), "a's GPUs at {t} s");
    }
    // Rising while held, decaying after.
    assert!(num(row("50", "a")[2]) > num(row("0", "a")[2]));
    assert!(num(row("100", "a")[2]) > num(row("50", "a")[2]));
    assert!(num(row("200", "a")[2]) < num(row("100", "a")[2]));
    // b had held nothing by 100; B holds the node after the cycle at 100 and ends at 150,
    // with nothing waiting (no cycle then): its 50 s of 8 GPUs are charged, 8(1 − 2^−½), and
    // have decayed half a half-life by the cycle at 200: (8 − 4√2)·2^−½ = 4√2 − 4 (0 when
    // only what each cycle's snapshot held was charged).
    near(row("100", "b")[2], 0.0);
    assert_eq!(row("100", "b")[5], "8");
    near(row("200", "b")[2], 4.0 * sqrt2 - 4.0);
    // Adjusted share, w + k·(w − u) with w = ½, u = a's part of the siblings' usage, k = 1:
    // equal at 0 (no usage); at 50 a used it all, so its weight is the floor (1 of 2^20
    // steps) against b's whole 2^20.
    near(row("0", "a")[4], 0.5);
    near(row("0", "b")[4], 0.5);
    let floor = 1.0 / (1.0 + (1u64 << 20) as f64);
    near(row("50", "a")[4], floor);
    near(row("50", "b")[4], 1.0 - floor);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Queue usage"), "{md}");
    assert!(md.contains("(queue_usage.csv)"), "{md}");
    assert!(dir.join("queue_usage.svg").exists() && dir.join("queue_usage.png").exists());
}

#[test]
fn without_a_half_life_no_usage_is_written() {
    let dir = report("fairness:\n  usage:\n    halfLife: \"0\"\n");
    for name in ["queue_usage.csv", "queue_usage.svg", "queue_usage.png"] {
        assert!(!dir.join(name).exists(), "{name} written with usage off");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!md.contains("Queue usage"), "{md}");
    let mut files: Vec<String> = (std::fs::read_dir(&dir).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    // Exactly what a report had before usage was recorded.
    let before = [
        "allocation.png",
        "allocation.svg",
        "jct_cdf.png",
        "jct_cdf.svg",
        "jobs.csv",
        "queue_share.csv",
        "queue_share.png",
        "queue_share.svg",
        "report.md",
        "summary.json",
        "timeseries.csv",
    ];
    assert_eq!(files, before);
}

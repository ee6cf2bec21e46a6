//! The replay on small traces whose metrics are worked out by hand in each test, plus
//! determinism, the exactness of folding bound pods, and readers' error messages.

mod common;

use common::{close, load, run, run_with, tmp, THREE_JOBS};

#[test]
fn hand_computed_jct_queueing_allocation_fairness() {
    let trace = tmp("three.csv", THREE_JOBS);
    let loaded = load(&["--trace", trace.to_str().unwrap(), "--nodes", "1"]);
    let (o, s) = run(&loaded);
    assert!(s.complete);
    assert_eq!(s.finished, 3);
    assert_eq!(o.end_ms, 150_000);
    // Queueing: A 0, B 90, C 80.
    close(s.queueing_delay_s.mean, 170.0 / 3.0);
    close(s.queueing_delay_s.p50, 80.0);
    close(s.queueing_delay_s.max, 90.0);
    // JCT: A 100, B 140, C 110; nearest rank p50 = 2nd of 3 = 110, p99 = 3rd = 140.
    close(s.jct_s.mean, 350.0 / 3.0);
    close(s.jct_s.p50, 110.0);
    close(s.jct_s.p99, 140.0);
    // Allocation: 8/8 over [0, 130), 4/8 over [130, 150): (130 + 10) / 150.
    close(s.mean_allocation, 140.0 / 150.0);
    // Fragmentation: 4 idle GPUs on a half-used node over [130, 150).
    close(s.mean_fragmented_gpus, 20.0 * 4.0 / 150.0);
    // Jain (deserved 4 GPUs each): [0,10) only a has demand: J = 1; [10,100) x_a = 8/4 = 2,
    // x_b = 0: J = 4 / (2·4) = 0.5; [100,150) only b: J = 1. (10 + 45 + 50) / 150.
    close(s.jain_fairness.unwrap(), 105.0 / 150.0);
    // Per queue: b's queueing delays are 90 and 80.
    let b = s.queues.iter().find(|q| q.name == "b").unwrap();
    close(b.queueing_delay_s.mean, 85.0);
    close(b.deserved_share, 0.5);
    // Queue a held all 8 GPUs for 100 of 150 s.
    let a = s.queues.iter().find(|q| q.name == "a").unwrap();
    close(a.mean_share, 100.0 / 150.0);
    // Load 50 % (4 GPUs demanded) only during [130, 150), with half the GPUs unallocated.
    let at50 = s
        .unallocated_at_load
        .iter()
        .find(|p| p.load_pct == 50)
        .unwrap();
    close(at50.unallocated_gpu_pct, 50.0);
    close(at50.time_share, 20.0 / 150.0);
    let at200 = s
        .unallocated_at_load
        .iter()
        .find(|p| p.load_pct == 200)
        .unwrap();
    close(at200.time_share, 80.0 / 150.0);
    assert_eq!(s.evictions, 0);
}

/// Two 8-GPU nodes, queues a and b of weight 1. A: 2 pods × 8 GPUs in queue a; B: 8 GPUs in
/// queue b; both at 0 (A first by name). Borrowing lets A take the whole cluster: B waits
/// until 100. A static quota caps a at 8 GPUs: A never starts and B runs at once.
const QUOTA: &str = "\
job,queue,submit_s,duration_s,pods,cpu,memory,gpus
A,a,0,100,2,1,1Gi,8
B,b,0,50,1,1,1Gi,8
";

#[test]
fn static_quota_against_borrowing() {
    let trace = tmp("quota.csv", QUOTA);
    let t = trace.to_str().unwrap();
    let (_, borrow) = run(&load(&["--trace", t, "--nodes", "2", "--quota", "borrow"]));
    assert_eq!(borrow.finished, 2);
    close(borrow.jct_s.max, 150.0);
    close(borrow.gang_wait_s.mean, 0.0);
    assert_eq!(borrow.gangs_multi_pod, 1);
    assert_eq!(borrow.gangs_in_one_rack, Some(1.0));
    let (_, fixed) = run(&load(&["--trace", t, "--nodes", "2", "--quota", "static"]));
    assert_eq!(fixed.finished, 1);
    assert_eq!(fixed.never_started, 1);
    close(fixed.jct_s.mean, 50.0);
    let a = fixed.queues.iter().find(|q| q.name == "a").unwrap();
    assert_eq!(a.never_started, 1);
}

#[test]
fn gangs_on_racks_and_tp_groups() {
    // Racks of one node: a 2-pod gang cannot fit one rack; TP 8 groups of 8-GPU pods stay in a node.
    let trace = tmp(
        "tp.csv",
        "job,submit_s,duration_s,pods,cpu,memory,gpus,tp_size\nG,0,10,2,1,1Gi,8,8\n",
    );
    let (_, s) = run(&load(&[
        "--trace",
        trace.to_str().unwrap(),
        "--nodes",
        "2",
        "--nodes-per-rack",
        "1",
    ]));
    assert_eq!(s.gangs_in_one_rack, Some(0.0));
    assert_eq!(s.tp_groups, 2);
    assert_eq!(s.tp_groups_in_one_node, Some(1.0));
    // TP 16 spans both nodes: inside an NVLink domain only when they share a clique.
    let trace = tmp(
        "tp16.csv",
        "job,submit_s,duration_s,pods,cpu,memory,gpus,tp_size\nG,0,10,2,1,1Gi,8,16\n",
    );
    let t = trace.to_str().unwrap();
    let (_, s) = run(&load(&["--trace", t, "--nodes", "2"]));
    assert_eq!(s.tp_groups_in_one_node, Some(0.0));
    assert_eq!(s.tp_groups_in_one_nvlink_domain, Some(0.0));
    let (_, s) = run(&load(&[
        "--trace",
        t,
        "--nodes",
        "2",
        "--clique-nodes",
        "2",
    ]));
    assert_eq!(s.tp_groups_in_one_nvlink_domain, Some(1.0));
}

#[test]
fn same_inputs_same_summary_bytes() {
    let loaded = load(&[]);
    let a = serde_json::to_string(&run(&loaded).1).unwrap();
    let b = serde_json::to_string(&run(&load(&[])).1).unwrap();
    assert_eq!(a, b);
    let syn = ["--synthetic-jobs", "300", "--nodes", "8", "--seed", "7"];
    let a = serde_json::to_string(&run(&load(&syn)).1).unwrap();
    let b = serde_json::to_string(&run(&load(&syn)).1).unwrap();
    assert_eq!(a, b);
    let other = ["--synthetic-jobs", "300", "--nodes", "8", "--seed", "8"];
    assert_ne!(a, serde_json::to_string(&run(&load(&other)).1).unwrap());
}

#[test]
fn folding_bound_pods_changes_no_decision() {
    // Without evicting actions a folded cycle is exact as it is; with them (the default) it
    // stands only when it equals the whole cluster's, and is run again whole otherwise.
    let no_evict = basalt_plugins::Config {
        actions: vec![
            basalt_plugins::config::ActionName::Enqueue,
            basalt_plugins::config::ActionName::Allocate,
        ],
        ..Default::default()
    };
    let default = basalt_plugins::Config::default();
    for (config, name) in [(&no_evict, "enqueue, allocate"), (&default, "default")] {
        for quota in ["borrow", "static"] {
            let mut loaded = load(&["--quota", quota]);
            loaded.options.fold_bound = Some(true);
            let (outcome, summary) = run_with(&loaded, config);
            let folded = serde_json::to_string(&summary).unwrap();
            loaded.options.fold_bound = Some(false);
            let (whole, summary) = run_with(&loaded, config);
            let exact = serde_json::to_string(&summary).unwrap();
            assert_eq!(folded, exact, "{name}, quota {quota}");
            assert_eq!(whole.redone, 0);
            if config.actions.len() > 2 && quota == "borrow" {
                // The sample queues up and reclaims: some folded cycles stand, some are redone.
                assert!(
                    outcome.redone > 0 && outcome.redone < outcome.cycles,
                    "{} of {} cycles redone",
                    outcome.redone,
                    outcome.cycles
                );
            }
        }
    }
}

#[test]
fn openb_sample_with_fractional_gpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let pods = dir.join("openb-pods-sample.csv");
    let nodes = dir.join("openb-nodes-sample.csv");
    for share in ["round-up", "pool", "hami"] {
        let loaded = load(&[
            "--trace",
            pods.to_str().unwrap(),
            "--nodes-csv",
            nodes.to_str().unwrap(),
            "--gpu-share",
            share,
        ]);
        assert_eq!(loaded.workload.jobs.len(), 400);
        let (_, s) = run(&loaded);
        assert!(s.complete);
        assert!(s.finished > 0);
        // Rounding up holds a whole GPU for a share: allocation ≥ the share actually asked.
        if share == "round-up" {
            assert!(s.mean_allocation >= s.mean_gpu_share_used);
        }
    }
}

fn load_err(args: &[&str]) -> String {
    match common::try_load(args) {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn malformed_rows_name_file_and_line() {
    let p = tmp(
        "bad-openb.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\np1,lots,1024,1,1000\n",
    );
    let e = load_err(&["--trace", p.to_str().unwrap(), "--nodes", "1"]);
    assert!(
        e.contains("bad-openb.csv") && e.contains("line 3") && e.contains("cpu_milli"),
        "{e}"
    );
    let p = tmp(
        "bad-philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,10,1,10,vc\nlast tuesday,10,1,10,vc\n",
    );
    let e = load_err(&["--trace", p.to_str().unwrap()]);
    assert!(
        e.contains("bad-philly.csv") && e.contains("line 3") && e.contains("timestamp"),
        "{e}"
    );
    let p = tmp(
        "share.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,2,500\n",
    );
    let e = load_err(&["--trace", p.to_str().unwrap(), "--nodes", "1"]);
    assert!(e.contains("line 2") && e.contains("gpu_milli"), "{e}");
}

#[test]
fn unknown_columns_are_named() {
    let p = tmp(
        "unknown.csv",
        "job,submit_s,duration_s,cpu,memory,colour\nj,0,1,1,1Gi,red\n",
    );
    let e = load_err(&["--trace", p.to_str().unwrap(), "--format", "csv"]);
    assert!(e.contains("unknown.csv") && e.contains("\"colour\""), "{e}");
    let p = tmp("missing.csv", "job,submit_s,cpu,memory\nj,0,1,1Gi\n");
    let e = load_err(&["--trace", p.to_str().unwrap(), "--format", "csv"]);
    assert!(e.contains("missing column \"duration_s\""), "{e}");
    let p = tmp(
        "bad.json",
        r#"{"jobs": [{"name": "j", "submit": 0, "duration": 1, "pods": [], "colour": 1}]}"#,
    );
    let e = load_err(&["--trace", p.to_str().unwrap()]);
    assert!(e.contains("bad.json") && e.contains("colour"), "{e}");
}

#[test]
fn native_formats_read_alike() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let csv = load(&["--trace", dir.join("native-sample.csv").to_str().unwrap()]);
    let launcher = csv
        .workload
        .jobs
        .iter()
        .find(|j| j.name == "launcher")
        .unwrap();
    assert_eq!(launcher.pods.len(), 3);
    assert_eq!(launcher.gpus(), 16);
    let json = load(&["--trace", dir.join("native-sample.json").to_str().unwrap()]);
    let a = &csv
        .workload
        .jobs
        .iter()
        .find(|j| j.name == "train-llm")
        .unwrap();
    let b = &json
        .workload
        .jobs
        .iter()
        .find(|j| j.name == "train-llm")
        .unwrap();
    assert_eq!(a.pods, b.pods);
    assert_eq!(
        json.workload
            .queues
            .iter()
            .find(|q| q.name == "research")
            .unwrap()
            .weight,
        3
    );
    let (_, s) = run(&csv);
    assert!(s.complete && s.finished == 5);
}

#[test]
fn kept_specs_give_the_same_run_as_rebuilding_every_cycle() {
    // The fast path keeps specs and the node table between cycles; the reference rebuilds the
    // ClusterSpec and calls Snapshot::build each cycle. Cover evicting and non-evicting configs
    // (folded and unfolded bound pods), both quotas, a rack topology and fractional-GPU pools.
    let no_evict = basalt_plugins::Config {
        actions: vec![
            basalt_plugins::config::ActionName::Enqueue,
            basalt_plugins::config::ActionName::Allocate,
        ],
        ..Default::default()
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let pods = dir.join("openb-pods-sample.csv");
    let nodes = dir.join("openb-nodes-sample.csv");
    let default = basalt_plugins::Config::default();
    let runs: Vec<(Vec<&str>, &basalt_plugins::Config)> = vec![
        (vec!["--quota", "borrow"], &default),
        (vec!["--quota", "static"], &no_evict),
        (
            vec![
                "--synthetic-jobs",
                "150",
                "--nodes",
                "8",
                "--nodes-per-rack",
                "4",
                "--synthetic-load",
                "1.5",
            ],
            &default,
        ),
        (
            vec![
                "--trace",
                pods.to_str().unwrap(),
                "--nodes-csv",
                nodes.to_str().unwrap(),
                "--gpu-share",
                "pool",
            ],
            &no_evict,
        ),
    ];
    let mut evictions = 0;
    for (args, config) in &runs {
        let mut loaded = load(args);
        let (fast_outcome, fast) = run_with(&loaded, config);
        loaded.options.full_rebuild = true;
        let (full_outcome, full) = run_with(&loaded, config);
        assert_eq!(
            serde_json::to_string(&fast).unwrap(),
            serde_json::to_string(&full).unwrap(),
            "{args:?}"
        );
        assert_eq!(fast_outcome.cycles, full_outcome.cycles, "{args:?}");
        assert_eq!(fast_outcome.bindings, full_outcome.bindings, "{args:?}");
        evictions += fast.evictions;
    }
    // The comparison covered runs that evict (the paths differ most there).
    assert!(evictions > 0);
}

/// Loads `text` as trace `name` (with `extra` arguments) and returns the error.
fn trace_err(name: &str, text: &str, extra: &[&str]) -> String {
    let p = tmp(name, text);
    let mut args = vec!["--trace", p.to_str().unwrap()];
    args.extend_from_slice(extra);
    load_err(&args)
}

#[test]
fn scaled_trace_values_never_wrap() {
    const OPENB: &str =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n";
    let openb = |name: &str, row: &str| {
        trace_err(
            name,
            &format!("{OPENB}p0,1,1,1,1000,0,10,0\n{row}\n"),
            &["--nodes", "1"],
        )
    };
    // MiB × 2^20 and s × 1000 overflowed silently; the messages name file, line and field.
    let e = openb("mib.csv", "p1,1,9223372036854775807,1,1000,0,10,0");
    assert!(
        e.contains("mib.csv: line 3: memory_mib: 9223372036854775807 MiB overflows"),
        "{e}"
    );
    let e = openb("created.csv", "p1,1,1,1,1000,9223372036854775,,");
    assert!(e.contains("created.csv: line 3: creation_time: 9223372036854775 s overflows (at most 1000000000000 s)"), "{e}");
    let e = openb("deleted.csv", "p1,1,1,1,1000,0,9223372036854775807,0");
    assert!(
        e.contains("deleted.csv: line 3: deletion_time: 9223372036854775807 s overflows"),
        "{e}"
    );
    // A negative scheduled time made the duration (deletion − scheduled) wrap.
    let e = openb("negative.csv", "p1,1,1,1,1000,0,10,-9223372036854775807");
    assert!(
        e.contains("negative.csv: line 3: scheduled_time: -9223372036854775807 s is negative"),
        "{e}"
    );

    let nodes = tmp(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu\nn0,1000,9007199254740992,1\n",
    );
    let e = trace_err(
        "ok.csv",
        &format!("{OPENB}p0,1,1,1,1000,0,10,0\n"),
        &["--nodes-csv", nodes.to_str().unwrap()],
    );
    assert!(
        e.contains("nodes.csv: line 2: memory_mib: 9007199254740992 MiB overflows"),
        "{e}"
    );

    // A year far out overflowed the day count.
    let e = trace_err(
        "philly-year.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,10,1,10,vc\n99999999999999-10-01 00:00:00,10,1,10,vc\n",
        &[],
    );
    assert!(
        e.contains("philly-year.csv: line 3: timestamp") && e.contains("years 1 to 9999"),
        "{e}"
    );

    // Counts were truncated to u32: 4294967297 became 1.
    let e = trace_err(
        "min.csv",
        "job,submit_s,duration_s,cpu,memory,pods,min_member\nj,0,10,1,1Gi,2,4294967297\n",
        &["--format", "csv"],
    );
    assert!(
        e.contains("min.csv: line 2: min_member: 4294967297 is out of range"),
        "{e}"
    );
    let e = trace_err(
        "tp.csv",
        "job,submit_s,duration_s,cpu,memory,tp_size\nj,0,10,1,1Gi,-1\n",
        &["--format", "csv"],
    );
    assert!(
        e.contains("tp.csv: line 2: tp_size: -1 is out of range"),
        "{e}"
    );
}

#[test]
fn pods_per_job_are_bounded_over_all_rows_and_roles() {
    let e = trace_err(
        "rows.csv",
        "job,submit_s,duration_s,cpu,memory,pods\nj,0,10,1,1Gi,60000\nj,0,10,1,1Gi,60000\n",
        &["--format", "csv"],
    );
    assert!(
        e.contains("rows.csv: line 3: pods: job j has 120000 pods over its rows, more than 100000"),
        "{e}"
    );
    let e = trace_err(
        "roles.json",
        r#"{"jobs": [{"name": "j", "submit": 0, "duration": 1, "pods": [{"count": 60000, "cpu": "1", "memory": "1Gi"}, {"count": 60000, "cpu": "1", "memory": "1Gi"}]}]}"#,
        &[],
    );
    assert!(
        e.contains(
            "roles.json: jobs[0] (j): pods[1].count: 120000 pods over its roles, more than 100000"
        ),
        "{e}"
    );
}

#[test]
fn duplicates_in_a_native_json_trace_are_named_when_read() {
    let job = |name: &str| {
        format!(
            r#"{{"name": "{name}", "submit": 0, "duration": 1, "pods": [{{"cpu": "1", "memory": "1Gi"}}]}}"#
        )
    };
    let e = trace_err(
        "queues.json",
        &format!(
            r#"{{"queues": [{{"name": "b"}}, {{"name": "a"}}, {{"name": "c"}}, {{"name": "a", "weight": 2}}], "jobs": [{}]}}"#,
            job("j")
        ),
        &[],
    );
    assert!(
        e.contains(r#"queues.json: queues[3].name: duplicate queue "a" (first at queues[1])"#),
        "{e}"
    );
    let e = trace_err(
        "jobs.json",
        &format!(r#"{{"jobs": [{}, {}, {}]}}"#, job("x"), job("y"), job("x")),
        &[],
    );
    assert!(
        e.contains(r#"jobs.json: jobs[2].name: duplicate job "x" (first at jobs[0])"#),
        "{e}"
    );
    let e = trace_err(
        "weight.json",
        &format!(
            r#"{{"queues": [{{"name": "a", "weight": 0}}], "jobs": [{}]}}"#,
            job("j")
        ),
        &[],
    );
    assert!(
        e.contains(r#"weight.json: queues[0].weight: queue "a": must be at least 1"#),
        "{e}"
    );
}

#[test]
fn a_synthetic_load_too_low_for_the_clock_is_refused() {
    let e = load_err(&[
        "--synthetic-jobs",
        "10",
        "--nodes",
        "1",
        "--synthetic-load",
        "1e-300",
    ]);
    assert!(
        e.contains("--synthetic-load: 1e-300") && e.contains("raise the load"),
        "{e}"
    );
}

#[test]
fn a_node_scale_that_would_overflow_the_cluster_size_is_refused() {
    // Each VC's weight saturated at u32::MAX and their u32 sum wrapped.
    let e = load_err(&["--node-scale", "1e300"]);
    assert!(
        e.contains("--node-scale 1e300") && e.contains("more than 1000000"),
        "{e}"
    );
}

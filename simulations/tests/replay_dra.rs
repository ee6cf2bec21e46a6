//! `--dra`: the same trace replayed with the GPUs as the `nvidia.com/gpu` extended resource and
//! as DRA devices asked through ResourceClaims. Checks what must hold between the two runs,
//! that no device is ever held by two claims, and that the DRA run's kept-spec, folded path
//! gives what rebuilding the whole cluster every cycle gives.

mod common;

use std::sync::atomic::AtomicBool;

use basalt_sim::replay::{self, metrics::Summary, sim::Outcome};
use common::{close, load, run, run_with, tmp, THREE_JOBS};

/// GPU-hours held by placed pods over the run: the time integral of GPUs allocated.
fn gpu_hours_held(o: &Outcome) -> f64 {
    let mut ms = 0i128;
    for (i, s) in o.samples.iter().enumerate() {
        let next = o.samples.get(i + 1).map_or(o.end_ms, |n| n.t_ms);
        ms += s.gpus_allocated as i128 * (next - s.t_ms) as i128;
    }
    ms as f64 / 3_600_000.0
}

/// GPU-hours the finished jobs' work takes: GPUs × duration, each job once.
fn gpu_hours_of_work(loaded: &replay::Loaded, o: &Outcome) -> f64 {
    let ms: i128 = (loaded.workload.jobs.iter().zip(&o.jobs))
        .filter(|(_, r)| r.end_ms.is_some())
        .map(|(j, _)| j.gpus() as i128 * j.duration_ms as i128)
        .sum();
    ms as f64 / 3_600_000.0
}

fn json(s: &Summary) -> String {
    serde_json::to_string(s).unwrap()
}

fn with_dra(args: &[&str]) -> replay::Loaded {
    let mut all = args.to_vec();
    all.push("--dra");
    load(&all)
}

/// A synthetic trace of 150 jobs on 8 nodes at 1.5 times their capacity.
const SYNTHETIC: [&str; 8] = [
    "--synthetic-jobs",
    "150",
    "--nodes",
    "8",
    "--nodes-per-rack",
    "4",
    "--synthetic-load",
    "1.5",
];

#[test]
fn a_trace_replayed_with_device_plugin_gpus_and_with_dra_devices() {
    let args = SYNTHETIC;
    let plugin = load(&args);
    let dra = with_dra(&args);
    let (po, ps) = run(&plugin);
    let (o, s) = run(&dra);
    println!("device plugin: {}", json(&ps));
    println!("DRA: {}", json(&s));
    // Every job finishes both ways, on the same GPUs.
    for (sum, name) in [(&ps, "device plugin"), (&s, "DRA")] {
        assert!(sum.complete, "{name}");
        assert_eq!(sum.finished, 150, "{name}");
        assert_eq!(sum.total_gpus, 64, "{name}");
    }
    // Every GPU pod placed got its devices through its claim (the run fails on a device given
    // twice, and in debug builds checks the whole table after every cycle).
    let every_pod_asks_gpus = (dra.workload.jobs.iter()).all(|j| j.pods.iter().all(|p| p.gpus > 0));
    assert!(every_pod_asks_gpus);
    assert_eq!(o.dra_claims, o.bindings);
    assert!(o.dra_peak_devices > 0 && o.dra_peak_devices <= 64);
    assert_eq!(po.dra_claims, 0);
    // GPU-hours: both runs place the same whole GPUs for the same work. What differs is the
    // work evictions throw away: the device-plugin run reclaims GPUs for queues below their
    // share, and Basalt's queues count no DRA device (nor can an eviction free a claim's
    // devices in its own cycle), so the DRA run evicts nothing.
    let work = gpu_hours_of_work(&plugin, &po);
    close(gpu_hours_of_work(&dra, &o), work);
    assert!((gpu_hours_held(&po) - (work + ps.lost_gpu_hours)).abs() < 1e-6);
    assert!((gpu_hours_held(&o) - work).abs() < 1e-6);
    assert_eq!(s.evictions, 0);
    assert!(
        ps.evictions > 0,
        "the comparison covers a run that reclaims"
    );
}

#[test]
fn the_dra_run_folds_and_keeps_specs_exactly() {
    // Folded pods hold their devices through `DraSpec::allocated`; the kept specs get the DRA
    // table attached. Both give what the whole cluster rebuilt every cycle gives.
    let args = SYNTHETIC;
    let no_evict = basalt_plugins::Config {
        actions: vec![
            basalt_plugins::config::ActionName::Enqueue,
            basalt_plugins::config::ActionName::Allocate,
        ],
        ..Default::default()
    };
    for config in [&basalt_plugins::Config::default(), &no_evict] {
        let mut loaded = with_dra(&args);
        let (fast_o, fast) = run_with(&loaded, config);
        loaded.options.fold_bound = Some(false);
        let (_, unfolded) = run_with(&loaded, config);
        loaded.options.fold_bound = None;
        loaded.options.full_rebuild = true;
        let (full_o, full) = run_with(&loaded, config);
        assert_eq!(json(&fast), json(&unfolded));
        assert_eq!(json(&fast), json(&full));
        assert_eq!(fast_o.cycles, full_o.cycles);
        assert_eq!(fast_o.dra_claims, full_o.dra_claims);
        assert_eq!(fast.finished, 150);
    }
}

#[test]
fn a_hand_worked_trace_runs_alike_both_ways() {
    let trace = tmp("dra-three.csv", THREE_JOBS);
    let args = ["--trace", trace.to_str().unwrap(), "--nodes", "1"];
    let (po, ps) = run(&load(&args));
    let (o, s) = run(&with_dra(&args));
    assert_eq!((o.end_ms, po.end_ms), (150_000, 150_000));
    assert_eq!(s.finished, 3);
    close(s.jct_s.mean, 350.0 / 3.0);
    close(s.queueing_delay_s.mean, 170.0 / 3.0);
    close(s.mean_allocation, ps.mean_allocation);
    close(s.mean_fragmented_gpus, ps.mean_fragmented_gpus);
    assert_eq!(o.dra_claims, 3);
    assert_eq!(o.dra_peak_devices, 8);
}

#[test]
fn gpu_models_become_the_claims_device_set() {
    // The openb sample's five P100 nodes hold two GPUs each: six 2-GPU P100 jobs, five start
    // at once, the sixth when one ends, although other models' nodes are idle.
    let nodes =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/openb-nodes-sample.csv");
    let mut csv = String::from("job,submit_s,duration_s,pods,cpu,memory,gpus,gpu_models\n");
    for i in 0..6 {
        csv += &format!("j{i},0,100,1,1,1Gi,2,P100\n");
    }
    let trace = tmp("dra-models.csv", &csv);
    let args = [
        "--trace",
        trace.to_str().unwrap(),
        "--nodes-csv",
        nodes.to_str().unwrap(),
    ];
    for loaded in [load(&args), with_dra(&args)] {
        let (o, s) = run(&loaded);
        assert_eq!(s.finished, 6);
        assert_eq!(o.end_ms, 200_000);
        close(s.queueing_delay_s.max, 100.0);
        close(s.queueing_delay_s.mean, 100.0 / 6.0);
    }
}

#[test]
fn what_dra_does_not_map_is_refused() {
    let err = |args: &[&str]| {
        let mut all = vec!["--dra"];
        all.extend_from_slice(args);
        match common::try_load(&all) {
            Ok(l) => {
                let config = basalt_plugins::Config::default();
                let stop = AtomicBool::new(false);
                match replay::execute(&l, &config, "dra", &stop, |_| {}) {
                    Ok(_) => panic!("{args:?} ran"),
                    Err(e) => format!("{e:#}"),
                }
            }
            Err(e) => format!("{e:#}"),
        }
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let pods = dir.join("openb-pods-sample.csv");
    let nodes = dir.join("openb-nodes-sample.csv");
    let openb = [
        "--trace",
        pods.to_str().unwrap(),
        "--nodes-csv",
        nodes.to_str().unwrap(),
    ];
    let e = err(&openb);
    assert!(
        e.contains("asks a share of a GPU") && e.contains("--gpu-share"),
        "{e}"
    );
    let e = err(&["--gpu-share", "hami"]);
    assert!(
        e.contains("--dra and --gpu-share hami exclude each other"),
        "{e}"
    );
    let e = err(&["--quota", "static"]);
    assert!(e.contains("Basalt's queues count no DRA device"), "{e}");
}

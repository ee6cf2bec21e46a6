//! What the replay tests share: trace files written to a temporary directory, traces loaded
//! from command-line style arguments, and runs under a config.

#![allow(dead_code)] // Each test binary uses its part.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use basalt_sim::replay::{self, metrics, TraceArgs};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trace: TraceArgs,
}

/// Writes `text` to a file `name` in a temporary folder of its own.
pub fn tmp(name: &str, text: &str) -> PathBuf {
    // One folder per call: tests of one process run side by side and may write the same name.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("basalt-replay-test-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The trace `basalt-sim replay` would load with these trace options.
pub fn load(args: &[&str]) -> replay::Loaded {
    let mut all = vec!["test"];
    all.extend_from_slice(args);
    Args::parse_from(all).trace.load().expect("loads")
}

/// The trace these options name, or why it cannot be loaded.
pub fn try_load(args: &[&str]) -> anyhow::Result<replay::Loaded> {
    let mut all = vec!["test"];
    all.extend_from_slice(args);
    Args::parse_from(all).trace.load()
}

pub fn run(loaded: &replay::Loaded) -> (replay::sim::Outcome, metrics::Summary) {
    run_with(loaded, &basalt_plugins::Config::default())
}

pub fn run_with(
    loaded: &replay::Loaded,
    config: &basalt_plugins::Config,
) -> (replay::sim::Outcome, metrics::Summary) {
    replay::execute(loaded, config, "default", &AtomicBool::new(false), |_| {}).expect("runs")
}

pub fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

/// One 8-GPU node. A (queue a, 8 GPUs, 100 s) arrives at 0; B (queue b, 4 GPUs, 50 s) at 10;
/// C (queue b, 4 GPUs, 30 s) at 20. A runs 0–100; B and C wait for it (overcommit room is
/// ⌊8 × 1.2⌋ − 8 = 1 GPU < 4) and both start at 100; C ends at 130, B at 150.
pub const THREE_JOBS: &str = "\
job,queue,submit_s,duration_s,pods,cpu,memory,gpus
A,a,0,100,1,1,1Gi,8
B,b,10,50,1,1,1Gi,4
C,b,20,30,1,1,1Gi,4
";

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

/// Writes `text` to a file `name` of this test process's temporary directory.
pub fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("basalt-replay-test-{}", std::process::id()));
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

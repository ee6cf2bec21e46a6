//! `cargo bench -p basalt-sim`: one scheduling cycle over a synthetic backlog of 10,000 pods in
//! gangs of 8, at several cluster sizes. The same hot path as `basalt-sim bench`.

use basalt_engine::Snapshot;
use basalt_plugins::Config;

use basalt_sim::synthetic;

fn main() {
    divan::main();
}

fn snapshot(nodes: usize, gpus_per_pod: u32) -> Snapshot {
    let setup = synthetic::Synthetic {
        nodes,
        pods: 10_000,
        gang_size: 8,
        gpus_per_node: 8,
        gpus_per_pod,
    };
    Snapshot::build(setup.cluster()).expect("synthetic cluster is valid")
}

/// Everything fits: 10,000 one-GPU pods.
#[divan::bench(args = [1_000, 5_000, 20_000], sample_count = 20)]
fn cycle_all_fit(bencher: divan::Bencher, nodes: usize) {
    let snap = snapshot(nodes, 1);
    let config = Config::default();
    bencher.bench(|| basalt_plugins::schedule(&snap, &config));
}

/// Half the backlog cannot fit (8-GPU pods on a cluster with room for 5,000 of them at 5,000
/// nodes): exercises the per-shape failure cache and the aggregated reasons.
#[divan::bench(args = [5_000, 20_000], sample_count = 20)]
fn cycle_oversubscribed(bencher: divan::Bencher, nodes: usize) {
    let snap = snapshot(nodes, 8);
    let config = Config::default();
    bencher.bench(|| basalt_plugins::schedule(&snap, &config));
}

/// Building the snapshot: sorting, interning and validation.
#[divan::bench(args = [5_000, 20_000], sample_count = 10)]
fn snapshot_build(bencher: divan::Bencher, nodes: usize) {
    let setup = synthetic::Synthetic {
        nodes,
        pods: 10_000,
        gang_size: 8,
        gpus_per_node: 8,
        gpus_per_pod: 1,
    };
    bencher
        .with_inputs(|| setup.cluster())
        .bench_values(|spec| Snapshot::build(spec).expect("valid"));
}

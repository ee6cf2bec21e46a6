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
        gpus_per_pod,
        ..synthetic::Synthetic::new(nodes, 10_000)
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
    let setup = synthetic::Synthetic::new(nodes, 10_000);
    bencher
        .with_inputs(|| setup.cluster())
        .bench_values(|spec| Snapshot::build(spec).expect("valid"));
}

/// The queues issue's target: 10,000 nodes, 200 leaf queues in a three-level tree, half the
/// cluster running low-priority gangs and 50,000 pending pods, with enqueue, allocate, reclaim
/// and preempt.
#[divan::bench(sample_count = 5)]
fn cycle_queues_10k_nodes_50k_pending(bencher: divan::Bencher) {
    let setup = synthetic::Synthetic {
        queues: 200,
        running: 40_000,
        ..synthetic::Synthetic::new(10_000, 50_000)
    };
    let snap = Snapshot::build(setup.cluster()).expect("synthetic cluster is valid");
    let config = Config::default();
    bencher.bench(|| basalt_plugins::schedule(&snap, &config));
}

/// The topology issue's target: 10,000 nodes as 20 spines x 25 racks x 20 nodes (NVL72-style
/// cliques in every fourth rack), a mixed backlog of 20,000 pods: 512-GPU gangs (required
/// spine), 4 x TP=8 gangs (required rack), TP=8 jobs (required nvlink) and 1-GPU pods.
#[divan::bench(sample_count = 5)]
fn cycle_topology_10k_nodes(bencher: divan::Bencher) {
    let setup = synthetic::Synthetic {
        fabric: true,
        ..synthetic::Synthetic::new(10_000, 20_000)
    };
    let snap = Snapshot::build(setup.cluster()).expect("synthetic cluster is valid");
    let config = Config::default();
    bencher.bench(|| basalt_plugins::schedule(&snap, &config));
}

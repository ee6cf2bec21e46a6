//! The replay with real per-device GPU shares (`--gpu-share hami`): openb-format traces on a
//! tiny cluster whose placements and fragmentation are worked out by hand, against the old
//! round-up mapping; and the exactness of carrying shares across cycles (folded or not, kept
//! specs or rebuilt every cycle) on the bundled openb sample.

mod common;

use basalt_sim::replay::{self, metrics};
use common::{close, load, run, run_with, tmp};

/// One node with two T4 GPUs (openb node list format).
const TWO_GPUS: &str = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n";

const HEADER: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n";

/// Runs `pods` (openb rows) on [`TWO_GPUS`] with `--gpu-share share` (None: the default).
fn replay_on_two_gpus(
    name: &str,
    pods: &str,
    share: Option<&str>,
) -> (replay::sim::Outcome, metrics::Summary) {
    let trace = tmp(name, &format!("{HEADER}{pods}"));
    let nodes = tmp("two-gpus.csv", TWO_GPUS);
    let mut args = vec![
        "--trace",
        trace.to_str().unwrap(),
        "--nodes-csv",
        nodes.to_str().unwrap(),
    ];
    if let Some(share) = share {
        args.extend(["--gpu-share", share]);
    }
    let loaded = load(&args);
    run(&loaded)
}

/// Four 0.5-GPU pods (0–100 s) arrive at 0 on two GPUs, a fifth (50 s) at 1. With real shares
/// the four fit at once, two per device at exactly 100 % compute each (no compute is left
/// anywhere), and the fifth waits for them: no device is ever over its compute. Rounded up,
/// each takes a whole GPU: two run at a time.
const FIVE_HALVES: &str = "\
p0,1000,1024,1,500,0,100,0
p1,1000,1024,1,500,0,100,0
p2,1000,1024,1,500,0,100,0
p3,1000,1024,1,500,0,100,0
p4,1000,1024,1,500,1,51,1
";

#[test]
fn four_half_gpu_pods_share_two_gpus() {
    // hami is the default for an openb trace.
    let (o, s) = replay_on_two_gpus("halves.csv", FIVE_HALVES, None);
    assert!(s.complete);
    assert_eq!(s.finished, 5);
    assert_eq!(o.total_gpus, 2);
    assert_eq!(o.total_gpu_cores, 200);
    assert_eq!(o.overcommitted_gpus_peak, 0);
    // p0–p3 start at 0; p4 waits from 1 until they leave at 100 and runs 100–150.
    close(s.queueing_delay_s.p50, 0.0);
    close(s.queueing_delay_s.max, 99.0);
    assert_eq!(o.end_ms, 150_000);
    // [0, 100): both devices at 100 % (four halves: two each); nothing free, nothing partial.
    let first = &o.samples[0];
    assert_eq!(first.t_ms, 0);
    assert_eq!(first.running_jobs, 4);
    assert_eq!(first.gpus_allocated, 2);
    assert_eq!(
        (
            first.fragmented_gpu_cores,
            first.free_gpu_cores,
            first.partial_gpus
        ),
        (0, 0, 0)
    );
    // [100, 150): p4 alone holds half of one device; the other is free.
    // Fragmented 50 of 200 for 50 of 150 s; free 100 of 200 for 50 s; one partial device.
    close(s.mean_fragmented_gpu_compute, 50.0 * 50.0 / 200.0 / 150.0);
    close(s.mean_free_gpu_compute, 50.0 * 100.0 / 200.0 / 150.0);
    close(s.mean_partial_gpus, 50.0 / 150.0);
    // Only [100, 150) has free compute: a third of it fragmented.
    close(s.mean_fragmented_share_of_free_compute, 1.0 / 3.0);
    // Allocation: 2 of 2 GPUs held for 100 s, 1 for 50 s; the share asked: all of both GPUs
    // for 100 s, a quarter of the cluster for 50 s.
    close(s.mean_allocation, (100.0 + 25.0) / 150.0);
    close(s.mean_gpu_share_used, (100.0 + 12.5) / 150.0);
    close(s.peak_fragmentation.used_gpu_compute, 1.0);
    close(s.peak_fragmentation.t_s, 0.0);

    // Rounded up, only two of the halves run at a time (the test's point: without real
    // sharing four halves never fit two GPUs): two wait 100 s, the last about 200 s.
    let (o, s) = replay_on_two_gpus("halves.csv", FIVE_HALVES, Some("round-up"));
    assert_eq!(s.finished, 5);
    close(s.queueing_delay_s.p50, 100.0);
    assert!(s.queueing_delay_s.max >= 199.0, "{:?}", s.queueing_delay_s);
    assert_eq!(o.samples[0].running_jobs, 2);
    // Whole devices are used or free: never partly.
    close(s.mean_fragmented_gpu_compute, 0.0);
    close(s.mean_partial_gpus, 0.0);
}

/// Shares of 0.6 and 0.4 arriving one by one on two GPUs, so that each placement is forced
/// (or symmetric): a (0.6, 0–100) takes one device, b (0.6, 10–100) must take the other, c
/// (0.4, 20–60) and d (0.4, 30–100) fill the 40 % left on each.
///
/// | interval | devices (compute used) | fragmented | free | partial |
/// |---|---|---|---|---|
/// | [0, 10)   | 60, 0     | 40 | 100 | 1 |
/// | [10, 20)  | 60, 60    | 80 | 0   | 2 |
/// | [20, 30)  | 100, 60   | 40 | 0   | 1 |
/// | [30, 60)  | 100, 100  | 0  | 0   | 0 |
/// | [60, 100) | 60, 100   | 40 | 0   | 1 |
const SIXTY_FORTY: &str = "\
a,1000,1024,1,600,0,100,0
b,1000,1024,1,600,10,100,10
c,1000,1024,1,400,20,60,20
d,1000,1024,1,400,30,100,30
";

#[test]
fn per_device_fragmentation_is_hand_computed() {
    let (o, s) = replay_on_two_gpus("sixty-forty.csv", SIXTY_FORTY, Some("hami"));
    assert!(s.complete);
    assert_eq!(s.finished, 4);
    assert_eq!(o.end_ms, 100_000);
    close(s.queueing_delay_s.max, 0.0);
    assert_eq!(o.overcommitted_gpus_peak, 0);
    // Fragmented compute: (10·40 + 10·80 + 10·40 + 30·0 + 40·40) / 100 s / 200 = 0.16.
    close(s.mean_fragmented_gpu_compute, 0.16);
    // Free devices' compute: 10·100 / 100 / 200 = 0.05.
    close(s.mean_free_gpu_compute, 0.05);
    // Partially used devices: (10·1 + 10·2 + 10·1 + 40·1) / 100 = 0.8.
    close(s.mean_partial_gpus, 0.8);
    // Fragmented over free compute, over the 70 s with free compute:
    // (10·40/140 + 10·1 + 10·1 + 40·1) / 70 = 44/49.
    close(s.mean_fragmented_share_of_free_compute, 44.0 / 49.0);
    // GPUs held: one for 10 s, both for 90 s; idle GPUs on a used node: one for 10 s.
    close(s.mean_allocation, (5.0 + 90.0) / 100.0);
    close(s.mean_fragmented_gpus, 0.1);
    // The busiest instant is the first at full compute: t = 30.
    close(s.peak_fragmentation.t_s, 30.0);
    close(s.peak_fragmentation.used_gpu_compute, 1.0);
    assert_eq!(s.peak_fragmentation.partial_gpus, 0);
    // Per sample, as timeseries.csv states it.
    let at = |t: i64| {
        let p = o.samples.iter().rposition(|x| x.t_ms <= t * 1000).unwrap();
        let x = &o.samples[p];
        (x.fragmented_gpu_cores, x.free_gpu_cores, x.partial_gpus)
    };
    assert_eq!(at(5), (40, 100, 1));
    assert_eq!(at(15), (80, 0, 2));
    assert_eq!(at(25), (40, 0, 1));
    assert_eq!(at(45), (0, 0, 0));
    assert_eq!(at(75), (40, 0, 1));

    // Rounded up, a and b hold both GPUs and c waits for them until 100.
    let (_, s) = replay_on_two_gpus("sixty-forty.csv", SIXTY_FORTY, Some("round-up"));
    close(s.queueing_delay_s.max, 80.0);
    close(s.mean_fragmented_gpu_compute, 0.0);
}

/// The bundled openb sample (400 pods, 61 nodes) under `hami`.
fn openb_sample(extra: &[&str]) -> replay::Loaded {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let pods = dir.join("openb-pods-sample.csv");
    let nodes = dir.join("openb-nodes-sample.csv");
    let mut args = vec![
        "--trace",
        pods.to_str().unwrap(),
        "--nodes-csv",
        nodes.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    load(&args)
}

#[test]
fn shares_carried_across_cycles_are_exact() {
    // Placed shares go into later cycles as held devices (pinned one by one when folded):
    // folded, unfolded and rebuilt-every-cycle runs agree, with and without evicting actions.
    let no_evict = basalt_plugins::Config {
        actions: vec![
            basalt_plugins::config::ActionName::Enqueue,
            basalt_plugins::config::ActionName::Allocate,
        ],
        ..Default::default()
    };
    let default = basalt_plugins::Config::default();
    for (config, name) in [(&no_evict, "enqueue, allocate"), (&default, "default")] {
        let mut loaded = openb_sample(&[]);
        assert_eq!(loaded.options.gpu_share.name(), "hami");
        let (outcome, summary) = run_with(&loaded, config);
        let folded = serde_json::to_string(&summary).unwrap();
        assert!(summary.complete && summary.finished > 0, "{name}");
        assert_eq!(outcome.overcommitted_gpus_peak, 0, "{name}");
        // The sample shares devices: some are partly used at times.
        assert!(summary.mean_partial_gpus > 0.0, "{name}");
        assert!(summary.mean_fragmented_gpu_compute > 0.0, "{name}");
        loaded.options.fold_bound = Some(false);
        let (whole, summary) = run_with(&loaded, config);
        assert_eq!(folded, serde_json::to_string(&summary).unwrap(), "{name}");
        assert_eq!(outcome.bindings, whole.bindings, "{name}");
        loaded.options.fold_bound = None;
        loaded.options.full_rebuild = true;
        let (full, summary) = run_with(&loaded, config);
        assert_eq!(folded, serde_json::to_string(&summary).unwrap(), "{name}");
        assert_eq!(outcome.cycles, full.cycles, "{name}");
    }
}

#[test]
fn real_shares_place_more_than_rounding_up() {
    // The same sample rounded up holds a whole GPU per share: real shares allocate fewer GPUs
    // for the same work, and the GPUs held are at least the share asked.
    let (_, hami) = run(&openb_sample(&[]));
    let (_, round) = run(&openb_sample(&["--gpu-share", "round-up"]));
    assert!(hami.mean_allocation >= hami.mean_gpu_share_used);
    assert!(
        hami.queueing_delay_s.mean <= round.queueing_delay_s.mean,
        "{} > {}",
        hami.queueing_delay_s.mean,
        round.queueing_delay_s.mean
    );
    assert!(hami.mean_allocation < round.mean_allocation);
}

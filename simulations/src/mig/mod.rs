//! `basalt-sim mig`: a synthetic MIG workload ([`workload`]) replayed with static MIG layouts
//! and with layouts the scheduler chooses from demand (`mig.relayout`), reporting the pending
//! time of the MIG pods, the GPU compute left unallocated and the re-layouts.
//!
//! Each GPU is modelled as a node of its own (MIG pods never span GPUs), so a bound pod stays
//! on the GPU it was bound to. A proposed layout is applied `apply_delay_s` later, only if the
//! GPU is still idle then and was not re-laid within `mig.minIntervalSeconds`: what the node
//! agent will do.

pub mod workload;

use basalt_crds::convert::device_names::mig_resource;
use basalt_engine::devices::MigSlice;
use basalt_engine::{ClusterSpec, Gpu, NodeSpec, PodPhase, PodSpec, Snapshot};
use basalt_plugins::Config;
use serde::Serialize;

use workload::{MigPod, Workload};

const MODEL: &str = "NVIDIA-H100-80GB-HBM3";
const MODEL_KEY: &str = "H100-80GB";

/// The static layouts tried, each on every GPU (`profile=count`, as `mig-plan` takes them).
pub const STATIC_LAYOUTS: [&str; 5] = [
    "1g.10gb=7",
    "2g.20gb=3,1g.10gb=1",
    "3g.40gb=2",
    "7g.80gb=1",
    "3g.40gb=1,2g.20gb=1,1g.10gb=2",
];

#[derive(Clone, Debug, clap::Args)]
pub struct MigArgs {
    /// GPUs (H100-80GB).
    #[arg(long, default_value_t = 16)]
    pub gpus: u32,
    /// Offered compute over the cluster's, in percent.
    #[arg(long, default_value_t = 80)]
    pub load: u32,
    /// Mean run time of a pod, seconds.
    #[arg(long, default_value_t = 1800.0)]
    pub mean_run: f64,
    /// Arrivals stop after this many seconds; pods still pending then count as waiting until it.
    #[arg(long, default_value_t = 21_600.0)]
    pub horizon: f64,
    /// Seconds between scheduling cycles.
    #[arg(long, default_value_t = 10.0)]
    pub cycle: f64,
    /// Seconds from a proposed layout to its application.
    #[arg(long, default_value_t = 30.0)]
    pub apply_delay: f64,
    /// A GPU is re-laid at most once per this many seconds (`mig.minIntervalSeconds`).
    #[arg(long, default_value_t = 300)]
    pub min_interval: u64,
    /// Seeds, `42-44` or `42,43`.
    #[arg(long, default_value = "42-44")]
    pub seeds: String,
}

/// One run's figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub layouts: String,
    pub seed: u64,
    pub pods: usize,
    /// Pods never started by the horizon (their pending time runs to it).
    pub never_started: usize,
    pub mean_pending_s: f64,
    pub p90_pending_s: f64,
    /// Time-averaged share of the GPUs' compute slices no running pod holds, in percent.
    pub unallocated_compute_percent: f64,
    pub relayouts: u32,
    /// Proposals dropped at application because the GPU was busy by then.
    pub refused_busy: u32,
    /// The most re-layouts of one GPU within any `minInterval` window (1 at most by design).
    pub max_relayouts_per_gpu_per_interval: u32,
}

/// A GPU's state: its layout (`None`: whole), and re-layouts in flight and done.
#[derive(Clone, Debug, Default)]
struct GpuState {
    layout: Option<Vec<(String, u32)>>,
    applying: Option<(f64, Vec<(String, u32)>)>,
    relaid_at: Vec<f64>,
}

struct Running {
    pod: usize,
    gpu: usize,
    ends_s: f64,
}

fn static_layout(text: &str) -> Vec<(String, u32)> {
    let plan = basalt_mig::planner::plan_text(MODEL_KEY, text).expect("the static layouts plan");
    (plan.placements.iter())
        .map(|p| (p.profile.name.to_string(), p.start))
        .collect()
}

fn node_of(i: usize, g: &GpuState, running: &[Running], pods: &[MigPod]) -> NodeSpec {
    let mut allocatable = vec![("cpu".to_string(), 64_000), ("memory".to_string(), 1 << 40)];
    let mut slices = Vec::new();
    match &g.layout {
        None => allocatable.push(("nvidia.com/gpu".into(), 1)),
        Some(layout) => {
            for (k, (profile, start)) in layout.iter().enumerate() {
                slices.push(MigSlice {
                    gpu: 0,
                    profile: profile.clone(),
                    resource: mig_resource(profile),
                    gpu_instance_id: k as u32 + 1,
                    start: *start,
                    memory_mib: None,
                });
                let r = mig_resource(profile);
                match allocatable.iter_mut().find(|(k, _)| *k == r) {
                    Some((_, n)) => *n += 1,
                    None => allocatable.push((r, 1)),
                }
            }
        }
    }
    // A pod holds its instance until it ends, whatever layout is wanted meanwhile.
    debug_assert!(running
        .iter()
        .filter(|r| r.gpu == i)
        .all(|r| g.layout.is_some()
            && (g.layout.iter().flatten()).any(|(p, _)| p == pods[r.pod].profile)));
    NodeSpec {
        name: format!("gpu-{i:03}"),
        allocatable: allocatable.into_iter().collect(),
        gpus: Some(vec![Gpu {
            model: Some(MODEL.into()),
            memory_mib: Some(81_559),
            mig: g.layout.is_some(),
            ..Gpu::new(0)
        }]),
        slices,
        ..Default::default()
    }
}

fn pod_spec(i: usize, p: &MigPod, node: Option<String>) -> PodSpec {
    PodSpec {
        namespace: "mig".into(),
        name: format!("p{i:05}"),
        ours: true,
        request: [("cpu".to_string(), 100), (mig_resource(p.profile), 1)]
            .into_iter()
            .collect(),
        created_ms: (p.arrive_s * 1000.0) as i64,
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        node,
        ..Default::default()
    }
}

/// The static mix: each GPU one of the pure layouts (`7g.80gb=1`, `3g.40gb=2`,
/// `2g.20gb=3,1g.10gb=1`, `1g.10gb=7`), in proportion to the compute the mix asks of each
/// profile (largest remainders), so every profile has GPUs.
pub fn demand_mix(gpus: u32) -> Vec<&'static str> {
    let pure = [
        ("7g.80gb", "7g.80gb=1"),
        ("3g.40gb", "3g.40gb=2"),
        ("2g.20gb", "2g.20gb=3,1g.10gb=1"),
        ("1g.10gb", "1g.10gb=7"),
    ];
    let weight = |p: &str| {
        let m = workload::MIX.iter().find(|m| m.0 == p).expect("in the mix");
        m.1 as u64 * m.2
    };
    let total: u64 = pure.iter().map(|(p, _)| weight(p)).sum();
    let mut counts: Vec<(u64, u64, &str)> = (pure.iter())
        .map(|(p, l)| {
            let exact = weight(p) * gpus as u64;
            (exact / total, exact % total, *l)
        })
        .collect();
    let mut left = gpus as u64 - counts.iter().map(|c| c.0).sum::<u64>();
    let mut by_remainder: Vec<usize> = (0..counts.len()).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(counts[i].1));
    for i in by_remainder {
        if left > 0 {
            counts[i].0 += 1;
            left -= 1;
        }
    }
    (counts.iter())
        .flat_map(|&(n, _, l)| std::iter::repeat_n(l, n as usize))
        .collect()
}

/// Replays `pods` on GPUs starting from `initial` (one layout per GPU; `None`: whole), with
/// the scheduler config `config` (demand-driven when `mig.relayout` is on).
pub fn replay(
    args: &MigArgs,
    pods: &[MigPod],
    initial: Vec<Option<Vec<(String, u32)>>>,
    config: &Config,
    label: &str,
    seed: u64,
) -> Outcome {
    let mut gpus: Vec<GpuState> = (initial.into_iter())
        .map(|layout| GpuState {
            layout,
            ..Default::default()
        })
        .collect();
    let all = gpus.len() as f64;
    let min_interval = config.mig.min_interval_seconds as f64;
    let mut running: Vec<Running> = Vec::new();
    let mut started: Vec<Option<f64>> = vec![None; pods.len()];
    let (mut out, mut idle_sum, mut samples) = (Outcome::default(), 0.0, 0u64);
    let mut t = 0.0;
    while t <= args.horizon {
        running.retain(|r| r.ends_s > t);
        for (i, g) in gpus.iter_mut().enumerate() {
            let Some((at, layout)) = g.applying.take_if(|(at, _)| *at <= t) else {
                continue;
            };
            if running.iter().any(|r| r.gpu == i) {
                out.refused_busy += 1;
            } else {
                debug_assert!(at <= t);
                g.layout = Some(layout);
                g.relaid_at.push(t);
                out.relayouts += 1;
            }
        }
        let waiting: Vec<usize> = (0..pods.len())
            .filter(|&i| pods[i].arrive_s <= t && started[i].is_none())
            .collect();
        if !waiting.is_empty() {
            let nodes = (gpus.iter().enumerate())
                .map(|(i, g)| node_of(i, g, &running, pods))
                .collect();
            let mut specs: Vec<PodSpec> = (running.iter())
                .map(|r| pod_spec(r.pod, &pods[r.pod], Some(format!("gpu-{:03}", r.gpu))))
                .collect();
            specs.extend(waiting.iter().map(|&i| pod_spec(i, &pods[i], None)));
            let spec = ClusterSpec {
                nodes,
                pods: specs,
                device_resource: basalt_crds::convert::device_names::GPU_NAME.to_string(),
                ..Default::default()
            };
            let snap = Snapshot::build(spec).expect("the simulated cluster is valid");
            let plan = basalt_plugins::schedule(&snap, config);
            for b in &plan.bindings {
                let pod: usize = b.pod["mig/p".len()..].parse().expect("our pod names");
                let gpu: usize = b.node["gpu-".len()..].parse().expect("our node names");
                started[pod] = Some(t);
                running.push(Running {
                    pod,
                    gpu,
                    ends_s: t + pods[pod].run_s,
                });
            }
            for l in &plan.mig_layouts {
                let g = &mut gpus[l.node["gpu-".len()..]
                    .parse::<usize>()
                    .expect("our node names")];
                let recent = g.relaid_at.last().is_some_and(|&at| t - at < min_interval);
                if g.applying.is_none() && !recent {
                    let layout = l
                        .layout
                        .iter()
                        .map(|p| (p.profile.clone(), p.start))
                        .collect();
                    g.applying = Some((t + args.apply_delay, layout));
                }
            }
        }
        let held: u32 = running.iter().map(|r| pods[r.pod].compute_slices).sum();
        idle_sum += 1.0 - held as f64 / (7.0 * all);
        samples += 1;
        t += args.cycle;
    }
    let mut pending: Vec<f64> = (pods.iter().zip(&started))
        .map(|(p, s)| s.unwrap_or(args.horizon) - p.arrive_s)
        .collect();
    pending.sort_by(f64::total_cmp);
    out.layouts = label.to_string();
    out.seed = seed;
    out.pods = pods.len();
    out.never_started = started.iter().filter(|s| s.is_none()).count();
    out.mean_pending_s = pending.iter().sum::<f64>() / pending.len().max(1) as f64;
    out.p90_pending_s = pending.get(pending.len() * 9 / 10).copied().unwrap_or(0.0);
    out.unallocated_compute_percent = 100.0 * idle_sum / samples.max(1) as f64;
    out.max_relayouts_per_gpu_per_interval = (gpus.iter())
        .flat_map(|g| {
            (0..g.relaid_at.len()).map(move |i| {
                (g.relaid_at[i..].iter())
                    .take_while(|&&at| at - g.relaid_at[i] < min_interval)
                    .count() as u32
            })
        })
        .max()
        .unwrap_or(0);
    out
}

/// Every static layout and the demand-driven run, for each seed.
pub fn run(args: &MigArgs, base: &Config) -> anyhow::Result<Vec<Outcome>> {
    let seeds = crate::fgd::parse_seeds(&args.seeds)?;
    let mut fixed = base.clone();
    fixed.mig.relayout = false;
    let mut demand = base.clone();
    demand.mig.relayout = true;
    // The simulated GPUs start whole and are switched to MIG mode when first re-laid, as
    // mig-manager does (Basalt's node agent never switches MIG mode: `mig.wholeGpus`).
    demand.mig.whole_gpus = true;
    demand.mig.min_interval_seconds = args.min_interval;
    fixed.mig.min_interval_seconds = args.min_interval;
    let mut out = Vec::new();
    for seed in seeds {
        let pods = Workload {
            gpus: args.gpus,
            load_percent: args.load,
            mean_run_s: args.mean_run,
            horizon_s: args.horizon,
            seed,
        }
        .pods();
        let every = |layout: Option<Vec<(String, u32)>>| vec![layout; args.gpus as usize];
        for text in STATIC_LAYOUTS {
            let initial = every(Some(static_layout(text)));
            out.push(replay(
                args,
                &pods,
                initial,
                &fixed,
                &format!("static {text}"),
                seed,
            ));
        }
        let mix = demand_mix(args.gpus)
            .into_iter()
            .map(|l| Some(static_layout(l)))
            .collect();
        out.push(replay(
            args,
            &pods,
            mix,
            &fixed,
            "static mix by demand",
            seed,
        ));
        out.push(replay(
            args,
            &pods,
            every(None),
            &demand,
            "demand-driven",
            seed,
        ));
    }
    Ok(out)
}

/// The figures per layout, averaged over seeds, and the demand-driven run against the best
/// static layout (least mean pending time).
pub fn render_text(outcomes: &[Outcome]) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for o in outcomes {
        if !labels.contains(&o.layouts.as_str()) {
            labels.push(&o.layouts);
        }
    }
    let avg = |label: &str, f: fn(&Outcome) -> f64| {
        let of: Vec<f64> = outcomes
            .iter()
            .filter(|o| o.layouts == label)
            .map(f)
            .collect();
        of.iter().sum::<f64>() / of.len().max(1) as f64
    };
    let mut text = format!(
        "{:<38} {:>10} {:>10} {:>8} {:>14} {:>10} {:>12}\n",
        "layouts",
        "mean pend",
        "p90 pend",
        "unstart",
        "unalloc comp %",
        "relayouts",
        "max/interval"
    );
    for l in &labels {
        text += &format!(
            "{:<38} {:>9.0}s {:>9.0}s {:>8.1} {:>14.1} {:>10.1} {:>12.0}\n",
            l,
            avg(l, |o| o.mean_pending_s),
            avg(l, |o| o.p90_pending_s),
            avg(l, |o| o.never_started as f64),
            avg(l, |o| o.unallocated_compute_percent),
            avg(l, |o| o.relayouts as f64),
            (outcomes.iter().filter(|o| o.layouts == *l))
                .map(|o| o.max_relayouts_per_gpu_per_interval)
                .max()
                .unwrap_or(0),
        );
    }
    let single = (labels
        .iter()
        .filter(|l| l.starts_with("static ") && !l.contains("mix")))
    .min_by(|a, b| avg(a, |o| o.mean_pending_s).total_cmp(&avg(b, |o| o.mean_pending_s)));
    let demand = avg("demand-driven", |o| o.mean_pending_s);
    for against in single
        .into_iter()
        .chain(labels.iter().filter(|l| l.contains("mix")))
    {
        let s = avg(against, |o| o.mean_pending_s);
        text += &format!(
            "demand-driven vs {against}: mean pending {demand:.0}s vs {s:.0}s ({:+.0} %)\n",
            if s > 0.0 {
                100.0 * (demand - s) / s
            } else {
                0.0
            }
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MigArgs {
        MigArgs {
            gpus: 4,
            load: 70,
            mean_run: 900.0,
            horizon: 5400.0,
            cycle: 30.0,
            apply_delay: 30.0,
            min_interval: 300,
            seeds: "7".into(),
        }
    }

    #[test]
    fn demand_driven_layouts_wait_less_than_any_static_one_and_keep_the_interval() {
        let outcomes = run(&small(), &Config::default()).unwrap();
        let demand = outcomes
            .iter()
            .find(|o| o.layouts == "demand-driven")
            .unwrap();
        let best_static = (outcomes.iter().filter(|o| o.layouts.starts_with("static")))
            .map(|o| o.mean_pending_s)
            .fold(f64::INFINITY, f64::min);
        assert!(demand.relayouts > 0, "{demand:?}");
        assert!(demand.max_relayouts_per_gpu_per_interval <= 1, "{demand:?}");
        assert!(demand.mean_pending_s < best_static, "{outcomes:#?}");
        // Static runs never re-lay.
        assert!(outcomes
            .iter()
            .filter(|o| o.layouts.starts_with("static"))
            .all(|o| o.relayouts == 0));
    }

    #[test]
    fn the_workload_is_seeded_and_follows_the_mix() {
        let w = |seed| Workload {
            gpus: 16,
            load_percent: 80,
            mean_run_s: 1800.0,
            horizon_s: 21_600.0,
            seed,
        };
        assert_eq!(w(1).pods(), w(1).pods());
        assert_ne!(w(1).pods(), w(2).pods());
        let pods = w(1).pods();
        let share = |p: &str| pods.iter().filter(|x| x.profile == p).count() * 100 / pods.len();
        assert!(
            (30..=50).contains(&share("1g.10gb")),
            "{}",
            share("1g.10gb")
        );
        assert!((8..=22).contains(&share("7g.80gb")), "{}", share("7g.80gb"));
    }
}

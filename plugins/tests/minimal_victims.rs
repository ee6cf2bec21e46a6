//! The cheapest sufficient set (issue 32 item 5): over random small clusters, a reclaim or a
//! preempt evicts no unit its preemptor does not need. Running jobs of three queues, of random
//! sizes, minimums and priorities, fill random nodes; a rigid gang of identical pods (minimum =
//! its size, a priority above every other job) waits in queue q0. Whenever the plan evicts, the
//! victims are split in units as the engine takes them (a job that loses every pod it ran is one
//! unit, each pod of a job that keeps running its own) and, for each unit, the test counts how
//! many of the gang's identical pods fit on the nodes with every other victim gone: never as
//! many as the plan places. Identical pods make the count exact (each node holds as many as its
//! scarcest resource allows), so the property judges the engine's choice, not its packing.

use std::collections::BTreeMap;

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec, QueueSpec, ResourceList,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const GPU: &str = "nvidia.com/gpu";

/// cpu (cores), memory (GiB), GPUs.
type Shape = (i64, i64, i64);

fn list((cpu, mem, gpu): Shape) -> ResourceList {
    let mut l = ResourceList::from([
        ("cpu".to_string(), cpu * 1000),
        ("memory".into(), mem << 30),
    ]);
    if gpu > 0 {
        l.insert(GPU.into(), gpu);
    }
    l
}

#[derive(Clone, Debug)]
struct Running {
    queue: usize,
    pods: Vec<Shape>,
    min: usize,
    priority: i32,
}

#[derive(Clone, Debug)]
struct Case {
    nodes: Vec<Shape>,
    weights: Vec<u32>,
    jobs: Vec<Running>,
    /// The waiting gang: how many pods, each of this shape.
    gang: (usize, Shape),
}

fn cases() -> impl Strategy<Value = Case> {
    let shape = (1..=4i64, 1..=8i64, 0..=2i64);
    let job = (
        0..3usize,
        prop::collection::vec(shape, 1..=3),
        1..=3usize,
        -2..=2i32,
    )
        .prop_map(|(queue, pods, min, priority)| Running {
            queue,
            min: min.min(pods.len()),
            pods,
            priority,
        });
    (
        prop::collection::vec((4..=8i64, 8..=32i64, 1..=4i64), 1..=4),
        prop::collection::vec(1..=3u32, 3),
        prop::collection::vec(job, 1..=7),
        (1..=3usize, (1..=4i64, 1..=8i64, 1..=2i64)),
    )
        .prop_map(|(nodes, weights, jobs, gang)| Case {
            nodes,
            weights,
            jobs,
            gang,
        })
}

/// The cluster, with where each running pod is (first fit; a job that does not fit whole is
/// left out), and the pods' names in order.
fn cluster(case: &Case) -> (ClusterSpec, BTreeMap<String, (usize, Shape)>) {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 100_000_000,
        nodes: (case.nodes.iter().enumerate())
            .map(|(i, &n)| NodeSpec {
                name: format!("n{i}"),
                allocatable: list(n),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    for (i, &w) in case.weights.iter().enumerate() {
        spec.queues.push(QueueSpec {
            weight: w,
            reclaimable: true,
            ..QueueSpec::new(format!("q{i}"))
        });
    }
    let mut free: Vec<Shape> = case.nodes.clone();
    let mut placed = BTreeMap::new();
    let group = |name: String, queue: usize, min: usize, priority: i32, running: bool| GroupSpec {
        namespace: "ns".into(),
        name,
        queue: Some(format!("q{queue}")),
        min_member: min as i64,
        min_task_member: Default::default(),
        min_resources: None,
        priority: Some(priority),
        created_ms: 1,
        phase: if running {
            JobPhase::Running
        } else {
            JobPhase::Inqueue
        },
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    };
    for (j, job) in case.jobs.iter().enumerate() {
        let mut trial = free.clone();
        let mut nodes = Vec::new();
        for &(c, m, g) in &job.pods {
            let Some(n) = (trial.iter()).position(|f| f.0 >= c && f.1 >= m && f.2 >= g) else {
                break;
            };
            trial[n] = (trial[n].0 - c, trial[n].1 - m, trial[n].2 - g);
            nodes.push(n);
        }
        if nodes.len() < job.pods.len() {
            continue;
        }
        free = trial;
        let name = format!("j{j}");
        spec.groups
            .push(group(name.clone(), job.queue, job.min, job.priority, true));
        for (p, (&shape, &n)) in job.pods.iter().zip(&nodes).enumerate() {
            let pod = format!("{name}-{p}");
            placed.insert(format!("ns/{pod}"), (n, shape));
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: pod,
                ours: true,
                group: Some(name.clone()),
                request: list(shape),
                priority: job.priority,
                // Older jobs first, so that ages differ.
                created_ms: 1000 * (1 + j as i64 + p as i64),
                phase: PodPhase::Running,
                node: Some(format!("n{n}")),
                ..Default::default()
            });
        }
    }
    let (size, shape) = case.gang;
    spec.groups.push(group("gang".into(), 0, size, 10, false));
    for p in 0..size {
        spec.pods.push(PodSpec {
            namespace: "ns".into(),
            name: format!("gang-{p}"),
            ours: true,
            group: Some("gang".into()),
            request: list(shape),
            priority: 10,
            created_ms: 50_000_000,
            phase: PodPhase::Pending,
            ..Default::default()
        });
    }
    (spec, placed)
}

/// How many pods of `shape` fit on the nodes with every running pod but `gone`'s.
fn room(
    case: &Case,
    placed: &BTreeMap<String, (usize, Shape)>,
    gone: &[&String],
    shape: Shape,
) -> i64 {
    let mut free = case.nodes.clone();
    for (pod, &(n, (c, m, g))) in placed {
        if !gone.contains(&pod) {
            free[n] = (free[n].0 - c, free[n].1 - m, free[n].2 - g);
        }
    }
    let fits = |have: i64, ask: i64| if ask == 0 { i64::MAX } else { have / ask };
    (free.iter())
        .map(|&(c, m, g)| fits(c, shape.0).min(fits(m, shape.1)).min(fits(g, shape.2)))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_evicted_unit_is_needless(case in cases()) {
        let (spec, placed) = cluster(&case);
        let snapshot = basalt_engine::Snapshot::build(spec).expect("valid cluster");
        let mut config = Config::default();
        config.backfill.reserve_after_seconds = None;
        // Any eviction is worth it here: the property is about what the gang needs.
        config.eviction.min_used_fraction = 0.0;
        let plan = schedule(&snapshot, &config);
        if plan.evictions.is_empty() {
            return Ok(());
        }
        let started = plan.nominations.len() + plan.bindings.len();
        prop_assert!(plan.evictions.iter().all(|e| e.for_group == "ns/gang"));
        // The units: a job that lost every pod it ran, or one pod of a job that runs on.
        let mut by_job: BTreeMap<String, Vec<&String>> = BTreeMap::new();
        for e in &plan.evictions {
            let job = e.pod.rsplit_once('-').expect("pod name").0.to_string();
            by_job.entry(job).or_default().push(&e.pod);
        }
        let mut units: Vec<Vec<&String>> = Vec::new();
        for (job, pods) in by_job {
            let ran = placed.keys().filter(|p| p.rsplit_once('-').unwrap().0 == job).count();
            if pods.len() == ran {
                units.push(pods);
            } else {
                units.extend(pods.into_iter().map(|p| vec![p]));
            }
        }
        let evicted: Vec<&String> = plan.evictions.iter().map(|e| &e.pod).collect();
        let shape = case.gang.1;
        prop_assert!(room(&case, &placed, &evicted, shape) >= started as i64);
        for unit in &units {
            let rest: Vec<&String> = (evicted.iter().copied())
                .filter(|p| !unit.contains(p))
                .collect();
            prop_assert!(
                room(&case, &placed, &rest, shape) < started as i64,
                "the gang's {started} pods fit without {unit:?}; evicted {evicted:?}"
            );
        }
    }
}

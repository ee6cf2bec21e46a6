//! The forecast (`basalt_engine::forecast`) with the plugins' framework: a waiting gang starts
//! when the running jobs ahead of it end, and says how that is known.

use std::collections::HashMap;
use std::sync::Arc;

use basalt_engine::forecast::{forecast, forecast_shared, End, Forecast, Limits, Method};
use basalt_engine::{schedule, ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec};
use basalt_engine::{Plan, ResourceList, Snapshot, Warm};
use basalt_plugins::Config;

const GPU: &str = "nvidia.com/gpu";
const HOUR: i64 = 3600 * 1000;

fn gpus(n: i64) -> ResourceList {
    ResourceList::from([("cpu".to_string(), 1000), (GPU.to_string(), n)])
}

/// Two 8-GPU nodes; `running` gangs (name, pods, node of each) hold them; `waiting` gangs
/// (name, pods) of 8-GPU pods wait.
fn cluster(running: &[(&str, &[&str])], waiting: &[(&str, usize)]) -> ClusterSpec {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 10 * HOUR,
        nodes: (0..2)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                allocatable: ResourceList::from([
                    ("cpu".to_string(), 64_000),
                    (GPU.to_string(), 8),
                    ("pods".to_string(), 110),
                ]),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut add = |name: &str, nodes: Vec<Option<&str>>, created: i64| {
        let mut group = GroupSpec::new("ml", name, nodes.len() as i64);
        group.created_ms = created;
        if nodes[0].is_some() {
            group.phase = JobPhase::Running;
        }
        spec.groups.push(group);
        for (k, node) in nodes.into_iter().enumerate() {
            spec.pods.push(PodSpec {
                namespace: "ml".into(),
                name: format!("{name}-{k}"),
                ours: true,
                group: Some(name.into()),
                request: gpus(8),
                created_ms: created,
                phase: if node.is_some() {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                node: node.map(str::to_string),
                gpu_ids: if node.is_some() {
                    (0..8).collect()
                } else {
                    Vec::new()
                },
                started_ms: node.map(|_| created),
                ..Default::default()
            });
        }
    };
    for (name, nodes) in running {
        add(name, nodes.iter().map(|n| Some(*n)).collect(), 0);
    }
    for (i, (name, pods)) in waiting.iter().enumerate() {
        // A minute ago: not waited long enough to reserve nodes.
        add(name, vec![None; *pods], 10 * HOUR - 60_000 + i as i64);
    }
    spec
}

fn run(spec: ClusterSpec, ends: &HashMap<String, End>) -> Forecast {
    let config = Config::default();
    let make = |names: &_| basalt_plugins::framework(&config, names);
    forecast(spec, make, ends, Limits::default()).expect("the cluster is valid")
}

fn at(ms: i64, method: Method) -> End {
    End::At { ms, method }
}

#[test]
fn a_gang_starts_when_the_jobs_it_needs_end() {
    // `a` holds n0 until 12:00, `b` holds n1 until 11:00; `big` needs both nodes, `small` one.
    let spec = cluster(
        &[("a", &["n0"]), ("b", &["n1"])],
        &[("big", 2), ("small", 1)],
    );
    let ends = HashMap::from([
        ("ml/a-0".to_string(), at(12 * HOUR, Method::Exact)),
        ("ml/b-0".to_string(), at(11 * HOUR, Method::Exact)),
        (
            "ml/big-0".to_string(),
            End::After {
                ms: HOUR,
                method: Method::Exact,
            },
        ),
        (
            "ml/big-1".to_string(),
            End::After {
                ms: HOUR,
                method: Method::Exact,
            },
        ),
    ]);
    let f = run(spec, &ends);
    let big = f.job("ml/big").expect("forecast");
    let small = f.job("ml/small").expect("forecast");
    // `big` is first in line (older): `small` does not pass it when n1 frees at 11:00; `big`
    // takes both nodes at 12:00 for an hour, and `small` starts at 13:00.
    assert_eq!(big.start_ms, Some(12 * HOUR), "{f:?}");
    assert_eq!(big.method, Method::Exact);
    assert_eq!(small.start_ms, Some(13 * HOUR), "{f:?}");
    assert_eq!(small.method, Method::Exact);
    assert!(f.cycles >= 2);
}

#[test]
fn an_estimated_end_makes_the_start_an_estimate() {
    let spec = cluster(&[("a", &["n0"]), ("b", &["n1"])], &[("big", 2)]);
    let ends = HashMap::from([
        ("ml/a-0".to_string(), at(12 * HOUR, Method::Estimate)),
        ("ml/b-0".to_string(), at(11 * HOUR, Method::Exact)),
    ]);
    let f = run(spec, &ends);
    let big = f.job("ml/big").expect("forecast");
    assert_eq!(big.start_ms, Some(12 * HOUR));
    assert_eq!(big.method, Method::Estimate);
}

#[test]
fn a_gang_behind_an_end_nobody_knows_is_unknown() {
    // `a`'s end is unknown: `big` (both nodes) never starts, nor `small` behind it; the
    // forecast stops once no end is left instead of cycling on.
    let spec = cluster(
        &[("a", &["n0"]), ("b", &["n1"])],
        &[("big", 2), ("small", 1)],
    );
    let ends = HashMap::from([("ml/b-0".to_string(), at(11 * HOUR, Method::Exact))]);
    let f = run(spec, &ends);
    for job in ["ml/big", "ml/small"] {
        let j = f.job(job).expect("forecast");
        assert_eq!((j.start_ms, j.method), (None, Method::Unknown), "{f:?}");
    }
    assert_eq!((f.cycles, f.ends), (2, 1), "{f:?}");
}

#[test]
fn a_gang_that_fits_now_starts_now_and_running_gangs_are_not_forecast() {
    let spec = cluster(&[("a", &["n0"])], &[("small", 1)]);
    let f = run(spec, &HashMap::new());
    assert_eq!(f.jobs.len(), 1, "{f:?}");
    let small = f.job("ml/small").expect("forecast");
    // `a`'s end is unknown, so even a start now is only a bound.
    assert_eq!(small.start_ms, Some(10 * HOUR));
    assert_eq!(small.method, Method::Estimate);
}

#[test]
fn the_budget_bounds_the_forecast() {
    let spec = cluster(&[("a", &["n0"]), ("b", &["n1"])], &[("big", 2)]);
    let ends = HashMap::from([
        ("ml/a-0".to_string(), at(12 * HOUR, Method::Exact)),
        ("ml/b-0".to_string(), at(11 * HOUR, Method::Exact)),
    ]);
    let config = Config::default();
    let make = |names: &_| basalt_plugins::framework(&config, names);
    let limits = Limits {
        horizon_ms: HOUR,
        ..Limits::default()
    };
    let f = forecast(spec, make, &ends, limits).expect("valid");
    let big = f.job("ml/big").expect("forecast");
    assert_eq!((big.start_ms, big.method), (None, Method::Unknown), "{f:?}");
}

/// The work bound (nodes plus pods per cycle) stops a run as the cycle bound does: a gang that
/// starts after its holders end is `Unknown` when the work allows one cycle, and starts
/// without a bound; the first cycle runs whatever the bound.
#[test]
fn the_work_bound_stops_the_forecast() {
    let spec = cluster(
        &[("a", &["n0"]), ("b", &["n1"])],
        &[("small", 1), ("big", 2)],
    );
    let ends = HashMap::from([
        ("ml/a-0".to_string(), at(11 * HOUR, Method::Exact)),
        ("ml/b-0".to_string(), at(12 * HOUR, Method::Exact)),
        (
            "ml/small-0".to_string(),
            End::After {
                ms: HOUR,
                method: Method::Exact,
            },
        ),
    ]);
    let config = Config::default();
    // Each cycle counts 2 nodes and the 5 pods still there, or fewer once some end.
    let run = |max_work| {
        let make = |names: &_| basalt_plugins::framework(&config, names);
        let limits = Limits {
            max_work,
            ..Limits::default()
        };
        forecast(spec.clone(), make, &ends, limits).expect("valid")
    };
    let unbounded = run(u64::MAX);
    let big = unbounded.job("ml/big").expect("forecast");
    assert!(big.start_ms.is_some(), "{unbounded:?}");
    assert!(unbounded.cycles > 2, "{unbounded:?}");
    let bounded = run(1);
    assert_eq!(
        bounded.cycles, 1,
        "the first cycle always runs: {bounded:?}"
    );
    let big = bounded.job("ml/big").expect("forecast");
    assert_eq!(
        (big.start_ms, big.method),
        (None, Method::Unknown),
        "{bounded:?}"
    );
    assert!(
        bounded.work > 0 && bounded.work <= unbounded.work,
        "{bounded:?}"
    );
}

#[test]
fn with_every_gang_complete_the_forecast_is_empty_unless_an_end_due_now_takes_a_member() {
    let spec = || cluster(&[("a", &["n0"]), ("b", &["n1"])], &[]);
    let later = HashMap::from([("ml/a-0".to_string(), at(12 * HOUR, Method::Exact))]);
    let f = run(spec(), &later);
    assert_eq!(
        (f.jobs.len(), f.cycles, f.ends, f.work),
        (0, 0, 0, 0),
        "{f:?}"
    );
    // An end already past applies at once (the forecast counts it), so the run is made.
    let past = HashMap::from([("ml/a-0".to_string(), at(9 * HOUR, Method::Exact))]);
    let f = run(spec(), &past);
    assert_eq!(f.ends, 1, "{f:?}");
    // A completed group is never complete as a gang: it is listed (as the full run lists it).
    let mut done = spec();
    done.groups[1].phase = JobPhase::Completed;
    let f = run(done, &later);
    assert!(f.job("ml/b").is_some(), "{f:?}");
}

/// Pods handed over shared (a daemon's kept conversions) give the same forecast as owned ones,
/// and the run leaves the caller's specs as they were: it binds, evicts and ends its own
/// copies of the pods it moves.
#[test]
fn shared_pods_give_the_same_forecast_and_stay_as_they_were() {
    let mut spec = cluster(
        &[("a", &["n0"]), ("b", &["n1"])],
        &[("big", 2), ("small", 1)],
    );
    let ends = HashMap::from([
        ("ml/a-0".to_string(), at(12 * HOUR, Method::Exact)),
        ("ml/b-0".to_string(), at(11 * HOUR, Method::Exact)),
    ]);
    let owned = run(spec.clone(), &ends);
    let pods: Vec<Arc<PodSpec>> = std::mem::take(&mut spec.pods)
        .into_iter()
        .map(Arc::new)
        .collect();
    let before: Vec<PodSpec> = pods.iter().map(|p| (**p).clone()).collect();
    let config = Config::default();
    let make = |names: &_| basalt_plugins::framework(&config, names);
    let shared = forecast_shared(spec, pods.clone(), None, make, &ends, Limits::default())
        .expect("the cluster is valid");
    assert_eq!(shared, owned);
    assert!(owned.jobs.iter().any(|j| j.start_ms.is_some()), "{owned:?}");
    let after: Vec<PodSpec> = pods.iter().map(|p| (**p).clone()).collect();
    assert_eq!(after, before, "the caller's pods are untouched");
}

/// The plan the scheduler made on the same cluster (the daemon's cycle) stands for the
/// forecast's first cycle: the same forecast as deciding it again. Another plan given (one
/// that places nothing) is what the forecast goes on from.
#[test]
fn the_cycles_own_plan_is_the_first_cycle() {
    // n1 is free: `small` starts now; `big` needs both nodes, free when `a` ends at 12:00.
    let spec = cluster(&[("a", &["n0"])], &[("small", 1), ("big", 2)]);
    let ends = HashMap::from([("ml/a-0".to_string(), at(12 * HOUR, Method::Exact))]);
    let config = Config::default();
    let make = |names: &_| basalt_plugins::framework(&config, names);
    let decided = {
        let snapshot = Snapshot::build(spec.clone()).expect("valid");
        schedule(&snapshot, &make(&snapshot.resources), &mut Warm::default())
    };
    assert_eq!(decided.bindings.len(), 1, "{decided:?}");
    let given = |plan: &Plan| {
        forecast_shared(
            spec.clone(),
            Vec::new(),
            Some(plan),
            make,
            &ends,
            Limits::default(),
        )
        .expect("valid")
    };
    let deciding = run(spec.clone(), &ends);
    assert_eq!(
        deciding.job("ml/small").and_then(|j| j.start_ms),
        Some(10 * HOUR)
    );
    assert_eq!(given(&decided), deciding);
    let nothing = given(&Plan::default());
    let small = nothing.job("ml/small").and_then(|j| j.start_ms);
    assert!(small > Some(10 * HOUR), "{nothing:?}");
}

/// When the cycle's own plan starts every waiting gang, the forecast is what the run would
/// give after that cycle (every gang at `now`, known as the running pods' ends are), with
/// or without an end known for the gang running beside them.
#[test]
fn a_plan_that_starts_every_gang_is_the_whole_forecast() {
    let spec = cluster(&[("a", &["n0"])], &[("small", 1)]);
    let config = Config::default();
    let make = |names: &_| basalt_plugins::framework(&config, names);
    let decided = {
        let snapshot = Snapshot::build(spec.clone()).expect("valid");
        schedule(&snapshot, &make(&snapshot.resources), &mut Warm::default())
    };
    let known = HashMap::from([("ml/a-0".to_string(), at(12 * HOUR, Method::Exact))]);
    for ends in [known, HashMap::new()] {
        let given = forecast_shared(
            spec.clone(),
            Vec::new(),
            Some(&decided),
            make,
            &ends,
            Limits::default(),
        )
        .expect("valid");
        let deciding = run(spec.clone(), &ends);
        assert_eq!(given, deciding);
        assert_eq!(deciding.jobs.len(), 1, "{deciding:?}");
        assert_eq!(deciding.jobs[0].start_ms, Some(10 * HOUR));
    }
}

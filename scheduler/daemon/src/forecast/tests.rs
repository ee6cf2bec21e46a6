use std::collections::HashMap;
use std::sync::Arc;

use basalt_crds::convert::device_names::GPU_NAME;
use basalt_crds::ends::{ends, parse_go_duration, EXPECTED_RUNTIME};
use basalt_crds::Object;
use basalt_engine::forecast::{forecast, End, Limits};
use basalt_engine::{ClusterSpec, GroupSpec, NodeSpec, PodPhase, PodSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

#[test]
fn go_durations_read_as_go_reads_them() {
    assert_eq!(parse_go_duration("90m"), Ok(90 * 60_000));
    assert_eq!(parse_go_duration("1h30m"), Ok(90 * 60_000));
    assert_eq!(parse_go_duration("2.5h"), Ok(150 * 60_000));
    assert_eq!(parse_go_duration("1500ms"), Ok(1500));
    assert_eq!(parse_go_duration("0"), Ok(0));
    for bad in ["", "90", "1x", "-5m", "h", "1h-5m"] {
        let e = parse_go_duration(bad).unwrap_err();
        assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
    }
}

fn meta(ns: &str, name: &str, runtime: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        annotations: runtime.map(|r| [(EXPECTED_RUNTIME.to_string(), r.to_string())].into()),
        ..Default::default()
    }
}

fn pod_object(ns: &str, name: &str, runtime: Option<&str>) -> (String, Object) {
    let pod = Pod {
        metadata: meta(ns, name, runtime),
        ..Default::default()
    };
    ("cluster".into(), Object::Pod(Arc::new(pod)))
}

fn group_object(ns: &str, name: &str, runtime: Option<&str>) -> (String, Object) {
    let group = basalt_crds::PodGroup {
        metadata: meta(ns, name, runtime),
        spec: Default::default(),
        status: None,
    };
    ("cluster".into(), Object::PodGroup(Arc::new(group)))
}

fn pod(name: &str, group: &str, gpus: i64, node: Option<&str>, started: Option<i64>) -> PodSpec {
    PodSpec {
        namespace: "ml".into(),
        name: name.into(),
        ours: true,
        group: Some(group.into()),
        request: [(GPU_NAME.to_string(), gpus)].into(),
        phase: match node {
            Some(_) => PodPhase::Running,
            None => PodPhase::Pending,
        },
        node: node.map(str::to_string),
        gpu_ids: match node {
            Some(_) => (0..gpus as u32).collect(),
            None => Vec::new(),
        },
        started_ms: started,
        ..Default::default()
    }
}

fn group(name: &str) -> GroupSpec {
    GroupSpec::new("ml", name, 1)
}

/// One 8-GPU node held by `running` (started at 0), `waiting` asking for all of it.
fn cluster(now: i64) -> ClusterSpec {
    let node = NodeSpec {
        name: "n1".into(),
        allocatable: [(GPU_NAME.to_string(), 8), ("pods".to_string(), 110)].into(),
        ..Default::default()
    };
    ClusterSpec {
        now_ms: now,
        device_resource: GPU_NAME.into(),
        nodes: vec![node],
        pods: vec![
            pod("running-0", "running", 8, Some("n1"), Some(0)),
            pod("waiting-0", "waiting", 8, None, None),
        ],
        groups: vec![group("running"), group("waiting")],
        ..Default::default()
    }
}

fn run(spec: ClusterSpec, ends: &HashMap<String, End>) -> Forecast {
    let config = basalt_plugins::Config::default();
    let limits = Limits::default();
    forecast(
        spec,
        |names| basalt_plugins::framework(&config, names),
        ends,
        limits,
    )
    .unwrap()
}

#[test]
fn a_stated_run_time_gives_an_exact_start_after_the_holder_ends() {
    let spec = cluster(60_000);
    let objects = [
        pod_object("ml", "running-0", None),
        group_object("ml", "running", Some("10m")),
        pod_object("ml", "waiting-0", None),
    ];
    let (ends, bad) = ends(&objects, &spec, &Learned::default());
    assert!(bad.is_empty(), "{bad:?}");
    let end = ends.get("ml/running-0").copied();
    let at = End::At {
        ms: 600_000,
        method: Method::Exact,
    };
    assert_eq!(end, Some(at), "from its start, the group's annotation");
    let f = run(spec, &ends);
    let published = published(&f, jiff::Timestamp::from_second(60).unwrap());
    let w = &published["ml/waiting"];
    assert_eq!(w.method, "exact");
    assert_eq!(w.start.as_deref(), Some("1970-01-01T00:10:00Z"));
    assert_eq!(w.computed_at, "1970-01-01T00:01:00Z");
}

#[test]
fn a_deadline_comes_before_the_annotation_and_a_pod_annotation_before_its_group() {
    let mut spec = cluster(0);
    spec.pods[0].active_deadline_s = Some(120);
    let objects = [
        pod_object("ml", "running-0", Some("1h")),
        pod_object("ml", "waiting-0", Some("5m")),
        group_object("ml", "waiting", Some("1h")),
    ];
    let (ends, _) = ends(&objects, &spec, &Learned::default());
    let exact = Method::Exact;
    assert_eq!(
        ends["ml/running-0"],
        End::At {
            ms: 120_000,
            method: exact
        }
    );
    assert_eq!(
        ends["ml/waiting-0"],
        End::After {
            ms: 300_000,
            method: exact
        }
    );
}

#[test]
fn a_bad_annotation_is_reported_by_object_and_field_and_taken_as_absent() {
    let spec = cluster(0);
    let objects = [
        pod_object("ml", "running-0", None),
        group_object("ml", "running", Some("ten minutes")),
    ];
    let (ends, bad) = ends(&objects, &spec, &Learned::default());
    assert!(ends.is_empty(), "{ends:?}");
    assert_eq!(bad.len(), 1);
    assert_eq!((bad[0].kind, bad[0].name.as_str()), ("PodGroup", "running"));
    assert!(
        bad[0].message.contains(EXPECTED_RUNTIME),
        "{}",
        bad[0].message
    );
    // Nobody knows when the holder ends: the waiting gang's start cannot be bounded.
    let f = run(spec, &ends);
    let w = &published(&f, jiff::Timestamp::UNIX_EPOCH)["ml/waiting"];
    assert_eq!((w.start.as_deref(), w.method.as_str()), (None, "unknown"));
}

#[test]
fn finished_pods_teach_an_estimate_per_owner_and_queue() {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    let owned = |name: &str| {
        let mut m = meta("ml", name, None);
        m.owner_references = Some(vec![OwnerReference {
            kind: "Job".into(),
            name: "train".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        m
    };
    let finished = |name: &str, secs: i64| Pod {
        metadata: owned(name),
        status: Some(PodStatus {
            phase: Some("Succeeded".into()),
            start_time: Some(at(100)),
            container_statuses: Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        finished_at: Some(at(100 + secs)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (a, b) = (finished("a", 300), finished("b", 500));
    let mut learned = Learned::default();
    learned.learn(&[&a, &b, &a], |_| Some("research".into()));
    assert_eq!(
        learned.estimate(Some("research"), &owned("c")),
        Some(300_000),
        "a once"
    );
    assert_eq!(
        learned.estimate(Some("prod"), &owned("c")),
        None,
        "per queue"
    );

    let spec = cluster(0);
    let running = Pod {
        metadata: owned("running-0"),
        ..Default::default()
    };
    let objects = [("cluster".to_string(), Object::Pod(Arc::new(running)))];
    let mut spec_q = spec.clone();
    spec_q.groups[0].queue = Some("research".into());
    spec_q
        .queues
        .push(basalt_engine::QueueSpec::new("research"));
    let (ends, _) = ends(&objects, &spec_q, &learned);
    let estimate = Method::Estimate;
    assert_eq!(
        ends["ml/running-0"],
        End::At {
            ms: 300_000,
            method: estimate
        }
    );
    let f = run(spec_q, &ends);
    let w = &published(&f, jiff::Timestamp::UNIX_EPOCH)["ml/waiting"];
    assert_eq!(w.method, "estimate");
    assert_eq!(w.start.as_deref(), Some("1970-01-01T00:05:00Z"));
}

#[test]
fn only_a_new_start_or_method_is_written() {
    let f = |start: Option<&str>, method: &str, at: &str| PodGroupForecast {
        start: start.map(str::to_string),
        method: method.into(),
        computed_at: at.into(),
    };
    let old = f(
        Some("2025-01-01T00:10:00Z"),
        "exact",
        "2025-01-01T00:00:00Z",
    );
    let later = f(
        Some("2025-01-01T00:10:00Z"),
        "exact",
        "2025-01-01T00:00:30Z",
    );
    assert!(!differs(Some(&old), Some(&later)));
    let moved = f(
        Some("2025-01-01T00:11:00Z"),
        "exact",
        "2025-01-01T00:00:30Z",
    );
    assert!(differs(Some(&old), Some(&moved)));
    assert!(differs(Some(&old), Some(&f(None, "unknown", "x"))));
    assert!(differs(None, Some(&old)) && differs(Some(&old), None));
    assert!(!differs(None, None));
}

#[test]
fn the_status_keeps_its_forecast_until_it_says_something_new_and_drops_it_once_started() {
    let f = |start: &str, at: &str| PodGroupForecast {
        start: Some(start.into()),
        method: "exact".into(),
        computed_at: at.into(),
    };
    let old = f("2026-01-01T00:10:00Z", "2026-01-01T00:00:00Z");
    let mut results = Results::default();
    let same = f("2026-01-01T00:10:00Z", "2026-01-01T00:00:30Z");
    results.published.insert("ml/a".into(), same);
    // The same start, computed later: the status keeps what it has (no write).
    assert_eq!(
        settled(Some(&old), Some(&results), "ml/a", true),
        Some(old.clone())
    );
    // A new start is written.
    let later = f("2026-01-01T00:20:00Z", "2026-01-01T00:01:00Z");
    results.published.insert("ml/a".into(), later.clone());
    assert_eq!(
        settled(Some(&old), Some(&results), "ml/a", true),
        Some(later)
    );
    // Started, or left out of the forecast: none.
    assert_eq!(settled(Some(&old), Some(&results), "ml/a", false), None);
    assert_eq!(settled(Some(&old), Some(&results), "ml/b", true), None);
    // Before the first forecast, what it has stands.
    assert_eq!(settled(Some(&old), None, "ml/a", true), Some(old));
}

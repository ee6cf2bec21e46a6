//! End to end: the in-memory API server on loopback and the real `basalt-scheduler` binary as
//! a child process, talking through a kubeconfig. Every wait is a bounded poll.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{Config, FaultRule, Verb};
use serde_json::{json, Value};

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_fits_is_bound_whole_and_running() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(queue("research"));
    c.create(group("g1", 4, "research"));
    for i in 0..4 {
        c.create(pod(&format!("g1-{i}"), "g1", 4));
    }
    let _s = c.start_scheduler();

    eventually("all four members bound", || {
        (0..4).all(|i| c.node_of(&format!("g1-{i}")).is_some())
    })
    .await;
    eventually("PodGroup g1 Running with 4 running", || {
        let g = c.group("g1");
        g["status"]["phase"] == "Running" && g["status"]["running"] == 4
    })
    .await;
    c.assert_no_node_over_capacity();
    eventually("Queue research counts g1 running and its 16 GPUs", || {
        let q = c
            .server
            .get("scheduling.basalt.dev/v1alpha1", "Queue", "", "research")
            .expect("queue exists");
        q["status"]["state"] == "Open"
            && q["status"]["running"] == 1
            && q["status"]["allocated"]["nvidia.com/gpu"] == "16"
    })
    .await;
    for i in 0..4 {
        let name = format!("g1-{i}");
        let p = c.pod(&name);
        let ids = p["metadata"]["annotations"]["scheduling.basalt.dev/gpu-ids"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has GPU ids"));
        assert_eq!(ids.split(',').count(), 4);
        let node = c.node_of(&name).unwrap();
        eventually("a Scheduled event", || {
            c.events("Scheduled", &name)
                .iter()
                .any(|e| e["message"] == format!("Successfully assigned default/{name} to {node}"))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_does_not_fit_waits_whole_then_starts_on_a_new_node() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(queue("research"));
    c.create(group("big", 3, "research"));
    for i in 0..3 {
        c.create(pod(&format!("big-{i}"), "big", 8));
    }
    let _s = c.start_scheduler();

    eventually("an Unschedulable condition on big", || {
        let g = c.group("big");
        g["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|cond| {
                cond["type"] == "Unschedulable"
                    && cond["status"] == "True"
                    && cond["lastTransitionTime"].is_string()
            })
        })
    })
    .await;
    eventually("a FailedScheduling event on the PodGroup", || {
        !c.events("FailedScheduling", "big").is_empty()
    })
    .await;
    for i in 0..3 {
        assert_eq!(
            c.node_of(&format!("big-{i}")),
            None,
            "no member of big is bound"
        );
    }
    assert_ne!(c.group("big")["status"]["phase"], "Running");

    c.create(node("n3", 8));
    eventually("all of big bound after a node joins", || {
        (0..3).all(|i| c.node_of(&format!("big-{i}")).is_some())
    })
    .await;
    eventually("big Running, its Unschedulable condition gone", || {
        let g = c.group("big");
        g["status"]["phase"] == "Running"
            && !g["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|cond| cond["type"] == "Unschedulable"))
    })
    .await;
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_failing_with_500_are_retried_without_overcommitting() {
    let c = cluster(Config {
        seed: 7,
        ..Config::default()
    })
    .await;
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 0.5, 500).times(8))
        .unwrap();
    for n in 0..3 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(queue("research"));
    // 24 GPUs asked, 24 present: a single double-booking would leave a node over capacity.
    for g in 0..3 {
        let name = format!("g{g}");
        c.create(group(&name, 4, "research"));
        for i in 0..4 {
            c.create(pod(&format!("{name}-{i}"), &name, 2));
        }
    }
    let _s = c.start_scheduler();

    let all: Vec<String> = (0..3)
        .flat_map(|g| (0..4).map(move |i| format!("g{g}-{i}")))
        .collect();
    eventually("every pod bound despite injected 500s", || {
        all.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    assert!(c.server.injected_faults() > 0, "faults were injected");
    c.assert_no_node_over_capacity();
    for g in 0..3 {
        eventually("every group Running", || {
            c.group(&format!("g{g}"))["status"]["phase"] == "Running"
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_object_is_reported_and_the_rest_scheduled_then_sigterm_stops_cleanly() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    let mut s = c.start_scheduler();
    // A group naming a queue that does not exist cannot be converted: it and its pod are left
    // out and reported, and everything else is still scheduled.
    c.create(group("orphan", 1, "no-such-queue"));
    c.create(pod("orphan-0", "orphan", 1));
    c.create(group("one", 1, "research"));
    c.create(pod("one-0", "one", 1));
    eventually("one-0 bound", || c.node_of("one-0").is_some()).await;
    eventually("an InvalidObject event on the bad PodGroup", || {
        c.events("InvalidObject", "orphan").iter().any(|e| {
            e["type"] == "Warning"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.queue") && m.contains("no-such-queue"))
        })
    })
    .await;
    assert_eq!(c.node_of("orphan-0"), None);
    let status = Command::new("kill")
        .args(["-TERM", &s.0.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let start = Instant::now();
    let code = loop {
        if let Some(code) = s.0.try_wait().unwrap() {
            break code;
        }
        assert!(start.elapsed() < DEADLINE, "the scheduler did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "exit status {code:?}");
}

#[test]
fn unknown_config_field_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "schedulerNames: [basalt]\nfrobnicate: true\n").unwrap();
    let out = run_with_config(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("frobnicate") && err.contains("config.yaml"),
        "{err}"
    );

    std::fs::write(&path, "enqueue:\n  overcommitFactor: 0.5\n").unwrap();
    let out = run_with_config(&path);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("overcommitFactor"));
}

fn run_with_config(path: &Path) -> std::process::Output {
    Command::new(BIN)
        .arg("--config")
        .arg(path)
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .expect("runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_dropped_watches_reconcile_without_overcommitting() {
    let c = cluster(Config {
        seed: 3,
        ..Config::default()
    })
    .await;
    // Refused binds (as if another scheduler got there first) are dropped and planned again.
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 0.5, 409).times(6))
        .unwrap();
    for n in 0..2 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(queue("research"));
    let _s = c.start_scheduler();
    for g in 0..4 {
        let name = format!("g{g}");
        c.create(group(&name, 2, "research"));
        for i in 0..2 {
            c.create(pod(&format!("{name}-{i}"), &name, 2));
        }
        // Every watch is cut while the gangs arrive; the reflectors resume or re-list.
        c.server.drop_watches();
    }
    let all: Vec<String> = (0..4)
        .flat_map(|g| (0..2).map(move |i| format!("g{g}-{i}")))
        .collect();
    eventually("every pod bound despite 409s and dropped watches", || {
        c.server.drop_watches();
        all.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    assert!(c.server.injected_faults() > 0, "faults were injected");
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_in_the_middle_of_a_gang_is_replaced_and_the_gang_completes() {
    let c = cluster(Config::default()).await;
    // Slow binds, one at a time: the gang is bound over several seconds.
    c.server
        .add_fault(FaultRule {
            verb: Some(Verb::Create),
            resource: Some("pods/binding".into()),
            probability: 1.0,
            code: None,
            delay_ms: 1000,
            remaining: None,
            ..Default::default()
        })
        .unwrap();
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 4, "research"));
    for i in 0..4 {
        c.create(pod(&format!("g-{i}"), "g", 2));
    }
    let bound = || {
        (0..4)
            .filter(|i| c.node_of(&format!("g-{i}")).is_some())
            .count()
    };
    let mut first = c.start_with(&["--bind-concurrency", "1"]);
    eventually("the first member bound", || bound() >= 1).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let at_kill = bound();
    assert!(
        at_kill < 4,
        "the scheduler was killed in the middle of the gang"
    );

    c.server.clear_faults();
    let _second = c.start_scheduler();
    eventually("the gang completes under the new scheduler", || {
        bound() == 4
    })
    .await;
    eventually("g Running", || c.group("g")["status"]["phase"] == "Running").await;
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_schedules_and_the_other_replica_takes_over_when_it_dies() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(queue("research"));
    let elect = |id: &'static str| {
        c.start_with(&["--leader-elect", "--lease-duration", "2s", "--identity", id])
    };
    let mut a = elect("replica-a");
    let mut b = elect("replica-b");
    let holder = || {
        c.server
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "kube-system",
                "basalt-scheduler",
            )
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    };
    eventually("one replica holds the lease", || holder().is_some()).await;
    let first = holder().unwrap();

    c.create(group("g1", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g1-{i}"), "g1", 4));
    }
    eventually("g1 bound", || {
        (0..2).all(|i| c.node_of(&format!("g1-{i}")).is_some())
    })
    .await;
    for i in 0..2 {
        let name = format!("g1-{i}");
        eventually("a Scheduled event", || {
            !c.events("Scheduled", &name).is_empty()
        })
        .await;
        let events = c.events("Scheduled", &name);
        assert_eq!(events.len(), 1, "bound once, by one replica");
        assert_eq!(
            events[0]["reportingInstance"],
            first.as_str(),
            "only the leader binds"
        );
    }

    // The leader dies without releasing the lease: the other replica takes over once it expires.
    let (dead, survivor) = if first == "replica-a" {
        (&mut a, "replica-b")
    } else {
        (&mut b, "replica-a")
    };
    dead.0.kill().unwrap();
    dead.0.wait().unwrap();
    c.create(group("g2", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g2-{i}"), "g2", 4));
    }
    eventually("the survivor holds the lease", || {
        holder().as_deref() == Some(survivor)
    })
    .await;
    eventually("g2 bound by the survivor", || {
        (0..2).all(|i| c.node_of(&format!("g2-{i}")).is_some())
    })
    .await;
    for i in 0..2 {
        let name = format!("g2-{i}");
        eventually("a Scheduled event", || {
            !c.events("Scheduled", &name).is_empty()
        })
        .await;
        let events = c.events("Scheduled", &name);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["reportingInstance"], survivor);
    }
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_a_group_gets_a_podgroup_of_one_owned_by_it() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    let mut solo = pod("solo", "unused", 2);
    solo["metadata"].as_object_mut().unwrap().remove("labels");
    solo["metadata"]["annotations"] = json!({"scheduling.basalt.dev/queue": "research"});
    c.create(solo);
    let _s = c.start_scheduler();

    eventually("solo bound", || c.node_of("solo").is_some()).await;
    eventually("solo-pg Running with one member", || {
        c.server
            .get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                "solo-pg",
            )
            .is_some_and(|g| g["status"]["phase"] == "Running" && g["status"]["running"] == 1)
    })
    .await;
    let g = c.group("solo-pg");
    assert_eq!(g["spec"]["minMember"], 1);
    assert_eq!(g["spec"]["queue"], "research");
    let owner = &g["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Pod"), Some("solo"))
    );
    assert_eq!(owner["uid"], c.pod("solo")["metadata"]["uid"]);
    assert_eq!(
        c.pod("solo")["metadata"]["annotations"]["scheduling.basalt.dev/pod-group"],
        "solo-pg"
    );
    // No object was ever left out on the way (the pod never named a group the cache lacked).
    assert!(c
        .server
        .list("v1", "Event")
        .iter()
        .all(|e| e["reason"] != "InvalidObject"));
}

/// A plain HTTP GET on loopback; None until something answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_are_served() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 2));
    }
    // A gang that cannot fit: pending in its queue.
    c.create(group("big", 1, "research"));
    c.create(pod("big-0", "big", 16));
    let free = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    // Probes on --listen, /metrics on its own address only.
    let (addr, metrics_at) = (free(), free());
    let _s = c.start_with(&["--listen", &addr, "--metrics-bind-address", &metrics_at]);
    eventually("/healthz answers ok", || {
        http_get(&addr, "/healthz")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") && r.ends_with("ok"))
    })
    .await;
    eventually("/readyz answers 200", || {
        http_get(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    let on_listen = http_get(&addr, "/metrics").unwrap();
    assert!(on_listen.starts_with("HTTP/1.1 404"), "{on_listen}");
    let probe_on_metrics = http_get(&metrics_at, "/healthz").unwrap();
    assert!(
        probe_on_metrics.starts_with("HTTP/1.1 404"),
        "{probe_on_metrics}"
    );
    let mut last = String::new();
    let start = Instant::now();
    let ok = loop {
        last = http_get(&metrics_at, "/metrics").unwrap_or(last);
        let m = &last;
        let lines: Vec<&str> = m.lines().collect();
        let has = |l: &str| lines.contains(&l);
        let done = m.contains("application/openmetrics-text")
            && has("basalt_scheduler_binds_total 2")
            && has("basalt_scheduler_bind_errors_total 0")
            && has("basalt_scheduler_pending_pods 1")
            && m.contains("basalt_scheduler_cycle_duration_seconds_count")
            // Both binds timed from their pods' creation.
            && has("basalt_scheduler_scheduling_latency_seconds_count 2")
            && has(r#"basalt_scheduler_queue_pending_pods{queue="research"} 1"#)
            && has(r#"basalt_scheduler_queue_pending_podgroups{queue="research"} 1"#)
            // The bound gang: 2 pods of 2 GPUs and 1 CPU each.
            && has(r#"basalt_scheduler_queue_allocated{queue="research",resource="nvidia.com/gpu"} 4.0"#)
            && has(r#"basalt_scheduler_queue_allocated{queue="research",resource="cpu"} 2.0"#)
            && m.contains(r#"basalt_scheduler_queue_deserved{queue="research",resource="nvidia.com/gpu"} "#)
            && m.trim_end().ends_with("# EOF");
        if done {
            break true;
        }
        if start.elapsed() > DEADLINE {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(ok, "/metrics never showed the expected series:\n{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_binds_are_reported_on_the_podgroup_until_they_succeed() {
    let c = cluster(Config::default()).await;
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 1.0, 503))
        .unwrap();
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 2));
    }
    let _s = c.start_scheduler();
    let condition = |kind: &str| {
        c.group("g")["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|cond| cond["type"] == kind).cloned())
    };
    eventually("a BindFailed condition on g", || {
        condition("BindFailed").is_some_and(|cond| {
            cond["status"] == "True"
                && cond["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("2 bind(s) failed") && m.contains("503"))
        })
    })
    .await;
    assert!((0..2).all(|i| c.node_of(&format!("g-{i}")).is_none()));

    c.server.clear_faults();
    eventually("g bound once binds succeed", || {
        (0..2).all(|i| c.node_of(&format!("g-{i}")).is_some())
    })
    .await;
    eventually("the BindFailed condition cleared", || {
        c.group("g")["status"]["phase"] == "Running" && condition("BindFailed").is_none()
    })
    .await;
}

/// A batch/v1 Job kind for the in-memory server, which does not serve Jobs by itself.
fn job_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobs.batch"},
        "spec": {"group": "batch", "scope": "Namespaced",
                 "names": {"kind": "Job", "plural": "jobs", "singular": "job"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

/// A groupless Basalt pod owned by `owner` (a Job's name and uid).
fn owned_pod(name: &str, owner: &str, uid: &str, gpus: u32) -> Value {
    let mut p = pod(name, "unused", gpus);
    p["metadata"].as_object_mut().unwrap().remove("labels");
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": owner, "uid": uid, "controller": true}]);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_an_annotated_job_share_one_podgroup_owned_by_the_job() {
    let c = cluster(Config::default()).await;
    c.create(job_crd());
    // Room for exactly the gang on one node each; a member scheduled alone would show.
    for n in ["n1", "n2", "n3"] {
        c.create(node(n, 4));
    }
    c.create(queue("research"));
    c.create(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "default",
            "annotations": {"scheduling.basalt.dev/min-member": "3",
                            "scheduling.basalt.dev/queue": "research"}},
        "spec": {"parallelism": 3},
    }));
    let job_uid = c
        .server
        .get("batch/v1", "Job", "default", "train")
        .expect("the Job exists")["metadata"]["uid"]
        .as_str()
        .expect("the Job has a uid")
        .to_string();
    // A Job owner that is gone: that pod falls back to a group of one, with a warning.
    c.create(owned_pod("orphan", "gone", "no-such-uid", 1));
    // Two members first: the gang of 3 must not start with them alone.
    for i in 0..2 {
        c.create(owned_pod(&format!("train-{i}"), "train", &job_uid, 4));
    }
    let _s = c.start_scheduler();
    eventually("the Job's PodGroup exists and both pods name it", || {
        c.server
            .get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                "train-pg",
            )
            .is_some()
            && (0..2).all(|i| {
                c.pod(&format!("train-{i}"))["metadata"]["annotations"]
                    ["scheduling.basalt.dev/pod-group"]
                    == "train-pg"
            })
    })
    .await;
    eventually(
        "the orphan is bound in a group of one, with a warning",
        || c.node_of("orphan").is_some() && !c.events("OwnerGroupInvalid", "orphan").is_empty(),
    )
    .await;
    assert_eq!(c.group("orphan-pg")["spec"]["minMember"], 1);
    // The orphan took a GPU of one node: only two nodes still fit a 4-GPU member, yet the
    // gang of three may not start partially.
    assert!((0..2).all(|i| c.node_of(&format!("train-{i}")).is_none()));
    c.create(node("n4", 4));
    c.create(owned_pod("train-2", "train", &job_uid, 4));
    eventually("all three members bound", || {
        (0..3).all(|i| c.node_of(&format!("train-{i}")).is_some())
    })
    .await;
    let g = c.group("train-pg");
    assert_eq!(g["spec"]["minMember"], 3);
    assert_eq!(g["spec"]["queue"], "research");
    let owner = &g["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["apiVersion"].as_str(),
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["uid"].as_str()
        ),
        (
            Some("batch/v1"),
            Some("Job"),
            Some("train"),
            Some(job_uid.as_str())
        )
    );
    // One group for the owner, none per member.
    let groups = c.server.list("scheduling.basalt.dev/v1alpha1", "PodGroup");
    assert!(groups.iter().all(|g| !g["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("train-")
        || g["metadata"]["name"] == "train-pg"));
    c.assert_no_node_over_capacity();
    assert!(c
        .server
        .list("v1", "Event")
        .iter()
        .all(|e| e["reason"] != "InvalidObject"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line() {
    let c = cluster(Config::default()).await;
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--period",
            "200ms",
            "--log-format",
            "json",
        ])
        .env("KUBECONFIG", c.dir.path().join("kubeconfig"))
        .env("RUST_LOG", "basalt_scheduler=info,kube=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("scheduler starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let _guard = Scheduler(child);
    // Read on a thread: the pipe blocks, and the deadline must still stop a hung test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let line = rx
            .recv_timeout(left)
            .expect("a \"caches synced\" log line within the deadline");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        assert!(v["timestamp"].is_string(), "{line}");
        assert!(v["level"].is_string(), "{line}");
        if v["message"] == "caches synced; scheduling" {
            assert_eq!(v["level"], "INFO");
            assert_eq!(v["target"], "basalt_scheduler");
            break;
        }
    }
}

#[test]
fn an_unknown_log_format_is_refused() {
    let out = Command::new(BIN)
        .args(["--log-format", "xml"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-format") && err.contains("xml"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Volcano's PodGroups and Queues
// ---------------------------------------------------------------------------------------------

/// Volcano's CRD for `plural` (status subresource declared, as Volcano's own CRDs do).
fn volcano_crd(plural: &str, kind: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.scheduling.volcano.sh")},
        "spec": {"group": "scheduling.volcano.sh", "scope": scope,
                 "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

/// A server that serves only what a plain cluster with Basalt's CRDs installed serves: no
/// Volcano.
async fn cluster_without_volcano() -> Cluster {
    let c = cluster(Config {
        preinstall_crds: false,
        ..Config::default()
    })
    .await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    for entry in std::fs::read_dir(&dir).expect("deploy/crds") {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML");
        c.create(crd);
    }
    assert!(c
        .server
        .resources()
        .iter()
        .all(|r| r.group != "scheduling.volcano.sh"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_podgroups_and_queues_are_scheduled_and_their_status_written_back() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(volcano_queue("vq"));
    // Volcano's implicit tree top, as a Volcano install has it: not a queue of its own.
    c.create(volcano_queue("root"));
    c.create(volcano_group("vg", 2, "vq"));
    for i in 0..2 {
        c.create(volcano_pod(&format!("vg-{i}"), "vg", 4));
    }
    // A Volcano gang that fits nowhere (16 GPUs a pod, 8 a node).
    c.create(volcano_group("big", 2, "vq"));
    for i in 0..2 {
        c.create(volcano_pod(&format!("big-{i}"), "big", 16));
    }
    // The same name in both APIs: Basalt's group (minMember 1) wins over Volcano's (3).
    c.create(group("dup", 1, "vq"));
    c.create(volcano_group("dup", 3, "vq"));
    c.create(pod("dup-0", "dup", 1));
    // And a Queue named in both.
    c.create(queue("both"));
    c.create(volcano_queue("both"));
    let (_s, logs) = c.start_logged(&[]);

    eventually("the Volcano gang bound", || {
        (0..2).all(|i| c.node_of(&format!("vg-{i}")).is_some())
    })
    .await;
    eventually("the Volcano PodGroup Running, in Volcano's object", || {
        let g = c.volcano_group("vg");
        g["status"]["phase"] == "Running" && g["status"]["running"] == 2
    })
    .await;
    eventually(
        "Unschedulable on the Volcano object of the gang that does not fit",
        || {
            c.volcano_group("big")["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|cond| cond["type"] == "Unschedulable" && cond["status"] == "True")
                })
        },
    )
    .await;
    assert!((0..2).all(|i| c.node_of(&format!("big-{i}")).is_none()));
    eventually("FailedScheduling about the Volcano PodGroup", || {
        c.events("FailedScheduling", "big")
            .iter()
            .any(|e| e["involvedObject"]["apiVersion"] == "scheduling.volcano.sh/v1beta1")
    })
    .await;
    // Basalt's `dup` was used: a group of one, bound and Running; Volcano's is left alone.
    eventually("Basalt's dup Running", || {
        c.node_of("dup-0").is_some() && c.group("dup")["status"]["phase"] == "Running"
    })
    .await;
    assert!(
        c.volcano_group("dup")["status"].is_null(),
        "Volcano's dup untouched"
    );
    eventually("the Volcano Queue's status counts its groups", || {
        let q = c
            .server
            .get("scheduling.volcano.sh/v1beta1", "Queue", "", "vq")
            .unwrap();
        let s = &q["status"];
        // vg and Basalt's dup run in vq; big waits (admitted, Inqueue). 4 + 4 + 1 GPUs held.
        s["state"] == "Open"
            && s["running"] == 2
            && s["inqueue"] == 1
            && s["pending"] == 0
            && s["allocated"]["nvidia.com/gpu"] == "9"
    })
    .await;
    let root = c
        .server
        .get("scheduling.volcano.sh/v1beta1", "Queue", "", "root")
        .unwrap();
    assert!(
        root["status"].is_null(),
        "Volcano's root queue is not scheduled into"
    );
    // Several cycles later, the name clash was still said once.
    let cycles = Instant::now();
    while cycles.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clashes: Vec<Value> = logs
        .lines()
        .into_iter()
        .filter(|l| l["level"] == "WARN" && l["object"] == "PodGroup default/dup")
        .collect();
    assert_eq!(clashes.len(), 1, "{clashes:?}");
    assert!(
        (clashes[0]["message"].as_str()).is_some_and(|m| m.starts_with("PodGroups of two APIs")),
        "{clashes:?}"
    );
    let queue_clash = logs
        .lines()
        .into_iter()
        .find(|l| l["object"] == "Queue both");
    assert!(
        queue_clash.as_ref().is_some_and(
            |l| (l["message"].as_str()).is_some_and(|m| m.starts_with("Queues of two APIs"))
        ),
        "the clash names the kind: {queue_clash:?}"
    );
    assert!(c
        .server
        .list("v1", "Event")
        .iter()
        .all(|e| e["reason"] != "InvalidObject"));
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_volcano_nothing_is_said_and_its_crds_are_picked_up_once_installed() {
    let c = cluster_without_volcano().await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("g", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 2));
    }
    let (_s, logs) = c.start_logged(&["--volcano-discovery-interval", "200ms"]);
    eventually("the Basalt gang bound", || {
        (0..2).all(|i| c.node_of(&format!("g-{i}")).is_some())
    })
    .await;
    // Several discovery rounds and cycles: not one warning or error.
    let rounds = Instant::now();
    while rounds.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(logs.problems(), Vec::<String>::new());
    assert!(!logs.any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.contains("watching Volcano"))));

    // Volcano installed later: picked up without a restart.
    c.create(volcano_crd("podgroups", "PodGroup", "Namespaced"));
    c.create(volcano_crd("queues", "Queue", "Cluster"));
    eventually("the scheduler watches Volcano's kinds", || {
        logs.any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("watching Volcano"))
        })
    })
    .await;
    c.create(volcano_queue("vq"));
    c.create(volcano_group("vg", 2, "vq"));
    for i in 0..2 {
        c.create(volcano_pod(&format!("vg-{i}"), "vg", 2));
    }
    eventually("the Volcano gang bound and Running", || {
        (0..2).all(|i| c.node_of(&format!("vg-{i}")).is_some())
            && c.volcano_group("vg")["status"]["phase"] == "Running"
    })
    .await;
    assert!(
        !logs.any(|l| l["message"] == "watch error"),
        "{:?}",
        logs.problems()
    );

    // Uninstalled again: its objects leave the snapshot, and nothing complains about it.
    let client = c.client().await;
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client);
    for name in [
        "podgroups.scheduling.volcano.sh",
        "queues.scheduling.volcano.sh",
    ] {
        crds.delete(name, &Default::default())
            .await
            .expect("CRD deleted");
    }
    eventually("the scheduler stops watching Volcano's kinds", || {
        logs.any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("no longer served"))
        })
    })
    .await;
    assert!(
        !logs.any(|l| l["message"] == "watch error"),
        "{:?}",
        logs.problems()
    );
}

// ---------------------------------------------------------------------------------------------
// The owner cache: re-read on expiry and per uid
// ---------------------------------------------------------------------------------------------

fn job(name: &str, min_member: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"scheduling.basalt.dev/min-member": min_member,
                            "scheduling.basalt.dev/queue": "research"}},
        "spec": {"parallelism": 3},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_s_changed_annotation_and_a_recreated_owner_are_read_again() {
    use kube::api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    };
    let c = cluster(Config::default()).await;
    c.create(job_crd());
    for n in ["n1", "n2", "n3"] {
        c.create(node(n, 4));
    }
    c.create(queue("research"));
    c.create(queue("other"));
    c.create(job("train", "3"));
    let uid_of = |c: &Cluster| {
        c.server
            .get("batch/v1", "Job", "default", "train")
            .expect("the Job exists")["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first_uid = uid_of(&c);
    for i in 0..2 {
        c.create(owned_pod(&format!("train-{i}"), "train", &first_uid, 4));
    }
    let _s = c.start_with(&["--owner-cache-ttl", "300ms"]);
    let train_pg = |c: &Cluster| {
        c.server.get(
            "scheduling.basalt.dev/v1alpha1",
            "PodGroup",
            "default",
            "train-pg",
        )
    };
    eventually("train-pg waits for a third member", || {
        train_pg(&c).is_some_and(|g| {
            g["spec"]["minMember"] == 3
                && g["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|x| x["type"] == "Unschedulable"))
        })
    })
    .await;
    assert!((0..2).all(|i| c.node_of(&format!("train-{i}")).is_none()));

    // The owner now asks for 2, in another queue: its cached entry expires, the owner is read
    // again, the waiting group follows it, and the two members start.
    let client = c.client().await;
    let jobs: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs"),
    );
    let patch = json!({"metadata": {"annotations": {"scheduling.basalt.dev/min-member": "2",
                                                      "scheduling.basalt.dev/queue": "other"}}});
    jobs.patch("train", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("Job annotated");
    eventually(
        "train-pg follows the owner and its two members are bound",
        || {
            train_pg(&c)
                .is_some_and(|g| g["spec"]["minMember"] == 2 && g["spec"]["queue"] == "other")
                && (0..2).all(|i| c.node_of(&format!("train-{i}")).is_some())
        },
    )
    .await;

    // The Job is deleted (its pods with it, as the garbage collector would) and made again
    // under the same name: a new uid, read afresh; the group the old one left is replaced by
    // one owned by the new Job.
    jobs.delete("train", &DeleteParams::default())
        .await
        .expect("Job deleted");
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "default");
    for i in 0..2 {
        pods.delete(&format!("train-{i}"), &DeleteParams::default())
            .await
            .expect("pod deleted");
    }
    c.create(job("train", "3"));
    let second_uid = uid_of(&c);
    assert_ne!(first_uid, second_uid);
    for i in 0..2 {
        c.create(owned_pod(&format!("again-{i}"), "train", &second_uid, 4));
    }
    eventually("train-pg is the new Job's, with its min-member", || {
        train_pg(&c).is_some_and(|g| {
            g["metadata"]["ownerReferences"][0]["uid"] == second_uid.as_str()
                && g["spec"]["minMember"] == 3
                && g["spec"]["queue"] == "research"
        }) && (0..2).all(|i| {
            c.pod(&format!("again-{i}"))["metadata"]["annotations"]
                ["scheduling.basalt.dev/pod-group"]
                == "train-pg"
        })
    })
    .await;
    // A gang of three with two members: not started (the stale group of two would have).
    assert!((0..2).all(|i| c.node_of(&format!("again-{i}")).is_none()));
    c.create(owned_pod("again-2", "train", &second_uid, 4));
    eventually("the new Job's three members bound", || {
        (0..3).all(|i| c.node_of(&format!("again-{i}")).is_some())
    })
    .await;
    c.assert_no_node_over_capacity();
}

// ---------------------------------------------------------------------------------------------
// Leader election: a lease that cannot be renewed or is taken, and release on SIGTERM
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_or_loses_its_lease_stops_and_sigterm_releases_it() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    let (mut s, logs) = c.start_logged(&[
        "--leader-elect",
        "--lease-duration",
        "2s",
        "--identity",
        "replica-a",
    ]);
    let lease = || {
        c.server.get(
            "coordination.k8s.io/v1",
            "Lease",
            "kube-system",
            "basalt-scheduler",
        )
    };
    let holder = || lease().and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string));
    let stepped_down = || {
        logs.lines()
            .iter()
            .filter(|l| l["message"] == "leadership changed" && l["leader"] == false)
            .count()
    };
    let led = || {
        logs.lines()
            .iter()
            .filter(|l| l["message"] == "leadership changed" && l["leader"] == true)
            .count()
    };
    eventually("replica-a holds the lease and leads", || {
        holder().as_deref() == Some("replica-a") && led() == 1
    })
    .await;

    // The API refuses every lease request: the leader stops at its next renewal, before the
    // lease can expire, and binds nothing meanwhile.
    c.server
        .add_fault(basalt_apiserver::FaultRule {
            verb: None,
            resource: Some("leases".into()),
            probability: 1.0,
            code: Some(500),
            delay_ms: 0,
            remaining: None,
            ..Default::default()
        })
        .unwrap();
    eventually("the leader steps down", || stepped_down() == 1).await;
    c.create(group("g1", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g1-{i}"), "g1", 2));
    }
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!((0..2).all(|i| c.node_of(&format!("g1-{i}")).is_none()));
    c.server.clear_faults();
    eventually("leading again, g1 bound", || {
        (0..2).all(|i| c.node_of(&format!("g1-{i}")).is_some())
    })
    .await;

    // Another writer takes the lease: the leader notices at its next renewal and stops.
    let leases: kube::Api<Lease> = kube::Api::namespaced(c.client().await, "kube-system");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff_now());
    let taken = json!({"spec": {"holderIdentity": "intruder", "renewTime": now,
                                "leaseDurationSeconds": 3600}});
    leases
        .patch(
            "basalt-scheduler",
            &PatchParams::default(),
            &Patch::Merge(&taken),
        )
        .await
        .expect("lease taken");
    eventually("the leader steps down again", || stepped_down() == 2).await;
    c.create(group("g2", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g2-{i}"), "g2", 2));
    }
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!((0..2).all(|i| c.node_of(&format!("g2-{i}")).is_none()));
    assert_eq!(holder().as_deref(), Some("intruder"));
    // The intruder gives it up: replica-a takes it and schedules.
    let freed = json!({"spec": {"holderIdentity": null, "renewTime": null, "acquireTime": null,
                                "leaseDurationSeconds": null}});
    leases
        .patch(
            "basalt-scheduler",
            &PatchParams::default(),
            &Patch::Merge(&freed),
        )
        .await
        .expect("lease freed");
    eventually("replica-a leads again, g2 bound", || {
        holder().as_deref() == Some("replica-a")
            && (0..2).all(|i| c.node_of(&format!("g2-{i}")).is_some())
    })
    .await;

    // SIGTERM: exit 0 with the lease released, so another replica need not wait it out.
    let status = Command::new("kill")
        .args(["-TERM", &s.0.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let start = Instant::now();
    let code = loop {
        if let Some(code) = s.0.try_wait().unwrap() {
            break code;
        }
        assert!(start.elapsed() < DEADLINE, "the scheduler did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "exit status {code:?}");
    assert_eq!(holder(), None, "lease released: {:?}", lease());
    c.assert_no_node_over_capacity();
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[test]
fn a_lease_shorter_than_two_seconds_is_refused() {
    let out = Command::new(BIN)
        .args(["--leader-elect", "--lease-duration", "500ms"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--lease-duration"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Topology: racks, NVLink islands, tensor-parallel sub-groups, Volcano HyperNodes
// ---------------------------------------------------------------------------------------------

fn labelled_node(name: &str, gpus: u32, labels: Value) -> Value {
    let mut n = node(name, gpus);
    n["metadata"]["labels"] = labels;
    n
}

/// A pod of an indexed Job: its rank in `batch.kubernetes.io/job-completion-index`.
fn ranked_pod(name: &str, group: &str, gpus: u32, rank: u32) -> Value {
    let mut p = pod(name, group, gpus);
    p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = json!(rank.to_string());
    p
}

/// A gang of `size` one-GPU pods in a PodGroup that must stay in one rack, cut into
/// tensor-parallel sub-groups of 4 by rank, each inside one NVLink domain.
fn create_rack_tp_gang(c: &Cluster, name: &str, size: u32) {
    c.create(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": size, "queue": "research",
                 "topology": {"required": "rack"},
                 "subGroups": [{"name": "tp", "size": 4, "topology": {"required": "nvlink"}}]},
    }));
    for i in 0..size {
        c.create(ranked_pod(&format!("{name}-{i}"), name, 1, i));
    }
}

fn gpu_ids(p: &Value) -> Vec<u32> {
    p["metadata"]["annotations"]["scheduling.basalt.dev/gpu-ids"]
        .as_str()
        .map(|s| s.split(',').map(|i| i.parse().unwrap()).collect())
        .unwrap_or_default()
}

fn unschedulable_message(g: &Value) -> Option<String> {
    g["status"]["conditions"].as_array().and_then(|cs| {
        cs.iter()
            .find(|cond| cond["type"] == "Unschedulable" && cond["status"] == "True")
            .and_then(|cond| cond["message"].as_str().map(str::to_string))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_gang_keeps_to_one_rack_and_each_tp_group_to_one_nvlink_island() {
    let c = cluster(Config::default()).await;
    let rack = |r: &str| json!({"topology.basalt.dev/rack": r});
    // Rack r1: a1, a PCIe server with two 4-GPU NVLink islands, GPUs 0 and 1 taken (6 free, but
    // only island [4-7] holds 4); a2 with 4 free. Rack r2: 4 + 2 free. 16 GPUs free in all.
    c.create(labelled_node("a1", 8, rack("r1")));
    c.create(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "NodeTopology",
        "metadata": {"name": "a1"},
        "spec": {"gpus": (0..8).map(|i| json!({"index": i})).collect::<Vec<_>>(),
                 "islands": [[0, 1, 2, 3], [4, 5, 6, 7]]},
    }));
    c.create(labelled_node("a2", 8, rack("r1")));
    c.create(labelled_node("b1", 8, rack("r2")));
    c.create(labelled_node("b2", 8, rack("r2")));
    c.create(busy_pod("busy-a1", "a1", 2, Some("0,1")));
    c.create(busy_pod("busy-a2", "a2", 4, None));
    c.create(busy_pod("busy-b1", "b1", 4, None));
    c.create(busy_pod("busy-b2", "b2", 6, None));
    c.create(queue("research"));
    // 8 ranks = 2 TP groups of 4: only r1 (10 free) holds the gang whole.
    create_rack_tp_gang(&c, "dp", 8);
    let _s = c.start_scheduler();

    eventually("every rank of dp bound", || {
        (0..8).all(|i| c.node_of(&format!("dp-{i}")).is_some())
    })
    .await;
    let nodes: Vec<String> = (0..8)
        .map(|i| c.node_of(&format!("dp-{i}")).unwrap())
        .collect();
    assert!(
        nodes.iter().all(|n| n == "a1" || n == "a2"),
        "the gang left rack r1: {nodes:?}"
    );
    for tp in nodes.chunks(4) {
        assert!(
            tp.iter().all(|n| *n == tp[0]),
            "a TP group spans nodes: {nodes:?}"
        );
    }
    assert_ne!(nodes[0], nodes[4], "two TP groups on one node: {nodes:?}");
    let on_a1: Vec<u32> = (0..8)
        .filter(|i| nodes[*i] == "a1")
        .flat_map(|i| gpu_ids(&c.pod(&format!("dp-{i}"))))
        .collect();
    let mut sorted = on_a1.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        vec![4, 5, 6, 7],
        "the TP group on a1 holds island [4-7], not GPUs across islands"
    );
    eventually("dp Running", || {
        c.group("dp")["status"]["phase"] == "Running"
    })
    .await;

    // Now r1 has 2 GPUs free and r2 6: 8 in all, but no rack holds another gang of 8.
    create_rack_tp_gang(&c, "late", 8);
    eventually("late Unschedulable, naming the rack tier", || {
        unschedulable_message(&c.group("late")).is_some_and(|m| m.contains("GPUs in one rack"))
    })
    .await;
    eventually("a FailedScheduling event on late", || {
        !c.events("FailedScheduling", "late").is_empty()
    })
    .await;
    assert!(
        (0..8).all(|i| c.node_of(&format!("late-{i}")).is_none()),
        "no member of late is bound"
    );
    c.assert_no_node_over_capacity();
}

/// Volcano's HyperNode CRD (`topology.volcano.sh/v1alpha1`, cluster-scoped).
fn hypernode_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "hypernodes.topology.volcano.sh"},
        "spec": {"group": "topology.volcano.sh", "scope": "Cluster",
                 "names": {"kind": "HyperNode", "plural": "hypernodes", "singular": "hypernode",
                           "shortNames": ["hn"]},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

fn hypernode(name: &str, tier: u32, members: Value) -> Value {
    json!({
        "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": members},
    })
}

/// A Volcano PodGroup that must stay inside one HyperNode of tier 1.
fn volcano_tier1_group(name: &str, min_member: u32) -> Value {
    let mut g = volcano_group(name, min_member, "vq");
    g["spec"]["networkTopology"] = json!({"mode": "hard", "highestTierAllowed": 1});
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_hypernodes_installed_later_become_tiers_and_their_warnings_are_said_once() {
    let c = cluster(Config::default()).await;
    for n in ["n1", "n2", "n3", "n4"] {
        c.create(node(n, 8));
    }
    // 4 GPUs taken on n1 and on n3: 12 free in each pair, at most 8 on one node.
    c.create(busy_pod("busy-n1", "n1", 4, None));
    c.create(busy_pod("busy-n3", "n3", 4, None));
    let (_s, logs) = c.start_logged(&["--volcano-discovery-interval", "200ms"]);
    c.create(hypernode_crd());
    eventually("the scheduler watches HyperNodes", || {
        logs.any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("watching Volcano's HyperNodes"))
        })
    })
    .await;
    c.create(hypernode(
        "rack-a",
        1,
        json!([{"type": "Node", "selector": {"exactMatch": {"name": "n1"}}},
               {"type": "Node", "selector": {"exactMatch": {"name": "n2"}}}]),
    ));
    c.create(hypernode(
        "rack-b",
        1,
        json!([{"type": "Node", "selector": {"regexMatch": {"pattern": "^n[34]$"}}}]),
    ));
    // n4 is in rack-b already: rack-b wins (first by name), with a warning.
    c.create(hypernode(
        "rack-dup",
        1,
        json!([{"type": "Node", "selector": {"exactMatch": {"name": "n4"}}}]),
    ));
    c.create(hypernode(
        "spine",
        2,
        json!([{"type": "HyperNode", "selector": {"exactMatch": {"name": "rack-a"}}},
               {"type": "HyperNode", "selector": {"exactMatch": {"name": "rack-b"}}}]),
    ));
    c.create(volcano_queue("vq"));
    // 3 x 4 GPUs inside one tier-1 HyperNode: fits only through the HyperNodes (no node alone
    // has 12 free), in rack-a or rack-b.
    c.create(volcano_tier1_group("vg", 3));
    for i in 0..3 {
        c.create(volcano_pod(&format!("vg-{i}"), "vg", 4));
    }
    // 4 x 4 GPUs: 24 free in the spine, but no tier-1 HyperNode holds 16.
    c.create(volcano_tier1_group("wide", 4));
    for i in 0..4 {
        c.create(volcano_pod(&format!("wide-{i}"), "wide", 4));
    }

    eventually("the Volcano gang bound", || {
        (0..3).all(|i| c.node_of(&format!("vg-{i}")).is_some())
    })
    .await;
    let nodes: Vec<String> = (0..3)
        .map(|i| c.node_of(&format!("vg-{i}")).unwrap())
        .collect();
    let in_a = nodes.iter().all(|n| n == "n1" || n == "n2");
    let in_b = nodes.iter().all(|n| n == "n3" || n == "n4");
    assert!(in_a || in_b, "the gang spans tier-1 HyperNodes: {nodes:?}");
    eventually(
        "wide Unschedulable on the Volcano object, naming the tier",
        || {
            unschedulable_message(&c.volcano_group("wide"))
                .is_some_and(|m| m.contains("volcano-tier-1"))
        },
    )
    .await;
    assert!((0..4).all(|i| c.node_of(&format!("wide-{i}")).is_none()));

    // Several cycles later the conversion's warning was said once.
    let cycles = Instant::now();
    while cycles.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said: Vec<Value> = logs
        .lines()
        .into_iter()
        .filter(|l| l["level"] == "WARN" && l["message"] == "conversion warning")
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    let w = said[0]["warning"].as_str().unwrap();
    assert!(
        w.contains("HyperNode rack-dup") && w.contains("node n4 is also in HyperNode rack-b"),
        "{w}"
    );
    assert!(
        !logs.any(|l| l["message"] == "watch error"),
        "{:?}",
        logs.problems()
    );
    c.assert_no_node_over_capacity();
}

//! Issue 33 end to end, through the real scheduler and the in-memory API server: why a job
//! waits in its PodGroup's status (a condition and the structured explanation), readable
//! Queue status and the `default` Queue as an object, and preemption Events that name both
//! sides.

use std::process::Command;

use basalt_apiserver::Config;
use serde_json::{json, Value};

mod common;

use common::*;

fn queue_object(c: &Cluster, name: &str) -> Option<Value> {
    c.server
        .get("scheduling.basalt.dev/v1alpha1", "Queue", "", name)
}

fn condition(g: &Value) -> Option<(String, String)> {
    let conditions = g["status"]["conditions"].as_array()?;
    let c = conditions.iter().find(|c| c["type"] == "Unschedulable")?;
    Some((
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gang_says_why_and_one_that_never_fits_says_so() {
    let c = cluster(Config::default()).await;
    for i in 1..=4 {
        c.create(node(&format!("n{i}"), 8));
    }
    c.create(queue("q"));
    c.create(group("busy", 2, "q"));
    for i in 0..2 {
        c.create(pod(&format!("busy-{i}"), "busy", 8));
    }
    let _s = c.start_scheduler();
    eventually("busy bound", || {
        (0..2).all(|i| c.node_of(&format!("busy-{i}")).is_some())
    })
    .await;
    c.create(group("wide", 3, "q"));
    c.create(group("huge", 5, "q"));
    for i in 0..3 {
        c.create(pod(&format!("wide-{i}"), "wide", 8));
    }
    for i in 0..5 {
        c.create(pod(&format!("huge-{i}"), "huge", 8));
    }
    eventually("wide explains it waits for busy", || {
        let g = c.group("wide");
        let e = &g["status"]["explanation"];
        e["verdict"] == "Waiting"
            && e["heldBy"][0]["name"] == "default/busy"
            && e["unblock"] == json!({"kind": "jobsEnd", "jobs": ["default/busy"]})
            && e["position"]["queue"] == "q"
            && condition(&g).is_some_and(|(reason, message)| {
                reason == "NotEnoughResources"
                    && message.starts_with(
                        "0/3 members of the gang could be placed: 2/4 nodes are available: 2 \
                         insufficient nvidia.com/gpu.",
                    )
            })
    })
    .await;
    eventually("huge never fits", || {
        let g = c.group("huge");
        g["status"]["explanation"]["verdict"] == "NeverFits"
            && condition(&g).is_some_and(|(reason, message)| {
                reason == "NeverFits"
                    && message.contains("it asks 40 nvidia.com/gpu, more than the 32")
            })
    })
    .await;
    eventually("huge's FailedScheduling says NeverFits", || {
        (c.events("FailedScheduling", "huge").iter()).any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("NeverFits: "))
        })
    })
    .await;
    // Once busy ends, wide starts and its explanation goes.
    for i in 0..2 {
        c.server
            .delete("v1", "Pod", "default", &format!("busy-{i}"))
            .expect("busy pods deleted");
    }
    eventually("wide bound, its explanation gone", || {
        let g = c.group("wide");
        (0..3).all(|i| c.node_of(&format!("wide-{i}")).is_some())
            && g["status"]["phase"] == "Running"
            && g["status"].get("explanation").is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_report_deserved_share_and_demand_and_default_is_made() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(queue("research"));
    c.create(group("small", 1, "research"));
    c.create(pod("small-0", "small", 2));
    c.create(group("wants", 1, "research"));
    c.create(pod("wants-0", "wants", 16));
    // A pod without a group goes to the implicit default queue.
    let mut solo = pod("solo", "", 1);
    solo["metadata"].as_object_mut().unwrap().remove("labels");
    c.create(solo);
    let _s = c.start_scheduler();
    eventually("research's status reads deserved, share and demand", || {
        let Some(q) = queue_object(&c, "research") else {
            return false;
        };
        let s = &q["status"];
        s["allocated"]["nvidia.com/gpu"] == "2"
            && s["deserved"]["nvidia.com/gpu"].is_string()
            && s["share"].is_number()
            && s["demand"]["nvidia.com/gpu"] == "16"
            && s["summary"]["allocated"]
                .as_str()
                .is_some_and(|a| a.contains("nvidia.com/gpu=2") && !a.contains("pods="))
            && s["summary"]["pending"]
                .as_str()
                .is_some_and(|p| p.contains("nvidia.com/gpu=16"))
    })
    .await;
    eventually("the default queue is an object with a status", || {
        queue_object(&c, "default").is_some_and(|q| {
            q["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "basalt-scheduler"
                && q["status"]["allocated"]["nvidia.com/gpu"] == "1"
        })
    })
    .await;
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .env("KUBECONFIG", c.dir.path().join("kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .args(args)
            .output()
    };
    let Ok(out) = kubectl(&["get", "queues"]) else {
        eprintln!("skipped the kubectl part: kubectl is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let header = text.lines().next().unwrap_or_default();
    for column in ["DESERVED", "ALLOCATED", "SHARE", "PENDING"] {
        assert!(header.contains(column), "{text}");
    }
    let research = (text.lines())
        .find(|l| l.starts_with("research "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(research.contains("nvidia.com/gpu=2"), "{text}");
    assert!(research.contains("nvidia.com/gpu=16"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("default ")), "{text}");
    let out = kubectl(&["describe", "queue", "default"]).expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn priority_class(name: &str, value: i32) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": name}, "value": value})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_names_the_preemptor_the_node_and_the_victims() {
    let c = cluster(Config::default()).await;
    c.create(priority_class("low", 10));
    c.create(priority_class("high", 1000));
    c.create(node("n1", 8));
    c.create(queue("q"));
    let prioritised = |name: &str, class: &str| {
        let mut g = group(name, 1, "q");
        g["spec"]["priorityClassName"] = json!(class);
        let mut p = pod(&format!("{name}-0"), name, 8);
        p["spec"]["priorityClassName"] = json!(class);
        (g, p)
    };
    let (g, p) = prioritised("old", "low");
    c.create(g);
    c.create(p);
    let _s = c.start_scheduler();
    eventually("old bound", || c.node_of("old-0").is_some()).await;
    let (g, p) = prioritised("urgent", "high");
    c.create(g);
    c.create(p);
    eventually("urgent bound in old's place", || {
        c.server.get("v1", "Pod", "default", "urgent-0").is_some()
            && c.node_of("urgent-0").as_deref() == Some("n1")
    })
    .await;
    let said = |reason: &str, about: &str, text: &str| {
        (c.events(reason, about).iter()).any(|e| e["message"] == text)
    };
    eventually(
        "the victim pod names the preemptor, the node and how",
        || {
            said(
                "Preempted",
                "old-0",
                "Preempted by default/urgent on node n1 (preempt)",
            )
        },
    )
    .await;
    eventually("the preemptor's PodGroup names its victims", || {
        said(
            "Preempting",
            "urgent",
            "Evicting default/old-0 on n1 (preempt)",
        )
    })
    .await;
    eventually("the victim's PodGroup names who took its place", || {
        said(
            "Preempted",
            "old",
            "default/old-0 on n1 preempted by default/urgent (preempt)",
        )
    })
    .await;
    assert!(
        c.events("FailedScheduling", "urgent").is_empty(),
        "a preempting gang is not told it failed: {:?}",
        c.events("FailedScheduling", "urgent")
    );
}

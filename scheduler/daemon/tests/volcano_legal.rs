//! Legal Volcano objects never take a cycle down: a PodGroup with `minMember: 0` and one naming
//! a PriorityClass that does not exist schedule (the second with a warning), a malformed one is
//! reported and left out on its own, and every other object schedules as before.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legal_volcano_groups_schedule_and_a_malformed_one_is_reported_alone() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    c.create(node("n2", 8));
    c.create(volcano_queue("vq"));
    c.create(queue("research"));
    // No gang minimum: each pod may start alone.
    c.create(volcano_group("zero", 0, "vq"));
    for i in 0..2 {
        c.create(volcano_pod(&format!("zero-{i}"), "zero", 2));
    }
    // A PriorityClass that does not exist: the default priority, and a warning.
    let mut gold = volcano_group("gold", 2, "vq");
    gold["spec"]["priorityClassName"] = json!("gold");
    c.create(gold);
    for i in 0..2 {
        c.create(volcano_pod(&format!("gold-{i}"), "gold", 2));
    }
    // Malformed: a sub-group of size 0.
    let mut broken = volcano_group("broken", 1, "vq");
    broken["spec"]["subGroupPolicy"] = json!([{"name": "tp", "subGroupSize": 0}]);
    c.create(broken);
    c.create(volcano_pod("broken-0", "broken", 1));
    // Basalt's own objects beside them.
    c.create(group("plain", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("plain-{i}"), "plain", 2));
    }

    let (_s, logs) = c.start_logged(&[]);
    let bound = ["zero-0", "zero-1", "gold-0", "gold-1", "plain-0", "plain-1"];
    eventually("every pod of the legal groups bound", || {
        bound.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    eventually("the minMember-0 group Running, in Volcano's object", || {
        c.volcano_group("zero")["status"]["phase"] == "Running"
    })
    .await;
    eventually("the gold group Running", || {
        c.volcano_group("gold")["status"]["phase"] == "Running"
    })
    .await;
    eventually("an InvalidObject event on the malformed group", || {
        c.events("InvalidObject", "broken").iter().any(|e| {
            e["type"] == "Warning"
                && e["message"].as_str().is_some_and(|m| {
                    m.contains("spec.subGroupPolicy[0].subGroupSize")
                        && m.contains("must be at least 1")
                })
        })
    })
    .await;
    eventually("a warning about the missing PriorityClass", || {
        logs.any(|l| {
            l["level"] == "WARN"
                && l["warning"].as_str().is_some_and(|w| {
                    w.contains("PodGroup default/gold")
                        && w.contains("names PriorityClass gold, which does not exist")
                        && w.contains("the default priority 0 is used")
                })
        })
    })
    .await;
    eventually("the warning is an Event on the gold group too", || {
        c.events("ConversionWarning", "gold").iter().any(|e| {
            e["type"] == "Warning"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("names PriorityClass gold"))
        })
    })
    .await;
    eventually("the malformed group's status says it is invalid", || {
        c.volcano_group("broken")["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k["type"] == "InvalidObject" && k["status"] == "True")
    })
    .await;
    assert_eq!(
        c.node_of("broken-0"),
        None,
        "the malformed group's pod waits"
    );
    assert_eq!(c.group("plain")["status"]["phase"], "Running");
    c.assert_no_node_over_capacity();
}

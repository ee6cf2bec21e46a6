//! Bad objects affect only themselves: other schedulers' pods with fields Basalt reads only on
//! its own pods malformed, and Basalt's own bad pods and PodGroups, never stop a cycle or take a
//! node out of scheduling.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_bad_foreign_pods_and_bad_own_objects_do_not_stop_scheduling() {
    let c = cluster(Config::default()).await;
    for n in 0..3 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(queue("q"));
    // 300 running pods of another scheduler, 100 on each node, whose rank label and GPU ids
    // annotation (fields Basalt reads only on its own pods) are malformed.
    for i in 0..300 {
        let mut p = busy_pod(&format!("foreign-{i}"), &format!("n{}", i % 3), 0, None);
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "10m"}});
        p["metadata"]["labels"] =
            json!({"batch.kubernetes.io/job-completion-index": "not-a-number"});
        p["metadata"]["annotations"] = json!({"scheduling.basalt.dev/gpu-ids": "zero,one"});
        c.create(p);
    }
    // Basalt's own bad objects: a PodGroup naming a missing queue with a member running on n0
    // (2 GPUs, still counted there), and a pod whose GPU ids cannot be read, running on n1.
    c.create(group("lost", 2, "nope"));
    let mut lost = pod("lost-0", "lost", 2);
    lost["spec"]["nodeName"] = json!("n0");
    lost["status"] = json!({"phase": "Running"});
    c.create(lost);
    let mut garbled = pod("garbled", "", 2);
    garbled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    garbled["metadata"]["annotations"] = json!({"scheduling.basalt.dev/gpu-ids": "x"});
    garbled["spec"]["nodeName"] = json!("n1");
    garbled["status"] = json!({"phase": "Running"});
    c.create(garbled);

    let _s = c.start_scheduler();
    // A gang that needs 6 GPUs on every node: only fits if no node dropped out and the bad
    // bound pods' GPUs are counted (8 - 2 on n0 and n1).
    c.create(group("train", 3, "q"));
    for i in 0..3 {
        c.create(pod(&format!("train-{i}"), "train", 6));
    }
    eventually("the gang is bound on all three nodes", || {
        (0..3).all(|i| c.node_of(&format!("train-{i}")).is_some())
    })
    .await;
    let mut nodes: Vec<String> = (0..3)
        .map(|i| c.node_of(&format!("train-{i}")).unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n0", "n1", "n2"]);
    c.assert_no_node_over_capacity();
    // The own bad objects are reported, the foreign pods are not Basalt's to complain about.
    eventually("the bad PodGroup is reported", || {
        !c.events("InvalidObject", "lost").is_empty()
    })
    .await;
    eventually("the bad PodGroup's status says it is invalid", || {
        c.group("lost")["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| {
                k["type"] == "InvalidObject"
                    && k["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("names queue nope"))
            })
    })
    .await;
    assert!(c.events("InvalidObject", "foreign-7").is_empty());

    // And it keeps scheduling: a later job on what is left (2 GPUs, on n2).
    c.create(group("small", 1, "q"));
    c.create(pod("small-0", "small", 2));
    eventually("the later job is bound", || c.node_of("small-0").is_some()).await;
    assert_eq!(c.node_of("small-0").as_deref(), Some("n2"));
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_group_is_not_watched_yet_waits_quietly() {
    let c = cluster(Config::default()).await;
    c.create(node("n0", 8));
    c.create(queue("q"));
    let _s = c.start_scheduler();
    // The pods arrive before their PodGroup (the two watches keep no order between them).
    for i in 0..2 {
        c.create(pod(&format!("late-{i}"), "late", 2));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    for i in 0..2 {
        let p = format!("late-{i}");
        assert!(
            c.events("InvalidObject", &p).is_empty(),
            "{p} reported invalid"
        );
        assert!(c.node_of(&p).is_none());
    }
    c.create(group("late", 2, "q"));
    eventually("both bound once the group is seen", || {
        (0..2).all(|i| c.node_of(&format!("late-{i}")).is_some())
    })
    .await;
}

/// Invalid objects are left out while others are scheduled, and scheduled once fixed: a
/// PodGroup naming a queue that does not exist yet (left out before the engine sees it), and
/// one the engine itself refuses (`minMember: -1`) until it is patched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_scheduled_once_fixed() {
    let c = cluster(Config::default()).await;
    for n in 0..2 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(queue("q"));
    c.create(group("early", 2, "later"));
    for i in 0..2 {
        c.create(pod(&format!("early-{i}"), "early", 2));
    }
    let mut refused = group("refused", 1, "q");
    refused["spec"]["minMember"] = json!(-1);
    c.create(refused);
    c.create(pod("refused-0", "refused", 2));
    let _s = c.start_scheduler();

    c.create(group("fine", 2, "q"));
    for i in 0..2 {
        c.create(pod(&format!("fine-{i}"), "fine", 4));
    }
    eventually("a valid gang is bound meanwhile", || {
        (0..2).all(|i| c.node_of(&format!("fine-{i}")).is_some())
    })
    .await;
    eventually("both bad PodGroups are reported", || {
        !c.events("InvalidObject", "early").is_empty()
            && !c.events("InvalidObject", "refused").is_empty()
    })
    .await;
    assert!(c.node_of("early-0").is_none() && c.node_of("refused-0").is_none());

    // Fixed: the queue is made, the minimum patched.
    c.create(queue("later"));
    c.server
        .patch(
            "scheduling.basalt.dev/v1alpha1",
            "PodGroup",
            "default",
            "refused",
            basalt_apiserver::PatchKind::Merge,
            &json!({"spec": {"minMember": 1}}),
        )
        .expect("patched");
    eventually("the fixed gangs are bound", || {
        ["early-0", "early-1", "refused-0"]
            .iter()
            .all(|p| c.node_of(p).is_some())
    })
    .await;
    c.assert_no_node_over_capacity();
}

/// Basalt's own kinds are read object by object: a PodGroup, a Queue and a NodeTopology with
/// integers out of their range (a real API server stores them: CRD `int32` formats are not
/// enforced on write) are each reported on themselves and left out, and the rest is scheduled,
/// after a re-list (a restart) as while running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_that_do_not_decode_are_left_out_alone_across_a_relist() {
    let c = cluster(Config::default()).await;
    for n in 0..3 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(queue("q"));
    let mut big = group("big", 2, "q");
    big["spec"]["minMember"] = json!(2147483648u64);
    c.create(big);
    let mut huge = queue("huge");
    huge["spec"]["priority"] = json!(2147483648u64);
    c.create(huge);
    c.create(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "NodeTopology",
        "metadata": {"name": "n0"}, "spec": {"islands": [[-1]]},
    }));

    // Present at the first list.
    let (s, logs) = c.start_logged(&[]);
    c.create(group("train", 2, "q"));
    for i in 0..2 {
        c.create(pod(&format!("train-{i}"), "train", 8));
    }
    eventually("the gang binds beside the undecodable objects", || {
        (0..2).all(|i| c.node_of(&format!("train-{i}")).is_some())
    })
    .await;
    for (about, kind, field) in [
        ("big", "PodGroup", "spec.minMember"),
        ("huge", "Queue", "spec.priority"),
        ("n0", "NodeTopology", "spec.islands"),
    ] {
        eventually(&format!("{kind} {about} is reported on itself"), || {
            c.events("InvalidObject", about).iter().any(|e| {
                e["involvedObject"]["kind"] == kind
                    && e["message"].as_str().is_some_and(|m| m.contains(field))
            })
        })
        .await;
    }
    eventually("the PodGroup's status says it is invalid", || {
        (c.group("big")["status"]["conditions"]
            .as_array()
            .into_iter())
        .flatten()
        .any(|k| k["type"] == "InvalidObject")
    })
    .await;
    // One log line names each, not the whole list.
    let lines = logs.problems();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("PodGroup default/big: spec.minMember")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("watch error")),
        "{lines:#?}"
    );

    // A good object turned bad while running is reported too, not silently dropped.
    let mut later = group("later", 1, "q");
    later["spec"]["minMember"] = json!(-4294967297i64);
    c.create(later);
    eventually("the later PodGroup is reported", || {
        !c.events("InvalidObject", "later").is_empty()
    })
    .await;

    // A restart lists everything again: the caches sync and scheduling goes on.
    drop(s);
    let _s = c.start_scheduler();
    c.create(group("after", 1, "q"));
    c.create(pod("after-0", "after", 8));
    eventually("a gang binds after the re-list", || {
        c.node_of("after-0").is_some()
    })
    .await;
    assert_eq!(c.node_of("after-0").as_deref(), Some("n2"));
    c.assert_no_node_over_capacity();
}

/// The text log escapes what users' objects hold: a PodGroup whose `spec.queue` holds a newline,
/// a carriage return and an escape sequence is logged as invalid on one line, and no line of
/// stderr starts with anything but a timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newline_in_a_queue_name_stays_on_its_log_line() {
    let c = cluster(Config::default()).await;
    c.create(node("n0", 8));
    c.create(group(
        "forged",
        1,
        "a\n2099-01-01T00:00:00Z  INFO forged\r\x1b[2Kline",
    ));
    c.create(pod("forged-0", "forged", 1));
    let mut child = std::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--period", "200ms"])
        .args(["--log-format", "text"])
        .env("KUBECONFIG", c.dir.path().join("kubeconfig"))
        .env("RUST_LOG", "basalt_scheduler=info,kube=warn")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("scheduler starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let _s = Scheduler(child);
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            sink.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&line).into_owned());
        }
    });
    eventually("the bad PodGroup is logged", || {
        (lines.lock().unwrap().iter()).any(|l| l.contains("object left out of scheduling"))
    })
    .await;
    let lines = lines.lock().unwrap().clone();
    // `2026-12-06T01:02:03.456789Z  INFO ...`
    let stamped = |l: &str| {
        let b = l.as_bytes();
        b.len() > 20 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
    };
    for l in &lines {
        assert!(
            stamped(l),
            "a line that is not a log line: {l:?}\nin {lines:#?}"
        );
        assert!(!l.contains(['\r', '\x1b']), "{l:?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r"names queue a\n2099-01-01T00:00:00Z  INFO forged\r\u{1b}[2Kline")),
        "{lines:#?}"
    );
}

//! Bad queue trees: a Queue named `root`, parent cycles and children of an invalid queue. Each
//! bad queue is reported and left out; queues and PodGroups off it keep scheduling, and the
//! tolerant and incremental builds say the same.

mod common;

use basalt_crds::{build_snapshot_tolerant, ConvertOptions, IncrementalSnapshot};
use common::objects;

fn queue(name: &str, spec: &str) -> String {
    format!("apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {spec}\n---\n")
}

/// A PodGroup `g-<queue>` in `queue` with one pending pod.
fn gang(queue: &str) -> String {
    format!(
        "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: g-{queue}, namespace: ml}}\nspec: {{minMember: 1, queue: {queue}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: p-{queue}, namespace: ml, labels: {{scheduling.basalt.dev/pod-group: g-{queue}}}}}\n\
         spec: {{schedulerName: basalt, containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: \"1\"}}}}}}]}}\n---\n"
    )
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"32\", memory: 256Gi, nvidia.com/gpu: \"8\"}}\n---\n";

/// The errors of both builds (which must agree) and the tasks of the snapshot.
fn build(text: &str) -> (Vec<String>, Vec<String>) {
    let objects = objects("cluster.yaml", text);
    let options = ConvertOptions::default();
    let built = build_snapshot_tolerant(&objects, &options);
    let errors: Vec<String> = built.errors.iter().map(|e| e.to_string()).collect();
    let mut inc = IncrementalSnapshot::new();
    let update = inc.update(objects, &options);
    let inc_errors: Vec<String> = update.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(errors, inc_errors, "the builds disagree");
    let snapshot = built.snapshot.expect("a snapshot");
    let tasks = snapshot.tasks.iter().map(|t| t.name.to_string()).collect();
    (errors, tasks)
}

fn said(errors: &[String], needle: &str) -> bool {
    errors.iter().any(|e| e.contains(needle))
}

#[test]
fn a_queue_named_root_is_refused_and_its_parent_keeps_scheduling() {
    // `root` under `team` and `team` under the implicit root: team → root → team.
    let text = format!(
        "{NODE}{}{}{}",
        queue("root", "{weight: 1, parent: team}"),
        queue("team", "{weight: 1, parent: root}"),
        gang("team")
    );
    let (errors, tasks) = build(&text);
    assert!(
        said(&errors, "Queue root: metadata.name: root is reserved"),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(tasks, ["ml/p-team"]);
}

#[test]
fn queues_on_a_parent_cycle_are_invalid_and_the_rest_keeps_scheduling() {
    let text = format!(
        "{NODE}{}{}{}{}{}{}{}{}",
        queue("a", "{weight: 1, parent: b}"),
        queue("b", "{weight: 1, parent: a}"),
        queue("self", "{weight: 1, parent: self}"),
        queue("under-a", "{weight: 1, parent: a}"),
        queue("fine", "{weight: 1}"),
        gang("b"),
        gang("under-a"),
        gang("fine"),
    );
    let (errors, tasks) = build(&text);
    assert!(
        said(
            &errors,
            "Queue a: spec.parent: its parent chain forms a cycle: a → b → a"
        ),
        "{errors:#?}"
    );
    assert!(
        said(
            &errors,
            "Queue b: spec.parent: its parent chain forms a cycle: b → a → b"
        ),
        "{errors:#?}"
    );
    assert!(
        said(
            &errors,
            "Queue self: spec.parent: its parent chain forms a cycle: self → self"
        ),
        "{errors:#?}"
    );
    // Children of an invalid queue are told it is invalid, and why.
    assert!(
        said(&errors, "Queue under-a: spec.parent: names queue a, which is invalid (spec.parent: its parent chain forms a cycle"),
        "{errors:#?}"
    );
    assert!(
        said(&errors, "PodGroup ml/g-b: spec.queue: names queue b, which is invalid (spec.parent: its parent chain forms a cycle"),
        "{errors:#?}"
    );
    assert!(
        said(&errors, "PodGroup ml/g-under-a: spec.queue: names queue under-a, which is invalid (its parent queue a is invalid)"),
        "{errors:#?}"
    );
    assert!(!said(&errors, "does not exist"), "{errors:#?}");
    assert!(tasks.contains(&"ml/p-fine".to_string()), "{tasks:?}");
    assert!(!tasks.iter().any(|t| t != "ml/p-fine"), "{tasks:?}");
}

#[test]
fn children_of_an_unreadable_queue_are_told_it_is_invalid() {
    let text = format!(
        "{NODE}{}{}{}{}{}",
        queue("bad", "{weight: 1, capability: {cpu: lots}}"),
        queue("zero", "{weight: 0}"),
        queue("child", "{weight: 1, parent: bad}"),
        gang("child"),
        gang("zero"),
    );
    let (errors, tasks) = build(&text);
    assert!(
        said(
            &errors,
            "Queue child: spec.parent: names queue bad, which is invalid (spec.capability"
        ),
        "{errors:#?}"
    );
    assert!(
        said(&errors, "PodGroup ml/g-child: spec.queue: names queue child, which is invalid (its parent queue bad is invalid)"),
        "{errors:#?}"
    );
    assert!(
        said(&errors, "PodGroup ml/g-zero: spec.queue: names queue zero, which is invalid (spec.weight: must be at least 1)"),
        "{errors:#?}"
    );
    assert!(!said(&errors, "does not exist"), "{errors:#?}");
    assert!(tasks.is_empty(), "{tasks:?}");
}

#[test]
fn a_missing_parent_is_still_said_to_be_missing() {
    let text = format!(
        "{NODE}{}{}",
        queue("orphan", "{weight: 1, parent: nope}"),
        gang("orphan"),
    );
    let (errors, _) = build(&text);
    assert!(
        said(
            &errors,
            "Queue orphan: spec.parent: names queue nope, which does not exist"
        ),
        "{errors:#?}"
    );
    assert!(
        said(
            &errors,
            "PodGroup ml/g-orphan: spec.queue: names queue orphan, which is invalid"
        ),
        "{errors:#?}"
    );
}

#[test]
fn volcanos_root_queue_in_a_dump_is_skipped_not_refused() {
    let text = format!(
        "{NODE}apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: root}}\nspec: {{weight: 1}}\n---\n\
         apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: team}}\nspec: {{weight: 1, parent: root}}\n---\n{}",
        gang("team")
    );
    let loaded = basalt_crds::read_objects("cluster.yaml", &text).unwrap();
    assert_eq!(
        loaded.warnings,
        ["cluster.yaml: document 2: skipped scheduling.volcano.sh/v1beta1 Queue root: Volcano's top queue, implicit in Basalt"]
    );
    let (errors, tasks) = build(&text);
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(tasks, ["ml/p-team"]);
}

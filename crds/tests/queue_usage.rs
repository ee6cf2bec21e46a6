//! Queue `status.usage` read back into the snapshot (fairness over time survives a restart):
//! the tolerant and incremental builds both carry it, and a malformed one is warned of, named
//! by queue and field, and taken as no usage.

mod common;

use basalt_crds::{build_snapshot_tolerant, ConvertOptions, IncrementalSnapshot};
use basalt_engine::QueueUsage;
use common::objects;

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"32\", memory: 256Gi, nvidia.com/gpu: \"8\"}}\n---\n";

fn queue(name: &str, usage: &str) -> String {
    format!("apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{weight: 1}}\nstatus: {{usage: {usage}}}\n---\n")
}

/// The usage and warnings of the tolerant build, checked against the incremental build's.
fn read(text: &str) -> (Vec<QueueUsage>, Vec<String>) {
    let objects = objects("cluster.yaml", text);
    let options = ConvertOptions::default();
    let built = build_snapshot_tolerant(&objects, &options);
    let usage = built.snapshot.expect("a snapshot").usage.to_vec();
    let mut inc = IncrementalSnapshot::new();
    let update = inc.update(objects, &options);
    assert_eq!(update.warnings, built.warnings, "the builds disagree");
    assert_eq!(
        inc.snapshot().expect("a snapshot").usage.to_vec(),
        usage,
        "the builds disagree"
    );
    (usage, built.warnings)
}

#[test]
fn status_usage_is_read_back_in_engine_units() {
    let text = format!(
        "{NODE}{}{}",
        queue(
            "a",
            r#"{takenAt: "2024-05-01T12:00:00Z", resources: {nvidia.com/gpu: "7.5", cpu: "1.25"}}"#
        ),
        queue("b", r#"{takenAt: "2024-05-01T12:00:01.5Z", resources: {}}"#),
    );
    let (usage, warnings) = read(&text);
    assert!(warnings.is_empty(), "{warnings:#?}");
    let at = 1_714_564_800_000;
    assert_eq!(
        usage,
        [
            QueueUsage {
                queue: "a".into(),
                at_ms: at,
                used: [("cpu".into(), 1250.0), ("nvidia.com/gpu".into(), 7.5)].into(),
                held: None,
            },
            QueueUsage {
                queue: "b".into(),
                at_ms: at + 1500,
                used: Default::default(),
                held: None,
            },
        ]
    );
}

#[test]
fn malformed_usage_is_warned_of_and_taken_as_none() {
    let text = format!(
        "{NODE}{}{}{}",
        queue(
            "a",
            r#"{takenAt: "last tuesday", resources: {nvidia.com/gpu: "2"}}"#
        ),
        queue(
            "b",
            r#"{takenAt: "2024-05-01T12:00:00Z", resources: {nvidia.com/gpu: "-1"}}"#
        ),
        queue(
            "c",
            r#"{takenAt: "2024-05-01T12:00:00Z", resources: {nvidia.com/gpu: "3"}}"#
        ),
    );
    let (usage, warnings) = read(&text);
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].contains("Queue a: status.usage.takenAt: not an RFC 3339 instant"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].contains("Queue b: status.usage.resources[nvidia.com/gpu]"),
        "{warnings:#?}"
    );
    let queues: Vec<&str> = usage.iter().map(|u| u.queue.as_str()).collect();
    assert_eq!(queues, ["c"]);
}

//! Reporting the MIG layout on the node: the `MigLayoutValid` condition in the NodeTopology's
//! status, and a Warning Event on the Node when the layout turns bad (or its reason changes).
//! The stored condition is the memory: an unchanged problem writes nothing, round after round
//! and across restarts, so a bad layout neither spams Events nor needs state in the agent.

use basalt_crd_types::{NodeTopology, PodGroupCondition};
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::mig::config::MIG_CONFIG_LABEL;
use crate::round::{kube_words, Report, Write, FIELD_MANAGER};

pub const MIG_LAYOUT_CONDITION: &str = "MigLayoutValid";
/// The Event's reason when the layout cannot be used.
pub const MIG_LAYOUT_INVALID: &str = "MigLayoutInvalid";
/// Where Events about cluster-scoped objects (Nodes) go, as the kubelet does.
pub const EVENT_NAMESPACE: &str = "default";

/// The condition for layout `layout`: valid, or the reason it is not.
pub fn layout_condition(layout: &str, problem: Option<&str>, now: &str) -> PodGroupCondition {
    let (status, reason, message) = match problem {
        None => (
            "True",
            "LayoutValid",
            format!("MIG layout {layout:?} (node label {MIG_CONFIG_LABEL}) was read and fits every GPU it selects"),
        ),
        Some(p) => (
            "False",
            "LayoutInvalid",
            format!("MIG layout {layout:?} (node label {MIG_CONFIG_LABEL}): {p}"),
        ),
    };
    PodGroupCondition {
        type_: MIG_LAYOUT_CONDITION.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(now.into()),
    }
}

/// The conditions to store, given the stored ones: ours replaced by `wanted` (removed when
/// `None`), keeping its transition time while its status holds; others kept. `None` when
/// nothing changes.
pub fn next_conditions(
    current: &[PodGroupCondition],
    wanted: Option<PodGroupCondition>,
) -> Option<Vec<PodGroupCondition>> {
    let stored = current.iter().find(|c| c.type_ == MIG_LAYOUT_CONDITION);
    let wanted = wanted.map(|mut w| {
        if let Some(s) = stored.filter(|s| s.status == w.status) {
            w.last_transition_time = s.last_transition_time.clone();
        }
        w
    });
    if stored == wanted.as_ref() {
        return None;
    }
    let mut next: Vec<PodGroupCondition> = current
        .iter()
        .filter(|c| c.type_ != MIG_LAYOUT_CONDITION)
        .cloned()
        .collect();
    next.extend(wanted);
    Some(next)
}

/// Whether moving from `current` to `next` is news worth an Event: the layout is bad and it was
/// not bad for the same reason before.
pub fn event_message(current: &[PodGroupCondition], next: &[PodGroupCondition]) -> Option<String> {
    let ours = |cs: &[PodGroupCondition]| {
        cs.iter()
            .find(|c| c.type_ == MIG_LAYOUT_CONDITION && c.status == "False")
            .and_then(|c| c.message.clone())
    };
    let now = ours(next)?;
    (ours(current).as_ref() != Some(&now)).then_some(now)
}

/// Stores `wanted` as the layout condition of the node's NodeTopology when it differs from
/// `stored`, and writes a Warning Event on `node` when the layout turns bad. Failures are
/// warnings in `report`: they must not stop the round that publishes the topology. Without the
/// stored condition no Event is written either, since the condition is what keeps it from
/// repeating every round.
pub async fn report_on_node(
    client: &Client,
    node: &Node,
    stored: &[PodGroupCondition],
    wanted: Option<PodGroupCondition>,
    dry_run: bool,
    report: &mut Report,
) {
    let Some(next) = next_conditions(stored, wanted) else {
        return;
    };
    if dry_run {
        report.mig_layout_condition = Some(Write::DryRun);
        return;
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if let Err(e) = write_conditions(client, name, &next).await {
        report.warnings.push(format!(
            "cannot write the {MIG_LAYOUT_CONDITION} condition of NodeTopology {name}: {}",
            kube_words(&e)
        ));
        return;
    }
    report.mig_layout_condition = Some(Write::Updated);
    if let Some(message) = event_message(stored, &next) {
        match warn_on_node(client, node, MIG_LAYOUT_INVALID, &message).await {
            Ok(()) => report.events.push(message),
            Err(e) => report.warnings.push(format!(
                "cannot write an Event on Node {name}: {}",
                kube_words(&e)
            )),
        }
    }
}

/// Now, as the RFC 3339 text conditions carry.
pub fn now() -> String {
    Timestamp::now().to_string()
}

/// Writes `conditions` into NodeTopology `name`'s status (a merge patch: the list is ours).
async fn write_conditions(
    client: &Client,
    name: &str,
    conditions: &[PodGroupCondition],
) -> Result<(), kube::Error> {
    let api: Api<NodeTopology> = Api::all(client.clone());
    let patch = json!({ "status": { "conditions": conditions } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Writes a Warning Event about `node`.
async fn warn_on_node(
    client: &Client,
    node: &Node,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(EVENT_NAMESPACE.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.clone()),
            uid: node.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some(FIELD_MANAGER.into()),
            host: Some(name.clone()),
        }),
        reporting_component: Some(FIELD_MANAGER.into()),
        reporting_instance: Some(name),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), EVENT_NAMESPACE);
    api.create(&PostParams::default(), &event).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_condition_writes_nothing_and_keeps_its_time() {
        let bad = layout_condition("huge", Some("too many"), "t0");
        let next = next_conditions(&[], Some(bad.clone())).unwrap();
        assert_eq!(next, vec![bad.clone()]);
        assert_eq!(
            event_message(&[], &next).as_deref(),
            Some("MIG layout \"huge\" (node label nvidia.com/mig.config): too many")
        );
        // The next round: same problem, later clock.
        let again = layout_condition("huge", Some("too many"), "t1");
        assert_eq!(next_conditions(&next, Some(again)), None);
        // Another reason: rewritten, the transition time kept (still False), a new Event.
        let other = layout_condition("huge", Some("unknown layout"), "t2");
        let moved = next_conditions(&next, Some(other)).unwrap();
        assert_eq!(moved[0].last_transition_time.as_deref(), Some("t0"));
        assert!(event_message(&next, &moved).is_some());
        // Fixed: True from now, no Event; label removed: the condition goes.
        let good = next_conditions(&moved, Some(layout_condition("huge", None, "t3"))).unwrap();
        assert_eq!(
            (
                good[0].status.as_str(),
                good[0].last_transition_time.as_deref()
            ),
            ("True", Some("t3"))
        );
        assert_eq!(event_message(&moved, &good), None);
        assert_eq!(next_conditions(&good, None), Some(vec![]));
        assert_eq!(next_conditions(&[], None), None);
    }
}

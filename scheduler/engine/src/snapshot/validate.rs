//! The checks an object must pass, each error naming the object and the field.

use super::*;

/// The checks a PodGroup's spec must pass on its own (`key` names it in the error).
pub(super) fn check_group(g: &GroupSpec, key: &str) -> Result<(), SnapshotError> {
    let invalid = |field, message| Err(err("PodGroup", key, field, message));
    // 0 is Volcano's "no gang minimum": every member may start alone.
    if g.min_member < 0 {
        return invalid(
            "spec.minMember",
            format!("must not be negative, got {}", g.min_member),
        );
    }
    if let Some((role, v)) = g.min_task_member.iter().find(|(_, &v)| v < 0) {
        return invalid(
            "spec.minTaskMember",
            format!("role {role:?}: must not be negative, got {v}"),
        );
    }
    for (i, sg) in g.sub_groups.iter().enumerate() {
        if sg.size < 1 {
            return invalid(
                "spec.subGroups[].size",
                format!("sub-group {:?} (#{i}): must be at least 1", sg.name),
            );
        }
        if g.sub_groups[..i].iter().any(|o| o.name == sg.name) {
            return invalid(
                "spec.subGroups[].name",
                format!("duplicate sub-group name {:?}", sg.name),
            );
        }
    }
    Ok(())
}

/// `spec.nodeName` of a live (pending or running) pod, resolved; a node that does not exist is
/// an error.
pub(super) fn bound_node(p: &PodSpec, facts: &PodFacts) -> Result<Option<NodeId>, SnapshotError> {
    let live = matches!(p.phase, PodPhase::Pending | PodPhase::Running);
    match (&p.node, live) {
        (Some(n), true) => facts.node.map(Some).ok_or_else(|| {
            err(
                "Pod",
                &facts.key,
                "spec.nodeName",
                format!("names node {n}, which does not exist"),
            )
        }),
        _ => Ok(None),
    }
}

/// A pinned pod's queue and node: the queue must exist and be a leaf, and the pod must be
/// bound.
pub(super) fn pinned_at(
    queue_ids: &Map<&str, QueueId>,
    has_children: &[bool],
    facts: &PodFacts,
    queue: &str,
    node: Option<NodeId>,
) -> Result<(QueueId, NodeId), SnapshotError> {
    let invalid = |message| Err(err("Pod", &facts.key, "pinned_queue", message));
    let Some(node) = node else {
        return invalid("a pinned pod must be running on a node".into());
    };
    match queue_ids.get(queue) {
        None => invalid(format!("names queue {queue}, which does not exist")),
        Some(q) if has_children[q.index()] => invalid(format!(
            "queue {queue} has child queues; only leaf queues hold work"
        )),
        Some(&q) => Ok((q, node)),
    }
}

/// A job's queue: it must exist and be a leaf (`has_children` per queue).
pub(super) fn job_queue(
    queue_ids: &Map<&str, QueueId>,
    has_children: &[bool],
    g: &GroupSpec,
    name: &str,
) -> Result<QueueId, SnapshotError> {
    let queue_name = g.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
    let queue = *queue_ids.get(queue_name).ok_or_else(|| {
        err(
            "PodGroup",
            name,
            "spec.queue",
            format!("names queue {queue_name}, which does not exist"),
        )
    })?;
    if has_children[queue.index()] {
        return Err(err(
            "PodGroup",
            name,
            "spec.queue",
            format!("queue {queue_name} has child queues; only leaf queues hold jobs"),
        ));
    }
    Ok(queue)
}

/// Queue ids by name, and per queue whether it has child queues.
pub(super) fn queue_lookup(queues: &[Queue]) -> (Map<&str, QueueId>, Vec<bool>) {
    let ids = queues.iter().map(|q| (q.name.as_str(), q.id)).collect();
    let mut has_children = vec![false; queues.len()];
    for q in queues {
        if let Some(parent) = q.parent {
            has_children[parent.index()] = true;
        }
    }
    (ids, has_children)
}

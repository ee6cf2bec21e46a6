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

/// Whether pod `p` of ours may join its job, a PodGroup of its job's name existing or not
/// (`group_exists`): a pod that names a group needs it, and a pod without one must not share
/// its name with one. A full build words why not; a patch declines. Inlined, its words apart:
/// a full build checks every pod.
#[inline]
pub(super) fn check_member(
    p: &PodSpec,
    facts: &PodFacts,
    group_exists: bool,
) -> Result<(), SnapshotError> {
    match p.group.is_some() == group_exists {
        true => Ok(()),
        false => Err(not_a_member(p, facts)),
    }
}

#[cold]
fn not_a_member(p: &PodSpec, facts: &PodFacts) -> SnapshotError {
    let (field, message) = match &p.group {
        Some(g) => (
            "metadata.labels/annotations (pod group)",
            format!("names PodGroup {}/{g}, which does not exist", p.namespace),
        ),
        None => (
            "metadata.name",
            format!(
                "has no PodGroup but a PodGroup named {} exists; name the group explicitly",
                facts.key
            ),
        ),
    };
    err("Pod", &facts.key, field, message)
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
fn pinned_at(
    queues: &QueueLookup,
    facts: &PodFacts,
    queue: &str,
    node: Option<NodeId>,
) -> Result<(QueueId, NodeId), SnapshotError> {
    let invalid = |message| err("Pod", &facts.key, "pinned_queue", message);
    let node = node.ok_or_else(|| invalid("a pinned pod must be running on a node".into()))?;
    let queue = (queues.leaf(queue)).map_err(|e| invalid(e.describe(queue, "work")))?;
    Ok((queue, node))
}

/// A job's queue (`g`'s, or the default): it must exist and be a leaf.
pub(super) fn job_queue(
    queues: &QueueLookup,
    g: &GroupSpec,
    name: &str,
) -> Result<QueueId, SnapshotError> {
    let queue = g.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
    (queues.leaf(queue)).map_err(|e| err("PodGroup", name, "spec.queue", e.describe(queue, "jobs")))
}

/// Queue ids by name, and per queue whether it has child queues: where jobs and pinned pods
/// are checked to go.
pub(super) struct QueueLookup<'q> {
    ids: Map<&'q str, QueueId>,
    has_children: Vec<bool>,
}

impl<'q> QueueLookup<'q> {
    pub(super) fn new(queues: &'q [Queue]) -> Self {
        let ids = queues.iter().map(|q| (q.name.as_str(), q.id)).collect();
        let mut has_children = vec![false; queues.len()];
        for q in queues {
            if let Some(parent) = q.parent {
                has_children[parent.index()] = true;
            }
        }
        QueueLookup { ids, has_children }
    }

    /// The queue `name`, which must exist and be a leaf.
    fn leaf(&self, name: &str) -> Result<QueueId, NotALeaf> {
        match self.ids.get(name) {
            None => Err(NotALeaf::Missing),
            Some(q) if self.has_children[q.index()] => Err(NotALeaf::HasChildren),
            Some(&q) => Ok(q),
        }
    }
}

/// Why a queue named to hold work cannot: it does not exist, or it is not a leaf.
enum NotALeaf {
    Missing,
    HasChildren,
}

impl NotALeaf {
    /// The reason for queue `name`, which was to hold `what` (only leaves hold it).
    fn describe(&self, name: &str, what: &str) -> String {
        match self {
            NotALeaf::Missing => format!("names queue {name}, which does not exist"),
            NotALeaf::HasChildren => {
                format!("queue {name} has child queues; only leaf queues hold {what}")
            }
        }
    }
}

impl PinnedUse {
    /// What pinned pod `facts` (bound to `node`, holding `gpus` there) holds for `queue`, a
    /// leaf it names: what a full build and a patch both record.
    pub(super) fn of(
        queues: &QueueLookup,
        queue: &str,
        facts: &PodFacts,
        node: Option<NodeId>,
        gpus: u64,
    ) -> Result<Self, SnapshotError> {
        let (queue, node) = pinned_at(queues, facts, queue, node)?;
        Ok(PinnedUse {
            node,
            queue,
            request: facts.request.clone(),
            gpus,
            share: facts.share,
            held_differs: facts.held_differs,
        })
    }
}

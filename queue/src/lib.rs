//! Basalt's queue tree: hierarchy walks and the capability ceiling that a queue and every one of
//! its ancestors impose on the work below them. Fair-share math (weighted water-filling,
//! guarantees, borrowing and reclaim) builds on this module.
//!
//! Depends only on `basalt-engine`; knows nothing of Kubernetes.

use basalt_engine::{QueueId, ResourceId, Resources, Session, Snapshot};

/// The queue itself, then its parent, up to the top of the tree (the implicit root is not a
/// queue). The snapshot has already rejected cycles.
pub fn ancestors(snapshot: &Snapshot, queue: QueueId) -> impl Iterator<Item = QueueId> + '_ {
    std::iter::successors(Some(queue), move |q| snapshot.queue(*q).parent)
}

/// Whether `queue` lies in the subtree rooted at `top` (a queue is in its own subtree).
pub fn in_subtree(snapshot: &Snapshot, queue: QueueId, top: QueueId) -> bool {
    ancestors(snapshot, queue).any(|q| q == top)
}

/// What the subtree rooted at `top` holds now.
pub fn subtree_allocated(session: &Session, top: QueueId) -> Resources {
    let snap = session.snapshot;
    let mut total = Resources::zero(snap.resources.len());
    for q in &snap.queues {
        if in_subtree(snap, q.id, top) {
            total.add(session.queue_allocated(q.id));
        }
    }
    total
}

/// A capability that `extra` more work in a queue would break.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapabilityExceeded {
    /// The queue whose capability is hit (the queue itself or an ancestor).
    pub queue: QueueId,
    pub resource: ResourceId,
    pub capability: i64,
    /// What the subtree would hold with `extra` added.
    pub would_hold: i64,
}

impl CapabilityExceeded {
    pub fn describe(&self, snapshot: &Snapshot) -> String {
        let names = &snapshot.resources;
        format!(
            "queue {} would hold {} {} over its capability of {}",
            snapshot.queue(self.queue).name,
            names.format(self.resource, self.would_hold),
            names.name(self.resource),
            names.format(self.resource, self.capability)
        )
    }
}

/// Checks `extra` against the capability of `queue` and of each ancestor. Only the resources a
/// capability names are capped.
pub fn check_capability(
    session: &Session,
    queue: QueueId,
    extra: &Resources,
) -> Result<(), CapabilityExceeded> {
    let snap = session.snapshot;
    for q in ancestors(snap, queue) {
        let Some(cap) = &snap.queue(q).capability else {
            continue;
        };
        let mut held = subtree_allocated(session, q);
        held.add(extra);
        for (resource, capability) in cap.iter() {
            if extra.get(resource) > 0 && held.get(resource) > capability {
                return Err(CapabilityExceeded {
                    queue: q,
                    resource,
                    capability,
                    would_hold: held.get(resource),
                });
            }
        }
    }
    Ok(())
}

//! Basalt's queue tree: fair shares (weighted water-filling down the tree, see [`fairshare`]),
//! and the capability ceiling that a queue and every one of its ancestors impose on the work
//! below them.
//!
//! Depends only on `basalt-engine`; knows nothing of Kubernetes.

pub mod fairshare;

use basalt_engine::{
    ancestors, FairShare, QueueId, Refusal, ResourceId, Resources, Session, Snapshot, PODS,
};

/// A capability that `extra` more work in a queue would break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        Refusal::from(*self).describe(snapshot)
    }
}

/// A task's refusal: worded the same, but only when a message is written.
impl From<CapabilityExceeded> for Refusal {
    fn from(e: CapabilityExceeded) -> Refusal {
        Refusal::OverCapability {
            queue: e.queue,
            resource: e.resource,
            capability: e.capability,
            would_hold: e.would_hold,
        }
    }
}

/// Checks `extra` on top of what each queue on the path to the root holds (plus `reserved`,
/// when admission reservations count) against its capability. Only the resources a capability
/// names are capped, and only those `extra` asks for.
pub fn check_capability(
    session: &Session,
    queue: QueueId,
    extra: &Resources,
    with_reservations: bool,
) -> Result<(), CapabilityExceeded> {
    let snap = session.snapshot;
    for q in ancestors(snap, queue) {
        let cap = &snap.queue(q).capability;
        if cap.is_empty() {
            continue;
        }
        let mut held = session.queue_allocated(q).clone();
        if with_reservations {
            held.add(session.queue_reserved(q));
        }
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

/// A guarantee is reserved: the work of other queues may not eat into what a guaranteed queue
/// has not used yet. Checks that `extra` more work in `queue` leaves every unmet guarantee of
/// the queues outside its path to the root still coverable ([`Refusal::Guaranteed`] when not).
/// Nested guarantees count once: a guaranteed queue inside another guaranteed queue off the
/// path is covered by its ancestor's.
pub fn check_guarantees(
    session: &Session,
    queue: QueueId,
    extra: &Resources,
) -> Result<(), Refusal> {
    let snap = session.snapshot;
    if !session.any_guarantee() {
        return Ok(());
    }
    let path: Vec<QueueId> = ancestors(snap, queue).collect();
    let mut free = session.queue_capacity();
    for q in snap.queues.iter().filter(|q| q.parent.is_none()) {
        free.sub(session.queue_allocated(q.id));
    }
    for (r, want) in extra.iter() {
        let unmet: i64 = snap
            .queues
            .iter()
            .filter(|q| !path.contains(&q.id))
            .filter_map(|q| q.guarantee.get(r).map(|g| (q, g)))
            .filter(|(q, _)| {
                // Topmost guaranteed queue off the path.
                !ancestors(snap, q.id)
                    .skip(1)
                    .any(|a| !path.contains(&a) && snap.queue(a).guarantee.get(r).is_some())
            })
            .map(|(q, g)| {
                g.saturating_sub(session.queue_allocated(q.id).get(r))
                    .max(0)
            })
            .fold(0, i64::saturating_add);
        // Only the guarantee is judged here; plain lack of room is the node search's to report.
        if unmet > 0 && (free.get(r) as i128 - unmet as i128) < want as i128 {
            return Err(Refusal::Guaranteed { resource: r, unmet });
        }
    }
    Ok(())
}

/// The fair-share policy: deserved shares by weighted water-filling over what the queues share
/// (the cluster less what other schedulers' pods use), with each leaf's demand.
pub struct WaterFilling;

impl FairShare for WaterFilling {
    fn deserved(&self, session: &Session) -> Vec<Resources> {
        let snap = session.snapshot;
        let has_children: Vec<bool> = {
            let mut v = vec![false; snap.queues.len()];
            for q in &snap.queues {
                if let Some(p) = q.parent {
                    v[p.index()] = true;
                }
            }
            v
        };
        let leaf_demand: Vec<Resources> = snap
            .queues
            .iter()
            .map(|q| {
                if has_children[q.id.index()] {
                    Resources::zero(snap.resources.len())
                } else {
                    session.queue_demand(q.id)
                }
            })
            .collect();
        let capacity = session.queue_capacity();
        let mut deserved = fairshare::deserved(snap, &capacity, &leaf_demand);
        // Pod slots are a per-node limit, not a quota: every queue may use them all.
        for d in &mut deserved {
            d.set(PODS, capacity.get(PODS));
        }
        deserved
    }
}

//! Basalt's queue tree: fair shares (weighted water-filling down the tree, see [`fairshare`]),
//! and the capability ceiling that a queue and every one of its ancestors impose on the work
//! below them.
//!
//! Depends only on `basalt-engine`; knows nothing of Kubernetes.

pub mod fairshare;

use basalt_engine::{ancestors, FairShare, QueueId, ResourceId, Resources, Session, Snapshot};

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
        fairshare::deserved(snap, &session.queue_capacity(), &leaf_demand)
    }
}

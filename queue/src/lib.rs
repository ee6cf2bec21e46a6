//! Basalt's queue tree: fair shares (weighted water-filling down the tree, see [`fairshare`]),
//! and the capability ceiling that a queue and every one of its ancestors impose on the work
//! below them.
//!
//! Depends only on `basalt-engine`; knows nothing of Kubernetes.

pub mod fairshare;
pub mod usage;

pub use usage::UsageWeighting;

use basalt_engine::{
    ancestors, FairShare, GivenBack, QueueId, Refusal, ResourceId, Resources, SessionView,
    Snapshot, PODS,
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
/// when admission reservations count) against its capability, less what evicted pods give back
/// to that queue (`given_back`: victims of the same queue, or of a sibling under a common
/// ancestor, credit every queue they share with it). Only the resources a capability names are
/// capped, and only those in which the queue grows: a move that gives a queue back at least as
/// much as it adds never breaks its capability.
pub fn check_capability(
    session: &SessionView,
    queue: QueueId,
    extra: &Resources,
    with_reservations: bool,
    given_back: GivenBack,
) -> Result<(), CapabilityExceeded> {
    let snap = session.snapshot;
    for q in ancestors(snap, queue) {
        let cap = &snap.queue(q).capability;
        if cap.is_empty() {
            continue;
        }
        let mut grows = extra.clone();
        if let Some(back) = given_back.to(q) {
            grows.sub(back);
        }
        let mut held = session.queue_allocated(q).clone();
        if with_reservations {
            held.add(session.queue_reserved(q));
        }
        held.add(&grows);
        for (resource, capability) in cap.iter() {
            if grows.get(resource) > 0 && held.get(resource) > capability {
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
/// the queues outside its path to the root still coverable by the free room
/// ([`Refusal::Guaranteed`] when not). Nested guarantees count once: a guaranteed queue inside
/// another guaranteed queue off the path is covered by its ancestor's. Evicted pods
/// (`given_back`) are judged gone: what they held is free, and their own queues' guarantees
/// that much less met, exactly as the same check sees the cluster once they are evicted.
pub fn check_guarantees(
    session: &SessionView,
    queue: QueueId,
    extra: &Resources,
    given_back: GivenBack,
) -> Result<(), Refusal> {
    let snap = session.snapshot;
    if !session.any_guarantee() {
        return Ok(());
    }
    let path: Vec<QueueId> = ancestors(snap, queue).collect();
    let back = |q: QueueId, r: ResourceId| given_back.to(q).map_or(0, |b| b.get(r));
    // What each queue holds once the victims are gone.
    let held =
        |q: QueueId, r: ResourceId| session.queue_allocated(q).get(r).saturating_sub(back(q, r));
    let capacity = session.queue_capacity();
    let top = || snap.queues.iter().filter(|q| q.parent.is_none());
    for (r, want) in extra.iter().filter(|&(_, want)| want > 0) {
        let free = (top().map(|q| held(q.id, r))).fold(capacity.get(r), i64::saturating_sub);
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
            .map(|(q, g)| g.saturating_sub(held(q.id, r)).max(0))
            .fold(0, i64::saturating_add);
        // Only the guarantee is judged here; plain lack of room is the node search's to report.
        if unmet > 0 && (free as i128 - unmet as i128) < want as i128 {
            return Err(Refusal::Guaranteed { resource: r, unmet });
        }
    }
    Ok(())
}

/// The fair-share policy: deserved shares by weighted water-filling over what the queues share
/// (the cluster less what other schedulers' pods use), with each leaf's demand; with `usage`,
/// the weights are adjusted by what the queues used ([`usage`]).
#[derive(Clone, Debug, Default)]
pub struct WaterFilling {
    pub usage: Option<UsageWeighting>,
}

impl FairShare for WaterFilling {
    fn name(&self) -> &str {
        "water-filling"
    }
    fn weights(&self, session: &SessionView) -> Option<basalt_engine::UsageWeights> {
        (self.usage.as_ref()).map(|u| u.weights(session))
    }

    fn deserved(&self, session: &SessionView) -> Vec<Resources> {
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
        let weights: Vec<i64> = snap.queues.iter().map(|q| session.weight(q.id)).collect();
        let scale = match self.usage {
            Some(_) => usage::WEIGHT_SCALE as i64,
            None => 1,
        };
        let mut deserved = fairshare::deserved(snap, &capacity, &leaf_demand, &weights, scale);
        // Pod slots are a per-node limit, not a quota: every queue may use them all.
        for d in &mut deserved {
            d.set(PODS, capacity.get(PODS));
        }
        deserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_engine::{
        Action, ClusterSpec, Framework, GroupSpec, JobPhase, LeastAllocated, NodeSpec, PodPhase,
        PodSpec, QueueSpec, ResourceList, Session,
    };

    fn cpu(n: i64) -> ResourceList {
        ResourceList::from([("cpu".to_string(), n * 1000)])
    }

    /// Queue org (capability 4 cpu) over a and b; top-level other; b runs 2 × 2 cpu, other
    /// 1 × 2 cpu, on one 16-cpu node. `guarantee`: other's guarantee, when given.
    fn cluster(guarantee: Option<i64>) -> Snapshot {
        let queue = |name: &str, parent: Option<&str>| QueueSpec {
            parent: parent.map(str::to_string),
            ..QueueSpec::new(name)
        };
        let mut other = queue("other", None);
        other.guarantee = guarantee.map(cpu);
        let mut org = queue("org", None);
        org.capability = Some(cpu(4));
        let group = |name: &str, queue: &str| GroupSpec {
            namespace: "ns".into(),
            name: name.into(),
            queue: Some(queue.into()),
            min_member: 1,
            min_task_member: Default::default(),
            min_resources: None,
            priority: None,
            created_ms: 0,
            phase: JobPhase::Running,
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        };
        let pod = |name: &str, group: &str, node: Option<&str>| PodSpec {
            namespace: "ns".into(),
            name: name.into(),
            ours: true,
            group: Some(group.into()),
            request: cpu(2),
            phase: if node.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            node: node.map(str::to_string),
            ..Default::default()
        };
        let spec = ClusterSpec {
            nodes: vec![NodeSpec {
                name: "n".into(),
                allocatable: cpu(16),
                ..Default::default()
            }],
            queues: vec![org, queue("a", Some("org")), queue("b", Some("org")), other],
            groups: vec![
                group("wants", "a"),
                group("runs", "b"),
                group("side", "other"),
            ],
            pods: vec![
                pod("wants-0", "wants", None),
                pod("runs-0", "runs", Some("n")),
                pod("runs-1", "runs", Some("n")),
                pod("side-0", "side", Some("n")),
            ],
            ..Default::default()
        };
        Snapshot::build(spec).unwrap()
    }

    fn queue(snap: &Snapshot, name: &str) -> QueueId {
        snap.queues.iter().find(|q| q.name == name).unwrap().id
    }

    /// What 2 cpu evicted from `leaf` give back to it and every ancestor.
    fn back(snap: &Snapshot, leaf: &str) -> Vec<(QueueId, Resources)> {
        let two = snap.resources.resources(&cpu(2));
        ancestors(snap, queue(snap, leaf))
            .map(|q| (q, two.clone()))
            .collect()
    }

    #[test]
    fn a_sibling_victim_credits_the_parent_they_share() {
        let snap = cluster(None);
        let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
        let session = Session::new(&snap, &fw);
        let session = session.view();
        let (a, org) = (queue(&snap, "a"), queue(&snap, "org"));
        let two = snap.resources.resources(&cpu(2));
        let refused = check_capability(&session, a, &two, false, GivenBack::NONE).unwrap_err();
        assert_eq!((refused.queue, refused.would_hold), (org, 6000));
        // A pod of sibling b gives org back what a adds.
        let sibling = back(&snap, "b");
        assert!(check_capability(&session, a, &two, false, GivenBack(&sibling)).is_ok());
        // A pod of another top-level queue frees room, but nothing inside org.
        let outside = back(&snap, "other");
        let refused = check_capability(&session, a, &two, false, GivenBack(&outside));
        assert_eq!(refused.unwrap_err().would_hold, 6000);
        // Victims giving back less than the member adds still leave org over.
        let one = snap.resources.resources(&cpu(1));
        let less: Vec<(QueueId, Resources)> =
            sibling.iter().map(|(q, _)| (*q, one.clone())).collect();
        let refused = check_capability(&session, a, &two, false, GivenBack(&less));
        assert_eq!(refused.unwrap_err().would_hold, 5000);
    }

    #[test]
    fn victims_free_cluster_room_for_a_guarantee() {
        // other is guaranteed 12 cpu and holds 2: 10 unmet, 16 - 6 = 10 free, none to lend.
        let snap = cluster(Some(12));
        let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
        let session = Session::new(&snap, &fw);
        let session = session.view();
        let a = queue(&snap, "a");
        let two = snap.resources.resources(&cpu(2));
        let refused = check_guarantees(&session, a, &two, GivenBack::NONE);
        assert!(matches!(
            refused,
            Err(Refusal::Guaranteed { unmet: 10000, .. })
        ));
        // A pod of b frees 2 cpu: 12 free, 10 unmet, 2 to lend.
        let sibling = back(&snap, "b");
        assert!(check_guarantees(&session, a, &two, GivenBack(&sibling)).is_ok());
        // A pod of the guaranteed queue itself frees 2 cpu and leaves its guarantee 2 cpu
        // less met: 12 free, 12 unmet.
        let guaranteed = back(&snap, "other");
        let refused = check_guarantees(&session, a, &two, GivenBack(&guaranteed));
        assert!(matches!(
            refused,
            Err(Refusal::Guaranteed { unmet: 12000, .. })
        ));
    }
}

//! Why a gang, or one of its members, was not placed: typed data that the placement passes up
//! and the session keeps ([`super::JobCondition`]), worded only when the plan is written.

use crate::conditions::{unschedulable, INVALID_TOPOLOGY, NOT_ENOUGH_RESOURCES};
use crate::model::{JobId, NodeId};
use crate::plan::Condition;
use crate::refusal::{NoNode, Refusal};
use crate::snapshot::Snapshot;

/// Why one member (or one sub-group) found no place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberFailure {
    /// A [`crate::TaskAdmit`] refused the member (e.g. its queue's capability).
    Queue(Refusal),
    /// Its queue is at its deserved share (`allocate`'s first pass serves queues up to it).
    AtDeservedShare,
    /// No node takes it: the nodes' refusals, as [`crate::Session::why_no_node`] counted them.
    NoNode(NoNode),
    /// No NVLink island of `node` has `want` free GPUs for a sub-group pinned to it.
    NoIsland { node: NodeId, want: u32 },
    /// A sub-group (by index in the job's `sub_groups`) of `pods` pods and `gpus` GPUs fits in
    /// no domain of its required tier (named `tier`); `why`: the last domain's reason.
    SubGroup {
        sub: usize,
        pods: usize,
        gpus: i64,
        tier: String,
        why: Option<Box<MemberFailure>>,
    },
}

/// Why a gang was not placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangFailure {
    /// Its topology names a required tier the topology does not know, or two ladders.
    InvalidTopology(TierError),
    /// Its minimum could not be placed: `placed` of `min` members, and why.
    Short {
        placed: u32,
        min: u32,
        why: ShortWhy,
    },
    /// The gang runs; its extra members wait, for this reason.
    Extras(MemberFailure),
}

/// Why a gang's minimum could not be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShortWhy {
    /// A member's reason (the first, or the last try's).
    Member(MemberFailure),
    /// Every member tried found a place, yet a role's `minTaskMember` is not met.
    RoleMinimums,
    /// No member said why.
    MembersDoNotFit,
    /// No domain of the required tier (named `tier`) has the gang's `gpus` free: the roomiest
    /// (its name and free GPUs), if any.
    NoRoomyDomain {
        tier: String,
        gpus: i64,
        roomiest: Option<(String, i64)>,
    },
    /// The domains of the required tier tried (by name), none holding the gang; the last
    /// one's reason.
    NoDomainHolds {
        tier: String,
        tried: Vec<String>,
        last: Option<MemberFailure>,
    },
}

/// A topology constraint that cannot apply: a tier the topology does not know (at `field`,
/// its `required` or `preferred` entry; `tiers`: the ones it knows), or tiers of two ladders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierError {
    Unknown {
        field: String,
        which: &'static str,
        name: String,
        tiers: Vec<String>,
    },
    TwoLadders {
        field: String,
    },
}

impl MemberFailure {
    /// The reason in words, for a member of `job` in `snapshot`.
    pub fn describe(&self, snapshot: &Snapshot, job: JobId) -> String {
        match self {
            MemberFailure::Queue(refusal) => refusal.describe(snapshot),
            MemberFailure::AtDeservedShare => "its queue is at its deserved share".into(),
            MemberFailure::NoNode(why) => why.describe(snapshot),
            MemberFailure::NoIsland { node, want } => format!(
                "no NVLink island of node {} has {want} free GPUs",
                snapshot.node(*node).name
            ),
            MemberFailure::SubGroup {
                sub,
                pods,
                gpus,
                tier,
                why,
            } => format!(
                "sub-group {} ({pods} pods, {gpus} GPUs) fits in no {tier} domain{}",
                snapshot.job(job).sub_groups[*sub].name,
                (why.as_ref())
                    .map(|f| format!(" ({})", f.describe(snapshot, job)))
                    .unwrap_or_default()
            ),
        }
    }
}

impl ShortWhy {
    fn describe(&self, snapshot: &Snapshot, job: JobId) -> String {
        match self {
            ShortWhy::Member(m) => m.describe(snapshot, job),
            ShortWhy::RoleMinimums => "per-role minimums (minTaskMember) are not met".into(),
            ShortWhy::MembersDoNotFit => "members do not fit on the nodes".into(),
            ShortWhy::NoRoomyDomain {
                tier,
                gpus,
                roomiest,
            } => {
                let (name, free) = roomiest.clone().unwrap_or(("none".into(), 0));
                format!(
                    "no {tier} domain can hold the gang's {gpus} GPUs (required tier {tier}); \
                     the roomiest, {name}, has {free} free (short by {})",
                    gpus - free
                )
            }
            ShortWhy::NoDomainHolds { tier, tried, last } => format!(
                "no {tier} domain can hold the gang (required tier {tier}); tried {}: {}",
                tried.join(", "),
                (last.as_ref()).map_or_else(
                    || "members do not fit on its nodes".into(),
                    |m| m.describe(snapshot, job)
                )
            ),
        }
    }
}

impl GangFailure {
    /// The PodGroup condition it is worded as, for `job` in `snapshot`.
    pub fn condition(&self, snapshot: &Snapshot, job: JobId) -> Condition {
        match self {
            GangFailure::InvalidTopology(e) => unschedulable(INVALID_TOPOLOGY, e.describe()),
            GangFailure::Short { placed, min, why } => unschedulable(
                NOT_ENOUGH_RESOURCES,
                format!(
                    "{placed}/{min} members of the gang could be placed: {}",
                    why.describe(snapshot, job)
                ),
            ),
            GangFailure::Extras(m) => {
                unschedulable(NOT_ENOUGH_RESOURCES, m.describe(snapshot, job))
            }
        }
    }
}

impl TierError {
    pub fn describe(&self) -> String {
        match self {
            TierError::Unknown {
                field,
                which,
                name,
                tiers,
            } => format!(
                "{field}.{which}: unknown tier {name:?} (tiers: {})",
                tiers.join(", ")
            ),
            TierError::TwoLadders { field } => format!("{field}: tiers of two different ladders"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{ClusterSpec, GroupSpec, NodeSpec, PodSpec, SubGroupSpec};

    /// Gang `ml/g` of two pods forming one sub-group (`tp-0`, of spec `tp`), and node `n1`.
    fn snapshot() -> Snapshot {
        let mut group = GroupSpec::new("ml", "g", 2);
        group.sub_groups = vec![SubGroupSpec {
            name: "tp".into(),
            size: 2,
            ..Default::default()
        }];
        let pod = |i: usize| PodSpec {
            namespace: "ml".into(),
            name: format!("g-{i}"),
            ours: true,
            group: Some("g".into()),
            ..Default::default()
        };
        Snapshot::build(ClusterSpec {
            nodes: vec![NodeSpec {
                name: "n1".into(),
                ..Default::default()
            }],
            groups: vec![group],
            pods: vec![pod(0), pod(1)],
            ..Default::default()
        })
        .unwrap()
    }

    /// Failures are typed data up to the plan; these are their words there, the same the
    /// actions wrote before they were typed.
    #[test]
    fn a_gang_failure_is_worded_from_its_data() {
        let snap = snapshot();
        let job = JobId(0);
        let island = MemberFailure::NoIsland {
            node: NodeId(0),
            want: 4,
        };
        let sub_group = MemberFailure::SubGroup {
            sub: 0,
            pods: 2,
            gpus: 8,
            tier: "rack".into(),
            why: Some(Box::new(island)),
        };
        let short = GangFailure::Short {
            placed: 1,
            min: 2,
            why: ShortWhy::Member(sub_group),
        };
        let c = short.condition(&snap, job);
        assert_eq!(
            (c.kind.as_str(), c.reason.as_str()),
            ("Unschedulable", "NotEnoughResources")
        );
        assert_eq!(
            c.message,
            "1/2 members of the gang could be placed: sub-group tp-0 (2 pods, 8 GPUs) fits in no \
             rack domain (no NVLink island of node n1 has 4 free GPUs)"
        );
        let roomless = GangFailure::Short {
            placed: 0,
            min: 2,
            why: ShortWhy::NoRoomyDomain {
                tier: "rack".into(),
                gpus: 16,
                roomiest: None,
            },
        };
        assert_eq!(
            roomless.condition(&snap, job).message,
            "0/2 members of the gang could be placed: no rack domain can hold the gang's 16 GPUs \
             (required tier rack); the roomiest, none, has 0 free (short by 16)"
        );
        let extras = GangFailure::Extras(MemberFailure::AtDeservedShare);
        assert_eq!(
            extras.condition(&snap, job).message,
            "its queue is at its deserved share"
        );
        // No node: the nodes counted per refusal, worded as kube-scheduler words them.
        let counts = [(Refusal::NodeSelector, 1)].into_iter().collect();
        let no_node = MemberFailure::NoNode(NoNode::Counted(std::sync::Arc::new(counts)));
        assert_eq!(
            GangFailure::Extras(no_node).condition(&snap, job).message,
            "0/1 nodes are available: 1 didn't match node selector."
        );
        let uncounted = GangFailure::Extras(MemberFailure::NoNode(NoNode::Uncounted));
        assert_eq!(uncounted.condition(&snap, job).message, "no node fits");
        let invalid = GangFailure::InvalidTopology(TierError::Unknown {
            field: "spec.topology".into(),
            which: "required",
            name: "row".into(),
            tiers: vec!["rack".into(), "node".into()],
        });
        let c = invalid.condition(&snap, job);
        assert_eq!(c.reason, "InvalidTopology");
        assert_eq!(
            c.message,
            "spec.topology.required: unknown tier \"row\" (tiers: rack, node)"
        );
    }
}

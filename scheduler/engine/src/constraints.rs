//! What a pod states about other pods, and its soft preferences: inter-pod affinity and
//! anti-affinity, topology spread constraints, host ports, in-tree disks and preferred node
//! affinity, as kube-scheduler reads them (its InterPodAffinity, PodTopologySpread, NodePorts,
//! VolumeRestrictions and NodeAffinity plugins). Unlike [`crate::PlacementRules`], most of
//! these depend on what is already placed, so they are checked against counts the session
//! keeps as it places and evicts, not cached per node.
//!
//! These are the reader-facing forms: selectors are final (a reader merges `matchLabelKeys` /
//! `mismatchLabelKeys` into them from the pod's own labels, as the API server does), while
//! namespaces are resolved by the snapshot (a `namespaceSelector` needs the namespaces' labels,
//! [`crate::ClusterSpec::namespaces`]).

use std::collections::BTreeMap;

use crate::model::{NodeSelectorTerm, SelectorOperator, SelectorRequirement};

/// A label selector (`metav1.LabelSelector`), `matchLabels` folded into `In` requirements. Only
/// `In`, `NotIn`, `Exists` and `DoesNotExist` occur (a reader refuses the rest). The empty
/// selector matches every pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelector {
    pub requirements: Vec<SelectorRequirement>,
}

impl LabelSelector {
    /// `key: value` pairs, as `matchLabels` states them.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        LabelSelector {
            requirements: (labels.into_iter())
                .map(|(k, v)| SelectorRequirement {
                    key: k.to_string(),
                    operator: SelectorOperator::In,
                    values: vec![v.to_string()],
                })
                .collect(),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        (self.requirements.iter()).all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }
}

/// A `podAffinityTerm`: pods matching `selector` in the chosen namespaces, counted per value of
/// `topology_key` on their nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodAffinityTerm {
    /// `None` (no `labelSelector`) matches no pod, as in Kubernetes.
    pub selector: Option<LabelSelector>,
    /// `namespaces`; with `namespace_selector` the term looks at the union of both, and with
    /// neither at the pod's own namespace.
    pub namespaces: Vec<String>,
    /// `namespaceSelector`: `Some` of the empty selector means every namespace.
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

/// A `preferredDuringSchedulingIgnoredDuringExecution` entry (`weight` 1..=100).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

/// `podAffinity` or `podAntiAffinity`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodAffinityRules {
    pub required: Vec<PodAffinityTerm>,
    pub preferred: Vec<WeightedPodAffinityTerm>,
}

impl PodAffinityRules {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WhenUnsatisfiable {
    /// A filter: no node where the skew would exceed `maxSkew`.
    #[default]
    DoNotSchedule,
    /// A preference: nodes that keep the skew small score better.
    ScheduleAnyway,
}

/// `nodeAffinityPolicy` / `nodeTaintsPolicy`: whether nodes the pod could not use count as
/// domains of a spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InclusionPolicy {
    Honor,
    Ignore,
}

/// One `topologySpreadConstraints` entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopologySpreadConstraint {
    /// At least 1.
    pub max_skew: u32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` (no `labelSelector`) matches no pod; `matchLabelKeys` already merged in.
    pub selector: Option<LabelSelector>,
    /// With fewer eligible domains than this, the global minimum counts as 0.
    pub min_domains: Option<u32>,
    /// Kubernetes' default: `Honor`.
    pub node_affinity_policy: InclusionPolicy,
    /// Kubernetes' default: `Ignore`.
    pub node_taints_policy: InclusionPolicy,
}

/// A container port with a `hostPort`: two pods conflict on a node when port and protocol are
/// equal and either host IP is the wildcard or both are equal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    /// `0.0.0.0` when the pod states none.
    pub host_ip: String,
    /// `TCP` when the pod states none.
    pub protocol: String,
    pub port: u16,
}

impl HostPort {
    pub const WILDCARD: &'static str = "0.0.0.0";

    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.host_ip == other.host_ip
                || self.host_ip == Self::WILDCARD
                || other.host_ip == Self::WILDCARD)
    }
}

/// An in-tree disk volume, as kube-scheduler's VolumeRestrictions compares them: two pods on
/// one node conflict when they mount the same disk and the rule of its kind forbids sharing it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Disk {
    /// `gcePersistentDisk`: shared only when both mount it read-only.
    GcePd { pd_name: String, read_only: bool },
    /// `awsElasticBlockStore`: never shared, read-only or not.
    AwsEbs { volume_id: String },
    /// `rbd`: the same image when a monitor is shared and pool and image are equal; shared only
    /// when both mount it read-only.
    Rbd {
        monitors: Vec<String>,
        /// `rbd` when the pod states none, as the API server defaults it.
        pool: String,
        image: String,
        read_only: bool,
    },
    /// `iscsi`: the same disk by IQN alone (kube ignores portal and lun); shared only when both
    /// mount it read-only.
    Iscsi { iqn: String, read_only: bool },
}

impl Disk {
    /// Whether two pods mounting these may not share a node: the same disk, unless both mount
    /// it read-only (an EBS volume counts as never read-only).
    pub fn conflicts(&self, other: &Disk) -> bool {
        use Disk::*;
        let same = match (self, other) {
            (GcePd { pd_name: a, .. }, GcePd { pd_name: b, .. }) => a == b,
            (AwsEbs { volume_id: a }, AwsEbs { volume_id: b }) => a == b,
            (Iscsi { iqn: a, .. }, Iscsi { iqn: b, .. }) => a == b,
            (
                Rbd {
                    monitors: ma,
                    pool: pa,
                    image: ia,
                    ..
                },
                Rbd {
                    monitors: mb,
                    pool: pb,
                    image: ib,
                    ..
                },
            ) => pa == pb && ia == ib && ma.iter().any(|m| mb.contains(m)),
            _ => false,
        };
        same && !(self.read_only() && other.read_only())
    }

    fn read_only(&self) -> bool {
        match self {
            Disk::GcePd { read_only, .. }
            | Disk::Rbd { read_only, .. }
            | Disk::Iscsi { read_only, .. } => *read_only,
            Disk::AwsEbs { .. } => false,
        }
    }
}

/// A `preferredDuringSchedulingIgnoredDuringExecution` node affinity entry (`weight` 1..=100).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PreferredNodeTerm {
    pub weight: i32,
    pub term: NodeSelectorTerm,
}

/// Everything a pod states beyond its static [`crate::PlacementRules`]. A bound pod's
/// constraints matter too: its required anti-affinity repels incoming pods, its preferred terms
/// and required affinity score them, its host ports are taken, its disks are mounted.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodConstraints {
    pub affinity: PodAffinityRules,
    pub anti_affinity: PodAffinityRules,
    pub spread: Vec<TopologySpreadConstraint>,
    pub host_ports: Vec<HostPort>,
    /// In-tree disk volumes (see [`Disk`]).
    pub disks: Vec<Disk>,
    pub preferred_node_affinity: Vec<PreferredNodeTerm>,
}

impl PodConstraints {
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.spread.is_empty()
            && self.host_ports.is_empty()
            && self.disks.is_empty()
            && self.preferred_node_affinity.is_empty()
    }
}

/// A namespace and its labels, for `namespaceSelector`. A namespace that pods name but no
/// [`NamespaceSpec`] describes has only the label Kubernetes gives every namespace,
/// `kubernetes.io/metadata.name`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// The label the API server sets on every namespace to its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_conflict_on_wildcard_or_equal_ip() {
        let p = |ip: &str, proto: &str, port| HostPort {
            host_ip: ip.into(),
            protocol: proto.into(),
            port,
        };
        assert!(p("0.0.0.0", "TCP", 80).conflicts(&p("10.0.0.1", "TCP", 80)));
        assert!(p("10.0.0.1", "TCP", 80).conflicts(&p("10.0.0.1", "TCP", 80)));
        assert!(!p("10.0.0.1", "TCP", 80).conflicts(&p("10.0.0.2", "TCP", 80)));
        assert!(!p("0.0.0.0", "TCP", 80).conflicts(&p("0.0.0.0", "UDP", 80)));
        assert!(!p("0.0.0.0", "TCP", 80).conflicts(&p("0.0.0.0", "TCP", 81)));
    }

    #[test]
    fn selectors_match_as_kubernetes() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "x".to_string())].into();
        assert!(LabelSelector::default().matches(&labels));
        assert!(LabelSelector::from_labels([("app", "x")]).matches(&labels));
        assert!(!LabelSelector::from_labels([("app", "y")]).matches(&labels));
    }
}

//! Volcano's objects as Basalt reads them: `Queue` and `PodGroup` (`scheduling.volcano.sh/v1beta1`,
//! turned into Basalt's by `into_basalt`, which names the field it refuses) and `HyperNode`
//! (`topology.volcano.sh/v1alpha1`, read as is; `basalt-crds` turns it into node labels).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

pub const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Queue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: QueueSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QueueStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    #[serde(default = "one_i32")]
    pub weight: i32,
    #[serde(default)]
    pub capability: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub guarantee: Guarantee,
    #[serde(default)]
    pub deserved: BTreeMap<String, Quantity>,
    #[serde(default = "yes")]
    pub reclaimable: bool,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub priority: i32,
    /// Not in Volcano's v1beta1 API, honoured when present (see docs/crds.md, Choices).
    #[serde(default)]
    pub state: Option<QueueState>,
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            weight: 1,
            capability: BTreeMap::new(),
            guarantee: Guarantee::default(),
            deserved: BTreeMap::new(),
            reclaimable: true,
            parent: None,
            priority: 0,
            state: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Guarantee {
    #[serde(default)]
    pub resource: BTreeMap<String, Quantity>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct QueueStatus {
    #[serde(default)]
    pub state: QueueState,
}

/// Volcano's queue states, which add `Unknown`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueState {
    #[default]
    Open,
    Closing,
    Closed,
    Unknown,
}

impl From<QueueState> for super::QueueState {
    /// `Unknown` is read as `Open`: Volcano reports it while its controller has not yet
    /// synced the queue, which is not a request to stop admission.
    fn from(s: QueueState) -> Self {
        match s {
            QueueState::Open | QueueState::Unknown => super::QueueState::Open,
            QueueState::Closing => super::QueueState::Closing,
            QueueState::Closed => super::QueueState::Closed,
        }
    }
}

impl Queue {
    /// The Basalt form of this queue. Fails (with the field path) only on a negative weight.
    pub fn into_basalt(self) -> Result<super::Queue, (&'static str, String)> {
        let s = self.spec;
        let weight = u32::try_from(s.weight).map_err(|_| {
            (
                "spec.weight",
                format!("must not be negative, got {}", s.weight),
            )
        })?;
        Ok(super::Queue {
            metadata: self.metadata,
            spec: super::QueueSpec {
                weight,
                capability: s.capability,
                guarantee: s.guarantee.resource,
                deserved: s.deserved,
                reclaimable: s.reclaimable,
                parent: s.parent,
                priority: s.priority,
                state: s.state.map(Into::into),
            },
            status: self.status.map(|st| super::QueueStatus {
                state: st.state.into(),
                ..Default::default()
            }),
        })
    }
}

// -----------------------------------------------------------------------------------------
// PodGroup
// -----------------------------------------------------------------------------------------

pub use super::Issue;

/// The tier name Basalt gives Volcano's tier `n` (`volcano-tier-2`); the scheduler's
/// topology configuration lists these tiers with the node label [`tier_label`]`(n)`.
pub fn tier_name(n: i64) -> String {
    format!("volcano-tier-{n}")
}

/// The node label that names a node's HyperNode of tier `n` (`topology.volcano.sh/tier-2`).
pub fn tier_label(n: i64) -> String {
    format!("topology.volcano.sh/tier-{n}")
}

/// Volcano's PodGroup: Basalt's fields plus `networkTopology` and `subGroupPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::PodGroupStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    #[serde(default = "one_i32")]
    pub min_member: i32,
    #[serde(default)]
    pub min_task_member: BTreeMap<String, i32>,
    #[serde(default)]
    pub min_resources: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub network_topology: Option<NetworkTopology>,
    #[serde(default)]
    pub sub_group_policy: Vec<SubGroupPolicy>,
}

impl Default for PodGroupSpec {
    fn default() -> Self {
        PodGroupSpec {
            min_member: 1,
            min_task_member: BTreeMap::new(),
            min_resources: BTreeMap::new(),
            queue: None,
            priority_class_name: None,
            network_topology: None,
            sub_group_policy: Vec::new(),
        }
    }
}

/// Volcano's network topology constraint. `mode` defaults to `hard` (as Volcano's CRD
/// does); `highestTierAllowed` and `highestTierName` exclude each other.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub highest_tier_allowed: Option<i64>,
    #[serde(default)]
    pub highest_tier_name: Option<String>,
}

/// One entry of Volcano's `subGroupPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupPolicy {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub sub_group_size: Option<i32>,
    #[serde(default)]
    pub match_label_keys: Vec<String>,
    #[serde(default)]
    pub network_topology: Option<NetworkTopology>,
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub min_sub_groups: Option<i32>,
}

impl NetworkTopology {
    /// Basalt's constraint for this one, found at `field`: `hard` gives `required`, `soft`
    /// gives `preferred`; the tier is `volcano-tier-<highestTierAllowed>`, or
    /// `highestTierName` as written. `soft` without either prefers tier 1, the closest.
    pub fn to_basalt(&self, field: &str) -> Result<super::TopologyConstraint, Issue> {
        let hard = match self.mode.as_deref() {
            None | Some("") | Some("hard") => true,
            Some("soft") => false,
            Some(other) => {
                return Err((
                    format!("{field}.mode"),
                    format!("unknown mode {other:?}: expected hard or soft"),
                ))
            }
        };
        let name = self.highest_tier_name.as_deref().filter(|n| !n.is_empty());
        let tier = match (self.highest_tier_allowed, name) {
            (Some(_), Some(_)) => {
                return Err((
                    field.to_string(),
                    "highestTierAllowed and highestTierName exclude each other".into(),
                ))
            }
            (Some(n), None) if n < 0 => {
                return Err((
                    format!("{field}.highestTierAllowed"),
                    format!("must not be negative, got {n}"),
                ))
            }
            (Some(n), None) => tier_name(n),
            (None, Some(name)) => name.to_string(),
            (None, None) if hard => {
                return Err((
                    format!("{field}.highestTierAllowed"),
                    "required in hard mode (or highestTierName)".into(),
                ))
            }
            (None, None) => tier_name(1),
        };
        Ok(if hard {
            super::TopologyConstraint {
                required: Some(tier),
                preferred: None,
            }
        } else {
            super::TopologyConstraint {
                required: None,
                preferred: Some(tier),
            }
        })
    }
}

impl PodGroup {
    /// The Basalt form of this PodGroup, with warnings about what Basalt does not honour
    /// (none at present).
    /// Fails on the first bad field.
    pub fn into_basalt(self) -> Result<(super::PodGroup, Vec<Issue>), Issue> {
        let s = self.spec;
        let topology = match &s.network_topology {
            Some(nt) => nt.to_basalt("spec.networkTopology")?,
            None => super::TopologyConstraint::default(),
        };
        let mut sub_groups = Vec::with_capacity(s.sub_group_policy.len());
        for (i, p) in s.sub_group_policy.into_iter().enumerate() {
            let at = format!("spec.subGroupPolicy[{i}]");
            if p.name.is_empty() {
                return Err((format!("{at}.name"), "must not be empty".into()));
            }
            if sub_groups
                .iter()
                .any(|g: &super::SubGroup| g.name == p.name)
            {
                return Err((
                    format!("{at}.name"),
                    format!("duplicate sub-group name {:?}", p.name),
                ));
            }
            // Volcano's default: a sub-group of one pod.
            let size = p.sub_group_size.unwrap_or(1);
            if size < 1 {
                return Err((
                    format!("{at}.subGroupSize"),
                    format!("must be at least 1, got {size}"),
                ));
            }
            if let Some(j) = p.match_label_keys.iter().position(String::is_empty) {
                return Err((
                    format!("{at}.matchLabelKeys[{j}]"),
                    "must not be empty".into(),
                ));
            }
            let min_sub_groups = p.min_sub_groups.unwrap_or(0);
            if min_sub_groups < 0 {
                return Err((
                    format!("{at}.minSubGroups"),
                    format!("must not be negative, got {min_sub_groups}"),
                ));
            }
            let topology = match &p.network_topology {
                Some(nt) => nt.to_basalt(&format!("{at}.networkTopology"))?,
                None => super::TopologyConstraint::default(),
            };
            sub_groups.push(super::SubGroup {
                name: p.name,
                size,
                match_label_keys: p.match_label_keys,
                label_selector: p.label_selector,
                min_sub_groups,
                topology,
            });
        }
        let group = super::PodGroup {
            metadata: self.metadata,
            spec: super::PodGroupSpec {
                min_member: s.min_member,
                min_task_member: s.min_task_member,
                min_resources: s.min_resources,
                queue: s.queue,
                priority_class_name: s.priority_class_name,
                topology,
                sub_groups,
                // Volcano's PodGroup has no wait timeout.
                schedule_timeout_seconds: None,
            },
            status: self.status,
        };
        // Every field is honoured today; the list stays for fields Volcano adds later.
        Ok((group, Vec::new()))
    }
}

// -----------------------------------------------------------------------------------------
// HyperNode
// -----------------------------------------------------------------------------------------

/// The API version of Volcano's HyperNode.
pub const TOPOLOGY_API_VERSION: &str = "topology.volcano.sh/v1alpha1";

/// Volcano's HyperNode: a network performance domain (a switch, a rack, an NVLink clique)
/// holding nodes or, at higher tiers, other HyperNodes. Volcano's CRD, read only: Basalt
/// does not install it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "topology.volcano.sh",
    version = "v1alpha1",
    kind = "HyperNode",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct HyperNodeSpec {
    /// 1 is the tier closest to the nodes; each tier up is a wider, slower domain.
    /// Volcano's CRD writes an integer; older versions a string of digits.
    #[serde(default)]
    pub tier: Option<Tier>,
    /// A name for the tier, the same for every HyperNode of that tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_name: Option<String>,
    #[serde(default)]
    pub members: Vec<MemberSpec>,
}

/// A tier as an integer or as a string of digits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum Tier {
    Number(i64),
    Text(String),
}

impl Tier {
    /// The tier, or the text that is not an integer.
    pub fn value(&self) -> Result<i64, &str> {
        match self {
            Tier::Number(n) => Ok(*n),
            Tier::Text(s) => s.trim().parse().map_err(|_| s.as_str()),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSpec {
    #[serde(rename = "type")]
    pub type_: MemberType,
    #[serde(default)]
    pub selector: MemberSelector,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberType {
    Node,
    HyperNode,
}

/// Exactly one of the three. A HyperNode member is named by `exactMatch` only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_match: Option<ExactMatch>,
    /// A regular expression searched for in node names (unanchored, as Go's
    /// `regexp.MatchString` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex_match: Option<RegexMatch>,
    /// A label selector over node labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_match: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExactMatch {
    #[serde(default)]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct RegexMatch {
    #[serde(default)]
    pub pattern: String,
}

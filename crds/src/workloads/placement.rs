//! Where a workload places its gang, in Basalt's terms: the exclusive topologies JobSet and
//! LeaderWorkerSet name as node labels become the topology tiers that read those labels.

use std::collections::BTreeMap;

use basalt_topology::{TierSpec, NODE_TIER};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::WorkloadGang;
use crate::types::{SubGroup, TopologyConstraint};

/// The node label that names each node itself: its tier is the node.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// What the PodGroup made for a workload says of placement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    pub topology: TopologyConstraint,
    pub sub_groups: Vec<SubGroup>,
    /// `(field, message)`, one per node label no configured tier reads. That constraint is left
    /// out of the PodGroup; the pods' own affinity, which JobSet's and LWS's webhooks write
    /// from the same annotation, still holds each pod to it, one pod at a time.
    pub warnings: Vec<(String, String)>,
}

impl WorkloadGang {
    /// The gang's topology and sub-groups against the scheduler's `tiers`.
    pub fn placement(&self, tiers: &[TierSpec]) -> Placement {
        let mut warnings: Vec<(String, String)> = Vec::new();
        let mut tier = |key: &str, annotation: &str| {
            if key == HOSTNAME {
                return Some(NODE_TIER.to_string());
            }
            let found = tiers.iter().find(|t| t.node_label == key);
            if found.is_none() {
                let read: Vec<&str> = (tiers.iter().map(|t| t.node_label.as_str()))
                    .chain([HOSTNAME])
                    .collect();
                let warning = (
                    format!("metadata.annotations[{annotation}]"),
                    format!(
                        "no topology tier reads node label {key:?} (tiers read {}); the pods' \
                         own affinity still applies, one pod at a time",
                        read.join(", ")
                    ),
                );
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
            found.map(|t| t.name.clone())
        };
        let topology = TopologyConstraint {
            required: (self.topology_key.as_ref()).and_then(|(key, a)| tier(key, a)),
            preferred: None,
        };
        let sub_groups = (self.sub_groups.iter())
            .filter(|g| g.size >= 1)
            .filter_map(|g| {
                let required = tier(&g.topology_key, g.annotation)?;
                Some(SubGroup {
                    name: g.name.clone(),
                    size: i32::try_from(g.size).unwrap_or(i32::MAX),
                    match_label_keys: vec![g.match_label_key.to_string()],
                    label_selector: g.selector.as_ref().map(|(key, value)| LabelSelector {
                        match_labels: Some(BTreeMap::from([(key.to_string(), value.clone())])),
                        match_expressions: None,
                    }),
                    min_sub_groups: 0,
                    topology: TopologyConstraint {
                        required: Some(required),
                        preferred: None,
                    },
                })
            })
            .collect();
        Placement {
            topology,
            sub_groups,
            warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{gang, lws_gang, JOBSET_API_VERSION, JOBSET_EXCLUSIVE_TOPOLOGY};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn tiers() -> Vec<TierSpec> {
        let tier = |name: &str, label: &str| TierSpec {
            name: name.into(),
            node_label: label.into(),
            nvlink: false,
        };
        vec![
            tier("spine", "topology.basalt.dev/spine"),
            tier("rack", "topology.basalt.dev/rack"),
        ]
    }

    #[test]
    fn a_jobsets_exclusive_topology_puts_each_child_job_in_one_domain() {
        let spec = json!({"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1},
                "metadata": {"annotations": {JOBSET_EXCLUSIVE_TOPOLOGY: "kubernetes.io/hostname"}}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}}]});
        let annotations = BTreeMap::from([(
            JOBSET_EXCLUSIVE_TOPOLOGY.to_string(),
            "topology.basalt.dev/rack".to_string(),
        )]);
        let g = gang(JOBSET_API_VERSION, "JobSet", &annotations, &spec)
            .unwrap()
            .unwrap();
        let p = g.placement(&tiers());
        assert!(p.topology.is_empty() && p.warnings.is_empty(), "{p:?}");
        let by_name: Vec<(&str, i32, Option<&str>)> = (p.sub_groups.iter())
            .map(|s| (s.name.as_str(), s.size, s.topology.required.as_deref()))
            .collect();
        // The template's own annotation wins for its replicated job.
        assert_eq!(
            by_name,
            [("driver", 1, Some("node")), ("workers", 4, Some("rack"))]
        );
        assert_eq!(
            p.sub_groups[1].match_label_keys,
            ["jobset.sigs.k8s.io/job-key"]
        );
    }

    #[test]
    fn a_label_no_tier_reads_is_left_to_the_pods_affinity_with_a_warning() {
        let spec = json!({"replicatedJobs": [{"name": "w", "replicas": 2,
            "template": {"spec": {"parallelism": 2}}}]});
        let annotations = BTreeMap::from([(
            JOBSET_EXCLUSIVE_TOPOLOGY.to_string(),
            "cloud.google.com/gke-nodepool".to_string(),
        )]);
        let g = gang(JOBSET_API_VERSION, "JobSet", &annotations, &spec)
            .unwrap()
            .unwrap();
        let p = g.placement(&tiers());
        assert!(p.sub_groups.is_empty());
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].1.contains("cloud.google.com/gke-nodepool"),
            "{p:?}"
        );
    }

    #[test]
    fn an_lws_group_and_its_subgroups_each_take_one_domain() {
        let meta = ObjectMeta {
            labels: Some(BTreeMap::from([
                ("leaderworkerset.sigs.k8s.io/name".into(), "vllm".into()),
                ("leaderworkerset.sigs.k8s.io/group-index".into(), "0".into()),
            ])),
            annotations: Some(BTreeMap::from([
                ("leaderworkerset.sigs.k8s.io/size".into(), "8".into()),
                (
                    "leaderworkerset.sigs.k8s.io/exclusive-topology".into(),
                    "topology.basalt.dev/spine".into(),
                ),
                (
                    "leaderworkerset.sigs.k8s.io/subgroup-size".into(),
                    "4".into(),
                ),
                (
                    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology".into(),
                    "topology.basalt.dev/rack".into(),
                ),
            ])),
            ..ObjectMeta::default()
        };
        let (group, g) = lws_gang(&meta).unwrap().unwrap();
        assert_eq!((group.as_str(), g.min_member), ("vllm-0-pg", 8));
        let p = g.placement(&tiers());
        assert_eq!(p.topology.required.as_deref(), Some("spine"));
        assert_eq!(p.sub_groups.len(), 1);
        let s = &p.sub_groups[0];
        assert_eq!((s.size, s.topology.required.as_deref()), (4, Some("rack")));
        assert_eq!(
            s.match_label_keys,
            ["leaderworkerset.sigs.k8s.io/subgroup-index"]
        );
    }
}

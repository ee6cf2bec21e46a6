//! Static node filters: `spec.unschedulable`, taints and tolerations (NoSchedule, NoExecute),
//! `nodeSelector`, required node affinity with every operator, and the node rules of the pod's
//! volumes (kube-scheduler's VolumeBinding: each rule's terms ORed), and HAMi's device type and
//! UUID filters (a node must have a device they accept). Resource fit (CPU, memory,
//! pod count, whole GPUs and every extended resource) is the engine's own capacity check.

use basalt_engine::{
    DeviceShort, Node, NodeFilter, PlacementRules, Refusal, Taint, TaintEffect, Toleration,
};

pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

pub struct Predicates;

impl NodeFilter for Predicates {
    fn name(&self) -> &str {
        "predicates"
    }
    fn filter(&self, rules: &PlacementRules, node: &Node) -> Result<(), Refusal> {
        // kube-scheduler lets pods that tolerate the unschedulable taint onto cordoned nodes.
        if node.unschedulable && !tolerated(&rules.tolerations, &unschedulable_taint()) {
            return Err(Refusal::Unschedulable);
        }
        if let Some((taint, _)) = (0..)
            .zip(&node.taints)
            .filter(|(_, t)| t.effect != TaintEffect::PreferNoSchedule)
            .find(|(_, t)| !tolerated(&rules.tolerations, t))
        {
            let node = node.id;
            return Err(Refusal::UntoleratedTaint { node, taint });
        }
        if !rules
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return Err(Refusal::NodeSelector);
        }
        if let Some(affinity) = &rules.affinity {
            if !affinity.terms.iter().any(|term| term.matches(node)) {
                return Err(Refusal::NodeAffinity);
            }
        }
        if let Some(filters) = rules.devices.as_ref().filter(|f| f.restricts()) {
            // HAMi's type and UUID filters: a node without one device they accept is no
            // candidate, whatever is free. Refused with the reason most of its cards give, in
            // HAMi's words and order (health, then type, then UUID).
            if !node.gpus.iter().any(|g| g.healthy && filters.accepts(g)) {
                let mut counts = [0usize; 3];
                for g in &node.gpus {
                    let why = match () {
                        _ if !g.healthy => 0,
                        _ if !filters.accepts_type(g) => 1,
                        _ => 2,
                    };
                    counts[why] += 1;
                }
                let most = (0..3).max_by_key(|&i| (counts[i], std::cmp::Reverse(i)));
                return Err(Refusal::Devices(match most.filter(|&i| counts[i] > 0) {
                    None => DeviceShort::NodeInsufficientDevice,
                    Some(0) => DeviceShort::CardNotHealth,
                    Some(1) => DeviceShort::CardTypeMismatch,
                    _ => DeviceShort::CardUuidMismatch,
                }));
            }
        }
        if let Some(rule) =
            (rules.volumes.iter()).find(|v| !v.terms.iter().any(|term| term.matches(node)))
        {
            return Err(match rule.bound {
                true => Refusal::VolumeNodeAffinity,
                false => Refusal::UnboundVolume,
            });
        }
        Ok(())
    }
}

fn unschedulable_taint() -> Taint {
    Taint {
        key: UNSCHEDULABLE_TAINT.to_string(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }
}

fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_engine::{
        NodeId, NodeSelectorTerm, RequiredNodeAffinity, Resources, TolerationOperator,
    };
    use basalt_engine::{SelectorOperator, SelectorRequirement};
    use std::collections::BTreeMap;

    fn node(labels: &[(&str, &str)]) -> Node {
        Node {
            id: NodeId(0),
            name: "n1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: vec![],
            unschedulable: false,
            allocatable: Resources::default(),
            gpus: vec![],
            sharing: Default::default(),
            device_kind: basalt_engine::GPU,
            device_base: 0,
            slices: vec![],
            devices_closed: None,
            mig_reconfiguring: None,
        }
    }

    fn req(key: &str, op: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn affinity(reqs: Vec<SelectorRequirement>) -> PlacementRules {
        PlacementRules {
            affinity: Some(RequiredNodeAffinity {
                terms: vec![NodeSelectorTerm {
                    match_expressions: reqs,
                    match_fields: vec![],
                }],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn every_operator() {
        use SelectorOperator::*;
        let n = node(&[("zone", "a"), ("gen", "9")]);
        let ok = |r| Predicates.filter(&affinity(vec![r]), &n).is_ok();
        assert!(ok(req("zone", In, &["a", "b"])));
        assert!(!ok(req("zone", In, &["b"])));
        assert!(ok(req("zone", NotIn, &["b"])));
        assert!(ok(req("missing", NotIn, &["b"])));
        assert!(!ok(req("zone", NotIn, &["a"])));
        assert!(ok(req("zone", Exists, &[])));
        assert!(!ok(req("missing", Exists, &[])));
        assert!(ok(req("missing", DoesNotExist, &[])));
        assert!(!ok(req("zone", DoesNotExist, &[])));
        assert!(ok(req("gen", Gt, &["8"])));
        assert!(!ok(req("gen", Gt, &["9"])));
        assert!(ok(req("gen", Lt, &["10"])));
        assert!(
            !ok(req("zone", Lt, &["10"])),
            "non-numeric label never matches Gt/Lt"
        );
    }

    #[test]
    fn match_fields_on_node_name_and_terms_are_ored() {
        let n = node(&[]);
        let rules = PlacementRules {
            affinity: Some(RequiredNodeAffinity {
                terms: vec![
                    NodeSelectorTerm {
                        match_expressions: vec![req("zone", SelectorOperator::Exists, &[])],
                        match_fields: vec![],
                    },
                    NodeSelectorTerm {
                        match_expressions: vec![],
                        match_fields: vec![req("metadata.name", SelectorOperator::In, &["n1"])],
                    },
                ],
            }),
            ..Default::default()
        };
        assert!(Predicates.filter(&rules, &n).is_ok());
        let empty = PlacementRules {
            affinity: Some(RequiredNodeAffinity {
                terms: vec![NodeSelectorTerm::default()],
            }),
            ..Default::default()
        };
        assert!(Predicates.filter(&empty, &n).is_err());
    }

    #[test]
    fn volume_rules_each_hold_with_terms_ored() {
        use basalt_engine::VolumeNodeRule;
        let n = node(&[("zone", "a")]);
        let term = |zone: &str| NodeSelectorTerm {
            match_expressions: vec![req("zone", SelectorOperator::In, &[zone])],
            match_fields: vec![],
        };
        let rules = |volumes| PlacementRules {
            volumes,
            ..Default::default()
        };
        let rule = |bound, terms| VolumeNodeRule { bound, terms };
        let ok = rules(vec![
            rule(true, vec![term("b"), term("a")]),
            rule(false, vec![term("a")]),
        ]);
        assert!(Predicates.filter(&ok, &n).is_ok());
        let bound = rules(vec![
            rule(false, vec![term("a")]),
            rule(true, vec![term("b")]),
        ]);
        assert_eq!(
            Predicates.filter(&bound, &n),
            Err(Refusal::VolumeNodeAffinity)
        );
        // No candidate volume and no provisioning: no node.
        let unbound = rules(vec![rule(false, vec![])]);
        assert_eq!(Predicates.filter(&unbound, &n), Err(Refusal::UnboundVolume));
    }

    #[test]
    fn taints_and_cordons() {
        let mut n = node(&[]);
        n.taints = vec![
            Taint {
                key: "soft".into(),
                value: String::new(),
                effect: TaintEffect::PreferNoSchedule,
            },
            Taint {
                key: "gpu".into(),
                value: "h100".into(),
                effect: TaintEffect::NoSchedule,
            },
        ];
        let none = PlacementRules::default();
        // The first taint not tolerated (PreferNoSchedule ones never refuse), by its position.
        assert_eq!(
            Predicates.filter(&none, &n),
            Err(Refusal::UntoleratedTaint {
                node: NodeId(0),
                taint: 1
            })
        );
        let tolerate = PlacementRules {
            tolerations: vec![Toleration {
                key: "gpu".into(),
                operator: TolerationOperator::Equal,
                value: "h100".into(),
                effect: Some(TaintEffect::NoSchedule),
            }],
            ..Default::default()
        };
        assert!(Predicates.filter(&tolerate, &n).is_ok());
        n.unschedulable = true;
        assert_eq!(
            Predicates.filter(&tolerate, &n),
            Err(Refusal::Unschedulable)
        );
        let everything = PlacementRules {
            tolerations: vec![Toleration {
                key: String::new(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            }],
            node_selector: BTreeMap::new(),
            affinity: None,
            volumes: Vec::new(),
            devices: None,
            claims: None,
        };
        assert!(Predicates.filter(&everything, &n).is_ok());
    }
}

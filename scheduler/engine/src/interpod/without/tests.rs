//! The rules with pods taken away agree with the rules once those pods are really gone, and
//! [`Conflict`] names every pod whose going can matter.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::constraints::{
    InclusionPolicy, LabelSelector, PodAffinityRules, PodAffinityTerm, PodConstraints,
    TopologySpreadConstraint, WhenUnsatisfiable,
};
use crate::interpod::InterPod;
use crate::model::TaskState;
use crate::snapshot::{ClusterSpec, NodeSpec, PodSpec};
use crate::PodPhase;

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "zone";
const NODES: usize = 4;

/// What a generated pod states: each rule on a label value (`app: a` or `app: b`) and a key.
#[derive(Clone, Debug)]
struct Rules {
    anti: Option<(bool, bool)>,
    affinity: Option<(bool, bool)>,
    spread: Option<(bool, bool, u32)>,
    port: bool,
    disk: Option<bool>,
}

/// Each rule stated with probability `p` (spread twice as often, up to 1).
fn rules(p: f64) -> impl Strategy<Value = Rules> {
    let term = || prop::option::weighted(p, (any::<bool>(), any::<bool>()));
    (
        term(),
        term(),
        prop::option::weighted((2.0 * p).min(1.0), (any::<bool>(), any::<bool>(), 1..=2u32)),
        prop::bool::weighted(p),
        prop::option::weighted(p, any::<bool>()),
    )
        .prop_map(|(anti, affinity, spread, port, disk)| Rules {
            anti,
            affinity,
            spread,
            port,
            disk,
        })
}

fn app(b: bool) -> &'static str {
    if b {
        "a"
    } else {
        "b"
    }
}

fn key(zone: bool) -> &'static str {
    if zone {
        ZONE
    } else {
        HOST
    }
}

fn term(value: bool, zone: bool) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: Some(LabelSelector::from_labels([("app", app(value))])),
        topology_key: key(zone).into(),
        ..Default::default()
    }
}

fn constraints(r: &Rules) -> PodConstraints {
    let required = |t: Option<(bool, bool)>| PodAffinityRules {
        required: t.map(|(v, z)| term(v, z)).into_iter().collect(),
        ..Default::default()
    };
    PodConstraints {
        anti_affinity: required(r.anti),
        affinity: required(r.affinity),
        spread: (r.spread.iter())
            .map(|&(v, zone, max_skew)| TopologySpreadConstraint {
                max_skew,
                topology_key: key(zone).into(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                selector: Some(LabelSelector::from_labels([("app", app(v))])),
                min_domains: None,
                node_affinity_policy: InclusionPolicy::Honor,
                node_taints_policy: InclusionPolicy::Ignore,
            })
            .collect(),
        host_ports: (r.port.then(|| HostPort {
            host_ip: HostPort::WILDCARD.into(),
            protocol: "TCP".into(),
            port: 80,
        }))
        .into_iter()
        .collect(),
        disks: (r.disk.iter())
            .map(|&read_only| Disk::GcePd {
                pd_name: "pd".into(),
                read_only,
            })
            .collect(),
        ..Default::default()
    }
}

/// Four nodes, n0 and n1 in zone z0, n2 in z1, n3 without a zone; the bound pods (node, label,
/// rules) and the pending one, `p`, last.
fn snapshot(bound: &[(usize, bool, Rules)], pending: (bool, &Rules)) -> Snapshot {
    let nodes = (0..NODES)
        .map(|i| {
            let mut labels = BTreeMap::from([(HOST.to_string(), format!("n{i}"))]);
            if i < 3 {
                labels.insert(ZONE.into(), format!("z{}", i / 2));
            }
            NodeSpec {
                name: format!("n{i}"),
                labels,
                allocatable: BTreeMap::from([("cpu".to_string(), 64_000)]),
                ..Default::default()
            }
        })
        .collect();
    let pod = |name: String, value: bool, r: &Rules| PodSpec {
        namespace: "ns".into(),
        name,
        ours: true,
        request: BTreeMap::from([("cpu".to_string(), 1000)]),
        labels: BTreeMap::from([("app".to_string(), app(value).to_string())]),
        constraints: Some(Arc::new(constraints(r))),
        ..Default::default()
    };
    let mut pods: Vec<PodSpec> = (bound.iter().enumerate())
        .map(|(i, (node, value, r))| PodSpec {
            node: Some(format!("n{node}")),
            phase: PodPhase::Running,
            ..pod(format!("b{i}"), *value, r)
        })
        .collect();
    pods.push(pod("p".into(), pending.0, pending.1));
    Snapshot::build(ClusterSpec {
        nodes,
        pods,
        ..Default::default()
    })
    .unwrap()
}

fn bound_on(snap: &Snapshot, task: TaskId) -> NodeId {
    match snap.task(task).state {
        TaskState::Bound(n) => n,
        _ => unreachable!("generated bound"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn rules_without_pods_agree_with_the_pods_gone(
        bound in prop::collection::vec((0..NODES, any::<bool>(), rules(0.15)), 0..8),
        pending in (any::<bool>(), rules(0.35)),
        gone_mask in any::<u8>(),
    ) {
        let snap = snapshot(&bound, (pending.0, &pending.1));
        let p = TaskId(bound.len() as u32);
        let gone: Vec<(TaskId, NodeId)> = (0..bound.len())
            .filter(|i| gone_mask & (1 << i) != 0)
            .map(|i| (TaskId(i as u32), bound_on(&snap, TaskId(i as u32))))
            .collect();
        let pods = InterPod::new(&snap);
        let mut really = InterPod::new(&snap);
        for &(g, n) in &gone {
            really.charge(&snap, g, n, false);
        }
        for n in 0..NODES as u32 {
            let node = NodeId(n);
            let expected = really.allows(&snap, p, node);
            let got = pods.prepare(&snap, p).map_or(Ok(()), |c| c.check_without(&snap, node, &gone));
            prop_assert_eq!(&got, &expected, "node n{}", n);
            let Some(check) = pods.prepare(&snap, p) else { continue };
            // Taking away only the pods that conflict does as well as taking them all.
            let here: Vec<TaskId> = (0..bound.len() as u32)
                .map(TaskId)
                .filter(|&t| bound_on(&snap, t) == node)
                .collect();
            let conflicting: Vec<(TaskId, NodeId)> = gone.iter().copied()
                .filter(|&(g, n)| n != node || check.conflict(&snap, node, g).is_some())
                .collect();
            if got.is_ok() {
                prop_assert!(check.check_without(&snap, node, &conflicting).is_ok());
            }
            // Every pod that blocks the task there must go.
            let blocked = here.iter().any(|&t| {
                check.conflict(&snap, node, t) == Some(Conflict::Blocks)
                    && !gone.iter().any(|&(g, _)| g == t)
            });
            if blocked {
                prop_assert!(got.is_err());
            }
        }
    }
}

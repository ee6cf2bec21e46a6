//! Soft preferences weighed against packing: preferred node affinity and `PreferNoSchedule`
//! taints, through `schedule` with a `Config`, and the search against a brute-force scan of
//! every node.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSelectorTerm, NodeSpec, PlacementRules, PodConstraints,
    PodPhase, PodSpec, PreferredNodeTerm, ResourceList, SelectorOperator, SelectorRequirement,
    Snapshot, Taint, TaintEffect, Toleration, TolerationOperator, TopologySpec,
};
use basalt_plugins::config::ScoringArgs;
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const RACK: &str = "topology.basalt.dev/rack";

fn resources(cpu: i64, gpus: i64) -> ResourceList {
    let mut r = ResourceList::from([("cpu".to_string(), cpu)]);
    if gpus > 0 {
        r.insert("nvidia.com/gpu".into(), gpus);
    }
    r
}

fn node(name: &str, cpu: i64, gpus: i64, labels: &[(&str, &str)], taints: Vec<Taint>) -> NodeSpec {
    let mut allocatable = resources(cpu, gpus);
    allocatable.insert("memory".into(), 1 << 30);
    allocatable.insert("pods".into(), 110);
    NodeSpec {
        name: name.into(),
        labels: (labels.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints,
        allocatable,
        ..Default::default()
    }
}

/// Another scheduler's running pod taking capacity on a node.
fn busy(node: &str, cpu: i64, gpus: i64) -> PodSpec {
    PodSpec {
        namespace: "other".into(),
        name: format!("busy-{node}"),
        request: resources(cpu, gpus),
        phase: PodPhase::Running,
        node: Some(node.into()),
        ..Default::default()
    }
}

fn prefer(terms: &[(&str, &str, i32)]) -> Option<Arc<PodConstraints>> {
    let preferred_node_affinity = (terms.iter())
        .map(|&(key, value, weight)| PreferredNodeTerm {
            weight,
            term: NodeSelectorTerm {
                match_expressions: vec![SelectorRequirement {
                    key: key.into(),
                    operator: SelectorOperator::In,
                    values: vec![value.into()],
                }],
                match_fields: vec![],
            },
        })
        .collect();
    Some(Arc::new(PodConstraints {
        preferred_node_affinity,
        ..Default::default()
    }))
}

fn pending(name: &str, cpu: i64, constraints: Option<Arc<PodConstraints>>) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        request: resources(cpu, 0),
        constraints,
        ..Default::default()
    }
}

fn soft_taint(key: &str) -> Taint {
    Taint {
        key: key.into(),
        value: String::new(),
        effect: TaintEffect::PreferNoSchedule,
    }
}

/// Where each pod of ours was bound, by pod name.
fn bound(spec: ClusterSpec, config: &Config) -> BTreeMap<String, String> {
    let plan = schedule(&Snapshot::build(spec).unwrap(), config);
    (plan.bindings.into_iter())
        .map(|b| (b.pod, b.node))
        .collect()
}

fn where_one_goes(nodes: Vec<NodeSpec>, pods: Vec<PodSpec>, config: &Config) -> Option<String> {
    let spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        ..Default::default()
    };
    bound(spec, config).remove("ns/p")
}

/// Binpack fills `full` first; the preference pulls the pod to `preferred` unless packing
/// gains more than the term's weighted points.
fn affinity_case(full_used: i64, weight: i32, config: &Config) -> Option<String> {
    let nodes = vec![
        node("full", 10_000, 0, &[], vec![]),
        node("preferred", 10_000, 0, &[("disk", "ssd")], vec![]),
    ];
    let pods = vec![
        busy("full", full_used, 0),
        busy("preferred", 4_000, 0),
        pending("p", 1_000, prefer(&[("disk", "ssd", weight)])),
    ];
    where_one_goes(nodes, pods, config)
}

#[test]
fn preferred_node_affinity_outweighs_a_small_utilisation_difference() {
    let config = Config::default();
    // 5 000 vs 4 000 of 10 000 CPU used: 5 % apart (CPU and memory weigh equally), against
    // 2 × 10 points.
    assert_eq!(
        affinity_case(5_000, 10, &config).as_deref(),
        Some("preferred")
    );
    // 9 000 vs 4 000: 25 % apart, more than a weight-10 term's 20 points...
    assert_eq!(affinity_case(9_000, 10, &config).as_deref(), Some("full"));
    // ...but less than a weight-100 term's 200.
    assert_eq!(
        affinity_case(9_000, 100, &config).as_deref(),
        Some("preferred")
    );
}

#[test]
fn zero_weights_restore_pure_packing() {
    let config = Config {
        scoring: ScoringArgs {
            node_affinity: 0,
            pod_affinity: 0,
            topology_spread: 0,
            taint_toleration: 0,
        },
        ..Config::default()
    };
    assert_eq!(affinity_case(5_000, 100, &config).as_deref(), Some("full"));
    let default = Config::default();
    assert_eq!(
        affinity_case(5_000, 100, &default).as_deref(),
        Some("preferred")
    );
    let nodes = vec![
        node("full", 10_000, 0, &[], vec![soft_taint("soft")]),
        node("empty", 10_000, 0, &[], vec![]),
    ];
    let pods = vec![busy("full", 5_000, 0), pending("p", 1_000, None)];
    assert_eq!(
        where_one_goes(nodes, pods, &config).as_deref(),
        Some("full")
    );
}

#[test]
fn prefer_no_schedule_is_avoided_while_another_node_fits() {
    let config = Config::default();
    let nodes = || {
        vec![
            node("tainted", 10_000, 0, &[], vec![soft_taint("soft")]),
            node("clean", 10_000, 0, &[], vec![]),
        ]
    };
    // Binpack alone would fill the tainted node, the fuller one.
    let pods = vec![busy("tainted", 8_000, 0), pending("p", 1_000, None)];
    assert_eq!(
        where_one_goes(nodes(), pods, &config).as_deref(),
        Some("clean")
    );
    // The clean node is full: the tainted one still takes the pod.
    let pods = vec![
        busy("tainted", 8_000, 0),
        PodSpec {
            name: "busy-clean".into(),
            ..busy("clean", 9_500, 0)
        },
        pending("p", 1_000, None),
    ];
    assert_eq!(
        where_one_goes(nodes(), pods, &config).as_deref(),
        Some("tainted")
    );
}

/// Only the taints a pod does not tolerate count: the tolerated node, fuller than the clean
/// one, wins; the fullest, whose taint the pod does not tolerate, loses.
#[test]
fn a_tolerated_prefer_no_schedule_taint_costs_nothing() {
    let nodes = vec![
        node("untolerated", 10_000, 0, &[], vec![soft_taint("other")]),
        node("tolerated", 10_000, 0, &[], vec![soft_taint("soft")]),
        node("clean", 10_000, 0, &[], vec![]),
    ];
    let mut pod = pending("p", 1_000, None);
    pod.rules = PlacementRules {
        tolerations: vec![Toleration {
            key: "soft".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: Some(TaintEffect::PreferNoSchedule),
        }],
        ..Default::default()
    };
    let pods = vec![
        busy("untolerated", 9_000, 0),
        busy("tolerated", 8_000, 0),
        pod,
    ];
    let config = Config::default();
    assert_eq!(
        where_one_goes(nodes, pods, &config).as_deref(),
        Some("tolerated")
    );
}

#[test]
fn scoring_config_parses_and_names_unknown_fields() {
    let config: Config =
        serde_yaml::from_str("scoring: {nodeAffinity: 5, taintToleration: 0}").unwrap();
    assert_eq!(
        config.scoring,
        ScoringArgs {
            node_affinity: 5,
            pod_affinity: 2,
            topology_spread: 2,
            taint_toleration: 0,
        }
    );
    assert_eq!(Config::default().scoring.taint_toleration, 3);
    let err = serde_yaml::from_str::<Config>("scoring: {nodeAffinty: 5}").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("nodeAffinty"), "{message}");
    assert!(message.contains("scoring"), "{message}");
    let err = serde_yaml::from_str::<Config>("scoring: {podAffinity: -1}").unwrap_err();
    assert!(err.to_string().contains("scoring"), "{err}");
}

/// A gang that only a rack holds (no node has its 8 GPUs) starts on the rack's preferred
/// node, not the fullest one; preferences choose nodes inside the domain the topology fit
/// chose.
#[test]
fn topology_gangs_honour_preferences() {
    let nodes = vec![
        node("a", 64_000, 8, &[(RACK, "r0")], vec![]),
        node("b", 64_000, 8, &[(RACK, "r0"), ("disk", "ssd")], vec![]),
        node("c", 64_000, 8, &[(RACK, "r1")], vec![]),
    ];
    let mut pods = vec![busy("a", 32_000, 2), busy("b", 0, 2), busy("c", 0, 6)];
    for i in 0..2 {
        pods.push(PodSpec {
            group: Some("g".into()),
            request: resources(1_000, 4),
            rank: Some(i),
            ..pending(&format!("g-{i}"), 1_000, prefer(&[("disk", "ssd", 100)]))
        });
    }
    let spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        groups: vec![GroupSpec {
            namespace: "ns".into(),
            name: "g".into(),
            queue: None,
            min_member: 2,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: None,
            created_ms: 1,
            phase: JobPhase::Inqueue,
            topology: TopologySpec {
                required: Some("rack".into()),
                preferred: None,
            },
            sub_groups: vec![],
            schedule_timeout_ms: None,
        }],
        ..Default::default()
    };
    let placed = bound(spec, &Config::default());
    assert_eq!(
        placed.get("ns/g-0").map(String::as_str),
        Some("b"),
        "{placed:?}"
    );
    // The second member no longer fits there and goes to the other node of the rack.
    assert_eq!(
        placed.get("ns/g-1").map(String::as_str),
        Some("a"),
        "{placed:?}"
    );
}

// ----- the search against a brute-force scan -----

#[derive(Clone, Debug)]
struct N {
    cpu: i64,
    gpus: i64,
    cpu_used: i64,
    gpus_used: i64,
    zone: u8,
    soft: Option<u8>,
    hard: bool,
}

#[derive(Clone, Debug)]
struct P {
    cpu: i64,
    gpus: i64,
    terms: Vec<(u8, i32)>,
    tolerate_soft: Option<u8>,
    weights: (u32, u32),
}

/// Nodes, each refused by a `NoSchedule` taint with probability `hard`.
fn nodes(hard: f64) -> impl Strategy<Value = Vec<N>> {
    let n = (
        prop::sample::select(vec![4_000i64, 8_000]),
        prop::sample::select(vec![0i64, 4, 8]),
        0..=8_000i64,
        0..=8i64,
        0..4u8,
        prop::option::weighted(0.4, 0..2u8),
        prop::bool::weighted(hard),
    )
        .prop_map(|(cpu, gpus, cpu_used, gpus_used, zone, soft, hard)| N {
            cpu,
            gpus,
            cpu_used: cpu_used.min(cpu),
            gpus_used: gpus_used.min(gpus),
            zone,
            soft,
            hard,
        });
    prop::collection::vec(n, 1..=40)
}

fn pod() -> impl Strategy<Value = P> {
    (
        1..=2_000i64,
        0..=2i64,
        prop::collection::vec((0..5u8, 1..=100i32), 0..=3),
        prop::option::of(0..2u8),
        (0..=4u32, 0..=4u32),
    )
        .prop_map(|(cpu, gpus, terms, tolerate_soft, weights)| P {
            cpu,
            gpus,
            terms,
            tolerate_soft,
            weights,
        })
}

/// The binpack key after placing, from the documented rule: 1,000,000 less the weighted mean
/// utilisation in millionths (cpu 1, memory 1, GPUs 10, over the resources the node has).
fn binpack_key(n: &N, p: &P) -> i128 {
    let mut parts = vec![(1, n.cpu_used + p.cpu, n.cpu), (1, 0, 1 << 30)];
    if n.gpus > 0 {
        parts.push((10, n.gpus_used + p.gpus, n.gpus));
    }
    let sum: i128 = parts
        .iter()
        .map(|&(w, u, a)| w * u as i128 * 1_000_000 / a as i128)
        .sum();
    let weight: i128 = parts.iter().map(|&(w, _, _)| w).sum();
    1_000_000 - sum / weight
}

/// The node a brute-force scan of every node picks: the lowest key less 10,000 per weighted
/// point, ties to the first node by name.
fn brute_force(ns: &[N], p: &P) -> Option<String> {
    let (w_affinity, w_taint) = p.weights;
    (ns.iter().enumerate())
        .filter(|(_, n)| !n.hard)
        .filter(|(_, n)| n.cpu_used + p.cpu <= n.cpu && n.gpus_used + p.gpus <= n.gpus)
        .map(|(i, n)| {
            let affinity: i64 = (p.terms.iter())
                .filter(|&&(zone, _)| zone == n.zone)
                .map(|&(_, w)| w as i64)
                .sum();
            let untolerated = n.soft.is_some() && n.soft != p.tolerate_soft;
            let points = w_affinity as i64 * affinity - w_taint as i64 * 100 * untolerated as i64;
            (binpack_key(n, p) - 10_000 * points as i128, i)
        })
        .min()
        .map(|(_, i)| format!("n{i:02}"))
}

fn cluster(ns: &[N], p: &P) -> ClusterSpec {
    let mut spec = ClusterSpec::default();
    for (i, n) in ns.iter().enumerate() {
        let name = format!("n{i:02}");
        let zone = format!("z{}", n.zone);
        let mut taints: Vec<Taint> = (n.soft.iter())
            .map(|s| Taint {
                value: format!("v{s}"),
                ..soft_taint("soft")
            })
            .collect();
        if n.hard {
            taints.push(Taint {
                key: "hard".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            });
        }
        spec.nodes
            .push(node(&name, n.cpu, n.gpus, &[("zone", &zone)], taints));
        if n.cpu_used + n.gpus_used > 0 {
            spec.pods.push(busy(&name, n.cpu_used, n.gpus_used));
        }
    }
    let terms: Vec<(String, i32)> = (p.terms.iter())
        .map(|&(z, w)| (format!("z{z}"), w))
        .collect();
    let terms: Vec<(&str, &str, i32)> = terms
        .iter()
        .map(|(z, w)| ("zone", z.as_str(), *w))
        .collect();
    let mut pod = pending(
        "p",
        p.cpu,
        (!terms.is_empty()).then(|| prefer(&terms)).flatten(),
    );
    pod.request = resources(p.cpu, p.gpus);
    pod.rules.tolerations = (p.tolerate_soft.iter())
        .map(|s| Toleration {
            key: "soft".into(),
            operator: TolerationOperator::Equal,
            value: format!("v{s}"),
            effect: Some(TaintEffect::PreferNoSchedule),
        })
        .collect();
    spec.pods.push(pod);
    spec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The bucket walk with its stop rule finds the node a scan of every node finds.
    #[test]
    fn the_search_finds_what_scoring_every_node_finds(ns in nodes(0.15), p in pod()) {
        check_against_brute_force(&ns, &p)?;
    }

    /// The same where few nodes pass the filters (the short list, not the buckets, is searched).
    #[test]
    fn the_short_list_finds_what_scoring_every_node_finds(ns in nodes(0.95), p in pod()) {
        check_against_brute_force(&ns, &p)?;
    }
}

fn check_against_brute_force(ns: &[N], p: &P) -> Result<(), TestCaseError> {
    let config = Config {
        scoring: ScoringArgs {
            node_affinity: p.weights.0,
            taint_toleration: p.weights.1,
            ..ScoringArgs::default()
        },
        ..Config::default()
    };
    let got = bound(cluster(ns, p), &config).remove("ns/p");
    prop_assert_eq!(got, brute_force(ns, p));
    Ok(())
}

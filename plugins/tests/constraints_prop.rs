//! No plan breaks a required inter-pod rule: on random small clusters, every binding a cycle
//! makes is replayed in the plan's order against a brute-force reading of kube-scheduler's
//! InterPodAffinity, PodTopologySpread (`DoNotSchedule`) and NodePorts filters, written here
//! from their documented behaviour and independent of the engine: its own pod model, its own
//! selector and namespace matching, every pod scanned for every check. Gangs with such rules
//! stay all-or-nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use basalt_engine::{
    ClusterSpec, GroupSpec, HostPort, InclusionPolicy, JobPhase, LabelSelector, NamespaceSpec,
    NodeSpec, PlacementRules, PodAffinityRules, PodAffinityTerm, PodConstraints, PodPhase, PodSpec,
    ResourceList, SelectorOperator, SelectorRequirement, Snapshot, Taint, TaintEffect, Toleration,
    TolerationOperator, TopologySpreadConstraint, WhenUnsatisfiable,
};
use basalt_plugins::config::ActionName;
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

type Labels = BTreeMap<String, String>;

const HOSTNAME: &str = "kubernetes.io/hostname";
const KEYS: [&str; 3] = [HOSTNAME, "zone", "rack"];
const NAMESPACES: [&str; 2] = ["ns1", "ns2"];

// ----- the checker's own model -----

#[derive(Clone, Debug)]
enum Select {
    Labels(Vec<(String, String)>),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
}

impl Select {
    fn matches(&self, labels: &Labels) -> bool {
        match self {
            Select::Labels(pairs) => pairs.iter().all(|(k, v)| labels.get(k) == Some(v)),
            Select::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Select::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Select::Exists(k) => labels.contains_key(k),
        }
    }
}

#[derive(Clone, Debug)]
enum Namespaces {
    /// Neither `namespaces` nor `namespaceSelector`: the owner's namespace.
    Own,
    Listed(Vec<String>),
    /// `namespaceSelector: {}`.
    All,
    /// `namespaceSelector` on the `env` label.
    Env(String),
}

#[derive(Clone, Debug)]
struct Term {
    select: Select,
    namespaces: Namespaces,
    key: &'static str,
}

#[derive(Clone, Debug)]
struct Spread {
    max_skew: u32,
    key: &'static str,
    select: Select,
    min_domains: Option<u32>,
    honor_affinity: bool,
    honor_taints: bool,
}

#[derive(Clone, Debug, Default)]
struct Rules {
    affinity: Vec<Term>,
    anti: Vec<Term>,
    spread: Vec<Spread>,
    ports: Vec<(String, u16)>,
    /// `nodeSelector: {pool: ...}`.
    pool: Option<String>,
    tolerates_dedicated: bool,
}

#[derive(Clone, Debug)]
struct TestNode {
    labels: Labels,
    dedicated: bool,
}

#[derive(Clone, Debug)]
struct TestPod {
    namespace: String,
    name: String,
    labels: Labels,
    rules: Rules,
    ours: bool,
    /// Bound before the cycle.
    node: Option<usize>,
    job: Option<usize>,
}

fn env_of(namespace: &str) -> &'static str {
    if namespace == "ns1" {
        "prod"
    } else {
        "dev"
    }
}

fn in_namespaces(term: &Term, owner: &str, target: &str) -> bool {
    match &term.namespaces {
        Namespaces::Own => owner == target,
        Namespaces::Listed(list) => list.iter().any(|n| n == target),
        Namespaces::All => true,
        Namespaces::Env(env) => env_of(target) == env,
    }
}

/// Whether `pod` is matched by `term` of a pod in namespace `owner`.
fn term_matches(term: &Term, owner: &str, pod: &TestPod) -> bool {
    in_namespaces(term, owner, &pod.namespace) && term.select.matches(&pod.labels)
}

fn same_domain(nodes: &[TestNode], a: usize, b: usize, key: &str) -> bool {
    match (nodes[a].labels.get(key), nodes[b].labels.get(key)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn passes_node_rules(rules: &Rules, node: &TestNode) -> bool {
    rules
        .pool
        .as_ref()
        .is_none_or(|p| node.labels.get("pool") == Some(p))
}

fn tolerates(rules: &Rules, node: &TestNode) -> bool {
    !node.dedicated || rules.tolerates_dedicated
}

/// kube-scheduler's required filters for `pod` on `node`, with `placed` the pods on nodes now.
fn violation(
    nodes: &[TestNode],
    placed: &[(&TestPod, usize)],
    pod: &TestPod,
    node: usize,
) -> Option<String> {
    let r = &pod.rules;
    // NodePorts.
    for (other, n) in placed {
        if *n == node && other.rules.ports.iter().any(|p| r.ports.contains(p)) {
            return Some(format!("host port taken by {}", other.name));
        }
    }
    // Its own required anti-affinity.
    for t in &r.anti {
        if let Some((other, _)) = placed.iter().find(|(o, n)| {
            same_domain(nodes, *n, node, t.key) && term_matches(t, &pod.namespace, o)
        }) {
            return Some(format!("anti-affinity {t:?} meets {}", other.name));
        }
    }
    // Existing pods' required anti-affinity.
    for (other, n) in placed {
        for t in &other.rules.anti {
            if same_domain(nodes, *n, node, t.key) && term_matches(t, &other.namespace, pod) {
                return Some(format!("{}'s anti-affinity {t:?}", other.name));
            }
        }
    }
    // Required affinity, with the first-pod rule.
    if !r.affinity.is_empty() {
        if r.affinity
            .iter()
            .any(|t| !nodes[node].labels.contains_key(t.key))
        {
            return Some("affinity: node lacks a topology key".into());
        }
        let matches_all = |p: &TestPod| {
            r.affinity
                .iter()
                .all(|t| term_matches(t, &pod.namespace, p))
        };
        let all_exist = r.affinity.iter().all(|t| {
            placed
                .iter()
                .any(|(o, n)| matches_all(o) && same_domain(nodes, *n, node, t.key))
        });
        if !all_exist {
            let any_anywhere = placed.iter().any(|(o, n)| {
                matches_all(o)
                    && r.affinity
                        .iter()
                        .any(|t| nodes[*n].labels.contains_key(t.key))
            });
            if any_anywhere || !matches_all(pod) {
                return Some(format!("affinity {:?} unmet", r.affinity));
            }
        }
    }
    // Topology spread, DoNotSchedule.
    for c in &r.spread {
        let Some(value) = nodes[node].labels.get(c.key) else {
            return Some(format!("spread: node lacks {}", c.key));
        };
        let mut counts: BTreeMap<&String, u32> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if !r.spread.iter().all(|s| n.labels.contains_key(s.key))
                || (c.honor_affinity && !passes_node_rules(r, n))
                || (c.honor_taints && !tolerates(r, n))
            {
                continue;
            }
            let here = placed
                .iter()
                .filter(|(o, on)| {
                    *on == i && o.namespace == pod.namespace && c.select.matches(&o.labels)
                })
                .count() as u32;
            *counts.entry(&n.labels[c.key]).or_default() += here;
        }
        let min = match c.min_domains {
            Some(m) if (counts.len() as u32) < m => 0,
            _ => counts.values().copied().min().unwrap_or(0),
        };
        let own = counts.get(value).copied().unwrap_or(0);
        let me = u32::from(c.select.matches(&pod.labels));
        if own + me > min + c.max_skew {
            return Some(format!("spread {c:?}: {own}+{me} over min {min}"));
        }
    }
    None
}

// ----- random clusters -----

fn label_value() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_string)
}

fn select() -> impl Strategy<Value = Select> {
    prop_oneof![
        label_value().prop_map(|v| Select::Labels(vec![("app".into(), v)])),
        label_value().prop_map(|v| Select::In("app".into(), vec![v, "c".into()])),
        label_value().prop_map(|v| Select::NotIn("app".into(), vec![v])),
        Just(Select::Exists("team".into())),
    ]
}

fn namespaces() -> impl Strategy<Value = Namespaces> {
    prop_oneof![
        4 => Just(Namespaces::Own),
        1 => Just(Namespaces::Listed(vec!["ns2".into()])),
        1 => Just(Namespaces::All),
        1 => Just(Namespaces::Env("prod".into())),
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(KEYS.to_vec())
}

fn term() -> impl Strategy<Value = Term> {
    (select(), namespaces(), key()).prop_map(|(select, namespaces, key)| Term {
        select,
        namespaces,
        key,
    })
}

fn spread() -> impl Strategy<Value = Spread> {
    (
        1..=2u32,
        key(),
        select(),
        prop::option::of(1..=4u32),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(max_skew, key, select, min_domains, honor_affinity, honor_taints)| Spread {
                max_skew,
                key,
                select,
                min_domains,
                honor_affinity,
                honor_taints,
            },
        )
}

fn rules() -> impl Strategy<Value = Rules> {
    (
        prop::collection::vec(term(), 0..=1),
        prop::collection::vec(term(), 0..=2),
        prop::collection::vec(spread(), 0..=1),
        prop::collection::vec(prop::sample::select(vec![80u16, 443]), 0..=1),
        prop::option::of(prop::sample::select(vec!["p0", "p1"])),
        any::<bool>(),
    )
        .prop_map(
            |(affinity, anti, spread, ports, pool, tolerates_dedicated)| Rules {
                affinity,
                anti,
                spread,
                ports: ports.into_iter().map(|p| ("TCP".to_string(), p)).collect(),
                pool: pool.map(str::to_string),
                tolerates_dedicated,
            },
        )
}

fn labels() -> impl Strategy<Value = Labels> {
    (label_value(), any::<bool>()).prop_map(|(app, team)| {
        let mut l = Labels::new();
        l.insert("app".into(), app);
        if team {
            l.insert("team".into(), "x".into());
        }
        l
    })
}

#[derive(Clone, Debug)]
struct Case {
    nodes: Vec<TestNode>,
    pods: Vec<TestPod>,
    /// Per job: its members' count and minMember.
    jobs: Vec<(usize, usize)>,
}

fn case() -> impl Strategy<Value = Case> {
    let node = (0..3usize, any::<bool>(), 0..2usize, 0..2usize, 0..5u8);
    let existing = (labels(), rules(), any::<bool>(), 0..6usize, 0..2usize);
    let job = (labels(), rules(), 1..=4usize, any::<bool>(), 0..2usize);
    (
        prop::collection::vec(node, 2..=6),
        prop::collection::vec(existing, 0..=5),
        prop::collection::vec(job, 1..=4),
    )
        .prop_map(|(node_specs, existing, jobs)| {
            let nodes: Vec<TestNode> = (node_specs.iter().enumerate())
                .map(|(i, &(zone, has_zone, rack, pool, flags))| {
                    let mut labels = Labels::new();
                    labels.insert(HOSTNAME.into(), format!("n{i}"));
                    if has_zone {
                        labels.insert("zone".into(), format!("z{zone}"));
                    }
                    labels.insert("rack".into(), format!("r{rack}"));
                    labels.insert("pool".into(), format!("p{pool}"));
                    TestNode {
                        labels,
                        dedicated: flags == 0,
                    }
                })
                .collect();
            let mut pods = Vec::new();
            for (i, (labels, mut rules, ours, node, ns)) in existing.into_iter().enumerate() {
                // What a bound pod states about others matters; its own node rules do not.
                rules.affinity.clear();
                rules.spread.clear();
                pods.push(TestPod {
                    namespace: NAMESPACES[ns].into(),
                    name: format!("e{i}"),
                    labels,
                    rules,
                    ours,
                    node: Some(node % nodes.len()),
                    job: None,
                });
            }
            let mut job_sizes = Vec::new();
            for (j, (mut labels, rules, size, whole, ns)) in jobs.into_iter().enumerate() {
                labels.insert("job".into(), format!("j{j}"));
                for m in 0..size {
                    pods.push(TestPod {
                        namespace: NAMESPACES[ns].into(),
                        name: format!("j{j}-{m}"),
                        labels: labels.clone(),
                        rules: rules.clone(),
                        ours: true,
                        node: None,
                        job: Some(j),
                    });
                }
                job_sizes.push((size, if whole { size } else { 1 }));
            }
            Case {
                nodes,
                pods,
                jobs: job_sizes,
            }
        })
}

// ----- the same case in the engine's terms -----

fn selector(s: &Select) -> LabelSelector {
    let req = |key: &str, operator, values: &[String]| SelectorRequirement {
        key: key.into(),
        operator,
        values: values.to_vec(),
    };
    LabelSelector {
        requirements: match s {
            Select::Labels(pairs) => pairs
                .iter()
                .map(|(k, v)| req(k, SelectorOperator::In, std::slice::from_ref(v)))
                .collect(),
            Select::In(k, vs) => vec![req(k, SelectorOperator::In, vs)],
            Select::NotIn(k, vs) => vec![req(k, SelectorOperator::NotIn, vs)],
            Select::Exists(k) => vec![req(k, SelectorOperator::Exists, &[])],
        },
    }
}

fn affinity_term(t: &Term) -> PodAffinityTerm {
    let (namespaces, namespace_selector) = match &t.namespaces {
        Namespaces::Own => (vec![], None),
        Namespaces::Listed(l) => (l.clone(), None),
        Namespaces::All => (vec![], Some(LabelSelector::default())),
        Namespaces::Env(e) => (
            vec![],
            Some(LabelSelector::from_labels([("env", e.as_str())])),
        ),
    };
    PodAffinityTerm {
        selector: Some(selector(&t.select)),
        namespaces,
        namespace_selector,
        topology_key: t.key.into(),
    }
}

fn policy(honor: bool) -> InclusionPolicy {
    if honor {
        InclusionPolicy::Honor
    } else {
        InclusionPolicy::Ignore
    }
}

fn constraints(r: &Rules) -> Option<Arc<PodConstraints>> {
    let c = PodConstraints {
        affinity: PodAffinityRules {
            required: r.affinity.iter().map(affinity_term).collect(),
            preferred: vec![],
        },
        anti_affinity: PodAffinityRules {
            required: r.anti.iter().map(affinity_term).collect(),
            preferred: vec![],
        },
        spread: (r.spread.iter())
            .map(|s| TopologySpreadConstraint {
                max_skew: s.max_skew,
                topology_key: s.key.into(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                selector: Some(selector(&s.select)),
                min_domains: s.min_domains,
                node_affinity_policy: policy(s.honor_affinity),
                node_taints_policy: policy(s.honor_taints),
            })
            .collect(),
        host_ports: (r.ports.iter())
            .map(|(protocol, port)| HostPort {
                host_ip: HostPort::WILDCARD.into(),
                protocol: protocol.clone(),
                port: *port,
            })
            .collect(),
        disks: vec![],
        preferred_node_affinity: vec![],
    };
    (!c.is_empty()).then(|| Arc::new(c))
}

fn cpu(milli: i64) -> ResourceList {
    [("cpu".to_string(), milli)].into_iter().collect()
}

fn cluster(case: &Case) -> ClusterSpec {
    let nodes = (case.nodes.iter().enumerate())
        .map(|(i, n)| NodeSpec {
            name: format!("n{i}"),
            labels: n.labels.clone(),
            taints: (n.dedicated)
                .then(|| Taint {
                    key: "dedicated".into(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                })
                .into_iter()
                .collect(),
            allocatable: cpu(64_000),
            ..Default::default()
        })
        .collect();
    let pods = (case.pods.iter())
        .map(|p| PodSpec {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            ours: p.ours,
            group: p.job.map(|j| format!("j{j}")),
            request: cpu(1000),
            rules: PlacementRules {
                node_selector: (p.rules.pool.iter())
                    .map(|pool| ("pool".to_string(), pool.clone()))
                    .collect(),
                tolerations: (p.rules.tolerates_dedicated)
                    .then(|| Toleration {
                        key: "dedicated".into(),
                        operator: TolerationOperator::Exists,
                        value: String::new(),
                        effect: None,
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            },
            phase: if p.node.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            node: p.node.map(|n| format!("n{n}")),
            labels: p.labels.clone(),
            constraints: constraints(&p.rules),
            ..Default::default()
        })
        .collect();
    let groups = (case.jobs.iter().enumerate())
        .map(|(j, &(_, min))| {
            let namespace = (case.pods.iter())
                .find(|p| p.job == Some(j))
                .map(|p| p.namespace.clone())
                .unwrap_or_default();
            GroupSpec {
                namespace,
                name: format!("j{j}"),
                queue: None,
                min_member: min as i64,
                min_task_member: BTreeMap::new(),
                min_resources: None,
                priority: None,
                created_ms: j as i64,
                phase: JobPhase::Inqueue,
                topology: Default::default(),
                sub_groups: Vec::new(),
                schedule_timeout_ms: None,
            }
        })
        .collect();
    ClusterSpec {
        now_ms: 1_000,
        nodes,
        pods,
        groups,
        queues: vec![],
        namespaces: (NAMESPACES.iter())
            .map(|&n| NamespaceSpec {
                name: n.into(),
                labels: [("env".to_string(), env_of(n).to_string())].into(),
            })
            .collect(),
        dra: Default::default(),
        usage: Default::default(),
        device_resource: Default::default(),
    }
}

fn allocate_only() -> Config {
    Config {
        actions: vec![ActionName::Enqueue, ActionName::Allocate],
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("BASALT_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Every binding passes the brute-force filters against the pods bound before it, in the
    /// plan's order; a gang binds at least its minimum or nothing.
    #[test]
    fn no_binding_breaks_a_required_rule(case in case()) {
        let snapshot = Snapshot::build(cluster(&case)).unwrap();
        let plan = schedule(&snapshot, &allocate_only());
        let by_key: BTreeMap<String, &TestPod> = (case.pods.iter())
            .map(|p| (format!("{}/{}", p.namespace, p.name), p))
            .collect();
        let mut placed: Vec<(&TestPod, usize)> = (case.pods.iter())
            .filter_map(|p| Some((p, p.node?)))
            .collect();
        let mut bound_per_job = vec![0usize; case.jobs.len()];
        let mut seen = BTreeSet::new();
        for b in &plan.bindings {
            let pod = by_key[&b.pod];
            prop_assert!(seen.insert(&b.pod), "{} bound twice", b.pod);
            let node: usize = b.node[1..].parse().unwrap();
            let why = violation(&case.nodes, &placed, pod, node);
            prop_assert!(why.is_none(), "{} on {}: {}", b.pod, b.node, why.unwrap());
            bound_per_job[pod.job.unwrap()] += 1;
            placed.push((pod, node));
        }
        for (j, &(_, min)) in case.jobs.iter().enumerate() {
            let n = bound_per_job[j];
            prop_assert!(n == 0 || n >= min, "job j{} bound {} of minimum {}", j, n, min);
        }
    }
}

/// The checker itself catches what it must: a hand-made plan that breaks each rule.
#[test]
fn checker_refuses_each_kind_of_violation() {
    let node = |i: usize, zone: &str| TestNode {
        labels: [
            (HOSTNAME.to_string(), format!("n{i}")),
            ("zone".to_string(), zone.to_string()),
        ]
        .into(),
        dedicated: false,
    };
    let nodes = vec![node(0, "z0"), node(1, "z0"), node(2, "z1")];
    let pod = |name: &str, app: &str, rules: Rules| TestPod {
        namespace: "ns1".into(),
        name: name.into(),
        labels: [("app".to_string(), app.to_string())].into(),
        rules,
        ours: true,
        node: None,
        job: Some(0),
    };
    let anti = |key| Rules {
        anti: vec![Term {
            select: Select::Labels(vec![("app".into(), "a".into())]),
            namespaces: Namespaces::Own,
            key,
        }],
        ..Rules::default()
    };
    let a0 = pod("a0", "a", anti(HOSTNAME));
    let a1 = pod("a1", "a", anti(HOSTNAME));
    assert!(violation(&nodes, &[(&a0, 0)], &a1, 0).is_some());
    assert!(violation(&nodes, &[(&a0, 0)], &a1, 1).is_none());
    // Symmetric: a plain pod may not join a pod whose anti-affinity it matches.
    let plain = pod("p", "a", Rules::default());
    assert!(violation(&nodes, &[(&a0, 0)], &plain, 0).is_some());
    // Zone anti-affinity covers every node of the zone.
    let z = pod("z", "a", anti("zone"));
    assert!(violation(&nodes, &[(&z, 0)], &plain, 1).is_some());
    assert!(violation(&nodes, &[(&z, 0)], &plain, 2).is_none());
    // Affinity: to an existing pod's zone, or anywhere for the first matching pod.
    let follow = Rules {
        affinity: vec![Term {
            select: Select::Labels(vec![("app".into(), "b".into())]),
            namespaces: Namespaces::Own,
            key: "zone",
        }],
        ..Rules::default()
    };
    let b = pod("b", "b", Rules::default());
    let f = pod("f", "b", follow.clone());
    assert!(violation(&nodes, &[(&b, 0)], &f, 2).is_some());
    assert!(violation(&nodes, &[(&b, 0)], &f, 1).is_none());
    assert!(violation(&nodes, &[], &f, 2).is_none(), "first pod");
    let stranger = pod("s", "c", follow);
    assert!(violation(&nodes, &[], &stranger, 2).is_some());
    // Spread over zones with maxSkew 1.
    let spread = Rules {
        spread: vec![Spread {
            max_skew: 1,
            key: "zone",
            select: Select::Labels(vec![("app".into(), "s".into())]),
            min_domains: None,
            honor_affinity: true,
            honor_taints: false,
        }],
        ..Rules::default()
    };
    let s0 = pod("s0", "s", spread.clone());
    let s1 = pod("s1", "s", spread.clone());
    assert!(violation(&nodes, &[(&s0, 0)], &s1, 1).is_some());
    assert!(violation(&nodes, &[(&s0, 0)], &s1, 2).is_none());
    // Ports.
    let port = Rules {
        ports: vec![("TCP".into(), 80)],
        ..Rules::default()
    };
    let w0 = pod("w0", "w", port.clone());
    let w1 = pod("w1", "w", port);
    assert!(violation(&nodes, &[(&w0, 0)], &w1, 0).is_some());
    assert!(violation(&nodes, &[(&w0, 0)], &w1, 1).is_none());
}

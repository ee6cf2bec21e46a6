//! Inter-pod rules through the engine: required pod affinity and anti-affinity (the symmetric
//! rule included), `DoNotSchedule` topology spread, host ports, and their reasons.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::*;

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn labels(items: &[(&str, &str)]) -> BTreeMap<String, String> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A node with 16 CPUs, its hostname label and a zone when given.
fn node(name: &str, zone: Option<&str>) -> NodeSpec {
    let mut l = labels(&[(HOST, name)]);
    if let Some(z) = zone {
        l.insert(ZONE.into(), z.into());
    }
    NodeSpec {
        name: name.into(),
        labels: l,
        allocatable: list(&[("cpu", 16000), ("pods", 1000)]),
        ..Default::default()
    }
}

fn pod(name: &str, group: Option<&str>, l: &[(&str, &str)], c: PodConstraints) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        group: group.map(Into::into),
        request: list(&[("cpu", 1000)]),
        labels: labels(l),
        constraints: (!c.is_empty()).then(|| Arc::new(c)),
        ..Default::default()
    }
}

/// A bound pod of another scheduler.
fn foreign(name: &str, node: &str, l: &[(&str, &str)], c: PodConstraints) -> PodSpec {
    PodSpec {
        ours: false,
        node: Some(node.into()),
        phase: PodPhase::Running,
        ..pod(name, None, l, c)
    }
}

fn group(name: &str, min: i64) -> GroupSpec {
    GroupSpec {
        namespace: "ns".into(),
        name: name.into(),
        queue: None,
        min_member: min,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: None,
        created_ms: 0,
        phase: JobPhase::Inqueue,
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    }
}

fn term(l: &[(&str, &str)], key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: Some(LabelSelector::from_labels(l.iter().copied())),
        topology_key: key.into(),
        ..Default::default()
    }
}

fn anti(l: &[(&str, &str)], key: &str) -> PodConstraints {
    PodConstraints {
        anti_affinity: PodAffinityRules {
            required: vec![term(l, key)],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn affinity(l: &[(&str, &str)], key: &str) -> PodConstraints {
    PodConstraints {
        affinity: PodAffinityRules {
            required: vec![term(l, key)],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn spread(l: &[(&str, &str)], key: &str, max_skew: u32) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: Some(LabelSelector::from_labels(l.iter().copied())),
        min_domains: None,
        node_affinity_policy: InclusionPolicy::Honor,
        node_taints_policy: InclusionPolicy::Ignore,
    }
}

fn spreading(c: TopologySpreadConstraint) -> PodConstraints {
    PodConstraints {
        spread: vec![c],
        ..Default::default()
    }
}

fn port(p: u16) -> PodConstraints {
    PodConstraints {
        host_ports: vec![HostPort {
            host_ip: HostPort::WILDCARD.into(),
            protocol: "TCP".into(),
            port: p,
        }],
        ..Default::default()
    }
}

/// Ready once every member holds a node: all or nothing.
struct Gang;

impl JobReady for Gang {
    fn name(&self) -> &str {
        "gang"
    }
    fn ready(&self, session: &SessionView, job: JobId) -> bool {
        session.holding(job) >= session.snapshot.job(job).min_member
    }
}

/// Node selectors and NoSchedule taints, as the plugins' static filters check them.
struct Static;

impl NodeFilter for Static {
    fn name(&self) -> &str {
        "static"
    }
    fn filter(&self, rules: &PlacementRules, node: &Node) -> Result<(), Refusal> {
        if (rules.node_selector.iter()).any(|(k, v)| node.labels.get(k) != Some(v)) {
            return Err(Refusal::NodeSelector);
        }
        let tolerated = |t: &Taint| rules.tolerations.iter().any(|tol| tol.tolerates(t));
        if let Some(taint) = (0..).zip(&node.taints).find(|(_, t)| !tolerated(t)) {
            return Err(Refusal::UntoleratedTaint {
                node: node.id,
                taint: taint.0,
            });
        }
        Ok(())
    }
}

fn framework() -> Framework {
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    fw.job_ready.push(Box::new(Gang));
    fw.filters.push(Box::new(Static));
    fw
}

fn spec(nodes: Vec<NodeSpec>, pods: Vec<PodSpec>, groups: Vec<GroupSpec>) -> ClusterSpec {
    ClusterSpec {
        nodes,
        pods,
        groups,
        ..Default::default()
    }
}

fn plan(spec: ClusterSpec) -> Plan {
    let snap = Snapshot::build(spec).expect("builds");
    schedule(&snap, &framework(), &mut Warm::default())
}

/// Pod name → node name of the plan's bindings.
fn placed(plan: &Plan) -> BTreeMap<String, String> {
    (plan.bindings.iter())
        .map(|b| (b.pod.clone(), b.node.clone()))
        .collect()
}

fn message(plan: &Plan) -> String {
    (plan.pod_groups.iter())
        .flat_map(|g| &g.conditions)
        .map(|c| c.message.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A gang of `size` members, each with required hostname anti-affinity on the gang's label.
fn anti_gang(size: usize) -> (Vec<PodSpec>, GroupSpec) {
    let pods = (0..size)
        .map(|i| {
            let c = anti(&[("gang", "g")], HOST);
            pod(&format!("p{i:03}"), Some("g"), &[("gang", "g")], c)
        })
        .collect();
    (pods, group("g", size as i64))
}

#[test]
fn an_anti_affinity_gang_goes_one_member_per_node() {
    let nodes: Vec<NodeSpec> = (0..4).map(|i| node(&format!("n{i}"), None)).collect();
    let (pods, g) = anti_gang(4);
    let p = plan(spec(nodes.clone(), pods, vec![g]));
    let at = placed(&p);
    assert_eq!(at.len(), 4);
    let distinct: std::collections::BTreeSet<&String> = at.values().collect();
    assert_eq!(distinct.len(), 4, "{at:?}");

    // Five members on four nodes: none is placed, and the reason says why.
    let (pods, g) = anti_gang(5);
    let p = plan(spec(nodes, pods, vec![g]));
    assert!(p.bindings.is_empty(), "{:?}", p.bindings);
    assert!(
        message(&p).contains("4 didn't match pod anti-affinity rules"),
        "{}",
        message(&p)
    );
}

/// Fullest node first: without anti-affinity a gang would pile onto one node.
struct Packing;

impl NodeOrder for Packing {
    fn name(&self) -> &str {
        "packing"
    }
    fn key(&self, allocatable: &Resources, used: &Resources) -> u64 {
        u64::MAX - LeastAllocated.key(allocatable, used)
    }
}

#[test]
fn a_512_member_anti_affinity_gang_takes_512_nodes() {
    let nodes: Vec<NodeSpec> = (0..512).map(|i| node(&format!("n{i:03}"), None)).collect();
    let (pods, g) = anti_gang(512);
    let snap = Snapshot::build(spec(nodes, pods, vec![g])).expect("builds");
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(Packing));
    fw.job_ready.push(Box::new(Gang));
    let p = schedule(&snap, &fw, &mut Warm::default());
    let at = placed(&p);
    assert_eq!(at.len(), 512);
    let distinct: std::collections::BTreeSet<&String> = at.values().collect();
    assert_eq!(distinct.len(), 512);
}

#[test]
fn affinity_follows_an_existing_pod_into_its_zone() {
    let nodes = vec![
        node("a0", Some("a")),
        node("a1", Some("a")),
        node("b0", Some("b")),
    ];
    let mut db = foreign("db", "b0", &[("app", "db")], PodConstraints::default());
    // The db pod makes b0 the fullest node: least-allocated alone would avoid it.
    db.request = list(&[("cpu", 8000)]);
    let web = pod("web", None, &[], affinity(&[("app", "db")], ZONE));
    let p = plan(spec(nodes, vec![db, web], vec![]));
    assert_eq!(placed(&p)["ns/web"], "b0");
}

#[test]
fn the_first_pod_of_a_self_affine_group_may_go_anywhere() {
    let nodes = vec![node("a0", Some("a")), node("b0", Some("b"))];
    // It selects itself: nothing else matches, so it may start the group.
    let first = pod(
        "first",
        None,
        &[("app", "x")],
        affinity(&[("app", "x")], ZONE),
    );
    let p = plan(spec(nodes.clone(), vec![first], vec![]));
    assert_eq!(p.bindings.len(), 1);
    // It selects what does not exist and is not itself: no node.
    let lonely = pod(
        "lonely",
        None,
        &[("app", "y")],
        affinity(&[("app", "x")], ZONE),
    );
    let p = plan(spec(nodes, vec![lonely], vec![]));
    assert!(p.bindings.is_empty());
    assert!(
        message(&p).contains("2 didn't match pod affinity rules"),
        "{}",
        message(&p)
    );
}

#[test]
fn an_existing_pods_anti_affinity_repels_pods_it_selects() {
    let nodes = vec![node("n0", None), node("n1", None)];
    let mut guard = foreign("guard", "n1", &[], anti(&[("app", "web")], HOST));
    guard.request = list(&[("cpu", 100)]);
    // n0 is fuller, so least-allocated alone would pick n1.
    let mut filler = foreign("filler", "n0", &[], PodConstraints::default());
    filler.request = list(&[("cpu", 8000)]);
    let web = pod("web", None, &[("app", "web")], PodConstraints::default());
    let p = plan(spec(
        nodes.clone(),
        vec![guard.clone(), filler, web.clone()],
        vec![],
    ));
    assert_eq!(placed(&p)["ns/web"], "n0");
    // Only the guarded node: refused, with kube's wording.
    let p = plan(spec(vec![node("n1", None)], vec![guard, web], vec![]));
    assert!(p.bindings.is_empty());
    assert!(
        message(&p).contains("1 didn't satisfy existing pods anti-affinity rules"),
        "{}",
        message(&p)
    );
}

#[test]
fn anti_affinity_counts_only_the_namespaces_it_names() {
    let nodes = vec![node("n0", None)];
    let mut other = foreign("other", "n0", &[("app", "web")], PodConstraints::default());
    other.namespace = "elsewhere".into();
    // Its own namespace only: the pod elsewhere does not count.
    let web = pod(
        "web",
        None,
        &[("app", "web")],
        anti(&[("app", "web")], HOST),
    );
    let p = plan(spec(
        nodes.clone(),
        vec![other.clone(), web.clone()],
        vec![],
    ));
    assert_eq!(p.bindings.len(), 1);
    // A namespace selector over the namespaces' labels brings it in.
    let mut c = anti(&[("app", "web")], HOST);
    c.anti_affinity.required[0].namespace_selector =
        Some(LabelSelector::from_labels([("team", "t")]));
    let web = pod("web", None, &[("app", "web")], c);
    let mut s = spec(nodes, vec![other, web], vec![]);
    s.namespaces = vec![NamespaceSpec {
        name: "elsewhere".into(),
        labels: labels(&[("team", "t")]),
    }];
    assert!(plan(s).bindings.is_empty());
}

/// Matching pods per zone after the plan, existing ones included.
fn per_zone(p: &Plan, existing: &[(&str, u32)]) -> BTreeMap<String, u32> {
    let mut zones: BTreeMap<String, u32> =
        existing.iter().map(|(z, n)| (z.to_string(), *n)).collect();
    for node in placed(p).values() {
        *zones.entry(node[..1].to_string()).or_default() += 1;
    }
    zones
}

#[test]
fn spread_keeps_the_skew_within_max_skew_counting_existing_pods() {
    // Zone a has two existing matching pods; zone b is small, so least-allocated prefers a.
    let mut nodes = vec![
        node("a0", Some("a")),
        node("a1", Some("a")),
        node("b0", Some("b")),
    ];
    nodes[2].allocatable = list(&[("cpu", 4000), ("pods", 1000)]);
    let mut pods = vec![
        foreign("x0", "a0", &[("app", "s")], PodConstraints::default()),
        foreign("x1", "a1", &[("app", "s")], PodConstraints::default()),
    ];
    for i in 0..3 {
        let c = spreading(spread(&[("app", "s")], ZONE, 1));
        pods.push(pod(&format!("s{i}"), Some("g"), &[("app", "s")], c));
    }
    let p = plan(spec(nodes, pods, vec![group("g", 3)]));
    assert_eq!(p.bindings.len(), 3, "{}", message(&p));
    let zones = per_zone(&p, &[("a", 2)]);
    assert!(zones["a"].abs_diff(zones["b"]) <= 1, "{zones:?}");
}

#[test]
fn with_fewer_domains_than_min_domains_each_takes_max_skew() {
    let nodes = vec![node("a0", Some("a")), node("a1", Some("a"))];
    let pods = |min_domains| {
        (0..3)
            .map(|i| {
                let mut c = spread(&[("app", "s")], ZONE, 1);
                c.min_domains = min_domains;
                pod(&format!("s{i}"), None, &[("app", "s")], spreading(c))
            })
            .collect::<Vec<_>>()
    };
    // One zone: the skew within it is always 0.
    assert_eq!(
        plan(spec(nodes.clone(), pods(None), vec![])).bindings.len(),
        3
    );
    // Two domains wanted, one exists: the global minimum is 0, so the zone takes one pod.
    let p = plan(spec(nodes, pods(Some(2)), vec![]));
    assert_eq!(p.bindings.len(), 1);
    assert!(
        message(&p).contains("2 didn't match pod topology spread constraints"),
        "{}",
        message(&p)
    );
}

#[test]
fn inclusion_policies_decide_which_nodes_are_domains() {
    let mut nodes = vec![node("a0", Some("a")), node("b0", Some("b"))];
    nodes[0].labels.insert("pool".into(), "x".into());
    let pods = |affinity_policy, taints_policy, selector: bool| {
        (0..3)
            .map(|i| {
                let mut c = spread(&[("app", "s")], ZONE, 1);
                c.node_affinity_policy = affinity_policy;
                c.node_taints_policy = taints_policy;
                let mut p = pod(&format!("s{i}"), None, &[("app", "s")], spreading(c));
                if selector {
                    p.rules.node_selector = labels(&[("pool", "x")]);
                }
                p
            })
            .collect::<Vec<_>>()
    };
    use InclusionPolicy::{Honor, Ignore};
    // Only a0 passes the node selector. Honored, zone b is no domain: all three go to a.
    let p = plan(spec(nodes.clone(), pods(Honor, Ignore, true), vec![]));
    assert_eq!(p.bindings.len(), 3);
    // Ignored, zone b counts with 0 pods: a takes one.
    let p = plan(spec(nodes.clone(), pods(Ignore, Ignore, true), vec![]));
    assert_eq!(p.bindings.len(), 1);

    // b0 tainted and not tolerated: as a domain only while taints are ignored.
    nodes[1].taints = vec![Taint {
        key: "k".into(),
        value: "v".into(),
        effect: TaintEffect::NoSchedule,
    }];
    let p = plan(spec(nodes.clone(), pods(Honor, Honor, false), vec![]));
    assert_eq!(p.bindings.len(), 3);
    let p = plan(spec(nodes, pods(Honor, Ignore, false), vec![]));
    assert_eq!(p.bindings.len(), 1);
}

#[test]
fn a_node_without_the_spread_key_is_refused() {
    let nodes = vec![node("n0", None), node("n1", None)];
    let c = spreading(spread(&[("app", "s")], ZONE, 1));
    let p = plan(spec(
        nodes,
        vec![pod("s", None, &[("app", "s")], c)],
        vec![],
    ));
    assert!(p.bindings.is_empty());
    assert!(
        message(&p)
            .contains("2 didn't match pod topology spread constraints (missing required label)"),
        "{}",
        message(&p)
    );
}

#[test]
fn host_ports_conflict_with_foreign_pods_and_inside_a_gang() {
    let nodes = vec![node("n0", None), node("n1", None)];
    let mut holder = foreign("holder", "n1", &[], port(8080));
    holder.request = list(&[("cpu", 100)]);
    let mut filler = foreign("filler", "n0", &[], PodConstraints::default());
    filler.request = list(&[("cpu", 8000)]);
    let web = pod("web", None, &[], port(8080));
    let p = plan(spec(
        nodes.clone(),
        vec![holder.clone(), filler, web.clone()],
        vec![],
    ));
    assert_eq!(placed(&p)["ns/web"], "n0");
    let p = plan(spec(vec![node("n1", None)], vec![holder, web], vec![]));
    assert!(p.bindings.is_empty());
    assert!(
        message(&p).contains("1 didn't have free ports for the requested pod ports"),
        "{}",
        message(&p)
    );

    // Two members asking the same port: different nodes, or none on one node.
    let gang = || {
        (0..2)
            .map(|i| pod(&format!("m{i}"), Some("g"), &[], port(9000)))
            .collect()
    };
    let p = plan(spec(nodes, gang(), vec![group("g", 2)]));
    let at = placed(&p);
    assert_eq!(at.len(), 2);
    assert_ne!(at["ns/m0"], at["ns/m1"]);
    let p = plan(spec(vec![node("n0", None)], gang(), vec![group("g", 2)]));
    assert!(p.bindings.is_empty());
}

#[test]
fn a_failed_affinity_pod_is_tried_again_once_its_peer_is_placed() {
    let nodes = vec![node("n0", None)];
    let follower = pod("a-follower", None, &[], affinity(&[("app", "db")], HOST));
    let db = pod("b-db", None, &[("app", "db")], PodConstraints::default());
    let snap = Snapshot::build(spec(nodes, vec![follower, db], vec![])).unwrap();
    let fw = framework();
    let mut s = Session::new(&snap, &fw);
    let (follower, db) = (TaskId(0), TaskId(1));
    assert_eq!(s.find_node(follower), None);
    let mut stmt = s.statement();
    let n = s.find_node(db).unwrap();
    s.allocate(&mut stmt, db, n);
    // Nothing was given back, yet the follower now fits: its failure was not cached.
    assert_eq!(s.find_node(follower), Some(n));
    s.discard(stmt);
    assert_eq!(s.find_node(follower), None);
}

#[test]
fn discard_gives_back_the_counts_of_undone_members() {
    let nodes = vec![node("n0", None)];
    let (pods, g) = anti_gang(2);
    let snap = Snapshot::build(spec(nodes, pods, vec![g])).unwrap();
    let fw = framework();
    let mut s = Session::new(&snap, &fw);
    let n0 = NodeId(0);
    assert!(s.pod_rules_allow(TaskId(1), n0));
    let mut stmt = s.statement();
    s.allocate(&mut stmt, TaskId(0), n0);
    assert!(!s.pod_rules_allow(TaskId(1), n0));
    s.discard(stmt);
    assert!(s.pod_rules_allow(TaskId(1), n0));
    assert!(s.pod_rules_allow(TaskId(0), n0));
}

#[test]
fn preference_points_follow_preferred_terms() {
    let nodes = vec![node("a0", Some("a")), node("b0", Some("b"))];
    let db = foreign("db", "b0", &[("app", "db")], PodConstraints::default());
    let mut c = PodConstraints::default();
    c.affinity.preferred = vec![WeightedPodAffinityTerm {
        weight: 40,
        term: term(&[("app", "db")], ZONE),
    }];
    let web = pod("web", None, &[], c);
    let plain = pod("plain", None, &[], PodConstraints::default());
    let snap = Snapshot::build(spec(nodes, vec![db, plain, web], vec![])).unwrap();
    let mut fw = framework();
    fw.preferences.pod_affinity = 2;
    let s = Session::new(&snap, &fw);
    let (plain, web) = (TaskId(0), TaskId(1));
    assert!(s.has_pod_preferences(web));
    assert!(!s.has_pod_preferences(plain));
    // Weight 40, times the framework's pod-affinity weight 2.
    assert_eq!(s.pod_preference_points(web, NodeId(1)), 80);
    assert_eq!(s.pod_preference_points(web, NodeId(0)), 0);
    assert_eq!(s.pod_preference_ceiling(web), 80);
}

//! kube-scheduler's own test cases, ported: PodTopologySpread skips terminating pods
//! (`filtering_test.go` and `scoring_test.go`, "terminating Pods should be excluded") while
//! InterPodAffinity still counts them, and VolumeRestrictions' disk conflicts
//! (`volume_restrictions_test.go`: `TestGCEDiskConflicts`, `TestAWSDiskConflicts`,
//! `TestRBDDiskConflicts`, `TestISCSIDiskConflicts`, with read-only variants added).

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::*;

const HOST: &str = "kubernetes.io/hostname";

fn labels(items: &[(&str, &str)]) -> BTreeMap<String, String> {
    (items.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A node with 16 CPUs and its hostname label, also under the key `node` (kube's tests).
fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        labels: labels(&[(HOST, name), ("node", name)]),
        allocatable: [("cpu".to_string(), 16000), ("pods".to_string(), 1000)].into(),
        ..Default::default()
    }
}

fn pending(name: &str, group: Option<&str>, l: &[(&str, &str)], c: PodConstraints) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        group: group.map(Into::into),
        request: [("cpu".to_string(), 1000)].into(),
        labels: labels(l),
        constraints: (!c.is_empty()).then(|| Arc::new(c)),
        ..Default::default()
    }
}

/// A running pod on `node`: ours when `ours`, else another scheduler's.
fn running(name: &str, node: &str, ours: bool, l: &[(&str, &str)], c: PodConstraints) -> PodSpec {
    PodSpec {
        ours,
        node: Some(node.into()),
        phase: PodPhase::Running,
        ..pending(name, None, l, c)
    }
}

fn terminating(p: PodSpec) -> PodSpec {
    PodSpec {
        terminating: true,
        ..p
    }
}

/// `foo Exists`, the selector of kube's spread cases.
fn foo_exists() -> LabelSelector {
    LabelSelector {
        requirements: vec![SelectorRequirement {
            key: "foo".into(),
            operator: SelectorOperator::Exists,
            values: Vec::new(),
        }],
    }
}

fn spread_on(key: &str, when: WhenUnsatisfiable) -> PodConstraints {
    PodConstraints {
        spread: vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: when,
            selector: Some(foo_exists()),
            min_domains: None,
            node_affinity_policy: InclusionPolicy::Honor,
            node_taints_policy: InclusionPolicy::Ignore,
        }],
        ..Default::default()
    }
}

fn anti_foo(key: &str) -> PodConstraints {
    PodConstraints {
        anti_affinity: PodAffinityRules {
            required: vec![PodAffinityTerm {
                selector: Some(foo_exists()),
                topology_key: key.into(),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn disks(d: &[Disk]) -> PodConstraints {
    PodConstraints {
        disks: d.to_vec(),
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

fn framework() -> Framework {
    let mut fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
    fw.preferences.topology_spread = 1;
    fw
}

fn snapshot(nodes: Vec<NodeSpec>, pods: Vec<PodSpec>, groups: Vec<GroupSpec>) -> Snapshot {
    let spec = ClusterSpec {
        nodes,
        pods,
        groups,
        ..Default::default()
    };
    Snapshot::build(spec).expect("builds")
}

/// A task by pod name.
fn task(snap: &Snapshot, name: &str) -> TaskId {
    let full = format!("ns/{name}");
    (snap.tasks.iter())
        .find(|t| *t.name == *full)
        .expect("task")
        .id
}

/// kube's filtering case: p-a (terminating) on node-a and p-b on node-b match `foo`; the pod
/// spreads with maxSkew 1 per `node`. Not counting p-a, node-a has 0 and node-b 1: node-b
/// would be skewed 2. p-a is ours here, p-b another scheduler's: both ways count alike.
#[test]
fn spread_does_not_count_terminating_pods_when_filtering() {
    let snap = snapshot(
        vec![node("node-a"), node("node-b")],
        vec![
            terminating(running(
                "p-a",
                "node-a",
                true,
                &[("foo", "")],
                Default::default(),
            )),
            running("p-b", "node-b", false, &[("foo", "")], Default::default()),
            pending(
                "p",
                None,
                &[("foo", "")],
                spread_on("node", WhenUnsatisfiable::DoNotSchedule),
            ),
        ],
        vec![],
    );
    let fw = framework();
    let s = Session::new(&snap, &fw);
    let p = task(&snap, "p");
    assert!(s.pod_rules_allow(p, NodeId(0)), "node-a");
    assert!(!s.pod_rules_allow(p, NodeId(1)), "node-b");
}

/// kube's scoring case: the same pods, `ScheduleAnyway` per hostname: node-a scores 100,
/// node-b 0.
#[test]
fn spread_does_not_count_terminating_pods_when_scoring() {
    let snap = snapshot(
        vec![node("node-a"), node("node-b")],
        vec![
            terminating(running(
                "p-a",
                "node-a",
                false,
                &[("foo", "")],
                Default::default(),
            )),
            running("p-b", "node-b", false, &[("foo", "")], Default::default()),
            pending(
                "p",
                None,
                &[("foo", "")],
                spread_on(HOST, WhenUnsatisfiable::ScheduleAnyway),
            ),
        ],
        vec![],
    );
    let fw = framework();
    let s = Session::new(&snap, &fw);
    let p = task(&snap, "p");
    assert_eq!(s.pod_preference_points(p, NodeId(0)), 100);
    assert_eq!(s.pod_preference_points(p, NodeId(1)), 0);
}

/// InterPodAffinity counts terminating pods (kube closed #111793 as intended, #112098 not
/// merged): a pod whose anti-affinity and spread select the same pods (one counter before
/// terminating pods were told apart) still avoids node-a for its anti-affinity.
#[test]
fn pod_anti_affinity_still_counts_terminating_pods() {
    let mut c = anti_foo(HOST);
    c.spread = spread_on(HOST, WhenUnsatisfiable::DoNotSchedule).spread;
    let snap = snapshot(
        vec![node("node-a"), node("node-b")],
        vec![
            terminating(running(
                "p-a",
                "node-a",
                false,
                &[("foo", "")],
                Default::default(),
            )),
            pending("p", None, &[("foo", "")], c),
        ],
        vec![],
    );
    let fw = framework();
    let s = Session::new(&snap, &fw);
    let p = task(&snap, "p");
    assert!(!s.pod_rules_allow(p, NodeId(0)), "anti-affinity sees p-a");
    assert!(s.pod_rules_allow(p, NodeId(1)));
}

fn gce(name: &str, read_only: bool) -> Disk {
    Disk::GcePd {
        pd_name: name.into(),
        read_only,
    }
}

fn ebs(id: &str) -> Disk {
    Disk::AwsEbs {
        volume_id: id.into(),
    }
}

fn rbd(monitors: &[&str], read_only: bool) -> Disk {
    Disk::Rbd {
        monitors: monitors.iter().map(|m| m.to_string()).collect(),
        pool: "foo".into(),
        image: "bar".into(),
        read_only,
    }
}

fn iscsi(iqn: &str, read_only: bool) -> Disk {
    Disk::Iscsi {
        iqn: iqn.into(),
        read_only,
    }
}

/// Whether a pending pod mounting `incoming` may join a node where another scheduler's pod
/// mounts `existing`.
fn allowed(existing: &[Disk], incoming: &[Disk]) -> bool {
    let snap = snapshot(
        vec![node("n")],
        vec![
            running("holder", "n", false, &[], disks(existing)),
            pending("p", None, &[], disks(incoming)),
        ],
        vec![],
    );
    let fw = framework();
    let s = Session::new(&snap, &fw);
    s.pod_rules_allow(task(&snap, "p"), NodeId(0))
}

#[test]
fn disks_conflict_as_volume_restrictions_says() {
    const IQN1: &str = "iqn.2016-12.server:storage.target01";
    const IQN2: &str = "iqn.2017-12.server:storage.target01";
    let cases: [(&str, Vec<Disk>, Vec<Disk>, bool); 16] = [
        ("nothing", vec![], vec![], true),
        ("one state", vec![gce("foo", false)], vec![], true),
        (
            "gce same state",
            vec![gce("foo", false)],
            vec![gce("foo", false)],
            false,
        ),
        (
            "gce different state",
            vec![gce("foo", false)],
            vec![gce("bar", false)],
            true,
        ),
        (
            "gce both read-only",
            vec![gce("foo", true)],
            vec![gce("foo", true)],
            true,
        ),
        (
            "gce one read-only",
            vec![gce("foo", true)],
            vec![gce("foo", false)],
            false,
        ),
        ("aws same state", vec![ebs("foo")], vec![ebs("foo")], false),
        (
            "aws different state",
            vec![ebs("foo")],
            vec![ebs("bar")],
            true,
        ),
        (
            "rbd same state",
            vec![rbd(&["a", "b"], false)],
            vec![rbd(&["a", "b"], false)],
            false,
        ),
        (
            "rbd different monitors",
            vec![rbd(&["a", "b"], false)],
            vec![rbd(&["c", "d"], false)],
            true,
        ),
        (
            "rbd one monitor shared",
            vec![rbd(&["a", "b"], true)],
            vec![rbd(&["b", "c"], false)],
            false,
        ),
        (
            "rbd both read-only",
            vec![rbd(&["a", "b"], true)],
            vec![rbd(&["b"], true)],
            true,
        ),
        (
            "iscsi same state",
            vec![iscsi(IQN1, false)],
            vec![iscsi(IQN1, false)],
            false,
        ),
        (
            "iscsi different iqn",
            vec![iscsi(IQN1, false)],
            vec![iscsi(IQN2, false)],
            true,
        ),
        (
            "iscsi both read-only",
            vec![iscsi(IQN1, true)],
            vec![iscsi(IQN1, true)],
            true,
        ),
        (
            "kinds never mix",
            vec![gce("foo", false)],
            vec![ebs("foo")],
            true,
        ),
    ];
    for (name, existing, incoming, want) in cases {
        assert_eq!(allowed(&existing, &incoming), want, "{name}");
    }
}

/// Two members of one gang mounting the same EBS volume go to two nodes; on one node the
/// second is refused in kube's words.
#[test]
fn a_gang_mounting_one_ebs_volume_takes_two_nodes() {
    let gang = || {
        (0..2)
            .map(|i| pending(&format!("m{i}"), Some("g"), &[], disks(&[ebs("vol-1")])))
            .collect()
    };
    let group = || GroupSpec::new("ns", "g", 2);
    let mut fw = framework();
    fw.job_ready.push(Box::new(Gang));
    let snap = snapshot(vec![node("n0"), node("n1")], gang(), vec![group()]);
    let plan = schedule(&snap, &fw, &mut Warm::default());
    let nodes: Vec<&str> = plan.bindings.iter().map(|b| b.node.as_str()).collect();
    assert_eq!(nodes.len(), 2);
    assert_ne!(nodes[0], nodes[1]);
    let snap = snapshot(vec![node("n0")], gang(), vec![group()]);
    let plan = schedule(&snap, &fw, &mut Warm::default());
    assert!(plan.bindings.is_empty());
    let messages: Vec<&str> = (plan.pod_groups.iter())
        .flat_map(|g| &g.conditions)
        .map(|c| c.message.as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("1 had no available disk")),
        "{messages:?}"
    );
}

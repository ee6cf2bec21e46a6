//! A Warm never changes a plan: a session starts from what it carries only for snapshots of the
//! nodes it came from, so a carried Warm gives what a cold one does, whatever it was used for.

use std::collections::BTreeMap;

use basalt_engine::*;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn node(name: &str, gpus: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        allocatable: list(&[("cpu", 8000), ("nvidia.com/gpu", gpus)]),
        ..Default::default()
    }
}

/// A builder of `gpus`-GPU nodes holding a gang of two pods of 4 GPUs each.
fn builder(nodes: usize, gpus: i64) -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new(
        "nvidia.com/gpu",
        (0..nodes).map(|i| node(&format!("n{i}"), gpus)).collect(),
    )
    .unwrap();
    b.set_group(GroupSpec {
        namespace: "ns".into(),
        name: "g".into(),
        queue: None,
        min_member: 2,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: None,
        created_ms: 0,
        phase: JobPhase::Inqueue,
        topology: Default::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    });
    for i in 0..2 {
        b.set_pod(PodSpec {
            namespace: "ns".into(),
            name: format!("p{i}"),
            ours: true,
            group: Some("g".into()),
            request: list(&[("cpu", 1000), ("nvidia.com/gpu", 4)]),
            ..Default::default()
        });
    }
    b
}

fn framework() -> Framework {
    Framework::new(vec![Action::Allocate], Box::new(LeastAllocated))
}

fn cold(snapshot: &Snapshot, fw: &Framework) -> Plan {
    schedule(snapshot, fw, &mut Warm::default())
}

/// Two builders of as many nodes take turns with one Warm: the 4-GPU pods fit only the big
/// nodes, which an index carried from the small ones would deny them.
#[test]
fn a_warm_of_other_nodes_is_not_used() {
    let fw = framework();
    let mut warm = Warm::default();
    let (mut small, mut big) = (builder(3, 2), builder(3, 8));
    for now in 0..3 {
        for b in [&mut small, &mut big] {
            let snapshot = b.build(now, &[]).unwrap();
            assert_eq!(schedule(snapshot, &fw, &mut warm), cold(snapshot, &fw));
        }
    }
    let snapshot = big.build(3, &[]).unwrap();
    assert_eq!(schedule(snapshot, &fw, &mut warm).bindings.len(), 2);
}

/// A node that grows is a node of another version: what the Warm carries of it is not used.
#[test]
fn a_warm_follows_node_changes() {
    let fw = framework();
    let mut warm = Warm::default();
    let mut b = builder(2, 2);
    let before = b.build(0, &[]).unwrap();
    assert!(schedule(before, &fw, &mut warm).bindings.is_empty());
    b.update_node(node("n0", 8)).unwrap();
    let after = b.build(1, &[]).unwrap();
    let plan = schedule(after, &fw, &mut warm);
    assert_eq!(plan, cold(after, &fw));
    assert_eq!(plan.bindings.len(), 2);
}

/// A node order of one key for every node.
struct Constant;

impl NodeOrder for Constant {
    fn name(&self) -> &str {
        "constant"
    }
    fn key(&self, _: &Resources, _: &Resources) -> u64 {
        7
    }
}

/// A Warm is for one framework; debug builds catch one carried to a framework of another node
/// order.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "a Warm is for one framework only")]
fn a_warm_carried_to_another_framework_is_caught() {
    let mut warm = Warm::default();
    let mut b = builder(2, 2);
    schedule(b.build(0, &[]).unwrap(), &framework(), &mut warm);
    let other = Framework::new(vec![Action::Allocate], Box::new(Constant));
    schedule(b.build(1, &[]).unwrap(), &other, &mut warm);
}

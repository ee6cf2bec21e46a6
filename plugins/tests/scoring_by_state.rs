//! The pod-aware search scores one node per state when the scorers read nodes only through
//! their state (`NodeScorer::by_state`): on clusters of many alike nodes it must choose
//! exactly what scoring every node chooses, whatever the labels, reservations and bound pods
//! that make alike nodes differ in what they may take. When the scorers also read tasks only
//! through their shape (`NodeScorer::by_shape`), each state is scored once per shape.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use basalt_engine::devices::{HeldDevice, Sharing};
use basalt_engine::{
    ClusterSpec, Gpu, NodeId, NodeScorer, NodeSpec, PodPhase, PodSpec, ResourceList, Score,
    SessionView, Snapshot, TaskId, Warm,
};
use basalt_plugins::fragmentation::{Fragmentation, Rule, Workload};
use basalt_plugins::{framework, Config};
use proptest::prelude::*;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The default fragmentation scorer, made to say it reads each node as a node of its own.
struct PerNode(Fragmentation);

struct PerNodeScorer<'s>(Box<dyn NodeScorer + 's>);

impl Score for PerNode {
    fn name(&self) -> &str {
        "per-node"
    }
    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>> {
        let inner = self.0.prepare(session)?;
        Some(Box::new(PerNodeScorer(inner)))
    }
}

impl NodeScorer for PerNodeScorer<'_> {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, devices: u64) -> i64 {
        self.0.score(session, task, node, devices)
    }
}

/// Nodes of two kinds in two zones, some with pods bound to shares of their devices.
fn cluster() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec((0..2usize, 0..2usize, 0..4u32), 2..=14),
        prop::collection::vec(
            (0..6usize, 0..4usize, proptest::bool::weighted(0.2)),
            1..=30,
        ),
    )
        .prop_map(|(nodes, asks)| {
            let mut pods = Vec::new();
            let nodes: Vec<NodeSpec> = (nodes.iter().enumerate())
                .map(|(i, &(kind, zone, busy))| {
                    let name = format!("n{i:02}");
                    let (devices, slots, memory) = [(4u32, 4u32, 81_920u64), (2, 2, 40_960)][kind];
                    let gpus: Vec<Gpu> = (0..devices)
                        .map(|d| Gpu {
                            uuid: Some(format!("{name}-{d}")),
                            model: Some(["H100", "A100"][kind].into()),
                            memory_mib: Some(memory),
                            slots,
                            nvlink_domain: d / 2,
                            ..Gpu::new(d)
                        })
                        .collect();
                    // `busy` pods bound to a fifth of a device each, on the first devices.
                    for b in 0..busy.min(devices) {
                        pods.push(read_asks(PodSpec {
                            namespace: "ns".into(),
                            name: format!("bound-{i}-{b}"),
                            ours: true,
                            request: list(&[
                                ("cpu", 1000),
                                ("nvidia.com/gpu", 1),
                                ("nvidia.com/gpucores", 20),
                                ("nvidia.com/gpumem-percentage", 20),
                            ]),
                            phase: PodPhase::Running,
                            node: Some(name.clone()),
                            held_devices: vec![HeldDevice {
                                uuid: format!("{name}-{b}"),
                                memory_mib: (memory / 5) as u32,
                                cores: 20,
                            }],
                            created_ms: 1,
                            ..Default::default()
                        }));
                    }
                    NodeSpec {
                        name,
                        labels: [("zone".to_string(), format!("z{zone}"))].into(),
                        allocatable: list(&[
                            ("cpu", 32_000),
                            ("nvidia.com/gpu", (devices * slots) as i64),
                        ]),
                        gpus: Some(gpus),
                        sharing: Sharing::Hami,
                        shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
                        ..Default::default()
                    }
                })
                .collect();
            for (k, &(shape, zone, pinned)) in asks.iter().enumerate() {
                // Whole, half, quarter, a fifth with 8 GiB, two halves, CPU only.
                let (count, percent) =
                    [(1, 100), (1, 50), (1, 25), (1, 20), (2, 50), (0, 0)][shape];
                let mut request = list(&[("cpu", 2000), ("nvidia.com/gpu", count)]);
                if count > 0 && percent < 100 {
                    request.insert("nvidia.com/gpucores".into(), percent);
                    request.insert("nvidia.com/gpumem-percentage".into(), percent);
                }
                let mut p = read_asks(PodSpec {
                    namespace: "ns".into(),
                    name: format!("p{k:02}"),
                    ours: true,
                    request,
                    created_ms: 2 + k as i64,
                    ..Default::default()
                });
                if pinned || zone == 3 {
                    p.rules
                        .node_selector
                        .insert("zone".into(), format!("z{}", zone % 2));
                }
                pods.push(p);
            }
            ClusterSpec {
                device_resource: "nvidia.com/gpu".into(),
                nodes,
                pods,
                ..Default::default()
            }
        })
}

fn bindings(plan: &basalt_engine::Plan) -> BTreeMap<String, (String, Vec<u32>)> {
    (plan.bindings.iter())
        .map(|b| (b.pod.clone(), (b.node.clone(), b.gpus.clone())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn scoring_one_node_per_state_chooses_as_scoring_every_node(spec in cluster(), ranked in any::<bool>()) {
        let snap = Snapshot::build(spec).unwrap();
        let config = Config::default();
        let mut by_state = framework(&config, &snap.resources);
        let mut per_node = framework(&config, &snap.resources);
        let frag = &config.node_order.fragmentation;
        per_node.scores = vec![Box::new(PerNode(Fragmentation {
            workload: Workload::Seen {
                window: frag.window as usize,
                coverage_pct: frag.coverage_percent as u64,
            },
            rule: Rule::Basalt,
            shared_only: true,
        }))];
        if ranked {
            // A tie ranking of its own (an experiment's), not name order.
            let rank: std::sync::Arc<[u32]> =
                (0..snap.nodes.len() as u32).map(|i| (i * 7) % 11).collect();
            by_state.node_rank = Some(rank.clone());
            per_node.node_rank = Some(rank);
        }
        let want = basalt_engine::schedule(&snap, &per_node, &mut Warm::default());
        let got = basalt_engine::schedule(&snap, &by_state, &mut Warm::default());
        prop_assert_eq!(bindings(&got), bindings(&want));
    }
}

/// The default fragmentation scorer, counting the nodes it scores and saying (or not) that it
/// reads tasks by shape.
struct Counted {
    inner: Fragmentation,
    by_shape: bool,
    calls: Arc<AtomicUsize>,
}

struct CountedScorer<'s> {
    inner: Box<dyn NodeScorer + 's>,
    by_shape: bool,
    calls: Arc<AtomicUsize>,
}

impl Score for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>> {
        Some(Box::new(CountedScorer {
            inner: self.inner.prepare(session)?,
            by_shape: self.by_shape,
            calls: self.calls.clone(),
        }))
    }
}

impl NodeScorer for CountedScorer<'_> {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, devices: u64) -> i64 {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.score(session, task, node, devices)
    }
    fn by_state(&self) -> bool {
        self.inner.by_state()
    }
    fn by_shape(&self) -> bool {
        self.by_shape
    }
}

/// Twenty alike HAMi nodes (four cards of four slots) and sixty pending quarter-card pods.
fn alike_nodes_and_pods() -> ClusterSpec {
    let nodes = (0..20)
        .map(|i| {
            let name = format!("n{i:02}");
            let gpus = (0..4)
                .map(|d| Gpu {
                    uuid: Some(format!("{name}-{d}")),
                    memory_mib: Some(81_920),
                    slots: 4,
                    ..Gpu::new(d)
                })
                .collect();
            NodeSpec {
                name,
                allocatable: list(&[("cpu", 64_000), ("nvidia.com/gpu", 16)]),
                gpus: Some(gpus),
                sharing: Sharing::Hami,
                shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
                ..Default::default()
            }
        })
        .collect();
    let pods = (0..60)
        .map(|k| {
            read_asks(PodSpec {
                namespace: "ns".into(),
                name: format!("p{k:02}"),
                ours: true,
                request: list(&[
                    ("cpu", 1000),
                    ("nvidia.com/gpu", 1),
                    ("nvidia.com/gpucores", 25),
                    ("nvidia.com/gpumem-percentage", 25),
                ]),
                created_ms: 1 + k,
                ..Default::default()
            })
        })
        .collect();
    ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        ..Default::default()
    }
}

#[test]
fn scorers_reading_tasks_by_shape_score_each_state_once_per_shape() {
    let snap = Snapshot::build(alike_nodes_and_pods()).unwrap();
    let config = Config::default();
    let frag = &config.node_order.fragmentation;
    let run = |by_shape: bool| {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut fw = framework(&config, &snap.resources);
        fw.scores = vec![Box::new(Counted {
            inner: Fragmentation {
                workload: Workload::Seen {
                    window: frag.window as usize,
                    coverage_pct: frag.coverage_percent as u64,
                },
                rule: Rule::Basalt,
                shared_only: true,
            },
            by_shape,
            calls: calls.clone(),
        })];
        let plan = basalt_engine::schedule(&snap, &fw, &mut Warm::default());
        (bindings(&plan), calls.load(Ordering::Relaxed))
    };
    let (per_shape, kept) = run(true);
    let (per_task, asked) = run(false);
    assert_eq!(per_shape.len(), 60);
    assert_eq!(per_shape, per_task);
    // The first pod scores each node (20); then each pod scores the states with room, again
    // and again (one or two per pod), unless the states' scores are kept for the shape.
    assert!(asked >= 20 + 59, "{asked} scores without keeping them");
    assert!(
        kept * 2 < asked,
        "{kept} scores kept per shape, {asked} asked per task"
    );
}

/// The pod with its device asks read from its request's names, as `crds` reads them.
fn read_asks(p: PodSpec) -> PodSpec {
    PodSpec {
        devices: basalt_crds::device_ask(&p.request),
        ..p
    }
}

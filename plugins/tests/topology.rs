//! Topology invariants on random clusters (spines, racks, NVLink cliques, nodes with one or two
//! NVLink islands) and random gangs with required tiers and tensor-parallel sub-groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use basalt_engine::{
    ClusterSpec, Gpu, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec, ResourceList, Snapshot,
    SubGroupSpec, TopologySpec,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const SPINE: &str = "topology.basalt.dev/spine";
const RACK: &str = "topology.basalt.dev/rack";
const CLIQUE: &str = "nvidia.com/gpu.clique";
const TIERS: [&str; 4] = ["spine", "rack", "nvlink", "node"];

#[derive(Clone, Debug)]
struct N {
    spine: Option<u8>,
    rack: Option<u8>,
    clique: bool,
    gpus: i64,
    two_islands: bool,
    used: i64,
}

#[derive(Clone, Debug)]
struct G {
    pods: usize,
    gpu: i64,
    min: usize,
    required: Option<usize>,
    sub: Option<(u32, usize)>,
}

fn nodes() -> impl Strategy<Value = Vec<N>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.9, 0..2u8),
            prop::option::weighted(0.9, 0..3u8),
            prop::bool::weighted(0.3),
            prop::sample::select(vec![4i64, 8]),
            any::<bool>(),
            0..=3i64,
        )
            .prop_map(|(spine, rack, clique, gpus, two_islands, used)| N {
                spine,
                rack,
                clique,
                gpus,
                two_islands,
                used,
            }),
        1..=12,
    )
}

fn gangs() -> impl Strategy<Value = Vec<G>> {
    prop::collection::vec(
        (
            1..=8usize,
            1..=4i64,
            1..=8usize,
            prop::option::of(0..4usize),
            prop::option::of((1..=4u32, 1..4usize)),
        )
            .prop_map(|(pods, gpu, min, required, sub)| G {
                pods,
                gpu,
                min: min.min(pods),
                required,
                sub,
            }),
        1..=6,
    )
}

fn spec(ns: &[N], gs: &[G]) -> ClusterSpec {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 1_000_000,
        ..Default::default()
    };
    for (i, n) in ns.iter().enumerate() {
        let mut labels = BTreeMap::new();
        if let Some(s) = n.spine {
            labels.insert(SPINE.to_string(), format!("s{s}"));
        }
        if let Some(r) = n.rack {
            labels.insert(RACK.to_string(), format!("r{r}"));
            if n.clique {
                labels.insert(CLIQUE.to_string(), format!("c{r}"));
            }
        }
        let gpus = (0..n.gpus as u32)
            .map(|index| Gpu {
                nvlink_domain: if n.two_islands {
                    index * 2 / n.gpus as u32
                } else {
                    0
                },
                ..Gpu::new(index)
            })
            .collect();
        let name = format!("n{i:02}");
        spec.nodes.push(NodeSpec {
            name: name.clone(),
            labels,
            allocatable: ResourceList::from([
                ("cpu".to_string(), 64_000),
                ("memory".to_string(), 1 << 40),
                ("nvidia.com/gpu".to_string(), n.gpus),
            ]),
            gpus: Some(gpus),
            ..Default::default()
        });
        if n.used > 0 {
            // Another scheduler's pod fragments the node.
            spec.pods.push(PodSpec {
                namespace: "other".into(),
                name: format!("busy-{i}"),
                request: ResourceList::from([("nvidia.com/gpu".to_string(), n.used.min(n.gpus))]),
                phase: PodPhase::Running,
                node: Some(name),
                ..Default::default()
            });
        }
    }
    for (g, gang) in gs.iter().enumerate() {
        let name = format!("g{g}");
        spec.groups.push(GroupSpec {
            namespace: "ns".into(),
            name: name.clone(),
            queue: None,
            min_member: gang.min as i64,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: None,
            created_ms: 1 + g as i64,
            phase: JobPhase::Inqueue,
            topology: TopologySpec {
                required: gang.required.map(|t| TIERS[t].to_string()),
                preferred: None,
            },
            sub_groups: gang
                .sub
                .map(|(size, tier)| SubGroupSpec {
                    name: "tp".into(),
                    size,
                    match_label_keys: Vec::new(),
                    topology: TopologySpec {
                        required: Some(TIERS[tier].to_string()),
                        preferred: None,
                    },
                    ..SubGroupSpec::default()
                })
                .into_iter()
                .collect(),
            schedule_timeout_ms: None,
        });
        for p in 0..gang.pods {
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("{name}-{p}"),
                ours: true,
                group: Some(name.clone()),
                request: ResourceList::from([
                    ("cpu".to_string(), 1000),
                    ("nvidia.com/gpu".to_string(), gang.gpu),
                ]),
                created_ms: 1 + g as i64,
                rank: Some(p as u32),
                ..Default::default()
            });
        }
    }
    spec
}

/// The domain of a node at a tier, computed from the labels as the docs define it: a node
/// missing the tier's label stands alone; otherwise the label values from the coarsest tier
/// down (a missing coarser value shared by all nodes that miss it).
fn domain(n: &NodeSpec, tier: usize) -> String {
    if tier == 3 {
        return format!("node:{}", n.name);
    }
    let labels = [SPINE, RACK, CLIQUE];
    if !n.labels.contains_key(labels[tier]) {
        return format!("node:{}", n.name);
    }
    labels[..=tier]
        .iter()
        .map(|l| n.labels.get(*l).cloned().unwrap_or_else(|| "*".into()))
        .collect::<Vec<_>>()
        .join("/")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn topology_invariants(ns in nodes(), gs in gangs()) {
        let spec = spec(&ns, &gs);
        let snapshot = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snapshot, &Config::default());
        // Same cluster in another order, same plan, byte for byte.
        let mut shuffled = spec.clone();
        shuffled.nodes.reverse();
        shuffled.pods.reverse();
        shuffled.groups.reverse();
        let again = schedule(&Snapshot::build(shuffled).unwrap(), &Config::default());
        prop_assert_eq!(serde_json::to_string(&plan).unwrap(), serde_json::to_string(&again).unwrap());
        let node_spec: HashMap<&str, &NodeSpec> = spec.nodes.iter().map(|n| (n.name.as_str(), n)).collect();

        // Capacity: no GPU handed out twice, never more than a node has.
        let mut taken: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for (i, n) in ns.iter().enumerate() {
            let name = format!("n{i:02}");
            let set = taken.entry(node_spec[name.as_str()].name.as_str()).or_default();
            set.extend(0..n.used.min(n.gpus) as u32);
        }
        for b in &plan.bindings {
            let set = taken.entry(node_spec[b.node.as_str()].name.as_str()).or_default();
            for &g in &b.gpus {
                prop_assert!(set.insert(g), "GPU {} of {} handed out twice", g, b.node);
            }
            let total = node_spec[b.node.as_str()].allocatable["nvidia.com/gpu"];
            prop_assert!(b.gpus.iter().all(|&g| (g as i64) < total));
        }

        let bound: HashMap<&str, (&str, &[u32])> = plan.bindings.iter().map(|b| (b.pod.as_str(), (b.node.as_str(), b.gpus.as_slice()))).collect();
        for (g, gang) in gs.iter().enumerate() {
            let pods: Vec<(usize, &str, &[u32])> = (0..gang.pods)
                .filter_map(|p| bound.get(format!("ns/g{g}-{p}").as_str()).map(|&(n, gpus)| (p, n, gpus)))
                .collect();
            // All or nothing.
            prop_assert!(pods.is_empty() || pods.len() >= gang.min, "gang g{} placed {} < min {}", g, pods.len(), gang.min);
            // The gang inside one domain of its required tier.
            if let Some(t) = gang.required {
                let domains: BTreeSet<String> = pods.iter().map(|(_, n, _)| domain(node_spec[n], t)).collect();
                prop_assert!(domains.len() <= 1, "gang g{} spans {:?} at tier {}", g, domains, TIERS[t]);
            }
            // Each sub-group inside one domain of its required tier; an NVLink sub-group on a
            // node outside any clique inside one island.
            if let Some((size, t)) = gang.sub {
                for block in pods.chunk_by(|a, b| a.0 / size as usize == b.0 / size as usize) {
                    let domains: BTreeSet<String> = block.iter().map(|(_, n, _)| domain(node_spec[n], t)).collect();
                    prop_assert!(domains.len() <= 1, "sub-group of g{} spans {:?} at tier {}", g, domains, TIERS[t]);
                    let n = node_spec[block[0].1];
                    if TIERS[t] == "nvlink" && !n.labels.contains_key(CLIQUE) {
                        let islands: BTreeSet<u32> = block.iter().flat_map(|(_, _, gpus)| gpus.iter()).map(|&g| n.gpus.as_ref().unwrap()[g as usize].nvlink_domain).collect();
                        prop_assert!(islands.len() <= 1, "NVLink sub-group of g{} spans islands {:?} of {}", g, islands, n.name);
                    }
                }
            }
        }
    }
}

//! DRA claims through a whole cycle under the default policy set: every allocation is checked
//! by an evaluator of its own (reach, matching set, count, constraints), no device goes to two
//! claims, pods are bound only with their claims allocated, gangs stay all-or-nothing, and the
//! plan is the same every time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use basalt_engine::dra::{
    Alternative, AttrValue, ClaimAsk, ClaimNeed, ClaimState, ConstraintAsk, Count, DeviceSet,
    DraDevice, DraSpec, Reach, RequestAsk,
};
use basalt_engine::{ClusterSpec, GroupSpec, NodeSpec, Plan, PodSpec, Snapshot};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const ROOT: &str = "resource.kubernetes.io/pcieRoot";

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        allocatable: [("cpu".to_string(), 64_000), ("pods".to_string(), 110)]
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// `per_node` devices on each node, device `k` on PCIe root `k / 2`, plus `network` devices
/// every node reaches.
fn devices(nodes: usize, per_node: usize, network: usize) -> Vec<DraDevice> {
    let mut out = Vec::new();
    for n in 0..nodes {
        for k in 0..per_node {
            out.push(DraDevice {
                driver: Arc::from("gpu.example.com"),
                pool: Arc::from(format!("n{n}").as_str()),
                name: Arc::from(format!("gpu-{k}").as_str()),
                reach: Reach::Node(format!("n{n}")),
                attributes: [(ROOT.to_string(), AttrValue::Int(k as i64 / 2))].into(),
                consumes: Vec::new(),
            });
        }
    }
    for k in 0..network {
        out.push(DraDevice {
            driver: Arc::from("net.example.com"),
            pool: Arc::from("fabric"),
            name: Arc::from(format!("nic-{k}").as_str()),
            reach: Reach::All,
            attributes: BTreeMap::new(),
            consumes: Vec::new(),
        });
    }
    out
}

fn pod(name: &str, group: &str, claims: Option<(ClaimNeed, Vec<String>)>) -> PodSpec {
    let mut p = PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        group: Some(group.into()),
        request: [("cpu".to_string(), 1000)].into_iter().collect(),
        created_ms: 1,
        ..Default::default()
    };
    if let Some((need, names)) = claims {
        p.rules.claims = Some(Arc::new(need));
        p.claims = names;
    }
    p
}

fn exactly(name: &str, eligible: u32, count: Count) -> RequestAsk {
    RequestAsk {
        name: name.into(),
        alternatives: vec![Alternative {
            name: name.into(),
            eligible,
            count,
            admin_access: false,
        }],
    }
}

fn pending(label: &str, requests: Vec<RequestAsk>, constraints: Vec<ConstraintAsk>) -> ClaimAsk {
    ClaimAsk {
        label: label.into(),
        shared: None,
        state: ClaimState::Pending {
            requests,
            constraints,
        },
    }
}

fn plan(spec: ClusterSpec) -> Plan {
    schedule(&Snapshot::build(spec).unwrap(), &Config::default())
}

#[test]
fn a_claim_takes_free_matching_devices_on_the_pods_node() {
    let mut dra = DraSpec {
        devices: devices(2, 4, 0),
        ..Default::default()
    };
    // Set 0: every GPU; GPUs 0..2 of n0 allocated already.
    dra.eligible.push((0..8).collect());
    dra.allocated = [0, 1, 2].into_iter().collect();
    let need = ClaimNeed {
        claims: vec![pending(
            "g",
            vec![exactly("gpus", 0, Count::Exactly(2))],
            vec![],
        )],
    };
    let p = plan(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![node("n0"), node("n1")],
        pods: vec![pod("p", "p", Some((need, vec!["ns/p-g".into()])))],
        groups: vec![GroupSpec::new("ns", "p", 1)],
        dra,
        ..Default::default()
    });
    assert_eq!(p.bindings.len(), 1);
    assert_eq!(p.bindings[0].node, "n1");
    let c = &p.claim_allocations[0];
    assert_eq!((c.claim.as_str(), c.node.as_str()), ("ns/p-g", "n1"));
    let got: Vec<&str> = c.results.iter().map(|r| r.device.as_str()).collect();
    assert_eq!(got, ["gpu-0", "gpu-1"]);
    assert_eq!(c.node_selector.as_deref(), Some("n1"));
}

#[test]
fn a_shared_claim_is_allocated_once_and_its_pods_follow_it() {
    let mut dra = DraSpec {
        devices: devices(3, 2, 0),
        ..Default::default()
    };
    dra.eligible.push((0..6).collect());
    let shared = ClaimAsk {
        shared: Some("ns/shared".into()),
        ..pending(
            "ns/shared",
            vec![exactly("gpus", 0, Count::Exactly(2))],
            vec![],
        )
    };
    let need = ClaimNeed {
        claims: vec![shared],
    };
    let pods = (0..2)
        .map(|i| {
            let claims = Some((need.clone(), vec!["ns/shared".into()]));
            pod(&format!("p{i}"), &format!("p{i}"), claims)
        })
        .collect();
    let p = plan(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![node("n0"), node("n1"), node("n2")],
        pods,
        groups: vec![GroupSpec::new("ns", "p0", 1), GroupSpec::new("ns", "p1", 1)],
        dra,
        ..Default::default()
    });
    assert_eq!(p.bindings.len(), 2, "{p:?}");
    assert_eq!(p.bindings[0].node, p.bindings[1].node);
    assert_eq!(p.claim_allocations.len(), 1);
}

#[test]
fn a_search_past_its_step_bound_gives_up_with_a_reason() {
    // 64 devices, a claim of 8 requests of 4 whose devices must all differ in a value only
    // 31 distinct ones exist for: no solution, and an exhaustive search would take forever.
    let mut list = devices(1, 64, 0);
    for (k, d) in list.iter_mut().enumerate() {
        d.attributes
            .insert("x/v".into(), AttrValue::Int(k as i64 % 31));
    }
    let dra = DraSpec {
        devices: list,
        eligible: vec![(0..64).collect()],
        allocated: DeviceSet::default(),
        counters: Vec::new(),
    };
    let requests = (0..8)
        .map(|i| exactly(&format!("r{i}"), 0, Count::Exactly(4)))
        .collect();
    let distinct = ConstraintAsk {
        requests: vec![],
        attribute: "x/v".into(),
        distinct: true,
    };
    let need = ClaimNeed {
        claims: vec![pending("g", requests, vec![distinct])],
    };
    let p = plan(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![node("n0")],
        pods: vec![pod("p", "p", Some((need, vec!["ns/p-g".into()])))],
        groups: vec![GroupSpec::new("ns", "p", 1)],
        dra,
        ..Default::default()
    });
    assert!(p.bindings.is_empty());
    let message = &p.pod_groups[0].conditions[0].message;
    assert!(message.contains("cannot allocate claim g: "), "{message}");
}

/// A random cluster: nodes with GPUs on two PCIe roots, network devices, matching sets, some
/// devices allocated, and gangs whose pods each claim devices in random forms.
fn cluster() -> impl Strategy<Value = ClusterSpec> {
    let gang = (
        1usize..4,
        prop::collection::vec((0u32..3, 1u32..4, any::<bool>(), 0u8..3), 1..3),
    );
    (
        1usize..4,
        0usize..5,
        0usize..3,
        prop::collection::vec(any::<u64>(), 3),
        any::<u64>(),
        prop::collection::vec(gang, 1..4),
    )
        .prop_map(|(nodes, per_node, network, sets, taken, gangs)| {
            let list = devices(nodes, per_node, network);
            let n = list.len() as u32;
            let eligible: Vec<DeviceSet> = (sets.iter())
                .map(|bits| (0..n).filter(|d| bits & (1 << (d % 64)) != 0).collect())
                .collect();
            let allocated = (0..n).filter(|d| taken & (1 << (d % 64)) != 0 && d % 3 == 0);
            let mut pods = Vec::new();
            let mut groups = Vec::new();
            for (g, (size, requests)) in gangs.into_iter().enumerate() {
                groups.push(GroupSpec::new("ns", format!("g{g}"), size as i64));
                for i in 0..size {
                    let asks: Vec<RequestAsk> = (requests.iter().enumerate())
                        .map(|(r, &(set, count, all, _))| {
                            let count = if all {
                                Count::All
                            } else {
                                Count::Exactly(count)
                            };
                            exactly(&format!("r{r}"), set, count)
                        })
                        .collect();
                    let constraints = match requests[0].3 {
                        1 => vec![ConstraintAsk {
                            requests: vec![],
                            attribute: ROOT.into(),
                            distinct: false,
                        }],
                        2 => vec![ConstraintAsk {
                            requests: vec!["r0".into()],
                            attribute: ROOT.into(),
                            distinct: true,
                        }],
                        _ => vec![],
                    };
                    let name = format!("g{g}-{i}");
                    let need = ClaimNeed {
                        claims: vec![pending("c", asks, constraints)],
                    };
                    let claims = Some((need, vec![format!("ns/{name}-c")]));
                    pods.push(pod(&name, &format!("g{g}"), claims));
                }
            }
            ClusterSpec {
                device_resource: "nvidia.com/gpu".into(),
                nodes: (0..nodes).map(|i| node(&format!("n{i}"))).collect(),
                pods,
                groups,
                dra: DraSpec {
                    devices: list,
                    eligible,
                    allocated: allocated.collect(),
                    counters: Vec::new(),
                },
                ..Default::default()
            }
        })
}

/// Checks the plan against the spec without the engine's own search: what each allocation
/// holds must be reachable, free, matching, of the right count and within its constraints.
fn check(spec: &ClusterSpec, p: &Plan) -> Result<(), String> {
    let dra = &spec.dra;
    let index: BTreeMap<(&str, &str), u32> = (dra.devices.iter().enumerate())
        .map(|(i, d)| ((&*d.pool, &*d.name), i as u32))
        .collect();
    let mut taken: BTreeSet<u32> = dra.allocated.iter().collect();
    let bound: BTreeMap<&str, &str> = (p.bindings.iter())
        .map(|b| (b.pod.as_str(), b.node.as_str()))
        .collect();
    for pod in &spec.pods {
        let key = format!("ns/{}", pod.name);
        let allocations: Vec<_> = (p.claim_allocations.iter())
            .filter(|c| c.pod == key)
            .collect();
        let Some(node) = bound.get(key.as_str()) else {
            if !allocations.is_empty() {
                return Err(format!("{key}: claims allocated but not bound"));
            }
            continue;
        };
        if allocations.len() != 1 {
            return Err(format!(
                "{key}: bound with {} allocations",
                allocations.len()
            ));
        }
        let c = allocations[0];
        if c.node != *node {
            return Err(format!("{key}: claim on {} but pod on {node}", c.node));
        }
        let need = pod.rules.claims.as_ref().unwrap();
        let ClaimState::Pending {
            requests,
            constraints,
        } = &need.claims[0].state
        else {
            unreachable!()
        };
        let mut picked: Vec<(&str, u32)> = Vec::new();
        for r in &c.results {
            let d = index[&(r.pool.as_str(), r.device.as_str())];
            if !taken.insert(d) {
                return Err(format!("{key}: device {} given twice", r.device));
            }
            let reach = match &dra.devices[d as usize].reach {
                Reach::Node(n) => n == node,
                Reach::Nodes(ns) => ns.iter().any(|n| n == node),
                Reach::All => true,
            };
            if !reach {
                return Err(format!("{key}: device {} not on {node}", r.device));
            }
            picked.push((r.request.as_str(), d));
        }
        for ask in requests {
            let alt = &ask.alternatives[0];
            let mine: Vec<u32> = (picked.iter())
                .filter(|(r, _)| *r == ask.name)
                .map(|p| p.1)
                .collect();
            let set = &dra.eligible[alt.eligible as usize];
            if !mine.iter().all(|&d| set.contains(d)) {
                return Err(format!(
                    "{key}: request {} took a device it does not match",
                    ask.name
                ));
            }
            let ok = match alt.count {
                Count::Exactly(k) => mine.len() == k as usize,
                Count::All => {
                    let all = (0..dra.devices.len() as u32)
                        .filter(|&d| set.contains(d))
                        .filter(|&d| match &dra.devices[d as usize].reach {
                            Reach::Node(n) => n == node,
                            _ => true,
                        })
                        .count();
                    !mine.is_empty() && mine.len() == all
                }
            };
            if !ok {
                return Err(format!(
                    "{key}: request {} got {} devices",
                    ask.name,
                    mine.len()
                ));
            }
        }
        for con in constraints {
            let values: Vec<Option<&AttrValue>> = (picked.iter())
                .filter(|(r, _)| con.requests.is_empty() || con.requests.iter().any(|x| x == r))
                .map(|(_, d)| dra.devices[*d as usize].attributes.get(&con.attribute))
                .collect();
            let distinct: BTreeSet<_> = values.iter().collect();
            let ok = values.iter().all(Option::is_some)
                && if con.distinct {
                    distinct.len() == values.len()
                } else {
                    distinct.len() <= 1
                };
            if !ok {
                return Err(format!("{key}: constraint {con:?} broken by {values:?}"));
            }
        }
    }
    for g in &spec.groups {
        let members = (spec.pods.iter()).filter(|p| p.group.as_deref() == Some(g.name.as_str()));
        let bound = members
            .filter(|p| bound.contains_key(format!("ns/{}", p.name).as_str()))
            .count() as i64;
        if bound != 0 && bound < g.min_member {
            return Err(format!("gang {} partly bound: {bound}", g.name));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn allocations_are_feasible_exclusive_all_or_nothing_and_deterministic(spec in cluster()) {
        let first = plan(spec.clone());
        prop_assert_eq!(check(&spec, &first), Ok(()));
        prop_assert_eq!(plan(spec), first);
    }
}

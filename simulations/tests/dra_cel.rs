//! DRA from manifests to plan on small random clusters: every device a claim is given satisfies
//! its CEL selectors as judged by an evaluator of this test's own (a Rust predicate written
//! beside each expression, not the CEL engine), no device goes to two claims, counts are met,
//! and pods are bound only with their claims.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use basalt_crds::{build_snapshot, ConvertOptions, Object};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;
use serde_json::json;

/// A device as the test's own evaluator sees it.
#[derive(Clone, Debug)]
struct Gpu {
    model: &'static str,
    mem_gib: i64,
    root: i64,
}

type Predicate = fn(&Gpu) -> bool;

/// Selectors with what they mean, written independently of the CEL engine.
const SELECTORS: [(&str, Predicate); 7] = [
    ("true", |_| true),
    (
        r#"device.attributes["gpu.example.com"].model == "h100""#,
        |g| g.model == "h100",
    ),
    (
        r#"device.attributes["gpu.example.com"].model.startsWith("a")"#,
        |g| g.model.starts_with('a'),
    ),
    (
        r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("50Gi")) > 0"#,
        |g| g.mem_gib > 50,
    ),
    (
        r#"device.attributes["gpu.example.com"].root == 1 || device.attributes["gpu.example.com"].model.upperAscii() == "A100""#,
        |g| g.root == 1 || g.model == "a100",
    ),
    (
        r#"has(device.attributes["gpu.example.com"].missing)"#,
        |_| false,
    ),
    (
        r#"cel.bind(m, device.attributes["gpu.example.com"].model, m in ["a100", "b200"])"#,
        |g| g.model == "a100" || g.model == "b200",
    ),
];

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

/// Nodes of GPUs, and pods each with one claim: (selector index, count).
fn manifests(nodes: &[Vec<Gpu>], pods: &[(usize, i64)]) -> Vec<(String, Object)> {
    let src = || "test".to_string();
    let mut out = vec![(
        src(),
        Object::DeviceClass(typed(json!({"metadata": {"name": "gpu"}, "spec": {
            "selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}}))),
    )];
    for (n, gpus) in nodes.iter().enumerate() {
        let name = format!("n{n}");
        out.push((
            src(),
            Object::Node(typed(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "64", "pods": "110"}}}))),
        ));
        let devices: Vec<_> = (gpus.iter().enumerate())
            .map(|(i, g)| {
                json!({"name": format!("gpu-{i}"), "attributes": {
                    "model": {"string": g.model}, "root": {"int": g.root}},
                "capacity": {"memory": {"value": format!("{}Gi", g.mem_gib)}}})
            })
            .collect();
        out.push((
            src(),
            Object::ResourceSlice(typed(json!({"metadata": {"name": name}, "spec": {
                "driver": "gpu.example.com", "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices}}))),
        ));
    }
    for (p, &(selector, count)) in pods.iter().enumerate() {
        let claim = format!("c{p}");
        out.push((
            src(),
            Object::ResourceClaim(typed(json!({"metadata": {"name": claim, "namespace": "t"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                    "deviceClassName": "gpu", "count": count,
                    "selectors": [{"cel": {"expression": SELECTORS[selector].0}}]}}]}}}))),
        ));
        out.push((
            src(),
            Object::Pod(typed(
                json!({"metadata": {"name": format!("p{p}"), "namespace": "t"},
                "spec": {"schedulerName": "basalt",
                    "resourceClaims": [{"name": "r", "resourceClaimName": claim}],
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Pending"}}),
            )),
        ));
    }
    out
}

fn gpu() -> impl Strategy<Value = Gpu> {
    (
        prop::sample::select(vec!["a100", "h100", "b200"]),
        0usize..3,
        0i64..2,
    )
        .prop_map(|(model, mem, root)| Gpu {
            model,
            mem_gib: [40, 80, 141][mem],
            root,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn allocations_satisfy_their_selectors(
        nodes in prop::collection::vec(prop::collection::vec(gpu(), 0..5), 1..4),
        pods in prop::collection::vec((0..SELECTORS.len(), 1i64..3), 1..6),
    ) {
        let objects = manifests(&nodes, &pods);
        let snapshot = build_snapshot(&objects, &ConvertOptions::default()).unwrap();
        let plan = schedule(&snapshot, &Config::default());
        let bound: BTreeMap<&str, &str> =
            plan.bindings.iter().map(|b| (b.pod.as_str(), b.node.as_str())).collect();
        let mut taken = BTreeSet::new();
        for c in &plan.claim_allocations {
            let p: usize = c.claim.trim_start_matches("t/c").parse().unwrap();
            let (selector, count) = pods[p];
            prop_assert_eq!(bound.get(c.pod.as_str()).copied(), Some(c.node.as_str()));
            prop_assert_eq!(c.results.len() as i64, count);
            let node: usize = c.node[1..].parse().unwrap();
            for r in &c.results {
                prop_assert!(taken.insert((c.node.clone(), r.device.clone())), "{} twice", r.device);
                let i: usize = r.device.trim_start_matches("gpu-").parse().unwrap();
                prop_assert!(SELECTORS[selector].1(&nodes[node][i]),
                    "{} on {} does not satisfy {}", r.device, c.node, SELECTORS[selector].0);
            }
        }
        // Every bound pod has its claim allocated; one that could be is not left out: a
        // lone pod (no gang) whose node has enough matching devices free is placed.
        prop_assert_eq!(plan.claim_allocations.len(), plan.bindings.len());
        for (p, &(selector, count)) in pods.iter().enumerate() {
            if bound.contains_key(format!("t/p{p}").as_str()) {
                continue;
            }
            for (n, gpus) in nodes.iter().enumerate() {
                let free = (gpus.iter().enumerate())
                    .filter(|(i, g)| SELECTORS[selector].1(g)
                        && !taken.contains(&(format!("n{n}"), format!("gpu-{i}"))))
                    .count() as i64;
                prop_assert!(free < count, "p{p} left pending with {free} matching GPUs free on n{n}");
            }
        }
    }
}

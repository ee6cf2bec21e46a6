//! DRA input is bounded like other quantities: a node's own devices (and a pool's that reach
//! several nodes) past `limits::MAX_DRA_DEVICES_PER_NODE` are not used, with a warning naming
//! the slice; up to the bound they are.

mod common;

use basalt_crds::limits::MAX_DRA_DEVICES_PER_NODE;
use basalt_crds::{cluster_spec_with_warnings, ConvertOptions};
use serde_json::{json, Value};

/// `devices` devices on `node` (or, without one, on every node), in slices of 128 of one pool.
fn slices(pool: &str, node: Option<&str>, devices: usize) -> Vec<Value> {
    let count = devices.div_ceil(128);
    (0..count)
        .map(|s| {
            let names =
                (s * 128..devices.min((s + 1) * 128)).map(|d| json!({"name": format!("dev-{d}")}));
            let mut spec = json!({
                "driver": "net.example.com",
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                "devices": names.collect::<Vec<_>>(),
            });
            match node {
                Some(n) => spec["nodeName"] = json!(n),
                None => spec["allNodes"] = json!(true),
            }
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                   "metadata": {"name": format!("{pool}-{s}")}, "spec": spec})
        })
        .collect()
}

#[test]
fn devices_past_the_bound_are_not_used() {
    let bound = MAX_DRA_DEVICES_PER_NODE;
    let node = |name: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    let mut items = vec![node("big"), node("full")];
    items.extend(slices("big", Some("big"), bound + 1));
    items.extend(slices("full", Some("full"), bound));
    items.extend(slices("fabric", None, bound + 1));
    let text = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let objects = common::objects("dra.json", &text);
    let (spec, warnings) =
        cluster_spec_with_warnings(&objects, &ConvertOptions::default()).unwrap();

    // Only the node at the bound keeps its devices.
    assert_eq!(spec.dra.devices.len(), bound);
    assert!(spec.dra.devices.iter().all(|d| &*d.pool == "full"));
    let over = |what: &str| {
        format!(
            "ResourceSlice {what}-0: spec.devices: {} has {} devices, more than {bound} (the limit \
             per node); none of them is used",
            if what == "big" { "node big".to_string() } else { format!("pool {what} of net.example.com") },
            bound + 1
        )
    };
    for what in ["big", "fabric"] {
        let said: Vec<&String> = warnings
            .iter()
            .filter(|w| w.contains(&over(what)))
            .collect();
        assert_eq!(said.len(), 1, "{what}: once\n{warnings:#?}");
    }
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
}

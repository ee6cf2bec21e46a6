//! Device resource names reach the engine as data from the nodes' reader: a shared node's
//! share totals, a MIG slice's resource, the resource a node's devices are advertised as.
//! Any names work, none is the engine's own (issue 39 item 2).

use std::sync::Arc;

use basalt_engine::devices::{MigSlice, ShareResources, ShareVocabulary, Sharing};
use basalt_engine::*;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A vendor's names no reader uses: the engine must take them as given.
fn vocabulary() -> Arc<ShareVocabulary> {
    let names = |p: &str| ShareResources {
        memory: format!("{p}/memory"),
        percent: format!("{p}/percent"),
        cores: format!("{p}/cores"),
    };
    Arc::new(ShareVocabulary {
        hami: names("shares.example"),
        vgpu: names("other.example"),
        vgpu_number: "other.example/number".into(),
    })
}

fn device(index: u32) -> Gpu {
    Gpu {
        uuid: Some(format!("dev-{index}")),
        memory_mib: Some(1000),
        slots: 4,
        ..Gpu::new(index)
    }
}

fn shared(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        allocatable: list(&[("cpu", 8000), ("example.com/dev", 8)]),
        device_resource: Some("example.com/dev".into()),
        gpus: Some(vec![device(0), device(1)]),
        sharing: Sharing::Hami,
        shares: Some(vocabulary()),
        ..Default::default()
    }
}

fn build(nodes: Vec<NodeSpec>) -> Result<Snapshot, SnapshotError> {
    Snapshot::build(ClusterSpec {
        nodes,
        ..Default::default()
    })
}

#[test]
fn a_shared_node_s_totals_are_in_its_reader_s_names() {
    let snap = build(vec![shared("n")]).unwrap();
    let got = snap.resources.list(&snap.nodes[0].allocatable);
    assert_eq!(got["shares.example/memory"], 2000);
    assert_eq!(got["shares.example/percent"], 200);
    assert_eq!(got["shares.example/cores"], 200);
    assert!(!got.keys().any(|k| k.starts_with("other.example")));
    // The made-up totals are known as such (never named in a refusal).
    let id = |n: &str| snap.resources.id(n);
    let totals = snap.share_names.totals();
    for name in ["memory", "percent", "cores"] {
        assert!(
            totals.contains(&id(&format!("shares.example/{name}"))),
            "{name}"
        );
    }
}

#[test]
fn a_node_sharing_memory_and_compute_must_name_its_shares() {
    let e = build(vec![NodeSpec {
        shares: None,
        ..shared("n")
    }])
    .unwrap_err();
    assert_eq!(
        (e.kind, e.object.as_str(), e.field),
        ("Node", "n", "shares")
    );
    assert_eq!(
        e.message,
        "shares its devices (Hami) but names no share resources"
    );
    // Replicas divide nothing: no names needed.
    let replicas = NodeSpec {
        shares: None,
        sharing: Sharing::TimeSliced,
        ..shared("n")
    };
    assert!(build(vec![replicas]).is_ok());
}

#[test]
fn a_closed_node_offers_none_of_its_devices_or_any_share() {
    let mut n = shared("n");
    n.allocatable.insert("other.example/memory".into(), 5000);
    n.devices_closed = Some("register unreadable".into());
    let snap = build(vec![n]).unwrap();
    let got = snap.resources.list(&snap.nodes[0].allocatable);
    assert_eq!(got.get("example.com/dev"), None, "{got:?}");
    assert_eq!(got.get("other.example/memory"), None, "{got:?}");
    assert_eq!(got["cpu"], 8000);
}

#[test]
fn a_mig_slice_is_counted_in_the_resource_its_reader_names() {
    let node = |resource: &str| NodeSpec {
        name: "m".into(),
        allocatable: list(&[("cpu", 8000), ("example.com/slice-small", 1)]),
        gpus: Some(vec![Gpu {
            mig: true,
            ..Gpu::new(0)
        }]),
        slices: vec![MigSlice {
            gpu: 0,
            profile: "small".into(),
            resource: resource.into(),
            gpu_instance_id: 1,
            start: 0,
            memory_mib: None,
        }],
        ..Default::default()
    };
    let snap = build(vec![node("example.com/slice-small")]).unwrap();
    let kind = snap.resources.id("example.com/slice-small");
    assert_eq!(Some(snap.nodes[0].slices[0].kind), kind);
    let e = build(vec![node("example.com/slice-other")]).unwrap_err();
    assert_eq!(
        (e.field, e.message.as_str()),
        (
            "slices",
            "[0]: example.com/slice-other is not in its allocatable"
        )
    );
}

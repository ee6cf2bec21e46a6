//! MIG slices (NVIDIA's mixed strategy) through a whole cycle under the default policy set:
//! GPUs in MIG mode are never whole devices, each slice goes to one pod, and gangs of slice
//! pods stay all-or-nothing.

use std::collections::{BTreeMap, BTreeSet};

use basalt_crds::convert::device_names::mig_resource;
use basalt_engine::devices::MigSlice;
use basalt_engine::{ClusterSpec, Gpu, GroupSpec, NodeSpec, Plan, PodPhase, PodSpec};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const SMALL: &str = "1g.10gb";
const HALF: &str = "3g.40gb";

/// A node of `gpus` GPUs; `layout[i]` instances of (small, half) on GPU i, or whole when
/// `None`.
fn node(name: &str, layout: &[Option<(u32, u32)>]) -> NodeSpec {
    let gpus: Vec<Gpu> = (layout.iter().enumerate())
        .map(|(i, l)| Gpu {
            uuid: Some(format!("{name}-GPU-{i}")),
            nvlink_domain: i as u32 / 2,
            mig: l.is_some(),
            ..Gpu::new(i as u32)
        })
        .collect();
    let mut slices = Vec::new();
    for (gpu, &(small, half)) in
        (layout.iter().enumerate()).filter_map(|(i, l)| Some((i, l.as_ref()?)))
    {
        let profiles = std::iter::repeat_n(HALF, half as usize)
            .chain(std::iter::repeat_n(SMALL, small as usize));
        for (k, profile) in profiles.enumerate() {
            slices.push(MigSlice {
                gpu: gpu as u32,
                profile: profile.into(),
                resource: mig_resource(profile),
                gpu_instance_id: k as u32 + 1,
                start: k as u32,
                memory_mib: None,
            });
        }
    }
    let count = |p: &str| slices.iter().filter(|s| s.profile == p).count() as i64;
    let whole = layout.iter().filter(|l| l.is_none()).count() as i64;
    let allocatable = [
        ("cpu".to_string(), 64_000),
        ("nvidia.com/gpu".to_string(), whole),
        (mig_resource(SMALL), count(SMALL)),
        (mig_resource(HALF), count(HALF)),
    ];
    NodeSpec {
        name: name.into(),
        allocatable: allocatable.into_iter().collect(),
        gpus: Some(gpus),
        slices,
        ..Default::default()
    }
}

fn pod(name: &str, request: &[(String, i64)]) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        request: request.iter().cloned().collect(),
        created_ms: 1,
        ..Default::default()
    }
}

fn group(name: &str, min_member: i64) -> GroupSpec {
    GroupSpec::new("ns", name, min_member)
}

fn plan(spec: ClusterSpec) -> Plan {
    let snap = basalt_engine::Snapshot::build(spec).unwrap();
    schedule(&snap, &Config::default())
}

#[test]
fn a_gang_of_slice_pods_starts_whole_or_not_at_all() {
    // Two small instances free; the gang needs three.
    let n = node("n", &[Some((2, 0)), None]);
    let ask = [(mig_resource(SMALL), 1)];
    let pods = (0..3)
        .map(|i| PodSpec {
            group: Some("g".into()),
            ..pod(&format!("p{i}"), &ask)
        })
        .collect();
    let p = plan(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![n.clone()],
        pods,
        groups: vec![group("g", 3)],
        ..Default::default()
    });
    assert!(p.bindings.is_empty(), "{:?}", p.bindings);
    // Two members fit: both bound, on distinct instances of the GPU.
    let pods = (0..2)
        .map(|i| PodSpec {
            group: Some("g".into()),
            ..pod(&format!("p{i}"), &ask)
        })
        .collect();
    let p = plan(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![n],
        pods,
        groups: vec![group("g", 2)],
        ..Default::default()
    });
    let ids: BTreeSet<u32> = (p.bindings.iter())
        .flat_map(|b| {
            b.devices
                .iter()
                .map(|d| d.mig.as_ref().unwrap().gpu_instance_id)
        })
        .collect();
    assert_eq!(ids.len(), 2, "{:?}", p.bindings);
}

/// What a pod asks: whole GPUs, small instances or a half instance.
fn ask() -> impl Strategy<Value = (u8, i64)> {
    prop_oneof![
        (Just(0u8), 1..=2i64),
        (Just(1u8), 1..=3i64),
        (Just(2u8), Just(1i64))
    ]
}

fn layout() -> impl Strategy<Value = Vec<Option<(u32, u32)>>> {
    let gpu = prop_oneof![
        Just(None),
        (0..=7u32, 0..=1u32).prop_map(|(s, h)| Some((s.min(7 - 4 * h), h)))
    ];
    prop::collection::vec(gpu, 1..=4)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    })]
    /// No binding takes a GPU in MIG mode as a whole device or a slice another pod holds
    /// (bound before or placed now), and a slice pod on a node that lists its profile's
    /// instances is given as many as it asks for, of that profile.
    #[test]
    fn slices_are_never_shared_and_mig_gpus_never_whole(
        layouts in prop::collection::vec(layout(), 1..=3),
        asks in prop::collection::vec(ask(), 1..=16),
        running in 0..4usize,
    ) {
        let nodes: Vec<NodeSpec> = (layouts.iter().enumerate())
            .map(|(i, l)| node(&format!("n{i}"), l))
            .collect();
        let resource = |kind: u8| match kind {
            0 => "nvidia.com/gpu".to_string(),
            1 => mig_resource(SMALL),
            _ => mig_resource(HALF),
        };
        let mut pods: Vec<PodSpec> = (asks.iter().enumerate())
            .map(|(i, &(kind, n))| pod(&format!("p{i:02}"), &[(resource(kind), n)]))
            .collect();
        // The first pods' asks run on n0 already when it has the room (the rebuild takes
        // their slices first).
        let n0 = &nodes[0];
        let mut room: BTreeMap<String, i64> = n0.allocatable.clone();
        for p in pods.iter_mut().take(running) {
            let (r, n) = p.request.iter().next().map(|(k, v)| (k.clone(), *v)).unwrap();
            if room.get(&r).copied().unwrap_or(0) >= n {
                *room.get_mut(&r).unwrap() -= n;
                p.node = Some("n0".into());
                p.phase = PodPhase::Running;
            }
        }
        let bound_before = pods.iter().filter(|p| p.node.is_some()).count();
        let spec = ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            nodes: nodes.clone(),
            pods: pods.clone(),
            ..Default::default()
        };
        let snap = basalt_engine::Snapshot::build(spec.clone()).unwrap();
        let held: usize = snap.tasks.iter().map(|t| t.slices.count_ones() as usize).sum();
        let asked: i64 = (pods.iter().filter(|p| p.node.is_some()))
            .filter_map(|p| p.request.iter().find(|(k, _)| k.starts_with("nvidia.com/mig-")))
            .map(|(_, v)| *v)
            .sum();
        prop_assert_eq!(held as i64, asked, "bound pods hold what they ask");
        let p = schedule(&snap, &Config::default());
        let mut taken: BTreeSet<(String, u32, u32)> = BTreeSet::new();
        let bound = |t: &basalt_engine::Task| match t.state {
            basalt_engine::TaskState::Bound(n) => Some(n),
            _ => None,
        };
        for (t, n) in snap.tasks.iter().filter_map(|t| Some((t, bound(t)?))) {
            let node = &snap.nodes[n.index()];
            for (i, s) in node.slices.iter().enumerate() {
                if t.slices & (1 << i) != 0 {
                    prop_assert!(taken.insert((node.name.clone(), s.mig.gpu, s.mig.gpu_instance_id)));
                }
            }
        }
        prop_assert_eq!(taken.len(), held);
        for b in &p.bindings {
            let node = nodes.iter().find(|n| n.name == b.node).unwrap();
            let gpus = node.gpus.as_ref().unwrap();
            for g in &b.gpus {
                prop_assert!(!gpus[*g as usize].mig, "{} takes GPU {} in MIG mode", b.pod, g);
            }
            let request = &pods.iter().find(|p| format!("ns/{}", p.name) == b.pod).unwrap().request;
            for d in &b.devices {
                if let Some(m) = &d.mig {
                    prop_assert!(request.contains_key(&mig_resource(&m.profile)));
                    let key = (b.node.clone(), d.index, m.gpu_instance_id);
                    prop_assert!(taken.insert(key), "{} takes a slice held already", b.pod);
                }
            }
            let slices = b.devices.iter().filter(|d| d.mig.is_some()).count() as i64;
            let asked: i64 = request.iter().filter(|(k, _)| k.starts_with("nvidia.com/mig-")).map(|(_, v)| *v).sum();
            prop_assert_eq!(slices, asked, "{} gets the instances it asks for", &b.pod);
        }
        prop_assert!(bound_before + p.bindings.len() <= pods.len());
    }
}

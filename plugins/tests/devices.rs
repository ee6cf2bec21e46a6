//! Shared devices through a whole cycle under the default policy set: HAMi memory and compute
//! shares, whole devices on HAMi nodes, time-sliced replicas, device filters, and usage
//! rebuilt from what bound pods hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use basalt_engine::devices::{DeviceFilters, DevicePolicy, HeldDevice, Sharing};
use basalt_engine::{
    ClusterSpec, Gpu, GroupSpec, JobPhase, NodeSpec, Plan, PodPhase, PodSpec, ResourceList,
    Snapshot,
};
use basalt_plugins::{schedule, Config};
use proptest::prelude::*;

const MIB: u64 = 81920;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn device(index: u32, memory: u64, slots: u32, island: u32) -> Gpu {
    Gpu {
        uuid: Some(format!("GPU-{index}")),
        model: Some("NVIDIA-H100-80GB-HBM3".into()),
        memory_mib: Some(memory),
        nvlink_domain: island,
        slots,
        ..Gpu::new(index)
    }
}

fn node(name: &str, sharing: Sharing, gpus: Vec<Gpu>) -> NodeSpec {
    let slots: u32 = gpus.iter().map(|g| g.slots).sum();
    NodeSpec {
        name: name.into(),
        allocatable: list(&[("cpu", 64_000), ("nvidia.com/gpu", slots as i64)]),
        gpus: Some(gpus),
        sharing,
        shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
        ..Default::default()
    }
}

fn hami(name: &str, devices: u32) -> NodeSpec {
    node(
        name,
        Sharing::Hami,
        (0..devices).map(|i| device(i, MIB, 10, 0)).collect(),
    )
}

fn pod(name: &str, request: &[(&str, i64)]) -> PodSpec {
    read_asks(PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        request: list(request),
        created_ms: 1,
        ..Default::default()
    })
}

/// The pod with its device asks read from its request's names, as `crds` reads them.
fn read_asks(p: PodSpec) -> PodSpec {
    PodSpec {
        devices: basalt_crds::device_ask(&p.request),
        ..p
    }
}

fn bound(mut p: PodSpec, node: &str, held: &[(&str, u32, u32)]) -> PodSpec {
    p.node = Some(node.into());
    p.phase = PodPhase::Running;
    p.held_devices = (held.iter())
        .map(|&(uuid, memory_mib, cores)| HeldDevice {
            uuid: uuid.into(),
            memory_mib,
            cores,
        })
        .collect();
    p
}

fn plan(nodes: Vec<NodeSpec>, pods: Vec<PodSpec>) -> Plan {
    let snap = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        ..Default::default()
    })
    .unwrap();
    schedule(&snap, &Config::default())
}

/// Device index per bound pod name.
fn placed(plan: &Plan) -> BTreeMap<String, Vec<u32>> {
    (plan.bindings.iter())
        .map(|b| (b.pod.trim_start_matches("ns/").to_string(), b.gpus.clone()))
        .collect()
}

#[test]
fn memory_shares_fill_each_device_up_to_its_memory() {
    // 30 GiB shares on two 80 GiB devices: two per device, the fifth pends.
    let pods = (0..5)
        .map(|i| pod(&format!("p{i}"), &[("nvidia.com/gpumem", 30_000)]))
        .collect();
    let plan = plan(vec![hami("n1", 2)], pods);
    let placed = placed(&plan);
    assert_eq!(placed.len(), 4, "{plan:?}");
    let mut per_device = HashMap::new();
    for gpus in placed.values() {
        assert_eq!(gpus.len(), 1);
        *per_device.entry(gpus[0]).or_insert(0) += 1;
    }
    assert_eq!(per_device, HashMap::from([(0, 2), (1, 2)]));
    let b = &plan.bindings[0];
    assert_eq!(b.devices[0].memory_mib, Some(30_000));
    assert_eq!(b.devices[0].cores, Some(0));
    assert_eq!(b.devices[0].uuid.as_deref(), Some("GPU-0"));
}

#[test]
fn room_a_discarded_gang_gives_back_is_seen_by_the_next_pod_of_its_shape() {
    // A pod holds 30 GiB of device 0. The gang's first member takes device 1's room, its
    // second finds none on either device (the node is remembered as without room for the
    // shape), the gang is undone: the next pod of the same shape must see the room again.
    let share = [("nvidia.com/gpumem", 60_000)];
    let running = bound(
        pod("running", &[("nvidia.com/gpumem", 30_000)]),
        "n1",
        &[("GPU-0", 30_000, 0)],
    );
    let gang = |i: usize| PodSpec {
        group: Some("g".into()),
        priority: 10,
        ..pod(&format!("g{i}"), &share)
    };
    let group = GroupSpec {
        priority: Some(10),
        ..GroupSpec::new("ns", "g", 2)
    };
    let snap = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![hami("n1", 2)],
        pods: vec![running, gang(0), gang(1), pod("single", &share)],
        groups: vec![group],
        ..Default::default()
    })
    .unwrap();
    let plan = schedule(&snap, &Config::default());
    let placed: Vec<&str> = plan.bindings.iter().map(|b| b.pod.as_str()).collect();
    assert_eq!(placed, ["ns/single"], "{plan:?}");
}

#[test]
fn a_whole_device_on_a_hami_node_is_taken_exclusively() {
    // A plain GPU request takes all of a device (HAMi's webhook default): the share goes to
    // the other device, and a second whole request finds none.
    let pods = vec![
        pod("a-whole", &[("nvidia.com/gpu", 1)]),
        pod("b-share", &[("nvidia.com/gpumem", 1000)]),
        pod("c-whole", &[("nvidia.com/gpu", 1)]),
    ];
    let plan = plan(vec![hami("n1", 2)], pods);
    let placed = placed(&plan);
    assert_eq!(placed.len(), 2, "{plan:?}");
    assert_ne!(placed["a-whole"], placed["b-share"]);
    let whole = plan
        .bindings
        .iter()
        .find(|b| b.pod == "ns/a-whole")
        .unwrap();
    assert_eq!(whole.devices[0].memory_mib, Some(MIB as u32));
    assert_eq!(whole.devices[0].cores, Some(100));
}

#[test]
fn a_share_of_several_devices_takes_distinct_ones() {
    let pods = vec![pod(
        "p",
        &[("nvidia.com/gpu", 2), ("nvidia.com/gpumem-percentage", 25)],
    )];
    let plan = plan(vec![hami("n1", 4)], pods);
    let b = &plan.bindings[0];
    assert_eq!(b.gpus.len(), 2);
    assert_ne!(b.gpus[0], b.gpus[1]);
    assert_eq!(b.devices[0].memory_mib, Some(MIB as u32 / 4));
}

#[test]
fn compute_shares_are_bounded_per_device() {
    let pods = (0..3)
        .map(|i| {
            pod(
                &format!("p{i}"),
                &[("nvidia.com/gpumem", 100), ("nvidia.com/gpucores", 60)],
            )
        })
        .collect();
    let plan = plan(vec![hami("n1", 2)], pods);
    assert_eq!(plan.bindings.len(), 2, "60 % twice does not fit one device");
}

#[test]
fn shares_need_a_hami_node() {
    let plain = NodeSpec {
        name: "plain".into(),
        allocatable: list(&[("cpu", 64_000), ("nvidia.com/gpu", 8)]),
        shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
        ..Default::default()
    };
    let plan = plan(vec![plain], vec![pod("p", &[("nvidia.com/gpumem", 1000)])]);
    assert!(plan.bindings.is_empty());
    let pg = &plan.pod_groups[0];
    let message = &pg.conditions[0].message;
    // In HAMi's words: the node has no HAMi devices; never the made-up gpumem resource.
    assert!(message.contains("NodeInsufficientDevice"), "{message}");
    assert!(
        !message.contains("insufficient nvidia.com/gpumem"),
        "{message}"
    );
}

#[test]
fn usage_of_bound_pods_is_rebuilt_from_what_they_hold() {
    // Device 0 is 60 GiB used by a HAMi-placed pod (its request says only 1 GPU); a 30 GiB
    // share then fits only device 1.
    let held = bound(
        pod("old", &[("nvidia.com/gpu", 1)]),
        "n1",
        &[("GPU-0", 60_000, 0)],
    );
    let plan = plan(
        vec![hami("n1", 2)],
        vec![held, pod("new", &[("nvidia.com/gpumem", 30_000)])],
    );
    assert_eq!(placed(&plan)["new"], vec![1]);
}

#[test]
fn binpack_fills_the_most_used_device_first() {
    let held = bound(
        pod("old", &[("nvidia.com/gpu", 1)]),
        "n1",
        &[("GPU-1", 1000, 0)],
    );
    let mut new = pod("new", &[("nvidia.com/gpumem", 1000)]);
    new.rules.devices = Some(Arc::new(DeviceFilters {
        policy: DevicePolicy::Binpack,
        ..Default::default()
    }));
    let plan = plan(vec![hami("n1", 3)], vec![held.clone(), new.clone()]);
    assert_eq!(placed(&plan)["new"], vec![1]);
    // HAMi's default spreads: the least used device.
    new.rules.devices = None;
    let plan = self::plan(vec![hami("n1", 3)], vec![held, new]);
    assert_eq!(placed(&plan)["new"], vec![0]);
}

#[test]
fn device_filters_choose_nodes_and_devices() {
    let mut a100 = hami("a100", 1);
    a100.gpus.as_mut().unwrap()[0].model = Some("NVIDIA-A100-SXM4-80GB".into());
    let mut p = pod("p", &[("nvidia.com/gpumem", 1000)]);
    p.rules.devices = Some(Arc::new(DeviceFilters {
        use_types: vec!["A100".into()],
        ..Default::default()
    }));
    let plan = plan(vec![a100, hami("h100", 1)], vec![p.clone()]);
    assert_eq!(plan.bindings[0].node, "a100");
    p.rules.devices = Some(Arc::new(DeviceFilters {
        nouse_uuids: vec!["GPU-0".into()],
        ..Default::default()
    }));
    let plan = self::plan(vec![hami("n1", 2)], vec![p]);
    assert_eq!(plan.bindings[0].gpus, vec![1]);
}

#[test]
fn unhealthy_devices_take_nothing() {
    let mut n = hami("n1", 2);
    n.gpus.as_mut().unwrap()[0].healthy = false;
    let pods = (0..3)
        .map(|i| pod(&format!("p{i}"), &[("nvidia.com/gpumem", 40_000)]))
        .collect();
    let plan = plan(vec![n], pods);
    let placed = placed(&plan);
    assert_eq!(placed.len(), 2);
    assert!(placed.values().all(|g| g == &vec![1]));
}

#[test]
fn time_sliced_replicas_go_to_distinct_devices_inside_one_island() {
    // 8 GPUs in two NVLink islands, 4 replicas each (allocatable 32, more than 64 devices
    // would be if replicas were devices): a TP=2 pod's replicas share one island.
    let gpus = (0..8).map(|i| device(i, MIB, 4, i / 4)).collect();
    let n = node("ts", Sharing::TimeSliced, gpus);
    let mut pods: Vec<PodSpec> = (0..30)
        .map(|i| pod(&format!("one{i:02}"), &[("nvidia.com/gpu", 1)]))
        .collect();
    pods.push(pod("two", &[("nvidia.com/gpu", 2)]));
    let plan = plan(vec![n], pods);
    let placed = placed(&plan);
    assert_eq!(placed.len(), 31, "32 replicas hold 30 + 2");
    let two = &placed["two"];
    assert_eq!(two.len(), 2);
    assert_ne!(two[0], two[1]);
    assert_eq!(two[0] / 4, two[1] / 4, "one island: {two:?}");
    let b = plan.bindings.iter().find(|b| b.pod == "ns/two").unwrap();
    assert_eq!(
        b.devices[0].memory_mib, None,
        "a replica's memory is not divided"
    );
}

#[test]
fn a_time_sliced_node_of_many_replicas_is_accepted() {
    let gpus = (0..8).map(|i| device(i, MIB, 10, 0)).collect();
    let n = node("ts", Sharing::TimeSliced, gpus);
    let plan = plan(vec![n], vec![pod("p", &[("nvidia.com/gpu", 1)])]);
    assert_eq!(plan.bindings.len(), 1);
}

// ----- properties -----

#[derive(Debug, Clone)]
struct Ask {
    count: i64,
    memory: Option<i64>,
    percent: Option<i64>,
    cores: Option<i64>,
    gang: usize,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        1..=3i64,
        prop::option::of(1..=60_000i64),
        prop::option::of(1..=100i64),
        prop::option::of(0..=100i64),
        0..4usize,
    )
        .prop_map(|(count, memory, percent, cores, gang)| Ask {
            count,
            memory,
            percent,
            cores,
            gang,
        })
}

fn request(a: &Ask) -> ResourceList {
    let mut l = list(&[("cpu", 100), ("nvidia.com/gpu", a.count)]);
    for (name, v) in [
        ("nvidia.com/gpumem", a.memory),
        ("nvidia.com/gpumem-percentage", a.percent),
        ("nvidia.com/gpucores", a.cores),
    ] {
        if let Some(v) = v {
            l.insert(name.into(), v);
        }
    }
    l
}

fn sharing_cluster() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec((1..=4u32, 1..=4u32, 16_000..=81_920u64), 1..=4),
        prop::collection::vec(ask(), 1..=24),
        prop::collection::vec(any::<bool>(), 4),
    )
        .prop_map(|(nodes, asks, min_all)| {
            let nodes = (nodes.iter().enumerate())
                .map(|(i, &(devices, slots, memory))| {
                    let gpus = (0..devices)
                        .map(|d| device(d, memory, slots, d % 2))
                        .collect();
                    let mut n = node(&format!("n{i}"), Sharing::Hami, gpus);
                    for g in n.gpus.as_mut().unwrap() {
                        g.uuid = Some(format!("GPU-{i}-{}", g.index));
                    }
                    n
                })
                .collect();
            let pods = (asks.iter().enumerate())
                .map(|(i, a)| {
                    read_asks(PodSpec {
                        group: Some(format!("g{}", a.gang)),
                        request: request(a),
                        ..pod(&format!("p{i:02}"), &[])
                    })
                })
                .collect::<Vec<_>>();
            let groups = (0..4)
                .map(|g| {
                    let members = asks.iter().filter(|a| a.gang == g).count() as i64;
                    GroupSpec {
                        namespace: "ns".into(),
                        name: format!("g{g}"),
                        queue: None,
                        min_member: if min_all[g] { members.max(1) } else { 1 },
                        min_task_member: BTreeMap::new(),
                        min_resources: None,
                        priority: None,
                        created_ms: 0,
                        phase: JobPhase::Inqueue,
                        topology: Default::default(),
                        sub_groups: Vec::new(),
                        schedule_timeout_ms: None,
                    }
                })
                .collect();
            ClusterSpec {
                device_resource: "nvidia.com/gpu".into(),
                nodes,
                pods,
                groups,
                ..Default::default()
            }
        })
}

/// Per device (node, uuid): slots, memory and cores the plan's bindings take.
fn device_usage(plan: &Plan) -> HashMap<(String, String), (u32, u64, u32)> {
    let mut used: HashMap<(String, String), (u32, u64, u32)> = HashMap::new();
    for b in &plan.bindings {
        for d in &b.devices {
            let u = used
                .entry((b.node.clone(), d.uuid.clone().unwrap()))
                .or_default();
            u.0 += 1;
            u.1 += d.memory_mib.unwrap() as u64;
            u.2 += d.cores.unwrap();
        }
    }
    used
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// No device over its memory, compute or slots; a device taken with all of its compute is
    /// shared with no one; a pod's devices are distinct; gangs stay all-or-nothing.
    #[test]
    fn shares_never_overcommit_a_device(spec in sharing_cluster()) {
        let snap = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snap, &Config::default());
        let devices: HashMap<(String, String), Gpu> = (spec.nodes.iter())
            .flat_map(|n| n.gpus.iter().flatten().map(|g| ((n.name.clone(), g.uuid.clone().unwrap()), g.clone())))
            .collect();
        for ((node, uuid), (slots, memory, cores)) in device_usage(&plan) {
            let g = &devices[&(node.clone(), uuid.clone())];
            prop_assert!(slots <= g.slots, "{node}/{uuid}: {slots} pods");
            prop_assert!(memory <= g.memory_mib.unwrap(), "{node}/{uuid}: {memory} MiB");
            prop_assert!(cores <= g.cores, "{node}/{uuid}: {cores} % compute");
        }
        let mut exclusive: HashMap<(String, u32), usize> = HashMap::new();
        for b in &plan.bindings {
            let mut gpus = b.gpus.clone();
            gpus.dedup();
            prop_assert_eq!(gpus.len(), b.gpus.len());
            for d in &b.devices {
                *exclusive.entry((b.node.clone(), d.index)).or_default() += 1;
            }
        }
        for b in &plan.bindings {
            for d in b.devices.iter().filter(|d| d.cores == Some(100)) {
                prop_assert_eq!(exclusive[&(b.node.clone(), d.index)], 1, "{} shares an exclusive device", b.pod);
            }
        }
        for g in &spec.groups {
            let bound = plan.bindings.iter()
                .filter(|b| spec.pods.iter().any(|p| format!("ns/{}", p.name) == b.pod && p.group.as_deref() == Some(&g.name)))
                .count() as i64;
            prop_assert!(bound == 0 || bound >= g.min_member, "{}: {bound} of min {}", g.name, g.min_member);
        }
    }

    /// Bound pods holding what a plan gave them (HAMi's annotation) rebuild exactly the usage
    /// that plan charged: the next cycle's snapshot sees every device as the plan left it.
    #[test]
    fn usage_rebuilt_from_annotations_equals_the_plan(spec in sharing_cluster()) {
        let snap = Snapshot::build(spec.clone()).unwrap();
        let plan = schedule(&snap, &Config::default());
        let by_pod: HashMap<&str, _> = plan.bindings.iter().map(|b| (b.pod.as_str(), b)).collect();
        let mut next = spec.clone();
        for p in &mut next.pods {
            if let Some(b) = by_pod.get(format!("ns/{}", p.name).as_str()) {
                p.node = Some(b.node.clone());
                p.phase = PodPhase::Running;
                p.held_devices = b.devices.iter().map(|d| HeldDevice {
                    uuid: d.uuid.clone().unwrap(),
                    memory_mib: d.memory_mib.unwrap(),
                    cores: d.cores.unwrap(),
                }).collect();
            }
        }
        let rebuilt = Snapshot::build(next).unwrap();
        let mut from_plan = HashMap::new();
        for ((node, uuid), (slots, memory, cores)) in device_usage(&plan) {
            from_plan.insert((node, uuid), (slots, memory as u32, cores));
        }
        for n in &rebuilt.nodes {
            for (p, g) in n.gpus.iter().enumerate() {
                let u = rebuilt.device_use[n.device_base as usize + p];
                let want = from_plan.get(&(n.name.clone(), g.uuid.clone().unwrap())).copied().unwrap_or_default();
                prop_assert_eq!((u.slots, u.memory_mib, u.cores), want, "{}/{:?}", n.name, g.uuid);
            }
        }
    }
}

#[test]
fn another_vendor_s_devices_get_islands_and_ids_too() {
    // An MI300X node: 8 devices in two xGMI islands, advertised as amd.com/gpu, one device
    // already held in the first island. A 4-device pod takes the whole free island.
    let mut n = NodeSpec {
        name: "mi300".into(),
        allocatable: list(&[("cpu", 64_000), ("amd.com/gpu", 8)]),
        gpus: Some((0..8).map(|i| device(i, 196_608, 1, i / 4)).collect()),
        device_resource: Some("amd.com/gpu".into()),
        ..Default::default()
    };
    n.gpus
        .as_mut()
        .unwrap()
        .iter_mut()
        .for_each(|g| g.model = Some("AMD-MI300X".into()));
    let mut held = bound(pod("old", &[("amd.com/gpu", 1)]), "mi300", &[]);
    held.gpu_ids = vec![0];
    let plan = plan(vec![n], vec![held, pod("tp4", &[("amd.com/gpu", 4)])]);
    assert_eq!(placed(&plan)["tp4"], vec![4, 5, 6, 7]);
    assert_eq!(plan.bindings[0].devices.len(), 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A framework and Warm kept from cycle to cycle hand the node index (shared nodes bucketed
    /// by the level of their devices) to the next session; its plans agree with a fresh
    /// framework's on a fresh snapshot, cycle after cycle, while bindings take shares and pods
    /// finish.
    #[test]
    fn a_kept_index_of_shared_nodes_decides_as_a_fresh_one(spec in sharing_cluster(), done in 0..6usize) {
        let config = Config::default();
        let mut builder = basalt_engine::SnapshotBuilder::new(&spec.device_resource, spec.nodes.clone()).unwrap();
        let mut pods: BTreeMap<String, PodSpec> = (spec.pods.iter())
            .map(|p| (p.name.clone(), p.clone()))
            .collect();
        for g in &spec.groups {
            builder.set_group(g.clone());
        }
        let mut kept = None;
        for cycle in 0..4i64 {
            for p in pods.values() {
                builder.set_pod(p.clone());
            }
            let snapshot = builder.build(cycle * 1000, &[]).unwrap();
            let (fw, warm) = kept.get_or_insert_with(|| (basalt_plugins::framework(&config, &snapshot.resources), basalt_engine::Warm::default()));
            let plan = basalt_engine::schedule(snapshot, fw, warm);
            let fresh = schedule(
                &Snapshot::build(ClusterSpec {
                    device_resource: "nvidia.com/gpu".into(),
                    now_ms: cycle * 1000,
                    nodes: spec.nodes.clone(),
                    pods: pods.values().cloned().collect(),
                    groups: spec.groups.clone(),
                    ..Default::default()
                })
                .unwrap(),
                &config,
            );
            prop_assert_eq!(&plan.bindings, &fresh.bindings, "cycle {}", cycle);
            for b in &plan.bindings {
                let p = pods.get_mut(b.pod.trim_start_matches("ns/")).unwrap();
                p.node = Some(b.node.clone());
                p.phase = PodPhase::Running;
                p.held_devices = (b.devices.iter())
                    .map(|d| HeldDevice {
                        uuid: d.uuid.clone().unwrap(),
                        memory_mib: d.memory_mib.unwrap(),
                        cores: d.cores.unwrap(),
                    })
                    .collect();
            }
            // Some running pods finish, giving their shares back.
            let running: Vec<String> = (pods.values())
                .filter(|p| p.phase == PodPhase::Running)
                .map(|p| p.name.clone())
                .collect();
            for name in running.iter().take(done) {
                pods.get_mut(name).unwrap().phase = PodPhase::Succeeded;
            }
        }
    }
}

#[test]
fn a_share_preempts_the_lower_priority_share_its_device_lacks_room_for() {
    // One 80 GiB device: a low-priority pod HAMi placed holds 60 GiB (its request names only
    // a GPU, so the node's totals do not show it); a high-priority pod asking 40 GiB lacks only
    // device memory: the low one is evicted for it.
    let mut low = bound(
        pod("low", &[("nvidia.com/gpu", 1)]),
        "n1",
        &[("GPU-0", 60_000, 0)],
    );
    low.priority = 1;
    let mut high = pod("high", &[("nvidia.com/gpumem", 40_000)]);
    high.priority = 100;
    let plan = plan(vec![hami("n1", 1)], vec![low, high]);
    let evicted: Vec<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(evicted, ["ns/low"], "{plan:?}");
    assert!(plan
        .nominations
        .iter()
        .any(|n| n.pod == "ns/high" && n.node == "n1"));
}

//! MIG layouts chosen from demand (`mig.relayout`): through a whole cycle under the default
//! policy set, with the plugin on and off.

use basalt_crds::convert::device_names::mig_resource;
use basalt_engine::devices::MigSlice;
use basalt_engine::{ClusterSpec, Gpu, NodeSpec, Plan, PodPhase, PodSpec, MIG_RELAYOUT};
use basalt_plugins::{schedule, Config};

const H100: &str = "NVIDIA-H100-80GB-HBM3";

/// A node of H100s: `layout[i]` the profiles of GPU i's instances (in MIG mode), or whole
/// when `None`.
fn node(name: &str, layout: &[Option<&[&str]>]) -> NodeSpec {
    let gpus: Vec<Gpu> = (layout.iter().enumerate())
        .map(|(i, l)| Gpu {
            model: Some(H100.into()),
            memory_mib: Some(81_559),
            nvlink_domain: 0,
            mig: l.is_some(),
            ..Gpu::new(i as u32)
        })
        .collect();
    let mut slices = Vec::new();
    for (gpu, profiles) in (layout.iter().enumerate()).filter_map(|(i, l)| Some((i, (*l)?))) {
        for (k, profile) in profiles.iter().enumerate() {
            slices.push(MigSlice {
                gpu: gpu as u32,
                profile: profile.to_string(),
                resource: mig_resource(profile),
                gpu_instance_id: k as u32 + 1,
                start: k as u32,
                memory_mib: None,
            });
        }
    }
    let mut allocatable: Vec<(String, i64)> = vec![
        ("cpu".into(), 64_000),
        (
            "nvidia.com/gpu".into(),
            layout.iter().filter(|l| l.is_none()).count() as i64,
        ),
    ];
    for s in &slices {
        match allocatable
            .iter_mut()
            .find(|(k, _)| *k == mig_resource(&s.profile))
        {
            Some((_, n)) => *n += 1,
            None => allocatable.push((mig_resource(&s.profile), 1)),
        }
    }
    NodeSpec {
        name: name.into(),
        allocatable: allocatable.into_iter().collect(),
        gpus: Some(gpus),
        slices,
        ..Default::default()
    }
}

fn pod(name: &str, resource: &str, count: i64) -> PodSpec {
    PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        request: [("cpu".to_string(), 1000), (resource.to_string(), count)]
            .into_iter()
            .collect(),
        created_ms: 1,
        ..Default::default()
    }
}

fn running(mut p: PodSpec, node: &str) -> PodSpec {
    p.node = Some(node.into());
    p.phase = PodPhase::Running;
    p
}

/// Re-layouts on, whole GPUs included (`mig.wholeGpus`: where mig-manager switches MIG mode).
fn relayout_on() -> Config {
    let mut c = Config::default();
    c.mig.relayout = true;
    c.mig.whole_gpus = true;
    c
}

#[test]
fn by_default_only_gpus_in_mig_mode_are_re_laid() {
    // GPU 0 whole, GPU 1 in MIG mode with no instance: the node agent cannot switch GPU 0's
    // MIG mode, so only GPU 1 is proposed.
    let mut c = Config::default();
    c.mig.relayout = true;
    let p = plan(
        vec![node("n", &[None, Some(&[])])],
        vec![pod("p", "nvidia.com/mig-3g.40gb", 1)],
        &c,
    );
    assert_eq!(p.mig_layouts.len(), 1, "{:?}", p.mig_layouts);
    assert_eq!(p.mig_layouts[0].gpu, 1, "{:?}", p.mig_layouts);
    // With only a whole GPU, nothing is proposed.
    let p = plan(
        vec![node("n", &[None])],
        vec![pod("p", "nvidia.com/mig-3g.40gb", 1)],
        &c,
    );
    assert!(p.mig_layouts.is_empty(), "{:?}", p.mig_layouts);
}

fn plan(nodes: Vec<NodeSpec>, pods: Vec<PodSpec>, config: &Config) -> Plan {
    let spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        ..Default::default()
    };
    schedule(&basalt_engine::Snapshot::build(spec).unwrap(), config)
}

fn profiles(p: &Plan, i: usize) -> Vec<&str> {
    p.mig_layouts[i]
        .layout
        .iter()
        .map(|l| l.profile.as_str())
        .collect()
}

#[test]
fn a_whole_idle_gpu_is_re_laid_for_a_3g_pod_which_waits_for_it() {
    let p = plan(
        vec![node("n", &[None])],
        vec![pod("a", &mig_resource("3g.40gb"), 1)],
        &relayout_on(),
    );
    assert!(p.bindings.is_empty() && p.nominations.is_empty(), "{p:?}");
    assert_eq!(p.mig_layouts.len(), 1, "{:?}", p.mig_layouts);
    let l = &p.mig_layouts[0];
    assert_eq!((l.node.as_str(), l.gpu), ("n", 0));
    assert!(profiles(&p, 0).contains(&"3g.40gb"), "{l:?}");
    assert_eq!(l.pods, ["ns/a"]);
    // The rest of the GPU is laid too, with the demanded profile first: all memory slices.
    let starts: Vec<u32> = l.layout.iter().map(|l| l.start).collect();
    assert_eq!(
        (profiles(&p, 0), starts),
        (vec!["3g.40gb", "3g.40gb"], vec![0, 4])
    );
    let group = p.pod_groups.iter().find(|g| &*g.name == "ns/a").unwrap();
    let reasons: Vec<&str> = group.conditions.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(reasons, [MIG_RELAYOUT], "{group:?}");
    // Serialized as the handoff reads it.
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["migLayouts"][0]["gpu"], 0);
    assert_eq!(json["migLayouts"][0]["layout"][0]["start"], 0);
}

#[test]
fn the_next_pending_shapes_share_the_new_layout() {
    let pods = vec![
        pod("a", &mig_resource("3g.40gb"), 1),
        pod("b", &mig_resource("2g.20gb"), 1),
        pod("c", &mig_resource("2g.20gb"), 1),
    ];
    let p = plan(vec![node("n", &[None, None])], pods, &relayout_on());
    // One GPU serves all three; the bound of one GPU per node per cycle holds.
    assert_eq!(p.mig_layouts.len(), 1, "{:?}", p.mig_layouts);
    assert_eq!(p.mig_layouts[0].pods, ["ns/a", "ns/b", "ns/c"]);
    let mut got = profiles(&p, 0);
    got.sort();
    assert_eq!(got, ["2g.20gb", "2g.20gb", "3g.40gb"]);
}

#[test]
fn a_partitioned_idle_gpu_goes_before_a_whole_one() {
    let p = plan(
        vec![node("n", &[None, Some(&["1g.10gb", "1g.10gb"])])],
        vec![pod("a", &mig_resource("3g.40gb"), 1)],
        &relayout_on(),
    );
    assert_eq!(p.mig_layouts.len(), 1, "{:?}", p.mig_layouts);
    assert_eq!(p.mig_layouts[0].gpu, 1);
}

#[test]
fn a_busy_gpu_is_never_proposed() {
    // GPU 0 in MIG mode with one instance in use; GPU 1 whole and held by a pod.
    let nodes = vec![node("n", &[Some(&["1g.10gb", "1g.10gb"]), None])];
    let pods = vec![
        running(pod("busy-slice", &mig_resource("1g.10gb"), 1), "n"),
        running(pod("busy-whole", "nvidia.com/gpu", 1), "n"),
        pod("a", &mig_resource("3g.40gb"), 1),
    ];
    let p = plan(nodes, pods, &relayout_on());
    assert!(p.mig_layouts.is_empty(), "{:?}", p.mig_layouts);
    let group = p.pod_groups.iter().find(|g| &*g.name == "ns/a").unwrap();
    assert!(
        group.conditions.iter().all(|c| c.reason != MIG_RELAYOUT),
        "{group:?}"
    );
}

#[test]
fn whole_gpus_a_pending_whole_gpu_pod_could_use_stay_whole() {
    let pods = vec![
        pod("a", &mig_resource("3g.40gb"), 1),
        pod("big", "nvidia.com/gpu", 4),
    ];
    // Two whole GPUs: the 4-GPU pod does not fit but waits for this node's island.
    let p = plan(vec![node("n", &[None, None])], pods, &relayout_on());
    assert!(p.mig_layouts.is_empty(), "{:?}", p.mig_layouts);
}

#[test]
fn a_node_mig_manager_reconfigures_gets_no_proposal() {
    let mut n = node("n", &[None]);
    n.mig_reconfiguring = Some("pending".into());
    let p = plan(
        vec![n],
        vec![pod("a", &mig_resource("3g.40gb"), 1)],
        &relayout_on(),
    );
    assert!(p.mig_layouts.is_empty(), "{:?}", p.mig_layouts);
}

#[test]
fn off_by_default_the_plan_is_identical() {
    let nodes = vec![node("n", &[None, Some(&["1g.10gb"])])];
    let pods = vec![
        pod("a", &mig_resource("3g.40gb"), 1),
        pod("b", &mig_resource("1g.10gb"), 1),
    ];
    let off = plan(nodes.clone(), pods.clone(), &Config::default());
    assert!(off.mig_layouts.is_empty());
    let json = serde_json::to_string(&off).unwrap();
    assert!(!json.contains("migLayouts"), "{json}");
    let mut on = plan(nodes, pods, &relayout_on());
    assert_eq!(on.mig_layouts.len(), 1);
    // Everything but the proposal and the reason of the pod that waits for it is the same.
    on.mig_layouts.clear();
    for (a, b) in on.pod_groups.iter_mut().zip(&off.pod_groups) {
        if &*a.name == "ns/a" {
            a.conditions = b.conditions.clone();
        }
    }
    assert_eq!(on, off);
}

#[test]
fn the_config_bounds_gpus_per_node() {
    let err = Config::from_yaml("c.yaml", "mig: {relayout: true, maxGpusPerNode: 0}").unwrap_err();
    assert_eq!(err, "c.yaml: mig.maxGpusPerNode: must be at least 1, got 0");
    let mut c = Config::from_yaml("c.yaml", "mig: {relayout: true, maxGpusPerNode: 2}").unwrap();
    let pods = vec![
        pod("a", &mig_resource("7g.80gb"), 1),
        pod("b", &mig_resource("7g.80gb"), 1),
        pod("c", &mig_resource("7g.80gb"), 1),
    ];
    let p = plan(
        vec![node("n", &[Some(&[]), Some(&[]), Some(&[])])],
        pods.clone(),
        &c,
    );
    assert_eq!(p.mig_layouts.len(), 2, "{:?}", p.mig_layouts);
    c.mig.max_gpus_per_node = 1;
    let p = plan(
        vec![node("n", &[Some(&[]), Some(&[]), Some(&[])])],
        pods,
        &c,
    );
    assert_eq!(p.mig_layouts.len(), 1, "{:?}", p.mig_layouts);
}

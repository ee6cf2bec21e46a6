//! Shared GPUs read from manifests: HAMi's node register and cordon, NVIDIA time-slicing (from
//! a NodeTopology or GFD's labels), HAMi's pod annotations.

mod common;

use basalt_crds::{build_snapshot_with_warnings, cluster_spec_with_warnings, ConvertOptions};
use basalt_engine::devices::{DevicePolicy, HeldDevice, Sharing};
use basalt_engine::{ClusterSpec, NodeSpec, PodSpec};
use common::objects;

fn read(text: &str) -> (ClusterSpec, Vec<String>) {
    cluster_spec_with_warnings(&objects("devices.yaml", text), &ConvertOptions::default()).unwrap()
}

fn node<'s>(spec: &'s ClusterSpec, name: &str) -> &'s NodeSpec {
    spec.nodes.iter().find(|n| n.name == name).unwrap()
}

fn pod<'s>(spec: &'s ClusterSpec, name: &str) -> &'s PodSpec {
    spec.pods.iter().find(|p| p.name == name).unwrap()
}

/// HAMi's register for 8 H100s split 10 ways, as its device plugin writes it.
fn register() -> String {
    let devices: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"id":"GPU-{i}","index":{i},"count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-H100","numa":{},"mode":"hami-core","health":true}}"#,
                i / 4
            )
        })
        .collect();
    format!("[{}]", devices.join(","))
}

fn hami_manifest() -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: hami
    annotations:
      hami.io/node-nvidia-register: '{}'
      hami.io/device-cordon: "GPU-3, GPU-9"
  status: {{allocatable: {{cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "80"}}}}
- apiVersion: scheduling.basalt.dev/v1alpha1
  kind: NodeTopology
  metadata: {{name: hami}}
  spec:
    gpus: [{{index: 0, uuid: GPU-0}}, {{index: 1, uuid: GPU-1}}, {{index: 2, uuid: GPU-2}}, {{index: 3, uuid: GPU-3}}, {{index: 4, uuid: GPU-4}}, {{index: 5, uuid: GPU-5}}, {{index: 6, uuid: GPU-6}}, {{index: 7, uuid: GPU-7}}]
    islands: [[0, 1, 2, 3], [4, 5, 6, 7]]
- apiVersion: v1
  kind: Pod
  metadata:
    name: bound
    namespace: t
    annotations:
      hami.io/vgpu-node: hami
      hami.io/vgpu-devices-allocated: "GPU-0,NVIDIA,20000,30:GPU-1,NVIDIA,20000,30:;"
  spec:
    nodeName: hami
    containers:
    - name: c
      resources: {{limits: {{nvidia.com/gpu: "2", nvidia.com/gpumem: "20000", nvidia.com/gpucores: "30"}}}}
  status: {{phase: Running}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: picky
    namespace: t
    annotations:
      nvidia.com/use-gputype: "H100,A100"
      nvidia.com/nouse-gpuuuid: GPU-7
      hami.io/gpu-scheduler-policy: binpack
  spec:
    schedulerName: basalt
    containers:
    - name: c
      resources: {{limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50"}}}}
"#,
        register()
    )
}

#[test]
fn hami_node_lists_its_devices() {
    let (spec, warnings) = read(&hami_manifest());
    assert!(warnings.is_empty(), "{warnings:?}");
    let n = node(&spec, "hami");
    assert_eq!(n.sharing, Sharing::Hami);
    let gpus = n.gpus.as_ref().unwrap();
    assert_eq!(gpus.len(), 8);
    for g in gpus {
        assert_eq!(g.slots, 10);
        assert_eq!(g.memory_mib, Some(81920));
        assert_eq!(g.cores, 100);
        assert_eq!(g.model.as_deref(), Some("NVIDIA-H100"));
        assert_eq!(g.uuid, Some(format!("GPU-{}", g.index)));
        assert_eq!(g.nvlink_domain, g.index / 4);
        // Cordoned: GPU-3 (GPU-9 is not on the node).
        assert_eq!(g.healthy, g.index != 3);
    }
    // The allocatable as the kubelet reports it: the engine adds HAMi's share totals.
    assert_eq!(n.allocatable["nvidia.com/gpu"], 80);
    assert!(!n.allocatable.contains_key("nvidia.com/gpumem"));
    assert!(!n.allocatable.contains_key("nvidia.com/gpucores"));
}

#[test]
fn hami_pods_hold_devices_and_state_filters() {
    let (spec, _) = read(&hami_manifest());
    let bound = pod(&spec, "bound");
    let held = |uuid: &str| HeldDevice {
        uuid: uuid.into(),
        memory_mib: 20000,
        cores: 30,
    };
    assert_eq!(bound.held_devices, [held("GPU-0"), held("GPU-1")]);
    // HAMi's request names stay ordinary extended resources.
    assert_eq!(bound.request["nvidia.com/gpumem"], 20000);
    assert_eq!(bound.request["nvidia.com/gpucores"], 30);
    assert!(bound.rules.devices.is_none());

    let picky = pod(&spec, "picky");
    assert!(picky.held_devices.is_empty());
    assert_eq!(picky.request["nvidia.com/gpumem-percentage"], 50);
    let f = picky.rules.devices.as_deref().unwrap();
    assert_eq!(f.use_types, ["H100", "A100"]);
    assert_eq!(f.nouse_uuids, ["GPU-7"]);
    assert_eq!(f.policy, DevicePolicy::Binpack);

    // The engine takes the node and its pods as they are.
    let objects = objects("devices.yaml", &hami_manifest());
    build_snapshot_with_warnings(&objects, &ConvertOptions::default()).unwrap();
}

#[test]
fn an_untrusted_register_closes_the_node_s_devices() {
    let one = r#"{"id": "GPU-0", "index": 0, "count": 10, "devmem": 81920, "health": true}"#;
    let text = format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: bad
    annotations: {{hami.io/node-nvidia-register: '[{{"id": "GPU-0", "count": "ten"}}]'}}
  status: {{allocatable: {{cpu: "8", nvidia.com/gpu: "8"}}}}
- apiVersion: v1
  kind: Node
  metadata:
    name: dup
    annotations: {{hami.io/node-nvidia-register: '[{one}, {one}, {one}, {one}]'}}
  status: {{allocatable: {{cpu: "8", nvidia.com/gpu: "40"}}}}
- apiVersion: v1
  kind: Node
  metadata:
    name: vgpu
    annotations: {{volcano.sh/node-vgpu-register: "GPU-v,10,32768,V100,true:GPU-v,10,32768,V100,true:"}}
  status: {{allocatable: {{cpu: "8", volcano.sh/vgpu-number: "20", volcano.sh/vgpu-memory: "65536", volcano.sh/vgpu-cores: "200"}}}}
"#
    );
    let (spec, warnings) = read(&text);
    let field = "metadata.annotations[hami.io/node-nvidia-register]";
    let cases = [
        ("bad", 1, format!("{field}: malformed JSON")),
        ("dup", 2, format!("{field}: devices 0 and 1 are both GPU-0")),
        (
            "vgpu",
            3,
            "metadata.annotations[volcano.sh/node-vgpu-register]: devices 0 and 1 are both GPU-v"
                .to_string(),
        ),
    ];
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    for (name, doc, why) in cases {
        let n = node(&spec, name);
        let closed = n.devices_closed.as_deref().unwrap_or("");
        assert!(closed.starts_with(&why), "{name}: {closed:?}");
        assert!(n.gpus.is_none(), "{name}");
        let warned = format!(
            "devices.yaml: document 1: items[{}]: Node {name}: {why}",
            doc - 1
        );
        assert!(
            warnings.iter().any(|w| w.starts_with(&warned)),
            "{warned}\n{warnings:?}"
        );
    }
    // The engine takes the nodes, their devices closed: none counted, no share totals.
    let objects = objects("devices.yaml", &text);
    let (snapshot, _) = build_snapshot_with_warnings(&objects, &ConvertOptions::default()).unwrap();
    for n in &snapshot.nodes {
        assert!(n.gpus.is_empty() && !n.sharing.shares(), "{}", n.name);
        assert!(n.devices_closed.is_some(), "{}", n.name);
        let names = &snapshot.resources;
        for (id, amount) in n.allocatable.iter() {
            let name = names.name(id);
            if name != "cpu" && name != "pods" {
                assert_eq!(amount, 0, "{}: {name}", n.name);
            }
        }
    }
}

#[test]
fn time_sliced_node_keeps_its_topology() {
    let text = r#"apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: ts}, status: {allocatable: {cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "32"}}}
- apiVersion: scheduling.basalt.dev/v1alpha1
  kind: NodeTopology
  metadata: {name: ts}
  spec:
    gpus: [{index: 0}, {index: 1}, {index: 2}, {index: 3}, {index: 4}, {index: 5}, {index: 6}, {index: 7}]
    islands: [[0, 1, 2, 3], [4, 5, 6, 7]]
    timeSliceReplicas: 4
"#;
    let (spec, warnings) = read(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    let n = node(&spec, "ts");
    assert_eq!(n.sharing, Sharing::TimeSliced);
    let gpus = n.gpus.as_ref().unwrap();
    assert_eq!(gpus.len(), 8);
    let domains: Vec<u32> = gpus.iter().map(|g| g.nvlink_domain).collect();
    assert_eq!(domains, [0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(gpus.iter().all(|g| g.slots == 4 && g.healthy));
    build_snapshot_with_warnings(&objects("ts.yaml", text), &ConvertOptions::default()).unwrap();

    // A count the replicas do not explain is still warned, with both counts.
    let (spec, warnings) = read(&text.replace("nvidia.com/gpu: \"32\"", "nvidia.com/gpu: \"24\""));
    assert!(node(&spec, "ts").gpus.is_none());
    assert!(
        warnings[0].contains("24 GPUs, but its NodeTopology lists 8 with 4 time-slice replicas"),
        "{warnings:?}"
    );
}

#[test]
fn time_sliced_node_from_gfd_labels() {
    let text = r#"apiVersion: v1
kind: Node
metadata:
  name: gfd
  labels: {nvidia.com/gpu.replicas: "4", nvidia.com/gpu.memory: "81559", nvidia.com/gpu.count: "8"}
status: {allocatable: {cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "32"}}
"#;
    let (spec, warnings) = read(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    let n = node(&spec, "gfd");
    assert_eq!(n.sharing, Sharing::TimeSliced);
    let gpus = n.gpus.as_ref().unwrap();
    assert_eq!(gpus.len(), 8);
    assert!(gpus
        .iter()
        .all(|g| g.slots == 4 && g.memory_mib == Some(81559)));
    let indices: Vec<u32> = gpus.iter().map(|g| g.index).collect();
    assert_eq!(indices, (0..8).collect::<Vec<_>>());
    build_snapshot_with_warnings(&objects("gfd.yaml", text), &ConvertOptions::default()).unwrap();
}

#[test]
fn more_whole_devices_than_a_node_may_have_are_refused_at_their_field() {
    let node = |name: &str, resource: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n\
             status: {{allocatable: {{cpu: \"8\", {resource}: \"65\"}}}}\n"
        )
    };
    let build = |text: String| {
        let objects = objects("devices.yaml", &text);
        build_snapshot_with_warnings(&objects, &ConvertOptions::default()).unwrap_err()
    };
    let e = build(node("big", "nvidia.com/gpu"));
    assert_eq!(
        e.to_string(),
        "devices.yaml: document 1: Node big: status.allocatable[nvidia.com/gpu]: 65 nvidia.com/gpu; at most \
         64 devices per node are supported"
    );
    let e = build(node("amd", "amd.com/gpu"));
    assert_eq!(
        e.to_string(),
        "devices.yaml: document 1: Node amd: status.allocatable: 65 amd.com/gpu; at most 64 devices per \
         node are supported"
    );
}

//! Unit tests of the device parsers and of how a node's and a pod's devices are read.

use std::collections::BTreeMap;

use super::*;

fn cx() -> Cx<'static> {
    Cx {
        origin: "t.yaml",
        kind: "Node",
        object: ("n".to_string()).into(),
    }
}

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn meta(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some("n".into()),
        annotations: map(annotations),
        labels: map(labels),
        ..ObjectMeta::default()
    }
}

fn held(uuid: &str, memory_mib: u32, cores: u32) -> HeldDevice {
    HeldDevice {
        uuid: uuid.into(),
        memory_mib,
        cores,
    }
}

#[test]
fn register_json_with_omitempty_and_unknown_fields() {
    let gpus = parse_register(
        r#"[{"id":"GPU-a","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-H100",
             "numa":1,"mode":"hami-core","health":true,"migProfiles":[{"name":"1g"}]},
            {"id":"GPU-b","index":1}]"#,
    )
    .unwrap();
    assert_eq!(gpus.len(), 2);
    let a = &gpus[0];
    assert_eq!(
        (a.index, a.uuid.as_deref(), a.model.as_deref()),
        (0, Some("GPU-a"), Some("NVIDIA-H100"))
    );
    assert_eq!(
        (a.memory_mib, a.slots, a.cores, a.healthy),
        (Some(81920), 10, 100, true)
    );
    // Absent fields are zero, empty or false, as Go's omitempty writes them.
    let b = &gpus[1];
    assert_eq!(
        (b.index, b.model.as_deref(), b.memory_mib),
        (1, None, Some(0))
    );
    assert_eq!(
        (b.slots, b.cores, b.healthy, b.nvlink_domain),
        (0, 0, false, 0)
    );
    assert!(parse_register("[]").unwrap().is_empty());
    assert!(parse_register(" null ").unwrap().is_empty());
    // Negative amounts (Go's int32) count as none.
    assert_eq!(
        parse_register(r#"[{"id":"x","count":-1}]"#).unwrap()[0].slots,
        0
    );
}

#[test]
fn register_malformed() {
    for bad in [
        "[{\"id\":\"x\",\"count\":\"10\"}]",
        "[{\"id\":\"x\",\"index\":-1}]",
        "[{\"id\":\"x\",\"devmem\":4294967296}]",
        "[{\"id\":\"x\"}",
        "[null]",
        "{}",
        "garbage",
    ] {
        assert!(parse_register(bad).is_err(), "{bad}");
    }
}

#[test]
fn register_legacy_form() {
    let gpus =
        parse_register("GPU-a,10,16384,100,NVIDIA-T4,0,true:GPU-b,5,8192,50,T4,1,false,3,mig:")
            .unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(
        (gpus[0].index, gpus[0].slots, gpus[0].memory_mib),
        (0, 10, Some(16384))
    );
    assert!(gpus[0].healthy);
    assert_eq!(
        (gpus[1].index, gpus[1].cores, gpus[1].healthy),
        (3, 50, false)
    );
    assert_eq!(gpus[1].model.as_deref(), Some("T4"));
    // Without an index field, the position.
    assert_eq!(
        parse_register("a,1,1,1,T,0,1:b,1,1,1,T,0,1:").unwrap()[1].index,
        1
    );
    for bad in [
        "a,1,1,1,T,0:",
        "a,x,1,1,T,0,true:",
        "a,1,1,1,T,0,yes:",
        "a,1,1,1,T,zero,true:",
        "a,1,1,1,T,0,true,-1,mig:",
        "no-separator",
    ] {
        assert!(parse_register(bad).is_err(), "{bad}");
    }
}

#[test]
fn comma_lists_are_trimmed() {
    assert_eq!(csv(" GPU-a, ,GPU-b ,"), ["GPU-a", "GPU-b"]);
    assert!(csv("").is_empty());
}

#[test]
fn allocated_devices_are_summed_per_uuid() {
    // An init container's device first, an empty container, then two devices.
    let text = "GPU-a,NVIDIA,1000,10:;;GPU-a,NVIDIA,3000,20:GPU-b,NVIDIA,4000,30:;";
    assert_eq!(
        parse_allocated(text).unwrap(),
        [held("GPU-a", 4000, 30), held("GPU-b", 4000, 30)]
    );
    // No trailing separators (Volcano's form), extra fields, whitespace.
    assert_eq!(
        parse_allocated(" GPU-a,NVIDIA,1,2,x ;GPU-c,NVIDIA,5,0\n").unwrap(),
        [held("GPU-a", 1, 2), held("GPU-c", 5, 0)]
    );
    assert!(parse_allocated("").unwrap().is_empty());
    assert!(parse_allocated(";;").unwrap().is_empty());
    for bad in [
        "GPU-a,NVIDIA,1000:",
        "GPU-a,NVIDIA,lots,10:",
        "GPU-a,NVIDIA,1000,-1:",
        ",NVIDIA,1000,10:",
    ] {
        assert!(parse_allocated(bad).is_err(), "{bad}");
    }
}

#[test]
fn policy_chains() {
    assert_eq!(
        parse_policy("binpack"),
        (Some(DevicePolicy::Binpack), vec![])
    );
    assert_eq!(
        parse_policy(" spread "),
        (Some(DevicePolicy::Spread), vec![])
    );
    assert_eq!(
        parse_policy("binpack,numa"),
        (Some(DevicePolicy::Binpack), vec!["numa".to_string()])
    );
    assert_eq!(
        parse_policy("spread,binpack"),
        (Some(DevicePolicy::Spread), vec![])
    );
    assert_eq!(parse_policy("mutex"), (None, vec!["mutex".to_string()]));
    assert_eq!(
        parse_policy("topology-aware"),
        (None, vec!["topology-aware".to_string()])
    );
}

fn topology(n: u32, replicas: Option<u32>) -> Topology {
    Topology {
        gpus: (0..n)
            .map(|i| Gpu {
                uuid: Some(format!("GPU-{i}")),
                nvlink_domain: i / 4,
                ..Gpu::new(i)
            })
            .collect(),
        time_slice_replicas: replicas,
        mig: Vec::new(),
        relayout_applying: None,
    }
}

fn devices(
    m: &ObjectMeta,
    count: i64,
    t: Option<&Topology>,
) -> (Option<Vec<Gpu>>, Sharing, Vec<String>) {
    let mut warnings = Vec::new();
    let (gpus, sharing) = node_devices(&cx(), m, count, t, &mut warnings).unwrap();
    (gpus, sharing, warnings)
}

#[test]
fn hami_node_takes_islands_and_cordon() {
    let register = r#"[{"id":"GPU-5","index":0,"count":10,"health":true},
                       {"id":"GPU-z","index":6,"count":10,"health":true},
                       {"id":"GPU-x","index":7,"count":10,"health":true},
                       {"id":"GPU-y","index":9,"count":10,"health":true}]"#;
    let m = meta(
        &[
            (HAMI_NODE_REGISTER, register),
            (HAMI_DEVICE_CORDON, "GPU-y, ,GPU-5"),
        ],
        &[],
    );
    let mut t = topology(8, None);
    t.gpus[6].uuid = None;
    let (gpus, sharing, warnings) = devices(&m, 40, Some(&t));
    assert_eq!(sharing, Sharing::Hami);
    assert!(warnings.is_empty(), "{warnings:?}");
    let gpus = gpus.unwrap();
    // By UUID (GPU-5 is in island 1); by index where the topology gives no UUID (6); not by index when the
    // UUIDs differ (GPU-x is not GPU-7); not at all (9): island 0.
    let domains: Vec<u32> = gpus.iter().map(|g| g.nvlink_domain).collect();
    assert_eq!(domains, [1, 1, 0, 0]);
    let healthy: Vec<bool> = gpus.iter().map(|g| g.healthy).collect();
    assert_eq!(healthy, [false, true, true, false]);
    // Without a NodeTopology, island 0.
    let (gpus, _, _) = devices(&m, 40, None);
    assert!(gpus.unwrap().iter().all(|g| g.nvlink_domain == 0));
}

#[test]
fn an_untrusted_register_closes_the_node_s_devices() {
    let closed = |register: &str| {
        let m = meta(&[(HAMI_NODE_REGISTER, register)], &[]);
        let mut warnings = Vec::new();
        let why = node_devices(&cx(), &m, 8, None, &mut warnings).unwrap_err();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        (why, warnings.remove(0))
    };
    let (why, warning) = closed("[{");
    let field = "metadata.annotations[hami.io/node-nvidia-register]";
    assert!(
        why.starts_with(&format!("{field}: malformed JSON")),
        "{why}"
    );
    assert!(
        warning.starts_with(&format!("t.yaml: Node n: {field}: malformed JSON")),
        "{warning}"
    );
    assert!(warning.ends_with("; the node's GPUs take no pod until it is fixed"));
    let one = r#"{"id":"GPU-a","index":0,"count":10}"#;
    let (why, _) = closed(&format!("[{one},{one},{one},{one}]"));
    assert_eq!(why, format!("{field}: devices 0 and 1 are both GPU-a"));
    let (why, _) = closed(r#"[{"id":"GPU-a"},{"id":"GPU-b"}]"#);
    assert_eq!(why, format!("{field}: devices 0 and 1 both have index 0"));
    let (why, _) = closed(r#"[{"id":"GPU-a"},{"index":1}]"#);
    assert_eq!(why, format!("{field}: device 1 has no UUID"));
    let (why, _) = closed("GPU-a,10,1,100,T4,0,true:GPU-a,10,1,100,T4,0,true:");
    assert_eq!(why, format!("{field}: devices 0 and 1 are both GPU-a"));
    let many: Vec<String> = (0..65)
        .map(|i| format!(r#"{{"id":"GPU-{i}","index":{i}}}"#))
        .collect();
    let (why, _) = closed(&format!("[{}]", many.join(",")));
    assert_eq!(
        why,
        format!("{field}: 65 devices; at most 64 per node are supported")
    );
    // An empty register is no HAMi node, silently.
    let m = meta(&[(HAMI_NODE_REGISTER, "[]")], &[]);
    assert_eq!(devices(&m, 8, None), (None, Sharing::Exclusive, vec![]));
}

#[test]
fn allocated_devices_are_summed_per_uuid_in_order_of_first_appearance() {
    // Many devices, each listed again in a later container: sums in one pass.
    let n = 12_000;
    let container =
        |mem: u32| -> String { (0..n).map(|d| format!("GPU-{d},NVIDIA,{mem},1:")).collect() };
    let text = format!("{};{};", container(10), container(5));
    let held = parse_allocated(&text).unwrap();
    assert_eq!(held.len(), n);
    assert!(held
        .iter()
        .enumerate()
        .all(|(d, h)| h.uuid == format!("GPU-{d}") && h.memory_mib == 15 && h.cores == 2));
}

#[test]
fn time_sliced_topology() {
    let t = topology(8, Some(4));
    let (gpus, sharing, warnings) = devices(&meta(&[], &[]), 32, Some(&t));
    assert_eq!(sharing, Sharing::TimeSliced);
    assert!(warnings.is_empty(), "{warnings:?}");
    let gpus = gpus.unwrap();
    assert_eq!(gpus.len(), 8);
    assert!(gpus.iter().all(|g| g.slots == 4));
    assert_eq!(gpus[5].nvlink_domain, 1);
    // The count of whole GPUs: the topology as it is, unshared.
    let (gpus, sharing, warnings) = devices(&meta(&[], &[]), 8, Some(&t));
    assert_eq!(
        (gpus.unwrap().len(), sharing, warnings.len()),
        (8, Sharing::Exclusive, 0)
    );
    // The label stands in for a topology without the field.
    let labelled = meta(&[], &[(GPU_REPLICAS_LABEL, "4")]);
    let (gpus, sharing, _) = devices(&labelled, 32, Some(&topology(8, None)));
    assert_eq!((gpus.unwrap()[0].slots, sharing), (4, Sharing::TimeSliced));
}

#[test]
fn time_slice_mismatches_are_warned() {
    // Stated replicas, wrong count: both counts named, the topology dropped.
    let (gpus, sharing, warnings) = devices(&meta(&[], &[]), 24, Some(&topology(8, Some(4))));
    assert_eq!((gpus, sharing), (None, Sharing::Exclusive));
    assert_eq!(
        warnings,
        [
            "t.yaml: Node n: status.allocatable[nvidia.com/gpu]: 24 GPUs, but its NodeTopology \
          lists 8 with 4 time-slice replicas each (spec.timeSliceReplicas), 32 in all: the \
          topology is not used (its GPUs are taken as alike, in one NVLink island)"
        ]
    );
    // No replica count: still the old warning.
    let (_, _, warnings) = devices(&meta(&[], &[]), 32, Some(&topology(8, None)));
    assert!(warnings[0].contains("32 GPUs, but its NodeTopology lists 8: the topology is not used"));
    assert!(warnings[0].contains("time-sliced GPUs (replicas) are not supported yet"));
    // The label's replicas fit the allocatable count but not the topology: the label wins.
    let labelled = meta(&[], &[(GPU_REPLICAS_LABEL, "4")]);
    let (gpus, sharing, warnings) = devices(&labelled, 24, Some(&topology(8, None)));
    assert_eq!((gpus.unwrap().len(), sharing), (6, Sharing::TimeSliced));
    assert!(warnings[0].contains("24 GPUs, but its NodeTopology lists 8 with 4 time-slice replicas each (label nvidia.com/gpu.replicas), 32 in all"));
    assert!(warnings[0].contains("taken as 6 alike GPUs of 4 replicas each"));
}

#[test]
fn time_sliced_from_labels_only() {
    let m = meta(
        &[],
        &[(GPU_REPLICAS_LABEL, "4"), (GPU_MEMORY_LABEL, "81559")],
    );
    let (gpus, sharing, warnings) = devices(&m, 32, None);
    assert!(warnings.is_empty());
    assert_eq!(sharing, Sharing::TimeSliced);
    let gpus = gpus.unwrap();
    assert_eq!(gpus.len(), 8);
    assert_eq!(
        gpus[7],
        Gpu {
            memory_mib: Some(81559),
            slots: 4,
            ..Gpu::new(7)
        }
    );
    // One replica (GFD's value without sharing), no GPUs: nothing to list.
    let one = meta(&[], &[(GPU_REPLICAS_LABEL, "1")]);
    assert_eq!(devices(&one, 8, None), (None, Sharing::Exclusive, vec![]));
    assert_eq!(devices(&m, 0, None), (None, Sharing::Exclusive, vec![]));
    // Not a multiple, or not a number: warned, unshared.
    let (gpus, _, warnings) = devices(&m, 30, None);
    // Unshared, its 30 GPUs alike with GFD's memory.
    let gpus = gpus.unwrap();
    assert_eq!(
        (gpus.len(), gpus[0].slots, gpus[0].memory_mib),
        (30, 1, Some(81559))
    );
    assert!(warnings[0].contains("metadata.labels[nvidia.com/gpu.replicas]: 4 replicas per GPU, but allocatable nvidia.com/gpu 30 is not a multiple of 4"));
    let bad = meta(&[], &[(GPU_REPLICAS_LABEL, "four")]);
    let (gpus, _, warnings) = devices(&bad, 32, None);
    assert!(gpus.is_none());
    assert!(warnings[0].contains("expected a non-negative integer, got \"four\""));
}

/// What [`pod_devices`] reads, and the warnings.
type PodDevices = (Vec<HeldDevice>, Option<Arc<DeviceFilters>>, Vec<String>);

fn pod(annotations: &[(&str, &str)], bound: bool, ours: bool) -> Result<PodDevices, ConvertError> {
    let mut warnings = Vec::new();
    let cx = Cx {
        kind: "Pod",
        ..cx()
    };
    let mut lenient = Lenience {
        ours,
        warnings: &mut warnings,
    };
    let (held, filters) = pod_devices(&cx, &meta(annotations, &[]), bound, &mut lenient)?;
    Ok((held, filters, warnings))
}

#[test]
fn pod_filters_and_policy() {
    let (held, filters, warnings) = pod(
        &[
            (USE_GPU_TYPE, "A100, H100"),
            (NOUSE_GPU_UUID, "GPU-1"),
            (HAMI_GPU_POLICY, "binpack,numa"),
            (HAMI_NODE_POLICY, "spread"),
        ],
        false,
        true,
    )
    .unwrap();
    assert!(held.is_empty());
    let f = filters.unwrap();
    assert_eq!(f.use_types, ["A100", "H100"]);
    assert_eq!(f.nouse_uuids, ["GPU-1"]);
    assert!(f.nouse_types.is_empty() && f.use_uuids.is_empty());
    assert_eq!(f.policy, DevicePolicy::Binpack);
    assert_eq!(f.node_policy, Some(DevicePolicy::Spread));
    assert_eq!(
        warnings,
        ["t.yaml: Pod n: metadata.annotations[hami.io/gpu-scheduler-policy]: not honoured: numa; Basalt picks a pod's devices by binpack only"]
    );
    // The node policy alone is stated; an unknown one is not, with a warning.
    let (_, filters, warnings) = pod(&[(HAMI_NODE_POLICY, "binpack")], false, true).unwrap();
    let f = filters.unwrap();
    assert_eq!(f.node_policy, Some(DevicePolicy::Binpack));
    assert!(!f.restricts() && warnings.is_empty());
    let (_, filters, warnings) = pod(&[(HAMI_NODE_POLICY, "fullest")], false, true).unwrap();
    assert!(filters.is_none());
    assert_eq!(
        warnings,
        ["t.yaml: Pod n: metadata.annotations[hami.io/node-scheduler-policy]: \"fullest\" is neither binpack nor spread; Basalt's node order applies"]
    );
    // Nothing stated (or only what is not honoured, or empty lists): no filters.
    assert_eq!(pod(&[], false, true).unwrap(), (vec![], None, vec![]));
    let (_, filters, warnings) = pod(
        &[(HAMI_GPU_POLICY, "mutex"), (USE_GPU_UUID, " ")],
        false,
        true,
    )
    .unwrap();
    assert!(filters.is_none());
    assert!(
        warnings[0].contains("not honoured: mutex; Basalt picks a pod's devices by spread only")
    );
    // A stated policy alone is a filter; another scheduler's pod gets no warnings.
    let (_, filters, warnings) = pod(&[(HAMI_GPU_POLICY, "spread,mutex")], false, false).unwrap();
    assert_eq!(filters.unwrap().policy, DevicePolicy::Spread);
    assert!(warnings.is_empty());
}

#[test]
fn pod_held_devices_leniently() {
    let allocated = [(HAMI_DEVICES_ALLOCATED, "GPU-a,NVIDIA,2000,25:;")];
    let (got, _, _) = pod(&allocated, true, true).unwrap();
    assert_eq!(got, [held("GPU-a", 2000, 25)]);
    // Only a bound pod holds devices.
    assert!(pod(&allocated, false, true).unwrap().0.is_empty());
    let bad = [(HAMI_DEVICES_ALLOCATED, "GPU-a,NVIDIA:;")];
    let e = pod(&bad, true, true).unwrap_err();
    assert_eq!(
        e.field,
        "metadata.annotations[hami.io/vgpu-devices-allocated]"
    );
    assert!(e.message.contains("expected UUID,TYPE,memory,cores"), "{e}");
    let (held, _, warnings) = pod(&bad, true, false).unwrap();
    assert!(held.is_empty());
    assert!(warnings[0].contains("hami.io/vgpu-devices-allocated"));
    assert!(warnings[0].ends_with("ignored on a pod of another scheduler"));
}

#[test]
fn volcano_vgpu_register_lists_devices_by_position() {
    let gpus = parse_vgpu_register(
        "GPU-v0,10,32768,NVIDIA-Tesla-V100,true,hami-core:GPU-v1,4,16384,NVIDIA-T4,false:",
    )
    .unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].uuid.as_deref(), Some("GPU-v0"));
    assert_eq!(
        (gpus[0].slots, gpus[0].memory_mib, gpus[0].cores),
        (10, Some(32768), 100)
    );
    assert_eq!((gpus[1].index, gpus[1].healthy), (1, false));
    assert!(parse_vgpu_register("GPU-v0,ten,1,T,true:").is_err());
    assert!(parse_vgpu_register("GPU-v0,1,1:").is_err());
}

#[test]
fn whole_devices_take_their_memory_from_gfd_s_label() {
    let m = ObjectMeta {
        labels: map(&[(GPU_MEMORY_LABEL, "81559")]),
        ..Default::default()
    };
    let mut warnings = Vec::new();
    let (gpus, sharing) = node_devices(&cx(), &m, 8, None, &mut warnings).unwrap();
    let gpus = gpus.unwrap();
    assert_eq!((gpus.len(), sharing), (8, Sharing::Exclusive));
    assert!(gpus
        .iter()
        .all(|g| g.memory_mib == Some(81559) && g.slots == 1));
    // Past the engine's 64 devices nothing is listed (the engine refuses the node).
    assert_eq!(
        node_devices(&cx(), &m, 1 << 40, None, &mut warnings)
            .unwrap()
            .0,
        None
    );
    assert!(warnings.is_empty());
}

//! Nodes: their NodeTopology (GPUs by index and their NVLink islands), labels from HyperNodes,
//! taints, allocatable and devices (`devices.rs` reads how they are shared).

use super::device_names::{share_vocabulary, GPU_NAME, SHARED_GPU_NAME, VGPU_NUMBER_NAME};
use super::*;

pub(super) fn collect_topologies(
    objects: &[(String, Object)],
) -> Result<HashMap<String, devices::Topology>, ConvertError> {
    let mut out = HashMap::new();
    for (origin, object) in objects {
        let Object::NodeTopology(t) = object else {
            continue;
        };
        let cx = Cx {
            origin,
            kind: "NodeTopology",
            object: Named::Of(object),
        };
        let name = cx.name(&t.metadata)?.to_string();
        let gpus = topology_gpus(&cx, t)?;
        let time_slice_replicas = t.spec.time_slice_replicas;
        let mig = (t.spec.gpus.iter())
            .filter_map(|g| Some((g.index, g.mig.as_ref().filter(|m| m.enabled)?)))
            .map(|(index, m)| (index, m.devices.clone()))
            .collect();
        let topology = devices::Topology {
            gpus,
            time_slice_replicas,
            mig,
            relayout_applying: mig::relayout_applying(t),
        };
        if out.insert(name, topology).is_some() {
            return Err(cx.err("metadata.name", "duplicate NodeTopology"));
        }
    }
    Ok(out)
}

/// The per-GPU detail of a NodeTopology. A GPU's NVLink domain is the index of the island that
/// holds it; GPUs outside every island get domains of their own after the islands'; with no
/// islands at all, every GPU is in domain 0.
fn topology_gpus(cx: &Cx, t: &NodeTopology) -> Result<Vec<Gpu>, ConvertError> {
    let n = t.spec.gpus.len();
    if n > MAX_GPUS_PER_NODE {
        return Err(cx.err(
            "spec.gpus",
            format!("{n} GPUs; at most {MAX_GPUS_PER_NODE} per node are supported"),
        ));
    }
    // Indices must be 0..n: the engine tracks GPUs by index in a bit mask of that size.
    let mut by_index: Vec<Option<usize>> = vec![None; n];
    for (pos, g) in t.spec.gpus.iter().enumerate() {
        let field = format!("spec.gpus[{pos}].index");
        let slot = by_index.get_mut(g.index as usize).ok_or_else(|| {
            cx.err(
                &field,
                format!("GPU index {} out of range: indices must be 0..{n}", g.index),
            )
        })?;
        if slot.replace(pos).is_some() {
            return Err(cx.err(&field, format!("duplicate GPU index {}", g.index)));
        }
    }
    // A UUID names one device: two GPUs with one would be given to pods as one.
    let mut uuids = HashMap::with_capacity(n);
    for (pos, g) in t.spec.gpus.iter().enumerate() {
        let Some(uuid) = g.uuid.as_deref().filter(|u| !u.is_empty()) else {
            continue;
        };
        if let Some(first) = uuids.insert(uuid, pos) {
            return Err(cx.err(
                format!("spec.gpus[{pos}].uuid"),
                format!("duplicate GPU UUID {uuid} (also spec.gpus[{first}])"),
            ));
        }
    }
    let mut domain: Vec<Option<u32>> = vec![None; n];
    for (i, island) in t.spec.islands.iter().enumerate() {
        for (j, &index) in island.iter().enumerate() {
            let field = format!("spec.islands[{i}][{j}]");
            let slot = domain
                .get_mut(index as usize)
                .ok_or_else(|| cx.err(&field, format!("GPU index {index} is not in spec.gpus")))?;
            if let Some(other) = slot.replace(i as u32) {
                return Err(cx.err(&field, format!("GPU {index} is already in island {other}")));
            }
        }
    }
    let mut next_lonely = t.spec.islands.len() as u32;
    let mut gpus = Vec::with_capacity(n);
    for (index, pos) in by_index.into_iter().enumerate() {
        let g = &t.spec.gpus[pos.expect("every index 0..n is filled: n distinct in-range indices")];
        let nvlink_domain = match domain[index] {
            Some(d) => d,
            None if t.spec.islands.is_empty() => 0,
            None => {
                next_lonely += 1;
                next_lonely - 1
            }
        };
        gpus.push(Gpu {
            index: index as u32,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            nvlink_domain,
            ..Gpu::new(index as u32)
        });
    }
    Ok(gpus)
}

pub(super) fn node(
    cx: &Cx,
    n: &Node,
    topologies: &HashMap<String, devices::Topology>,
    hyper_labels: &HashMap<String, BTreeMap<String, String>>,
    device_resources: &[String],
    warnings: &mut Vec<String>,
) -> Result<NodeSpec, ConvertError> {
    let name = cx.name(&n.metadata)?.to_string();
    let mut labels = n.metadata.labels.clone().unwrap_or_default();
    // A label the node carries itself wins over the one its HyperNode would give.
    for (key, hyper_node) in hyper_labels.get(&name).into_iter().flatten() {
        match labels.get(key) {
            None => {
                labels.insert(key.clone(), hyper_node.clone());
            }
            Some(own) if own == hyper_node => {}
            Some(own) => warnings.push(cx.warning(
                format!("metadata.labels[{key}]"),
                format!("kept {own:?}, not HyperNode {hyper_node} that contains the node"),
            )),
        }
    }
    let spec = n.spec.as_ref();
    let mut taints = Vec::new();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        taints.push(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: taint_effect(&t.effect).ok_or_else(|| {
                cx.err(
                    format!("spec.taints[{i}].effect"),
                    format!("unknown effect {:?}", t.effect),
                )
            })?,
        });
    }
    let status = n.status.as_ref();
    let allocatable = match (
        status.and_then(|s| s.allocatable.as_ref()),
        status.and_then(|s| s.capacity.as_ref()),
    ) {
        (Some(a), _) => cx.capacity("status.allocatable", a, warnings)?,
        (None, Some(c)) => cx.capacity("status.capacity", c, warnings)?,
        (None, None) => ResourceList::new(),
    };
    let mut allocatable = allocatable;
    mig::hold_mig_while_reconfiguring(cx, &n.metadata, &mut allocatable, warnings);
    // The first device resource the node advertises names its devices.
    let device_resource = (device_resources.iter())
        .find(|r| allocatable.get(r.as_str()).is_some_and(|&v| v > 0))
        .filter(|r| r.as_str() != GPU_NAME)
        .cloned();
    let topology = topologies.get(&name);
    let mig = topology.and_then(|t| mig::mig_devices(cx, &n.metadata, &allocatable, t, warnings));
    let (topology, mut slices) = match mig {
        Some((t, slices)) => (Some(std::borrow::Cow::Owned(t)), slices),
        None => (topology.map(std::borrow::Cow::Borrowed), Vec::new()),
    };
    let topology = topology.as_deref();
    // A Volcano vGPU node's devices are counted by `volcano.sh/vgpu-number`.
    if let Some(read) = devices::vgpu_devices(cx, &n.metadata, &allocatable, topology, warnings) {
        let (gpus, devices_closed) = match read {
            Ok(gpus) => (Some(gpus), None),
            Err(why) => (None, Some(why)),
        };
        return Ok(NodeSpec {
            gpus,
            name,
            labels,
            taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable,
            sharing: basalt_engine::devices::Sharing::VolcanoVgpu,
            device_resource: Some(VGPU_NUMBER_NAME.to_string()),
            shares: Some(share_vocabulary()),
            slices: Vec::new(),
            devices_closed,
            mig_reconfiguring: None,
        });
    }
    let mut devices_closed = None;
    let mut registered = |read: Result<_, String>| {
        read.unwrap_or_else(|why| {
            devices_closed = Some(why);
            (None, Default::default())
        })
    };
    let (gpus, sharing) = match &device_resource {
        None => {
            let count = (allocatable.get(GPU_NAME).copied()).unwrap_or(0);
            registered(devices::node_devices(
                cx,
                &n.metadata,
                count,
                topology,
                warnings,
            ))
        }
        // NVIDIA's plugin renames shared replicas (`renameByDefault`): still its GPUs.
        Some(resource) if resource == SHARED_GPU_NAME => {
            let count = allocatable[resource];
            registered(devices::node_devices(
                cx,
                &n.metadata,
                count,
                topology,
                warnings,
            ))
        }
        Some(resource) => {
            let count = allocatable[resource];
            (
                devices::vendor_devices(cx, resource, count, topology, warnings),
                Default::default(),
            )
        }
    };
    let sharing = devices::mps_when_labelled(&n.metadata, sharing);
    // Slices are tied to GPUs in MIG mode of the devices kept, and only on unshared nodes.
    let tied = |gpus: &Option<Vec<Gpu>>| {
        let listed = |s: &basalt_engine::devices::MigSlice| {
            (gpus.iter().flatten()).any(|g| g.index == s.gpu && g.mig)
        };
        !sharing.shares() && slices.iter().all(listed)
    };
    if !slices.is_empty() && !tied(&gpus) {
        warnings.push(cx.warning(
            "NodeTopology spec.gpus",
            "its GPUs are not used, so its MIG instances are counted, not tied to their GPUs",
        ));
        slices.clear();
    }
    let node = NodeSpec {
        gpus,
        name,
        labels,
        taints,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        sharing,
        device_resource,
        shares: Some(share_vocabulary()),
        slices,
        devices_closed,
        mig_reconfiguring: (mig::reconfiguring(&n.metadata).map(str::to_string))
            .or_else(|| topology.and_then(|t| t.relayout_applying.clone())),
    };
    check_device_count(cx, &node)?;
    Ok(node)
}

/// At most [`MAX_GPUS_PER_NODE`] whole devices on a node that does not share them (the
/// engine's bound, worded here with the field they are read from).
fn check_device_count(cx: &Cx, node: &NodeSpec) -> Result<(), ConvertError> {
    let resource = node.device_resource.as_deref().unwrap_or(GPU_NAME);
    let count = node.allocatable.get(resource).copied().unwrap_or(0).max(0) as usize;
    if count <= MAX_GPUS_PER_NODE || node.sharing.shares() || node.devices_closed.is_some() {
        return Ok(());
    }
    let field = match node.device_resource {
        None => format!("status.allocatable[{GPU_NAME}]"),
        Some(_) => "status.allocatable".to_string(),
    };
    let message =
        format!("{count} {resource}; at most {MAX_GPUS_PER_NODE} devices per node are supported");
    Err(cx.err(&field, message))
}

pub(crate) fn taint_effect(s: &str) -> Option<TaintEffect> {
    match s {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

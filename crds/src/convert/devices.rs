//! Shared GPUs: HAMi's node register, device cordon and pod annotations, Volcano vGPU's node
//! register and pod annotations, NVIDIA's time-slicing (NodeTopology `spec.timeSliceReplicas`,
//! GFD's `nvidia.com/gpu.replicas` label), and the device filters and policy on pods
//! (`docs/protocols.md`, sections 1 to 3).
//!
//! The parsers are pure and follow HAMi's decoders (`pkg/device/devices.go`): what HAMi
//! accepts is accepted, except values that make no sense as amounts (negative memory or cores
//! held by a pod) and empty UUIDs.

use std::sync::Arc;

use basalt_engine::devices::{DeviceFilters, DevicePolicy, HeldDevice, Sharing};
use basalt_engine::Gpu;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::device_names::GPU_NAME;
use super::{annotation, ConvertError, Cx, Lenience};

/// Node annotation where HAMi's device plugin registers the node's devices (JSON).
pub const HAMI_NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// Node annotation: comma-separated UUIDs of devices HAMi gives no new pods.
pub const HAMI_DEVICE_CORDON: &str = "hami.io/device-cordon";
/// Pod annotation: the devices HAMi allocated to a pod, per container.
pub const HAMI_DEVICES_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// Pod annotation: how HAMi picks a pod's devices on a node (`spread`, `binpack`, ...).
pub const HAMI_GPU_POLICY: &str = "hami.io/gpu-scheduler-policy";
/// Pod annotation: how HAMi orders nodes for a pod (not honoured: Basalt orders nodes).
pub const HAMI_NODE_POLICY: &str = "hami.io/node-scheduler-policy";
/// Pod annotations: comma-separated device models (substrings) a pod accepts, or refuses.
pub const USE_GPU_TYPE: &str = "nvidia.com/use-gputype";
pub const NOUSE_GPU_TYPE: &str = "nvidia.com/nouse-gputype";
/// Pod annotations: comma-separated device UUIDs a pod accepts, or refuses.
pub const USE_GPU_UUID: &str = "nvidia.com/use-gpuuuid";
pub const NOUSE_GPU_UUID: &str = "nvidia.com/nouse-gpuuuid";
/// Node annotation where Volcano's vGPU device plugin registers the node's devices
/// (`UUID,count,devmem,type,health[,mode]:` per device).
pub const VGPU_NODE_REGISTER: &str = "volcano.sh/node-vgpu-register";
/// Pod annotation: the devices Volcano allocated to a pod, per container (HAMi's encoding).
pub const VGPU_IDS: &str = "volcano.sh/vgpu-ids-new";
/// Pod annotations: comma-separated device UUIDs a Volcano vGPU pod accepts, or refuses.
pub const VGPU_USE_UUID: &str = "volcano.sh/vgpu-use-gpuuuid";
pub const VGPU_NOUSE_UUID: &str = "volcano.sh/vgpu-nouse-gpuuuid";
/// GFD's node label: `none`, `time-slicing` or `mps`.
pub const SHARING_STRATEGY_LABEL: &str = "nvidia.com/gpu.sharing-strategy";

/// Replicas on a node GFD labels `nvidia.com/gpu.sharing-strategy: mps` are MPS clients: one
/// per pod, each with its part of a device's memory.
pub(super) fn mps_when_labelled(meta: &ObjectMeta, sharing: Sharing) -> Sharing {
    let labels = meta.labels.as_ref();
    let mps = labels
        .and_then(|l| l.get(SHARING_STRATEGY_LABEL))
        .map(String::as_str)
        == Some("mps");
    match sharing {
        Sharing::TimeSliced if mps => Sharing::Mps,
        other => other,
    }
}

/// GFD's node label: time-slice (or MPS) replicas per GPU.
pub const GPU_REPLICAS_LABEL: &str = "nvidia.com/gpu.replicas";
/// GFD's node label: memory per GPU, in MiB.
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";

/// What a NodeTopology says of its node's devices.
#[derive(Clone)]
pub(super) struct Topology {
    pub gpus: Vec<Gpu>,
    pub time_slice_replicas: Option<u32>,
    /// The GPUs in MIG mode (by index) and their instances (see `mig.rs`).
    pub mig: Vec<(u32, Vec<crate::MigDeviceInfo>)>,
    /// Basalt's node agent re-laying a GPU now (see `mig::relayout_applying`).
    pub relayout_applying: Option<String>,
}

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

/// A node's devices and how they are shared: HAMi's register annotation when it has a valid
/// one; else its NodeTopology's GPUs (time-sliced when the allocatable count is the replicas
/// times the GPUs); else uniform time-sliced devices from GFD's replicas label; else nothing
/// listed (the engine takes `count` uniform whole devices). `count` is allocatable
/// `nvidia.com/gpu`. What is not used is said in a warning.
///
/// `Err`: the register cannot be trusted (see [`register_devices`]); the reason, said in a
/// warning too, closes the node's devices.
pub(super) fn node_devices(
    cx: &Cx,
    meta: &ObjectMeta,
    count: i64,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> Result<(Option<Vec<Gpu>>, Sharing), String> {
    if let Some(text) = annotation(meta, HAMI_NODE_REGISTER) {
        let gpus = register_devices(cx, HAMI_NODE_REGISTER, parse_register(text), warnings)?;
        // HAMi too takes a node that registers no device as no HAMi node.
        if !gpus.is_empty() {
            let cordoned = annotation(meta, HAMI_DEVICE_CORDON).map_or_else(Vec::new, csv);
            return Ok((Some(hami_gpus(gpus, topology, &cordoned)), Sharing::Hami));
        }
    }
    Ok(node_devices_unregistered(
        cx, meta, count, topology, warnings,
    ))
}

/// A device plugin's register, parsed: its devices when it can be trusted; else the reason,
/// warned of, for the engine to close the node's devices with. Read as no register instead,
/// a node would offer devices no plugin hands out under the names Basalt would write.
fn register_devices(
    cx: &Cx,
    key: &str,
    parsed: Result<Vec<Gpu>, String>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Gpu>, String> {
    let e = match parsed.and_then(distinct) {
        Ok(gpus) => return Ok(gpus),
        Err(e) => e,
    };
    let field = annotation_field(key);
    let why = format!("{e}; the node's GPUs take no pod until it is fixed");
    warnings.push(cx.warning(&field, why));
    Err(format!("{field}: {e}"))
}

/// A register's devices, each named once: a device listed twice would be given to one pod
/// twice, and one without a UUID cannot be named in the annotations the plugin reads. At most
/// the engine's 64, so that a long register closes the GPUs, not the whole node.
fn distinct(gpus: Vec<Gpu>) -> Result<Vec<Gpu>, String> {
    let max = basalt_engine::MAX_GPUS_PER_NODE;
    if gpus.len() > max {
        return Err(format!(
            "{} devices; at most {max} per node are supported",
            gpus.len()
        ));
    }
    let mut uuids = std::collections::HashMap::with_capacity(gpus.len());
    let mut indices = std::collections::HashMap::with_capacity(gpus.len());
    for (pos, g) in gpus.iter().enumerate() {
        let Some(uuid) = g.uuid.as_deref() else {
            return Err(format!("device {pos} has no UUID"));
        };
        if let Some(first) = uuids.insert(uuid, pos) {
            return Err(format!("devices {first} and {pos} are both {uuid}"));
        }
        if let Some(first) = indices.insert(g.index, pos) {
            return Err(format!(
                "devices {first} and {pos} both have index {}",
                g.index
            ));
        }
    }
    Ok(gpus)
}

/// [`node_devices`] for a node without a HAMi register.
fn node_devices_unregistered(
    cx: &Cx,
    meta: &ObjectMeta,
    count: i64,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> (Option<Vec<Gpu>>, Sharing) {
    let labels = meta.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let label_field = |key: &str| format!("metadata.labels[{key}]");
    let mut number = |key: &str| -> Option<u64> {
        let v = label(key)?;
        let parsed = v.trim().parse::<u64>().ok();
        if parsed.is_none() {
            warnings.push(cx.warning(
                label_field(key),
                format!("expected a non-negative integer, got {v:?}; ignored"),
            ));
        }
        parsed
    };
    let label_replicas = number(GPU_REPLICAS_LABEL)
        .map(|r| r.min(u32::MAX as u64) as u32)
        .filter(|&r| r >= 2);
    let memory = number(GPU_MEMORY_LABEL);
    let uniform = |r: u32| {
        let gpus = (0..(count / r as i64) as u32).map(|i| Gpu {
            memory_mib: memory,
            slots: r,
            ..Gpu::new(i)
        });
        (Some(gpus.collect()), Sharing::TimeSliced)
    };
    // Uniform devices from the label, when it and the allocatable count agree.
    let from_label = |warnings: &mut Vec<String>| match label_replicas {
        Some(r) if count > 0 && count % r as i64 == 0 => Some(uniform(r)),
        Some(r) if count > 0 => {
            warnings.push(cx.warning(
                label_field(GPU_REPLICAS_LABEL),
                format!(
                    "{r} replicas per GPU, but allocatable {GPU_NAME} {count} is not a multiple \
                     of {r}: taken as {count} unshared GPUs"
                ),
            ));
            None
        }
        _ => None,
    };
    // Whole devices without a topology: alike, with GFD's memory label when it has one.
    let whole = || match memory {
        // Past the engine's limit the node is refused there, with its count.
        Some(m) if count > 0 && count as usize <= basalt_engine::MAX_GPUS_PER_NODE => {
            let gpus = (0..count as u32).map(|i| Gpu {
                memory_mib: Some(m),
                ..Gpu::new(i)
            });
            (Some(gpus.collect()), Sharing::Exclusive)
        }
        _ => (None, Sharing::Exclusive),
    };
    let Some(t) = topology else {
        return from_label(warnings).unwrap_or_else(whole);
    };
    // GPUs in MIG mode (mixed strategy) are listed, but are no whole devices.
    let listed = t.gpus.iter().filter(|g| !g.mig).count() as i64;
    if listed == count {
        return (Some(t.gpus.clone()), Sharing::Exclusive);
    }
    let replicas = match t.time_slice_replicas.filter(|&r| r >= 2) {
        Some(r) => Some((r, "spec.timeSliceReplicas")),
        None => label_replicas.map(|r| (r, "label nvidia.com/gpu.replicas")),
    };
    if let Some((r, _)) = replicas.filter(|&(r, _)| listed > 0 && count == listed * r as i64) {
        // A GPU in MIG mode takes no replicas (its slices are counted resources there).
        let gpus = t.gpus.iter().map(|g| Gpu {
            slots: r,
            healthy: g.healthy && !g.mig,
            ..g.clone()
        });
        return (Some(gpus.collect()), Sharing::TimeSliced);
    }
    let fallback = from_label(warnings);
    let used = match &fallback {
        Some((Some(g), _)) => format!(
            "its GPUs are taken as {} alike GPUs of {} replicas each, in one NVLink island",
            g.len(),
            g[0].slots
        ),
        _ => "its GPUs are taken as alike, in one NVLink island".to_string(),
    };
    let message = match replicas {
        Some((r, source)) => format!(
            "{count} GPUs, but its NodeTopology lists {listed} with {r} time-slice replicas \
             each ({source}), {} in all: the topology is not used ({used})",
            listed * r as i64
        ),
        // A whole multiple of the GPUs listed looks like a time-sliced node's replicas.
        None if listed > 0 && count > listed && count % listed == 0 => format!(
            "{count} GPUs, but its NodeTopology lists {listed}: the topology is not used \
             ({used}); time-sliced GPUs (replicas) are not supported yet without their count \
             per GPU (NodeTopology spec.timeSliceReplicas or node label {GPU_REPLICAS_LABEL})"
        ),
        None => format!(
            "{count} GPUs, but its NodeTopology lists {listed}: the topology is not used ({used})"
        ),
    };
    warnings.push(cx.warning(format!("status.allocatable[{GPU_NAME}]"), message));
    fallback.unwrap_or((None, Sharing::Exclusive))
}

/// A Volcano vGPU node's devices, when its plugin registered them and advertises
/// `volcano.sh/vgpu-number`, `vgpu-memory` and `vgpu-cores` (all above 0, as Volcano
/// requires), with islands from the NodeTopology as for HAMi. `Some(Err)`: the register
/// cannot be trusted, as in [`node_devices`].
pub(super) fn vgpu_devices(
    cx: &Cx,
    meta: &ObjectMeta,
    allocatable: &basalt_engine::ResourceList,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> Option<Result<Vec<Gpu>, String>> {
    use super::device_names::{VGPU_CORES_NAME, VGPU_MEMORY_NAME, VGPU_NUMBER_NAME};
    let text = annotation(meta, VGPU_NODE_REGISTER)?;
    let advertised = [VGPU_NUMBER_NAME, VGPU_MEMORY_NAME, VGPU_CORES_NAME]
        .iter()
        .all(|r| allocatable.get(*r).is_some_and(|&v| v > 0));
    if !advertised {
        return None;
    }
    match register_devices(cx, VGPU_NODE_REGISTER, parse_vgpu_register(text), warnings) {
        Ok(gpus) if gpus.is_empty() => None,
        Ok(gpus) => Some(Ok(hami_gpus(gpus, topology, &[]))),
        Err(why) => Some(Err(why)),
    }
}

/// Volcano vGPU's register: per device `UUID,count,devmem,type,health[,mode]` ended by `:`
/// (Volcano's `decodeNodeDevices`); a device's index is its position, its compute 100.
pub(super) fn parse_vgpu_register(text: &str) -> Result<Vec<Gpu>, String> {
    let mut out = Vec::new();
    for (pos, device) in text.split(':').filter(|d| d.contains(',')).enumerate() {
        let f: Vec<&str> = device.trim().split(',').collect();
        if f.len() < 5 {
            return Err(format!(
                "device {pos} {device:?}: expected UUID,count,memory,type,health"
            ));
        }
        let int = |i: usize, what: &str| {
            (f[i].parse::<u32>()).map_err(|_| format!("device {pos}: invalid {what} {:?}", f[i]))
        };
        let healthy = match f[4] {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            other => return Err(format!("device {pos}: invalid health {other:?}")),
        };
        out.push(Gpu {
            uuid: Some(f[0].to_string()).filter(|s| !s.is_empty()),
            model: Some(f[3].to_string()).filter(|s| !s.is_empty()),
            memory_mib: Some(int(2, "memory")? as u64),
            slots: int(1, "count")?,
            healthy,
            ..Gpu::new(pos as u32)
        });
    }
    Ok(out)
}

/// The devices of a node whose device resource is another vendor's (`resource`, `count`
/// advertised): its NodeTopology's when it lists as many, else none listed (uniform devices in
/// one island), said in a warning.
pub(super) fn vendor_devices(
    cx: &Cx,
    resource: &str,
    count: i64,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> Option<Vec<Gpu>> {
    let t = topology?;
    if t.gpus.len() as i64 == count {
        return Some(t.gpus.clone());
    }
    warnings.push(cx.warning(
        format!("status.allocatable[{resource}]"),
        format!(
            "{count} devices, but its NodeTopology lists {}: the topology is not used (its \
             devices are taken as alike, in one island)",
            t.gpus.len()
        ),
    ));
    None
}

/// HAMi's registered devices with their NVLink islands from the NodeTopology (matched by UUID,
/// else by index where one of the two gives no UUID; island 0 without a match), and the
/// cordoned ones unhealthy.
fn hami_gpus(mut gpus: Vec<Gpu>, topology: Option<&Topology>, cordoned: &[String]) -> Vec<Gpu> {
    let known = topology.map_or(&[][..], |t| &t.gpus[..]);
    for g in &mut gpus {
        let by_uuid =
            (g.uuid.as_ref()).and_then(|u| known.iter().find(|k| k.uuid.as_ref() == Some(u)));
        // Another UUID at the same index is another device (a stale topology).
        let by_index = || {
            (known.iter())
                .find(|k| k.index == g.index)
                .filter(|k| k.uuid.is_none() || g.uuid.is_none())
        };
        g.nvlink_domain = by_uuid.or_else(by_index).map_or(0, |k| k.nvlink_domain);
        if g.uuid.as_ref().is_some_and(|u| cordoned.contains(u)) {
            g.healthy = false;
        }
    }
    gpus
}

/// One device of HAMi's JSON register (`DeviceInfo`; fields are omitempty, so absent means
/// zero, false or empty; unknown fields such as `migProfiles` are ignored, as Go does).
#[derive(Deserialize)]
struct Registered {
    id: Option<String>,
    index: Option<u32>,
    count: Option<i32>,
    devmem: Option<i32>,
    devcore: Option<i32>,
    #[serde(rename = "type")]
    model: Option<String>,
    #[allow(dead_code)] // Read to refuse what Go refuses; Basalt does not bind by NUMA node.
    numa: Option<i64>,
    #[allow(dead_code)] // hami-core, mig or mps: the engine treats them alike.
    mode: Option<String>,
    health: Option<bool>,
}

/// The devices of `hami.io/node-nvidia-register`: HAMi's JSON array, or its legacy form
/// (`DecodeNodeDevices`: per device `id,count,devmem,devcore,type,numa,health[,index,mode]`,
/// each ending in `:`). Island 0, healthy as registered.
pub(super) fn parse_register(text: &str) -> Result<Vec<Gpu>, String> {
    let trimmed = text.trim();
    if !(trimmed.starts_with('[') || trimmed == "null") {
        return parse_legacy_register(trimmed);
    }
    let list: Option<Vec<Registered>> =
        serde_json::from_str(trimmed).map_err(|e| format!("malformed JSON device list: {e}"))?;
    let amount = |v: Option<i32>| v.unwrap_or(0).max(0) as u32;
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok((list.into_iter().flatten())
        .map(|d| Gpu {
            uuid: non_empty(d.id),
            model: non_empty(d.model),
            memory_mib: Some(amount(d.devmem) as u64),
            slots: amount(d.count),
            cores: amount(d.devcore),
            healthy: d.health.unwrap_or(false),
            ..Gpu::new(d.index.unwrap_or(0))
        })
        .collect())
}

fn parse_legacy_register(text: &str) -> Result<Vec<Gpu>, String> {
    if !text.contains(':') {
        return Err("neither a JSON device list nor HAMi's legacy `id,count,...:` form".into());
    }
    let mut out = Vec::new();
    for (pos, device) in text.split(':').filter(|d| !d.is_empty()).enumerate() {
        let f: Vec<&str> = device.split(',').collect();
        if f.len() != 7 && f.len() != 9 {
            return Err(format!(
                "device {pos} {device:?}: expected 7 or 9 comma-separated fields, got {}",
                f.len()
            ));
        }
        let int = |i: usize, what: &str| {
            (f[i].parse::<i32>()).map_err(|_| format!("device {pos}: invalid {what} {:?}", f[i]))
        };
        let (count, devmem, devcore) = (int(1, "count")?, int(2, "memory")?, int(3, "cores")?);
        f[5].parse::<i64>()
            .map_err(|_| format!("device {pos}: invalid numa {:?}", f[5]))?;
        let healthy = match f[6] {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            other => return Err(format!("device {pos}: invalid health {other:?}")),
        };
        // HAMi reads index 0 for the 7-field form; the position is a better guess.
        let index = match f.get(7) {
            Some(i) => i
                .parse::<u32>()
                .map_err(|_| format!("device {pos}: invalid index {i:?}"))?,
            None => pos as u32,
        };
        out.push(Gpu {
            uuid: Some(f[0].to_string()).filter(|s| !s.is_empty()),
            model: Some(f[4].to_string()).filter(|s| !s.is_empty()),
            memory_mib: Some(devmem.max(0) as u64),
            slots: count.max(0) as u32,
            cores: devcore.max(0) as u32,
            healthy,
            ..Gpu::new(index)
        });
    }
    Ok(out)
}

/// A comma-separated list, trimmed, without empty entries (HAMi's `CheckUUID`, `CheckType`,
/// `cordonedDevices`).
pub(super) fn csv(text: &str) -> Vec<String> {
    (text.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// The devices of `hami.io/vgpu-devices-allocated`: containers separated by `;`, devices in a
/// container by `:`, each `UUID,TYPE,memMiB,cores[,...]` (HAMi's `DecodePodDevices`; a piece
/// without a comma is skipped, as there). Memory and cores are summed per UUID across
/// containers, in order of first appearance. Linear: the annotation is the pod's to write, and
/// may list thousands of devices.
pub(super) fn parse_allocated(text: &str) -> Result<Vec<HeldDevice>, String> {
    let mut out: Vec<HeldDevice> = Vec::new();
    // Position in `out` by UUID.
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (c, container) in text.split(';').enumerate() {
        for device in container.split(':').map(str::trim) {
            if !device.contains(',') {
                continue;
            }
            let f: Vec<&str> = device.split(',').collect();
            // Worded only on an error: most annotations have none.
            let at = || format!("container {c}, device {device:?}");
            if f.len() < 4 {
                return Err(format!("{}: expected UUID,TYPE,memory,cores", at()));
            }
            if f[0].is_empty() {
                return Err(format!("{}: empty UUID", at()));
            }
            let amount = |i: usize, what: &str| {
                (f[i].parse::<i32>().ok())
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("{}: invalid {what} {:?}", at(), f[i]))
            };
            let (memory_mib, cores) = (amount(2, "memory")?, amount(3, "cores")?);
            match seen.get(f[0]) {
                Some(&i) => {
                    let d = &mut out[i];
                    d.memory_mib = d.memory_mib.saturating_add(memory_mib);
                    d.cores = d.cores.saturating_add(cores);
                }
                None => {
                    seen.insert(f[0], out.len());
                    out.push(HeldDevice {
                        uuid: f[0].to_string(),
                        memory_mib,
                        cores,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// `hami.io/gpu-scheduler-policy`: the first of `binpack` and `spread` in the chain, and the
/// other entries (Basalt does not honour them).
pub(super) fn parse_policy(text: &str) -> (Option<DevicePolicy>, Vec<String>) {
    let mut policy = None;
    let mut others = Vec::new();
    for p in csv(text) {
        match p.as_str() {
            "binpack" if policy.is_none() => policy = Some(DevicePolicy::Binpack),
            "spread" if policy.is_none() => policy = Some(DevicePolicy::Spread),
            "binpack" | "spread" => {}
            _ => others.push(p),
        }
    }
    (policy, others)
}

/// A pod's HAMi devices: what a bound pod holds (read leniently) and the device filters it
/// states (`None` when it states no filter and no binpack or spread policy, for its devices
/// or, `hami.io/node-scheduler-policy`, its node). Warns, on a pod of ours, about the
/// policies Basalt does not honour.
pub(super) fn pod_devices(
    cx: &Cx,
    meta: &ObjectMeta,
    bound: bool,
    lenient: &mut Lenience,
) -> Result<(Vec<HeldDevice>, Option<Arc<DeviceFilters>>), ConvertError> {
    // HAMi's record, else Volcano vGPU's (the same encoding).
    let recorded = [HAMI_DEVICES_ALLOCATED, VGPU_IDS]
        .into_iter()
        .find_map(|key| Some((key, annotation(meta, key)?)));
    let held = match recorded.filter(|_| bound) {
        None => Vec::new(),
        Some((key, text)) => {
            let parsed = parse_allocated(text).map_err(|e| cx.err(annotation_field(key), e));
            lenient.or(parsed, Vec::new())?
        }
    };
    let list = |key: &str| annotation(meta, key).map_or_else(Vec::new, csv);
    let (policy, others) =
        annotation(meta, HAMI_GPU_POLICY).map_or((None, Vec::new()), parse_policy);
    let node_policy = match annotation(meta, HAMI_NODE_POLICY).map(str::trim) {
        None => None,
        Some("binpack") => Some(DevicePolicy::Binpack),
        Some("spread") => Some(DevicePolicy::Spread),
        Some(other) => {
            if lenient.ours {
                lenient.warnings.push(cx.warning(
                    annotation_field(HAMI_NODE_POLICY),
                    format!("{other:?} is neither binpack nor spread; Basalt's node order applies"),
                ));
            }
            None
        }
    };
    let filters = DeviceFilters {
        use_types: list(USE_GPU_TYPE),
        nouse_types: list(NOUSE_GPU_TYPE),
        use_uuids: [list(USE_GPU_UUID), list(VGPU_USE_UUID)].concat(),
        nouse_uuids: [list(NOUSE_GPU_UUID), list(VGPU_NOUSE_UUID)].concat(),
        policy: policy.unwrap_or_default(),
        node_policy,
    };
    let stated = policy.is_some() || !filters.is_default();
    if lenient.ours && !others.is_empty() {
        let chosen = match filters.policy {
            DevicePolicy::Binpack => "binpack",
            DevicePolicy::Spread => "spread",
        };
        lenient.warnings.push(cx.warning(
            annotation_field(HAMI_GPU_POLICY),
            format!(
                "not honoured: {}; Basalt picks a pod's devices by {chosen} only",
                others.join(", ")
            ),
        ));
    }
    Ok((held, stated.then(|| Arc::new(filters))))
}

#[cfg(test)]
mod tests;

//! The raw NVML calls nvml-wrapper does not wrap (GPU/compute instances, fabric info) or wraps
//! wrongly (`remote_device_type`, which in 0.13 writes into a temporary and always returns
//! `Unknown`). The only module of the crate allowed `unsafe`.
//!
//! Every call first checks that the symbol was loaded (the wrapper's accessors panic on a
//! missing one, e.g. an older driver without fabric info), then passes pointers to locals that
//! outlive the call.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;
use std::ptr;

use nvml_wrapper::error::nvml_try;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as b;

use crate::raw::{FabricState, RawComputeInstance, RawFabric, RawGpuInstance, RemoteType};

const NOT_SUPPORTED: u32 = b::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const INVALID_ARGUMENT: u32 = b::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_FOUND: u32 = b::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;

fn check(what: &str, code: b::nvmlReturn_t) -> Result<(), String> {
    nvml_try(code).map_err(|e| format!("{what}: {e}"))
}

macro_rules! need {
    ($lib:expr, $sym:ident) => {
        if $lib.$sym.is_err() {
            return Err(format!(
                "{} missing from the NVML library",
                stringify!($sym)
            ));
        }
    };
}

fn handle(device: &Device) -> b::nvmlDevice_t {
    // SAFETY: the handle is only passed back to NVML while `device` (and so the `Nvml` it
    // borrows) is alive.
    unsafe { device.handle() }
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`.
pub fn remote_device_type(nvml: &Nvml, device: &Device, link: u32) -> Result<RemoteType, String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceGetNvLinkRemoteDeviceType);
    let mut t: b::nvmlIntNvLinkDeviceType_t =
        b::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: symbol checked above; `t` is a live local the call writes one enum into.
    let code = unsafe { lib.nvmlDeviceGetNvLinkRemoteDeviceType(handle(device), link, &mut t) };
    check("NVLink remote device type", code)?;
    Ok(match t {
        b::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU => RemoteType::Gpu,
        b::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH => RemoteType::Switch,
        b::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_IBMNPU => RemoteType::Npu,
        _ => RemoteType::Unknown,
    })
}

/// `nvmlDeviceGetGpuFabricInfo`; `None` where the device or driver has no fabric.
pub fn fabric_info(nvml: &Nvml, device: &Device) -> Result<Option<RawFabric>, String> {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetGpuFabricInfo.is_err() {
        return Ok(None);
    }
    let mut info = MaybeUninit::<b::nvmlGpuFabricInfo_t>::zeroed();
    // SAFETY: symbol checked above; `info` is a zeroed local of the struct the call fills.
    let code = unsafe { lib.nvmlDeviceGetGpuFabricInfo(handle(device), info.as_mut_ptr()) };
    if code == NOT_SUPPORTED {
        return Ok(None);
    }
    check("fabric info", code)?;
    // SAFETY: zero-initialised plain integers, filled by a successful call.
    let info = unsafe { info.assume_init() };
    let state = match info.state as u32 {
        b::NVML_GPU_FABRIC_STATE_NOT_STARTED => FabricState::NotStarted,
        b::NVML_GPU_FABRIC_STATE_IN_PROGRESS => FabricState::InProgress,
        b::NVML_GPU_FABRIC_STATE_COMPLETED => FabricState::Completed,
        _ => FabricState::NotSupported,
    };
    if state == FabricState::NotSupported {
        return Ok(None);
    }
    let u = info.clusterUuid;
    let hex =
        |r: std::ops::Range<usize>| u[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    Ok(Some(RawFabric {
        cluster_uuid: format!(
            "{}-{}-{}-{}-{}",
            hex(0..4),
            hex(4..6),
            hex(6..8),
            hex(8..10),
            hex(10..16)
        ),
        clique_id: info.cliqueId,
        state,
        status: (state == FabricState::Completed).then(|| match nvml_try(info.status) {
            Ok(()) => "Success".to_string(),
            Err(e) => e.to_string(),
        }),
    }))
}

/// The NVML profile id and memory size of GPU instance profile enum `profile`, `None` where the
/// device does not offer it.
fn gi_profile(
    nvml: &Nvml,
    device: &Device,
    profile: u32,
) -> Result<Option<b::nvmlGpuInstanceProfileInfo_t>, String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceGetGpuInstanceProfileInfo);
    let mut info = MaybeUninit::<b::nvmlGpuInstanceProfileInfo_t>::zeroed();
    // SAFETY: symbol checked above; `info` is a zeroed local of the struct the call fills.
    let code = unsafe {
        lib.nvmlDeviceGetGpuInstanceProfileInfo(handle(device), profile, info.as_mut_ptr())
    };
    if code == NOT_SUPPORTED || code == INVALID_ARGUMENT || code == NOT_FOUND {
        return Ok(None);
    }
    check("GPU instance profile info", code)?;
    // SAFETY: filled by the successful call.
    Ok(Some(unsafe { info.assume_init() }))
}

/// The compute instances of `gi`: (id, slices) for each.
fn compute_instances(
    nvml: &Nvml,
    gi: b::nvmlGpuInstance_t,
) -> Result<Vec<(u32, u32, b::nvmlComputeInstance_t)>, String> {
    let lib = nvml.lib();
    need!(lib, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    need!(lib, nvmlGpuInstanceGetComputeInstances);
    need!(lib, nvmlComputeInstanceGetInfo_v2);
    let mut out = Vec::new();
    for ci_profile in 0..=b::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 {
        let mut info = MaybeUninit::<b::nvmlComputeInstanceProfileInfo_t>::zeroed();
        // SAFETY: symbols checked above; `gi` came from NVML for a live device; `info` is a local.
        let code = unsafe {
            lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi,
                ci_profile,
                b::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                info.as_mut_ptr(),
            )
        };
        if code != 0 {
            continue;
        }
        // SAFETY: filled by the successful call.
        let info = unsafe { info.assume_init() };
        let mut cis: Vec<b::nvmlComputeInstance_t> =
            vec![ptr::null_mut(); info.instanceCount.max(1) as usize];
        let mut count = 0u32;
        // SAFETY: `cis` has room for `instanceCount` handles, the most NVML returns for a profile.
        let code = unsafe {
            lib.nvmlGpuInstanceGetComputeInstances(gi, info.id, cis.as_mut_ptr(), &mut count)
        };
        check("compute instances", code)?;
        for &ci in cis.iter().take(count as usize) {
            let mut ci_info = MaybeUninit::<b::nvmlComputeInstanceInfo_t>::zeroed();
            // SAFETY: `ci` was just returned by NVML; `ci_info` is a local.
            let code = unsafe { lib.nvmlComputeInstanceGetInfo_v2(ci, ci_info.as_mut_ptr()) };
            check("compute instance info", code)?;
            // SAFETY: filled by the successful call.
            let ci_info = unsafe { ci_info.assume_init() };
            out.push((ci_info.id, info.sliceCount, ci));
        }
    }
    Ok(out)
}

/// The GPU instances of a MIG-enabled device. `name(profile_enum, slices, memory_mb)` names each.
pub fn gpu_instances(
    nvml: &Nvml,
    device: &Device,
    name: impl Fn(u32, u32, u64) -> String,
) -> Result<Vec<RawGpuInstance>, String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceGetGpuInstances);
    need!(lib, nvmlGpuInstanceGetInfo);
    let mut out = Vec::new();
    for profile in 0..=b::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 {
        let Some(info) = gi_profile(nvml, device, profile)? else {
            continue;
        };
        let mut gis: Vec<b::nvmlGpuInstance_t> =
            vec![ptr::null_mut(); info.instanceCount.max(1) as usize];
        let mut count = 0u32;
        // SAFETY: symbol checked; `gis` has room for `instanceCount` handles, NVML's maximum.
        let code = unsafe {
            lib.nvmlDeviceGetGpuInstances(handle(device), info.id, gis.as_mut_ptr(), &mut count)
        };
        check("GPU instances", code)?;
        for &gi in gis.iter().take(count as usize) {
            let mut gi_info = MaybeUninit::<b::nvmlGpuInstanceInfo_t>::zeroed();
            // SAFETY: `gi` was just returned by NVML; `gi_info` is a local.
            let code = unsafe { lib.nvmlGpuInstanceGetInfo(gi, gi_info.as_mut_ptr()) };
            check("GPU instance info", code)?;
            // SAFETY: filled by the successful call.
            let gi_info = unsafe { gi_info.assume_init() };
            out.push(RawGpuInstance {
                id: gi_info.id,
                profile: name(profile, info.sliceCount, info.memorySizeMB),
                start: gi_info.placement.start,
                size: gi_info.placement.size,
                compute_instances: compute_instances(nvml, gi)?
                    .into_iter()
                    .map(|(id, slices, _)| RawComputeInstance {
                        id,
                        uuid: None,
                        slices,
                        processes: 0,
                    })
                    .collect(),
            });
        }
    }
    out.sort_by_key(|g| g.start);
    Ok(out)
}

/// GPU and compute instance ids of a MIG device handle.
pub fn mig_device_ids(nvml: &Nvml, mig_device: &Device) -> Result<(u32, u32), String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceGetGpuInstanceId);
    need!(lib, nvmlDeviceGetComputeInstanceId);
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: symbols checked; the handle is a live MIG device handle; `gi` and `ci` are locals.
    check("GPU instance id", unsafe {
        lib.nvmlDeviceGetGpuInstanceId(handle(mig_device), &mut gi)
    })?;
    // SAFETY: as above.
    check("compute instance id", unsafe {
        lib.nvmlDeviceGetComputeInstanceId(handle(mig_device), &mut ci)
    })?;
    Ok((gi, ci))
}

/// Creates a GPU instance of NVML profile enum `gi_profile` at `start`/`size` and one compute
/// instance of `ci_profile` spanning it; on a compute instance failure the GPU instance is
/// destroyed again. Returns the GPU instance id.
pub fn create(
    nvml: &Nvml,
    device: &Device,
    gi_profile_enum: u32,
    ci_profile: u32,
    start: u32,
    size: u32,
) -> Result<u32, String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceCreateGpuInstanceWithPlacement);
    need!(lib, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    need!(lib, nvmlGpuInstanceCreateComputeInstance);
    need!(lib, nvmlGpuInstanceGetInfo);
    need!(lib, nvmlGpuInstanceDestroy);
    let info =
        gi_profile(nvml, device, gi_profile_enum)?.ok_or("profile not supported by this GPU")?;
    let placement = b::nvmlGpuInstancePlacement_t { start, size };
    let mut gi: b::nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: symbols checked; `placement` and `gi` are locals that outlive the call.
    let code = unsafe {
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(handle(device), info.id, &placement, &mut gi)
    };
    check("create GPU instance", code)?;
    let rollback = |e: String| {
        // SAFETY: `gi` is the instance created above, with no compute instance left on it.
        let _ = unsafe { lib.nvmlGpuInstanceDestroy(gi) };
        e
    };
    let mut ci_info = MaybeUninit::<b::nvmlComputeInstanceProfileInfo_t>::zeroed();
    // SAFETY: `gi` is live; `ci_info` is a local.
    let code = unsafe {
        lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi,
            ci_profile,
            b::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            ci_info.as_mut_ptr(),
        )
    };
    check("compute instance profile info", code).map_err(rollback)?;
    // SAFETY: filled by the successful call.
    let ci_info = unsafe { ci_info.assume_init() };
    let mut ci: b::nvmlComputeInstance_t = ptr::null_mut();
    // SAFETY: `gi` is live; `ci` is a local.
    let code = unsafe { lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id, &mut ci) };
    check("create compute instance", code).map_err(rollback)?;
    let mut gi_info = MaybeUninit::<b::nvmlGpuInstanceInfo_t>::zeroed();
    // SAFETY: `gi` is live; `gi_info` is a local.
    check("GPU instance info", unsafe {
        lib.nvmlGpuInstanceGetInfo(gi, gi_info.as_mut_ptr())
    })?;
    // SAFETY: filled by the successful call.
    Ok(unsafe { gi_info.assume_init() }.id)
}

/// Destroys GPU instance `id` and its compute instances. NVML refuses (`In use`) while
/// processes run on it.
pub fn destroy(nvml: &Nvml, device: &Device, id: u32) -> Result<(), String> {
    let lib = nvml.lib();
    need!(lib, nvmlDeviceGetGpuInstanceById);
    need!(lib, nvmlComputeInstanceDestroy);
    need!(lib, nvmlGpuInstanceDestroy);
    let mut gi: b::nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: symbol checked; `gi` is a local.
    check("GPU instance", unsafe {
        lib.nvmlDeviceGetGpuInstanceById(handle(device), id, &mut gi)
    })?;
    for (ci_id, _, ci) in compute_instances(nvml, gi)? {
        // SAFETY: `ci` was just returned by NVML for the live `gi`.
        check(&format!("destroy compute instance {ci_id}"), unsafe {
            lib.nvmlComputeInstanceDestroy(ci)
        })?;
    }
    // SAFETY: `gi` is live and has no compute instances left.
    check("destroy GPU instance", unsafe {
        lib.nvmlGpuInstanceDestroy(gi)
    })
}

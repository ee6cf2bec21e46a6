//! Vendors' device resource names: NVIDIA's, HAMi's, Volcano vGPU's, MIG's and other vendors'.
//! Basalt reads them here and hands the engine what they mean (counts, shares, slices, the
//! resource each node's devices are advertised as), so the engine spells none of them
//! (`docs/protocols.md`, sections 1 to 4).

use std::sync::{Arc, LazyLock};

use basalt_engine::devices::{ShareResources, ShareVocabulary};

/// Whole NVIDIA GPUs: the device resource of a node that names no other
/// (`ClusterSpec::device_resource`).
pub const GPU_NAME: &str = "nvidia.com/gpu";

/// NVIDIA's plugin's name for shared replicas under `renameByDefault`.
pub const SHARED_GPU_NAME: &str = "nvidia.com/gpu.shared";

/// Resources that name devices without configuration: NVIDIA's (HAMi's too; time-sliced or MPS
/// replicas renamed by NVIDIA's `renameByDefault`), AMD's, Huawei's Ascend, Intel's Gaudi and
/// GPUs. A node's devices are the first of a list like this it advertises.
pub const DEFAULT_DEVICE_RESOURCES: [&str; 7] = [
    GPU_NAME,
    SHARED_GPU_NAME,
    "amd.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310",
    "habana.ai/gaudi",
    "gpu.intel.com/i915",
];

/// HAMi's memory request per device, in MiB.
pub const GPU_MEMORY_NAME: &str = "nvidia.com/gpumem";
/// HAMi's memory request per device, in percent of the device's memory.
pub const GPU_MEMORY_PERCENT_NAME: &str = "nvidia.com/gpumem-percentage";
/// HAMi's compute request per device, in percent of its SMs.
pub const GPU_CORES_NAME: &str = "nvidia.com/gpucores";
/// Volcano vGPU's device count: the device resource of its nodes.
pub const VGPU_NUMBER_NAME: &str = "volcano.sh/vgpu-number";
/// Volcano vGPU's memory request per device, in MiB.
pub const VGPU_MEMORY_NAME: &str = "volcano.sh/vgpu-memory";
/// Volcano vGPU's memory request per device, in percent.
pub const VGPU_MEMORY_PERCENT_NAME: &str = "volcano.sh/vgpu-memory-percentage";
/// Volcano vGPU's compute request per device, in percent.
pub const VGPU_CORES_NAME: &str = "volcano.sh/vgpu-cores";

/// The share names of HAMi and Volcano vGPU, as the engine takes them: one value for every
/// node, so nodes alike share it.
pub fn share_vocabulary() -> Arc<ShareVocabulary> {
    static SHARES: LazyLock<Arc<ShareVocabulary>> = LazyLock::new(|| {
        Arc::new(ShareVocabulary {
            hami: ShareResources {
                memory: GPU_MEMORY_NAME.into(),
                percent: GPU_MEMORY_PERCENT_NAME.into(),
                cores: GPU_CORES_NAME.into(),
            },
            vgpu: ShareResources {
                memory: VGPU_MEMORY_NAME.into(),
                percent: VGPU_MEMORY_PERCENT_NAME.into(),
                cores: VGPU_CORES_NAME.into(),
            },
            vgpu_number: VGPU_NUMBER_NAME.into(),
        })
    });
    SHARES.clone()
}

/// NVIDIA's resource for a MIG profile under the mixed strategy: `nvidia.com/mig-<profile>`,
/// a media-extension `+` written `.` (`1g.10gb+me` is `nvidia.com/mig-1g.10gb.me`).
pub fn mig_resource(profile: &str) -> String {
    format!("{MIG_PREFIX}{}", profile.replace('+', "."))
}

/// What every mixed-strategy MIG resource name starts with.
pub const MIG_PREFIX: &str = "nvidia.com/mig-";

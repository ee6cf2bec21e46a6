//! MIG profile tables.
//!
//! Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
//! (docs.nvidia.com/datacenter/tesla/mig-user-guide/), the per-product tables (profile name,
//! fraction of memory and SMs, number of instances available) and the placement diagrams, which
//! `nvidia-smi mig -lgipp` prints as `{starts}:size` in memory slices. A100, H100 and H200 have 7
//! compute and 8 memory slices; A30 has 4 of each. Profiles whose names the guide derives from
//! another product's (A100-80GB from A100-40GB) keep the placements of the product they are
//! derived from. Profiles added by later drivers and not listed here (`+gfx`, `-me`, `all-me`
//! variants) are rejected as unknown rather than guessed.

/// One GPU instance profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// As the device plugin advertises it: `3g.40gb`, `1g.10gb+me`.
    pub name: &'static str,
    pub compute_slices: u32,
    /// Placement size, in memory slices.
    pub memory_slices: u32,
    /// Allowed placement starts, in memory slices.
    pub starts: &'static [u32],
    /// "Number of instances available" in the guide.
    pub max_instances: u32,
    /// `NVML_GPU_INSTANCE_PROFILE_*`.
    pub nvml_gpu_instance_profile: u32,
    /// `NVML_COMPUTE_INSTANCE_PROFILE_*` of the one compute instance spanning the GPU instance.
    pub nvml_compute_instance_profile: u32,
}

/// A MIG-capable GPU model.
#[derive(Debug, PartialEq, Eq)]
pub struct GpuModel {
    /// What `mig-plan --model` takes: `H100-80GB`.
    pub key: &'static str,
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub profiles: &'static [MigProfile],
}

impl GpuModel {
    pub fn profile(&self, name: &str) -> Option<&'static MigProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    pub fn profile_names(&self) -> Vec<&'static str> {
        self.profiles.iter().map(|p| p.name).collect()
    }
}

// NVML enum values (nvml.h).
const GI_1: u32 = 0;
const GI_2: u32 = 1;
const GI_3: u32 = 2;
const GI_4: u32 = 3;
const GI_7: u32 = 4;
const GI_1_REV1: u32 = 7; // 1 slice + media extensions
const GI_2_REV1: u32 = 8; // 2 slices + media extensions (A30)
const GI_1_REV2: u32 = 9; // 1 compute slice, 2 memory slices
const CI_1: u32 = 0;
const CI_2: u32 = 1;
const CI_3: u32 = 2;
const CI_4: u32 = 3;
const CI_7: u32 = 4;

const fn p(
    name: &'static str,
    compute_slices: u32,
    memory_slices: u32,
    starts: &'static [u32],
    max_instances: u32,
    gi: u32,
    ci: u32,
) -> MigProfile {
    MigProfile {
        name,
        compute_slices,
        memory_slices,
        starts,
        max_instances,
        nvml_gpu_instance_profile: gi,
        nvml_compute_instance_profile: ci,
    }
}

/// The 7-slice Ampere/Hopper layout, with the memory size in each name.
macro_rules! seven_slice {
    ($one:literal, $one_me:literal, $one_double:literal, $two:literal, $three:literal, $four:literal, $seven:literal) => {
        &[
            p($one, 1, 1, &[0, 1, 2, 3, 4, 5, 6], 7, GI_1, CI_1),
            p($one_me, 1, 1, &[0, 1, 2, 3, 4, 5, 6], 1, GI_1_REV1, CI_1),
            p($one_double, 1, 2, &[0, 2, 4, 6], 4, GI_1_REV2, CI_1),
            p($two, 2, 2, &[0, 2, 4], 3, GI_2, CI_2),
            p($three, 3, 4, &[0, 4], 2, GI_3, CI_3),
            p($four, 4, 4, &[0], 1, GI_4, CI_4),
            p($seven, 7, 8, &[0], 1, GI_7, CI_7),
        ]
    };
}

pub static A30_24GB: GpuModel = GpuModel {
    key: "A30-24GB",
    compute_slices: 4,
    memory_slices: 4,
    profiles: &[
        p("1g.6gb", 1, 1, &[0, 1, 2, 3], 4, GI_1, CI_1),
        p("1g.6gb+me", 1, 1, &[0, 1, 2, 3], 1, GI_1_REV1, CI_1),
        p("2g.12gb", 2, 2, &[0, 2], 2, GI_2, CI_2),
        p("2g.12gb+me", 2, 2, &[0, 2], 1, GI_2_REV1, CI_2),
        p("4g.24gb", 4, 4, &[0], 1, GI_4, CI_4),
    ],
};

pub static A100_40GB: GpuModel = GpuModel {
    key: "A100-40GB",
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb"
    ),
};

pub static A100_80GB: GpuModel = GpuModel {
    key: "A100-80GB",
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb"
    ),
};

pub static H100_80GB: GpuModel = GpuModel {
    key: "H100-80GB",
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb"
    ),
};

pub static H200_141GB: GpuModel = GpuModel {
    key: "H200-141GB",
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb"
    ),
};

pub static MODELS: [&GpuModel; 5] = [&A30_24GB, &A100_40GB, &A100_80GB, &H100_80GB, &H200_141GB];

/// The most instances of one profile any GPU in the tables holds (7: one per compute slice). A
/// count above it is no layout for any GPU, so readers refuse it before planning anything.
pub fn max_instances_of_any_profile() -> u32 {
    MODELS
        .iter()
        .flat_map(|m| m.profiles)
        .map(|p| p.max_instances)
        .max()
        .unwrap_or(0)
}

/// The model by its key (`H100-80GB`), ignoring case.
pub fn model_by_key(key: &str) -> Option<&'static GpuModel> {
    MODELS
        .iter()
        .copied()
        .find(|m| m.key.eq_ignore_ascii_case(key))
}

/// The model of a device from NVML's name and memory (`NVIDIA A100-SXM4-40GB`, 40960 MiB).
/// H100 and H200 variants with other memory sizes (H100 NVL 94GB, H200 NVL) have other
/// profiles and get `None`.
pub fn model_for_device(name: &str, memory_mib: u64) -> Option<&'static GpuModel> {
    let name = name.to_ascii_uppercase();
    let gib = memory_mib / 1024;
    if name.contains("A30") {
        Some(&A30_24GB)
    } else if name.contains("A100") {
        // The 40GB boards report about 40 GiB, the 80GB ones about 80 GiB.
        if gib >= 60 || name.contains("80GB") {
            Some(&A100_80GB)
        } else {
            Some(&A100_40GB)
        }
    } else if name.contains("H100") && !name.contains("NVL") && (70..=85).contains(&gib) {
        Some(&H100_80GB)
    } else if name.contains("H200") && !name.contains("NVL") && (130..=145).contains(&gib) {
        Some(&H200_141GB)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_consistent() {
        for m in MODELS {
            for p in m.profiles {
                assert!(p.compute_slices <= m.compute_slices, "{} {}", m.key, p.name);
                for s in p.starts {
                    assert!(
                        s + p.memory_slices <= m.memory_slices,
                        "{} {}",
                        m.key,
                        p.name
                    );
                }
                assert!(
                    p.max_instances as usize <= p.starts.len(),
                    "{} {}",
                    m.key,
                    p.name
                );
                assert!(p.name.starts_with(&format!("{}g.", p.compute_slices)));
                assert!(p.max_instances <= m.compute_slices, "{} {}", m.key, p.name);
            }
        }
        assert_eq!(max_instances_of_any_profile(), 7);
    }

    #[test]
    fn devices_map_to_models() {
        let m = |n, mib| model_for_device(n, mib).map(|m| m.key);
        assert_eq!(m("NVIDIA A100-SXM4-40GB", 40960), Some("A100-40GB"));
        assert_eq!(m("NVIDIA A100-SXM4-80GB", 81920), Some("A100-80GB"));
        assert_eq!(m("NVIDIA A100 80GB PCIe", 81920), Some("A100-80GB"));
        assert_eq!(m("NVIDIA H100 80GB HBM3", 81559), Some("H100-80GB"));
        assert_eq!(m("NVIDIA H100 NVL", 95830), None);
        assert_eq!(m("NVIDIA H200", 143771), Some("H200-141GB"));
        assert_eq!(m("NVIDIA A30", 24576), Some("A30-24GB"));
        assert_eq!(m("Tesla V100-SXM2-32GB", 32768), None);
        assert_eq!(model_by_key("h100-80gb").map(|m| m.key), Some("H100-80GB"));
    }
}

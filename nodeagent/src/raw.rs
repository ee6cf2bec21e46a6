//! What NVML reports about a node, before any interpretation: the fixture format of the fake
//! backend, and what the NVML backend dumps with `discover --raw`. Discovery works only from
//! this, so the fixtures exercise the same code as a real machine.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Everything the backend read from the driver.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawNode {
    /// `nvmlSystemGetDriverVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// Per device, by NVML index.
    #[serde(default)]
    pub gpus: Vec<RawGpu>,
    /// `nvmlDeviceGetTopologyCommonAncestor` for each pair, rows and columns by GPU index;
    /// `self` on the diagonal, `null` where NVML could not tell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_topology: Vec<Vec<Option<PcieLevel>>>,
    /// Queries that failed without making the whole report useless (`GPU 3: NVLink 5 remote
    /// PCI info: NotSupported`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One device as NVML describes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawGpu {
    pub index: u32,
    pub uuid: String,
    /// `nvmlDeviceGetName`, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Total framebuffer memory, MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// `nvmlPciInfo_t.busId`, e.g. `00000000:18:00.0`.
    pub pci_bus_id: String,
    /// `nvmlPciInfo_t.pciDeviceId`, e.g. `0x233010DE` (what mig-parted's `device-filter` matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Absent when the device does not support MIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<RawMig>,
    /// Active NVLinks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<RawNvLink>,
    /// `nvmlDeviceGetGpuFabricInfo`, on devices that join a multi-node NVLink fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<RawFabric>,
}

/// MIG mode and GPU instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawMig {
    /// Current mode.
    pub enabled: bool,
    /// Mode after the next reset; equal to `enabled` unless a change is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<RawGpuInstance>,
}

/// One GPU instance (`nvmlGpuInstanceInfo_t`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawGpuInstance {
    /// GPU instance id.
    pub id: u32,
    /// Profile name (`3g.40gb`), from the profile id NVML reports.
    pub profile: String,
    /// Placement start and size, in memory slices.
    pub start: u32,
    pub size: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compute_instances: Vec<RawComputeInstance>,
}

impl RawGpuInstance {
    /// Whether any process runs on one of its compute instances.
    pub fn busy(&self) -> bool {
        self.compute_instances.iter().any(|c| c.processes > 0)
    }
}

/// One compute instance inside a GPU instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawComputeInstance {
    pub id: u32,
    /// The MIG device's UUID (`MIG-…`): how the device plugin, and so the kubelet's
    /// PodResources, name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Compute slices it spans.
    #[serde(default = "one")]
    pub slices: u32,
    /// Running compute processes.
    #[serde(default)]
    pub processes: u32,
}

fn one() -> u32 {
    1
}

/// One active NVLink.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawNvLink {
    pub link: u32,
    /// `nvmlDeviceGetNvLinkRemotePciInfo`: the peer GPU's or NVSwitch's bus id; absent when NVML
    /// could not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_pci_bus_id: Option<String>,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType`.
    #[serde(default)]
    pub remote_type: RemoteType,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RemoteType {
    Gpu,
    Switch,
    Npu,
    #[default]
    Unknown,
}

/// `nvmlGpuFabricInfo_t`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawFabric {
    /// The fabric cluster's UUID, as text.
    pub cluster_uuid: String,
    pub clique_id: u32,
    pub state: FabricState,
    /// `status` once the state is `completed` (`Success` when registration worked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum FabricState {
    #[default]
    NotSupported,
    NotStarted,
    InProgress,
    Completed,
}

/// NVML's topology levels (`nvmlGpuTopologyLevel_t`), closest first.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub enum PcieLevel {
    /// The device itself (diagonal of the matrix).
    #[serde(rename = "self")]
    Itself,
    /// Same board (`NVML_TOPOLOGY_INTERNAL`).
    Internal,
    /// One PCIe switch (`NVML_TOPOLOGY_SINGLE`).
    Single,
    /// Several PCIe switches, no host bridge (`NVML_TOPOLOGY_MULTIPLE`).
    Multiple,
    /// A host bridge (`NVML_TOPOLOGY_HOSTBRIDGE`).
    Hostbridge,
    /// Same NUMA node (`NVML_TOPOLOGY_NODE`).
    Node,
    /// Across NUMA nodes (`NVML_TOPOLOGY_SYSTEM`).
    System,
}

impl PcieLevel {
    /// `nvidia-smi topo -m` notation (`BRD` for the same board, which it does not name).
    pub fn smi(self) -> &'static str {
        match self {
            PcieLevel::Itself => "X",
            PcieLevel::Internal => "BRD",
            PcieLevel::Single => "PIX",
            PcieLevel::Multiple => "PXB",
            PcieLevel::Hostbridge => "PHB",
            PcieLevel::Node => "NODE",
            PcieLevel::System => "SYS",
        }
    }
}

impl fmt::Display for PcieLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.smi())
    }
}

/// A PCI bus id in NVML's canonical form (`00000000:18:00.0`, lower case), from either NVML's
/// 8-digit or the legacy 4-digit domain spelling. `None` when it is not a bus id.
pub fn canonical_bus_id(text: &str) -> Option<String> {
    let (rest, function) = text.trim().rsplit_once('.')?;
    let mut parts = rest.split(':');
    let (domain, bus, device) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(d), Some(b), Some(v), None) => (d, b, v),
        (Some(b), Some(v), None, None) => ("0", b, v),
        _ => return None,
    };
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let device = u8::from_str_radix(device, 16).ok()?;
    let function = u8::from_str_radix(function, 16).ok()?;
    if device > 0x1f || function > 7 {
        return None;
    }
    Some(format!("{domain:08x}:{bus:02x}:{device:02x}.{function:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_canonical_in_either_spelling() {
        assert_eq!(
            canonical_bus_id("0000:1B:00.0").as_deref(),
            Some("00000000:1b:00.0")
        );
        assert_eq!(
            canonical_bus_id("00000000:1b:00.0").as_deref(),
            Some("00000000:1b:00.0")
        );
        assert_eq!(
            canonical_bus_id("1b:00.0").as_deref(),
            Some("00000000:1b:00.0")
        );
        assert_eq!(canonical_bus_id("gpu0"), None);
        assert_eq!(canonical_bus_id("0000:1b:20.0"), None);
    }
}

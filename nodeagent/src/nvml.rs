//! The NVML backend. The library is loaded at run time, so the agent builds and starts on a
//! machine without GPUs and says "no NVML" there. Every per-GPU query that can fail
//! (NotSupported for NVLink, fabric or NUMA on many boards) is recorded in
//! [`RawNode::errors`] and never fails the node's report.

mod sys;

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::backend::{BackendError, GpuBackend};
use crate::mig::profiles::{self, MigProfile};
use crate::raw::{canonical_bus_id, PcieLevel, RawGpu, RawMig, RawNode, RawNvLink};

/// NVML's `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: u32 = 18;

pub struct NvmlBackend {
    nvml: Nvml,
}

impl NvmlBackend {
    /// Loads and initialises NVML; a clean [`BackendError::NoNvml`] where there is none.
    pub fn new() -> Result<Self, BackendError> {
        Nvml::init().map(|nvml| NvmlBackend { nvml }).map_err(|e| {
            BackendError::NoNvml(format!(
                "{e} (is the NVIDIA driver installed and libnvidia-ml.so.1 visible to this process?)"
            ))
        })
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, BackendError> {
        self.nvml
            .device_by_index(gpu)
            .map_err(|e| BackendError::Gpu {
                gpu,
                message: e.to_string(),
            })
    }

    fn read_gpu(
        &self,
        index: u32,
        d: &Device,
        errors: &mut Vec<String>,
    ) -> Result<RawGpu, NvmlError> {
        let mut note = |what: &str, e: String| errors.push(format!("GPU {index}: {what}: {e}"));
        let pci = d.pci_info()?;
        let name = d.name()?;
        let memory_mib = d.memory_info()?.total / (1024 * 1024);
        let numa_node = match d.numa_node_id() {
            Ok(n) => Some(n),
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                note("NUMA node", e.to_string());
                None
            }
        };
        let model = profiles::model_for_device(&name, memory_mib);
        let mig = match d.mig_mode() {
            Ok(m) => {
                let enabled = m.current == 1;
                let instances = if enabled {
                    match self.mig_instances(d, model) {
                        Ok(i) => i,
                        Err(e) => {
                            note("MIG instances", e);
                            Vec::new()
                        }
                    }
                } else {
                    Vec::new()
                };
                Some(RawMig {
                    enabled,
                    pending_enabled: Some(m.pending == 1),
                    instances,
                })
            }
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                note("MIG mode", e.to_string());
                None
            }
        };
        let mut nvlinks = Vec::new();
        for link in 0..MAX_LINKS {
            let w = d.link_wrapper_for(link);
            match w.is_active() {
                Ok(true) => {}
                Ok(false) => continue,
                // No NVLink on this board, or fewer links than the maximum.
                Err(NvmlError::NotSupported | NvmlError::InvalidArg) => break,
                Err(e) => {
                    note(&format!("NVLink {link} state"), e.to_string());
                    continue;
                }
            }
            let remote_pci_bus_id = match w.remote_pci_info() {
                Ok(p) => canonical_bus_id(&p.bus_id).or(Some(p.bus_id)),
                Err(e) => {
                    note(&format!("NVLink {link} remote PCI info"), e.to_string());
                    None
                }
            };
            let remote_type = sys::remote_device_type(&self.nvml, d, link).unwrap_or_else(|e| {
                note(&format!("NVLink {link}"), e);
                Default::default()
            });
            nvlinks.push(RawNvLink {
                link,
                remote_pci_bus_id,
                remote_type,
            });
        }
        let fabric = sys::fabric_info(&self.nvml, d).unwrap_or_else(|e| {
            note("fabric", e);
            None
        });
        Ok(RawGpu {
            index,
            uuid: d.uuid()?,
            name,
            memory_mib,
            pci_bus_id: canonical_bus_id(&pci.bus_id).unwrap_or(pci.bus_id),
            pci_device_id: Some(format!("0x{:08X}", pci.pci_device_id)),
            numa_node,
            mig,
            nvlinks,
            fabric,
        })
    }

    fn mig_instances(
        &self,
        d: &Device,
        model: Option<&'static profiles::GpuModel>,
    ) -> Result<Vec<crate::raw::RawGpuInstance>, String> {
        let mut instances = sys::gpu_instances(&self.nvml, d, |profile, slices, memory_mb| {
            model
                .and_then(|m| {
                    m.profiles
                        .iter()
                        .find(|p| p.nvml_gpu_instance_profile == profile)
                })
                .map(|p| p.name.to_string())
                .unwrap_or_else(|| {
                    // NVIDIA's names round the memory up to whole GB.
                    let me = if profile == 7 || profile == 8 {
                        "+me"
                    } else {
                        ""
                    };
                    format!("{slices}g.{}gb{me}", memory_mb.div_ceil(1024))
                })
        })?;
        // Processes run on MIG device handles (one per compute instance).
        let count = d.mig_device_count().map_err(|e| e.to_string())?;
        for j in 0..count {
            let Ok(m) = d.mig_device_by_index(j) else {
                continue;
            };
            let (gi, ci) = sys::mig_device_ids(&self.nvml, &m)?;
            let processes = m
                .running_compute_processes()
                .map(|p| p.len() as u32)
                .map_err(|e| e.to_string())?;
            if let Some(c) = instances
                .iter_mut()
                .filter(|i| i.id == gi)
                .flat_map(|i| i.compute_instances.iter_mut())
                .find(|c| c.id == ci)
            {
                c.processes = processes;
                c.uuid = m.uuid().ok();
            }
        }
        Ok(instances)
    }
}

impl GpuBackend for NvmlBackend {
    fn describe(&self) -> String {
        match self.nvml.sys_driver_version() {
            Ok(v) => format!("NVML, driver {v}"),
            Err(_) => "NVML".into(),
        }
    }

    fn report(&self) -> Result<RawNode, BackendError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| BackendError::Other(format!("NVML device count: {e}")))?;
        let mut raw = RawNode {
            driver_version: self.nvml.sys_driver_version().ok(),
            ..Default::default()
        };
        let mut devices = Vec::new();
        for index in 0..count {
            let d = self.device(index)?;
            let gpu = self
                .read_gpu(index, &d, &mut raw.errors)
                .map_err(|e| BackendError::Gpu {
                    gpu: index,
                    message: e.to_string(),
                })?;
            raw.gpus.push(gpu);
            devices.push(d);
        }
        let n = devices.len();
        let mut matrix = vec![vec![None; n]; n];
        let mut pairs = Vec::new();
        for (a, da) in devices.iter().enumerate() {
            for b in (a + 1)..n {
                // topology_common_ancestor takes the other device by value: a fresh handle.
                let other = self.nvml.device_by_index(b as u32);
                let level = match other.and_then(|o| da.topology_common_ancestor(o)) {
                    Ok(l) => Some(match l {
                        TopologyLevel::Internal => PcieLevel::Internal,
                        TopologyLevel::Single => PcieLevel::Single,
                        TopologyLevel::Multiple => PcieLevel::Multiple,
                        TopologyLevel::HostBridge => PcieLevel::Hostbridge,
                        TopologyLevel::Node => PcieLevel::Node,
                        TopologyLevel::System => PcieLevel::System,
                    }),
                    Err(e) => {
                        raw.errors
                            .push(format!("GPUs {a} and {b}: PCIe common ancestor: {e}"));
                        None
                    }
                };
                pairs.push((a, b, level));
            }
        }
        for (a, row) in matrix.iter_mut().enumerate() {
            row[a] = Some(PcieLevel::Itself);
        }
        for (a, b, level) in pairs {
            matrix[a][b] = level;
            matrix[b][a] = level;
        }
        if n > 0 {
            raw.pcie_topology = matrix;
        }
        Ok(raw)
    }

    fn create_mig_instance(
        &self,
        gpu: u32,
        profile: &MigProfile,
        start: u32,
    ) -> Result<u32, BackendError> {
        let d = self.device(gpu)?;
        sys::create(
            &self.nvml,
            &d,
            profile.nvml_gpu_instance_profile,
            profile.nvml_compute_instance_profile,
            start,
            profile.memory_slices,
        )
        .map_err(|message| BackendError::Gpu { gpu, message })
    }

    fn destroy_mig_instance(&self, gpu: u32, gpu_instance_id: u32) -> Result<(), BackendError> {
        let d = self.device(gpu)?;
        sys::destroy(&self.nvml, &d, gpu_instance_id)
            .map_err(|message| BackendError::Gpu { gpu, message })
    }
}

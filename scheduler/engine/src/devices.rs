//! Shared devices: what a pod asks of each GPU it shares (HAMi's memory and compute shares,
//! time-sliced replicas), how a node's devices are shared, and the per-device fit.
//!
//! A node's devices are physical devices. On a node that shares them each device has `slots`
//! (HAMi's split count, or time-slice replicas), memory (MiB) and compute (`cores`, 100 per
//! device as HAMi's `devcore`); a pod takes `count` **distinct** devices, the same amounts on
//! each, as HAMi allocates. Nodes that do not share keep whole devices in a mask, as before.
//! Integer arithmetic only. The names and defaults are HAMi's
//! (`docs/protocols.md`, section 1).

use serde::{Deserialize, Serialize};

use crate::model::Gpu;
use crate::resources::{ResourceId, ResourceNames, Resources};

/// The resources a vendor's device shares are asked in, as its reader names them: memory per
/// device in MiB, memory in percent of a device, and compute in percent (100 per device).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShareResources {
    pub memory: String,
    pub percent: String,
    pub cores: String,
}

/// The share resources of every vendor that shares devices, given by the reader (`crds`) with
/// each node: the engine sums a shared node's devices into its vendor's, and a node whose
/// devices are closed offers none of any vendor's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShareVocabulary {
    /// HAMi's ([`Sharing::Hami`]).
    pub hami: ShareResources,
    /// Volcano vGPU's ([`Sharing::VolcanoVgpu`]).
    pub vgpu: ShareResources,
    /// What counts Volcano vGPU's devices (also the device resource of its nodes).
    pub vgpu_number: String,
}

impl ShareVocabulary {
    /// The resources of `sharing`'s shares (`None`: it divides no memory or compute).
    pub fn of(&self, sharing: Sharing) -> Option<&ShareResources> {
        match sharing {
            Sharing::Hami => Some(&self.hami),
            Sharing::VolcanoVgpu => Some(&self.vgpu),
            Sharing::Exclusive | Sharing::TimeSliced | Sharing::Mps => None,
        }
    }

    /// Every name: what a node whose devices are closed offers none of, with its device count.
    pub fn names(&self) -> [&str; 7] {
        let (h, v) = (&self.hami, &self.vgpu);
        [
            &h.memory,
            &h.percent,
            &h.cores,
            &self.vgpu_number,
            &v.memory,
            &v.percent,
            &v.cores,
        ]
    }
}

/// How a node's devices are shared between pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Sharing {
    /// Whole devices, one pod each (NVIDIA's device plugin without sharing).
    #[default]
    Exclusive,
    /// NVIDIA's time-slicing or MPS: each device is advertised as `slots` replicas; a pod's
    /// `nvidia.com/gpu: n` takes a replica on each of `n` distinct devices. Memory and compute
    /// are not divided.
    TimeSliced,
    /// NVIDIA's MPS: replicas as time-slicing, each client with `1/slots` of a device's memory,
    /// and one replica per pod (the plugin's `failRequestsGreaterThanOne`, on by default for
    /// MPS).
    Mps,
    /// HAMi's device plugin (`hami.io/node-nvidia-register`): each device takes up to `slots`
    /// pods, each with its own memory and compute share, which HAMi-core enforces.
    Hami,
    /// Volcano's vGPU device plugin (`volcano.sh/node-vgpu-register`): as HAMi, with
    /// Volcano's resource names (`volcano.sh/vgpu-number` counts the devices).
    VolcanoVgpu,
}

impl Sharing {
    pub fn shares(self) -> bool {
        self != Sharing::Exclusive
    }

    /// Replicas only: no memory or compute is accounted per pod.
    pub fn replicas(self) -> bool {
        matches!(self, Sharing::TimeSliced | Sharing::Mps)
    }
}

/// How a pod's devices are chosen among those that fit (`hami.io/gpu-scheduler-policy`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum DevicePolicy {
    /// The least used devices first (HAMi's default).
    #[default]
    Spread,
    /// The most used devices first, so whole devices stay free.
    Binpack,
}

/// Which devices a pod accepts, by model and UUID (HAMi's `nvidia.com/use-gputype`,
/// `nouse-gputype`, `use-gpuuuid`, `nouse-gpuuuid`), and how it picks among them. Part of the
/// pod's placement rules: a node without one acceptable device is refused statically.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceFilters {
    /// Accepted models: case-insensitive substrings of the device's model (empty: any).
    pub use_types: Vec<String>,
    pub nouse_types: Vec<String>,
    /// Accepted UUIDs (empty: any).
    pub use_uuids: Vec<String>,
    pub nouse_uuids: Vec<String>,
    pub policy: DevicePolicy,
    /// HAMi's `hami.io/node-scheduler-policy`, when the pod states it: `Binpack` prefers the
    /// node whose cards are most used, `Spread` the least used (HAMi's node score). `None`:
    /// the scheduler's own node order.
    pub node_policy: Option<DevicePolicy>,
}

impl DeviceFilters {
    /// Whether the device is one the pod accepts.
    pub fn accepts(&self, gpu: &Gpu) -> bool {
        let uuid = gpu.uuid.as_deref().unwrap_or("");
        self.accepts_type(gpu)
            && (self.use_uuids.is_empty() || self.use_uuids.iter().any(|u| u == uuid))
            && !self.nouse_uuids.iter().any(|u| u == uuid)
    }

    /// Whether the device's model is one the pod accepts (its UUID aside).
    pub fn accepts_type(&self, gpu: &Gpu) -> bool {
        if self.use_types.is_empty() && self.nouse_types.is_empty() {
            return true;
        }
        let model = gpu.model.as_deref().unwrap_or("").to_ascii_lowercase();
        let typed = |t: &String| model.contains(&t.to_ascii_lowercase());
        (self.use_types.is_empty() || self.use_types.iter().any(typed))
            && !self.nouse_types.iter().any(typed)
    }

    pub fn is_default(&self) -> bool {
        *self == DeviceFilters::default()
    }

    /// Whether they refuse some devices (by model or UUID), not only order them.
    pub fn restricts(&self) -> bool {
        !(self.use_types.is_empty()
            && self.nouse_types.is_empty()
            && self.use_uuids.is_empty()
            && self.nouse_uuids.is_empty())
    }
}

/// A device a bound pod holds, as HAMi's `hami.io/vgpu-devices-allocated` records it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeldDevice {
    pub uuid: String,
    pub memory_mib: u32,
    pub cores: u32,
}

/// Memory a pod asks of each device it shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareMemory {
    Mib(u32),
    /// Percent of the device's memory (1..=100).
    Percent(u32),
}

/// What a pod takes of each device it shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShareAsk {
    pub memory: ShareMemory,
    /// Percent of the device's compute; 100 takes the device exclusively.
    pub cores: u32,
}

impl ShareAsk {
    /// What a pod asking only for whole devices takes on a HAMi node: all of each device
    /// (HAMi's webhook sets `gpucores: 100` when a pod gives a GPU count and no memory).
    pub const WHOLE: ShareAsk = ShareAsk {
        memory: ShareMemory::Percent(100),
        cores: 100,
    };

    /// The memory this ask takes on `gpu`, in MiB (a device of unknown memory has none to
    /// give: a percentage of it is 0, a MiB amount does not fit).
    pub fn memory_on(&self, gpu: &Gpu) -> u32 {
        match self.memory {
            ShareMemory::Mib(m) => m,
            ShareMemory::Percent(p) => {
                let total = gpu.memory_mib.unwrap_or(0).min(u32::MAX as u64);
                (total * p.min(100) as u64 / 100) as u32
            }
        }
    }
}

/// The ids of HAMi's and Volcano vGPU's request names ([`ShareVocabulary`]) in one snapshot's
/// resource table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareNames {
    pub memory: Option<ResourceId>,
    pub percent: Option<ResourceId>,
    pub cores: Option<ResourceId>,
    pub vgpu_number: Option<ResourceId>,
    pub vgpu_memory: Option<ResourceId>,
    pub vgpu_percent: Option<ResourceId>,
    pub vgpu_cores: Option<ResourceId>,
}

impl ShareNames {
    /// The ids of `shares`' names in `names` (none without them).
    pub fn in_table(names: &ResourceNames, shares: Option<&ShareVocabulary>) -> Self {
        let Some(s) = shares else {
            return ShareNames::default();
        };
        let id = |name: &String| names.id(name);
        ShareNames {
            memory: id(&s.hami.memory),
            percent: id(&s.hami.percent),
            cores: id(&s.hami.cores),
            vgpu_number: id(&s.vgpu_number),
            vgpu_memory: id(&s.vgpu.memory),
            vgpu_percent: id(&s.vgpu.percent),
            vgpu_cores: id(&s.vgpu.cores),
        }
    }

    /// The share totals Basalt makes up as a shared node's allocatable, which no device
    /// plugin advertises (HAMi's memory, memory percentage and compute; Volcano's memory
    /// percentage): a node short of them is worded by its cards, never "insufficient
    /// nvidia.com/gpumem".
    pub fn totals(&self) -> [Option<ResourceId>; 4] {
        [self.memory, self.percent, self.cores, self.vgpu_percent]
    }
}

/// What a pod asks of the devices it shares, read by its reader (`crds`) from its vendor's
/// resource names with the vendor's defaults applied: the engine matches on this, never on
/// the names. The device count itself stays in the pod's request, in the resource its
/// node's devices are advertised as.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceAsk {
    /// What it takes of each device it shares (`None`: it states no share; what it takes
    /// then depends on the node, see [`ShareAsk::WHOLE`]).
    pub share: Option<ShareAsk>,
    /// Resources counting devices of which the share implies one when the request leaves
    /// them at 0 (a share without a count takes one device, as HAMi's webhook adds it and
    /// Volcano reads memory alone); one the snapshot does not know is left alone.
    pub implied_counts: Vec<String>,
    /// Per container that asks for devices, in order, when two or more do and no init
    /// container does (HAMi allocates such a pod container by container); empty otherwise.
    pub containers: Vec<ContainerAsk>,
}

/// One container's device ask, for a pod whose containers ask for devices separately: HAMi
/// allocates per container, each container's cards chosen after the previous containers',
/// and two containers may share a card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContainerAsk {
    /// Distinct devices the container takes.
    pub count: u32,
    /// What it takes of each (`None`: whole devices, see [`ShareAsk::WHOLE`]).
    pub share: Option<ShareAsk>,
}

/// What one container takes of one device: the device's position in the node's list, and the
/// memory (MiB) and compute it takes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Take {
    pub position: u8,
    pub memory_mib: u32,
    pub cores: u32,
}

/// What is in use on one shared device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceUse {
    pub slots: u32,
    pub memory_mib: u32,
    pub cores: u32,
}

impl DeviceUse {
    /// Whether `ask` (memory `memory` MiB on this device) fits beside what is in use, by HAMi's
    /// rules (`device.go` Fit): a free slot, enough memory and compute, a pod asking for all
    /// compute only on an unused device, and none joining a device whose compute is taken.
    /// On a time-sliced device only the slot counts (`ask` is `None`).
    pub fn fits(&self, gpu: &Gpu, ask: Option<(ShareAsk, u32)>) -> bool {
        if !gpu.healthy || self.slots >= gpu.slots {
            return false;
        }
        let Some((ask, memory)) = ask else {
            return true;
        };
        let total_memory = gpu.memory_mib.unwrap_or(0).min(u32::MAX as u64) as u32;
        (self.memory_mib as u64 + memory as u64) <= total_memory as u64
            && self.cores.saturating_add(ask.cores) <= gpu.cores
            && !(ask.cores == 100 && self.slots > 0)
            && !(self.cores >= gpu.cores && gpu.cores > 0)
    }

    /// Whether no pod can join the device any more (no free slot, or compute or memory all
    /// taken): such devices count as used in the node's free-device mask.
    pub fn closed(&self, gpu: &Gpu, sharing: Sharing) -> bool {
        !gpu.healthy
            || self.slots >= gpu.slots
            || (!sharing.replicas()
                && ((self.cores >= gpu.cores && self.slots > 0)
                    || (self.memory_mib as u64) >= gpu.memory_mib.unwrap_or(0)))
    }

    pub fn charge(&mut self, memory: u32, cores: u32, add: bool) {
        if add {
            self.slots += 1;
            self.memory_mib = self.memory_mib.saturating_add(memory);
            self.cores = self.cores.saturating_add(cores);
        } else {
            self.slots = self.slots.saturating_sub(1);
            self.memory_mib = self.memory_mib.saturating_sub(memory);
            self.cores = self.cores.saturating_sub(cores);
        }
    }
}

/// A MIG instance NVIDIA's mixed strategy advertises on its own, on its parent GPU (from the
/// NodeTopology's MIG instances).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigSlice {
    /// The parent GPU's index.
    pub gpu: u32,
    /// Its profile (`1g.10gb`).
    pub profile: String,
    /// The resource it is advertised as (its reader names it from the profile).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    pub gpu_instance_id: u32,
    /// First memory slice of its placement on the GPU.
    pub start: u32,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

/// A node's MIG slice with the resource it is advertised as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub kind: ResourceId,
    pub mig: MigSlice,
}

/// The slices a request takes on a node beside `used` (positions in `slices`): for each slice
/// kind it asks for, that many free slices of the kind, each on the GPU with the most slices
/// in use (so a GPU's instances free up together and mig-manager can repartition it), then by
/// GPU index and placement. Fewer when fewer are free (the counted resource bounds them).
pub fn pick_slices(slices: &[Slice], used: u64, request: &Resources) -> u64 {
    let mut taken = used;
    for (p, s) in slices.iter().enumerate() {
        // Each kind once, at its first slice.
        if slices[..p].iter().any(|o| o.kind == s.kind) {
            continue;
        }
        for _ in 0..request.count(s.kind) {
            let busy = |gpu: u32| {
                (slices.iter().enumerate())
                    .filter(|(q, o)| o.mig.gpu == gpu && taken & (1 << q) != 0)
                    .count()
            };
            let best = (slices.iter().enumerate())
                .filter(|(q, o)| o.kind == s.kind && taken & (1 << q) == 0)
                .min_by_key(|(_, o)| (std::cmp::Reverse(busy(o.mig.gpu)), o.mig.gpu, o.mig.start));
            match best {
                Some((q, _)) => taken |= 1 << q,
                None => break,
            }
        }
    }
    taken & !used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(memory: u64) -> Gpu {
        Gpu {
            memory_mib: Some(memory),
            slots: 10,
            ..Gpu::new(0)
        }
    }

    #[test]
    fn a_device_takes_shares_up_to_its_memory_cores_and_slots() {
        let g = gpu(81920);
        let half = ShareAsk {
            memory: ShareMemory::Mib(40960),
            cores: 50,
        };
        let mut used = DeviceUse::default();
        assert!(used.fits(&g, Some((half, 40960))));
        used.charge(40960, 50, true);
        assert!(used.fits(&g, Some((half, 40960))));
        used.charge(40960, 50, true);
        assert!(!used.fits(&g, Some((half, 1))), "compute is taken");
        assert!(used.closed(&g, Sharing::Hami));
        used.charge(40960, 50, false);
        assert!(!used.closed(&g, Sharing::Hami));
        // All compute only on an unused device.
        assert!(!used.fits(&g, Some((ShareAsk::WHOLE, 40960))));
        // Slots bound time-sliced devices.
        let mut used = DeviceUse::default();
        for _ in 0..10 {
            assert!(used.fits(&g, None));
            used.charge(0, 0, true);
        }
        assert!(!used.fits(&g, None));
        assert!(used.closed(&g, Sharing::TimeSliced));
    }

    #[test]
    fn filters_match_models_case_insensitively_and_uuids_exactly() {
        let g = Gpu {
            uuid: Some("GPU-a".into()),
            model: Some("NVIDIA-H100-80GB".into()),
            ..Gpu::new(0)
        };
        let f = |use_types: &[&str], nouse_uuids: &[&str]| DeviceFilters {
            use_types: use_types.iter().map(|s| s.to_string()).collect(),
            nouse_uuids: nouse_uuids.iter().map(|s| s.to_string()).collect(),
            ..DeviceFilters::default()
        };
        assert!(f(&["h100"], &[]).accepts(&g));
        assert!(!f(&["A100"], &[]).accepts(&g));
        assert!(!f(&[], &["GPU-a"]).accepts(&g));
    }
}

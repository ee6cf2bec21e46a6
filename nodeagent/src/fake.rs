//! A backend read from a YAML fixture (the [`RawNode`] format). MIG changes are applied to the
//! in-memory copy, with NVML's refusals: overlapping placements, unknown profiles, busy instances.

use std::path::Path;
use std::sync::Mutex;

use crate::backend::{BackendError, GpuBackend};
use crate::mig::profiles::{self, MigProfile};
use crate::raw::{RawComputeInstance, RawGpuInstance, RawNode};

pub struct FakeBackend {
    label: String,
    state: Mutex<RawNode>,
}

impl FakeBackend {
    /// Reads a fixture file. Unknown fields and malformed values fail with the file name and the
    /// field path.
    pub fn from_file(path: &Path) -> Result<Self, BackendError> {
        let label = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| BackendError::Fixture {
            path: label.clone(),
            message: format!("cannot read: {e}"),
        })?;
        Self::from_yaml(&label, &text)
    }

    /// Parses a fixture's text; `label` names it in errors.
    pub fn from_yaml(label: &str, text: &str) -> Result<Self, BackendError> {
        let raw = parse_fixture(label, text)?;
        Ok(Self::from_raw(label, raw))
    }

    pub fn from_raw(label: &str, raw: RawNode) -> Self {
        FakeBackend {
            label: label.to_string(),
            state: Mutex::new(raw),
        }
    }

    /// Sets the process count of one compute instance, as a workload starting or ending would.
    pub fn set_processes(&self, gpu: u32, gpu_instance_id: u32, processes: u32) -> bool {
        let mut state = self.lock();
        let Some(gi) = state
            .gpus
            .iter_mut()
            .find(|g| g.index == gpu)
            .and_then(|g| g.mig.as_mut())
            .and_then(|m| m.instances.iter_mut().find(|i| i.id == gpu_instance_id))
        else {
            return false;
        };
        match gi.compute_instances.first_mut() {
            Some(ci) => ci.processes = processes,
            None => return false,
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RawNode> {
        // A panic while holding the lock cannot leave the plain data half-updated in a way that
        // matters for a test double, so a poisoned lock is taken over.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Parses fixture text into a [`RawNode`], naming the field path on error.
pub fn parse_fixture(label: &str, text: &str) -> Result<RawNode, BackendError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        BackendError::Fixture {
            path: label.to_string(),
            message: with_path(&path, inner.to_string()),
        }
    })
}

/// `path: message`, unless the message already starts with the path (yaml_serde names it in
/// some errors) or the error is at the top.
pub(crate) fn with_path(path: &str, message: String) -> String {
    if path == "." || path.is_empty() || message.starts_with(path) {
        message
    } else {
        format!("{path}: {message}")
    }
}

impl GpuBackend for FakeBackend {
    fn describe(&self) -> String {
        format!("fixture {}", self.label)
    }

    fn report(&self) -> Result<RawNode, BackendError> {
        Ok(self.lock().clone())
    }

    fn create_mig_instance(
        &self,
        gpu: u32,
        profile: &MigProfile,
        start: u32,
    ) -> Result<u32, BackendError> {
        let mut state = self.lock();
        let err = |message: String| BackendError::Gpu { gpu, message };
        let g = state
            .gpus
            .iter_mut()
            .find(|g| g.index == gpu)
            .ok_or_else(|| err("no such GPU".into()))?;
        let model = profiles::model_for_device(&g.name, g.memory_mib)
            .ok_or_else(|| err(format!("{}: MIG not supported", g.name)))?;
        if model.profile(profile.name).is_none() {
            return Err(err(format!(
                "profile {} not supported on {}",
                profile.name, model.key
            )));
        }
        let mig = g
            .mig
            .as_mut()
            .filter(|m| m.enabled)
            .ok_or_else(|| err("MIG mode is disabled".into()))?;
        if !profile.starts.contains(&start) {
            return Err(err(format!(
                "{} cannot start at slice {start}",
                profile.name
            )));
        }
        let end = start + profile.memory_slices;
        if let Some(other) = mig
            .instances
            .iter()
            .find(|i| i.start < end && start < i.start + i.size)
        {
            return Err(err(format!(
                "placement {start}:{} overlaps GPU instance {} ({} at {}:{})",
                profile.memory_slices, other.id, other.profile, other.start, other.size
            )));
        }
        let id = mig.instances.iter().map(|i| i.id + 1).max().unwrap_or(1);
        // NVML's MIG UUIDs are random; the fake's name the GPU and instance.
        let uuid = format!("MIG-{}-gi{id}", g.uuid);
        let mig = g.mig.as_mut().expect("checked above");
        mig.instances.push(RawGpuInstance {
            id,
            profile: profile.name.to_string(),
            start,
            size: profile.memory_slices,
            compute_instances: vec![RawComputeInstance {
                id: 0,
                uuid: Some(uuid),
                slices: profile.compute_slices,
                processes: 0,
            }],
        });
        mig.instances.sort_by_key(|i| i.start);
        Ok(id)
    }

    fn destroy_mig_instance(&self, gpu: u32, gpu_instance_id: u32) -> Result<(), BackendError> {
        let mut state = self.lock();
        let err = |message: String| BackendError::Gpu { gpu, message };
        let mig = state
            .gpus
            .iter_mut()
            .find(|g| g.index == gpu)
            .and_then(|g| g.mig.as_mut())
            .ok_or_else(|| err("no MIG-capable GPU with this index".into()))?;
        let pos = mig
            .instances
            .iter()
            .position(|i| i.id == gpu_instance_id)
            .ok_or_else(|| err(format!("no GPU instance {gpu_instance_id}")))?;
        if mig.instances[pos].busy() {
            // NVML answers NVML_ERROR_IN_USE here.
            return Err(err(format!(
                "GPU instance {gpu_instance_id} is in use by running processes"
            )));
        }
        mig.instances.remove(pos);
        Ok(())
    }
}

//! The GPU backend: where the agent reads what the driver sees and asks for MIG changes. Two
//! implementations: NVML ([`crate::nvml::NvmlBackend`]) and YAML fixtures
//! ([`crate::fake::FakeBackend`]).

use thiserror::Error;

use crate::mig::profiles::MigProfile;
use crate::raw::RawNode;

#[derive(Debug, Error)]
pub enum BackendError {
    /// The NVML library could not be loaded or initialised (no driver, no GPU, container without
    /// the driver mounted).
    #[error("no NVML: {0}")]
    NoNvml(String),
    #[error("{path}: {message}")]
    Fixture { path: String, message: String },
    #[error("GPU {gpu}: {message}")]
    Gpu { gpu: u32, message: String },
    #[error("{0}")]
    Other(String),
}

/// A source of GPU facts and the sink of MIG changes.
pub trait GpuBackend: Send + Sync {
    /// What this backend is, for logs (`NVML, driver 550.54.15` / `fixture h100.yaml`).
    fn describe(&self) -> String;
    /// What the driver reports now. Fails as a whole only when nothing can be read; per-GPU
    /// failures go into [`RawNode::errors`].
    fn report(&self) -> Result<RawNode, BackendError>;
    /// Creates a GPU instance of `profile` at placement `start` on GPU `gpu`, with one compute
    /// instance spanning it (what the device plugin advertises as one MIG device). Returns the
    /// new GPU instance id.
    fn create_mig_instance(
        &self,
        gpu: u32,
        profile: &MigProfile,
        start: u32,
    ) -> Result<u32, BackendError>;
    /// Destroys GPU instance `gpu_instance_id` of GPU `gpu` and its compute instances. Refuses
    /// when processes run on it.
    fn destroy_mig_instance(&self, gpu: u32, gpu_instance_id: u32) -> Result<(), BackendError>;
}

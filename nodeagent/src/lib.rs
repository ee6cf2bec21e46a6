//! Basalt's node agent: reads the node's GPUs through a [`backend::GpuBackend`] (NVML or YAML
//! fixtures), derives the NVLink topology ([`discover`]), publishes it as the node's
//! `NodeTopology` ([`publish`]), and partitions GPUs with MIG ([`mig`]) and time-slicing
//! ([`timeslice`]) from layouts declared in node labels and ConfigMaps.
//!
//! Dependency rule: of Basalt's crates this one depends on `basalt-crd-types` only (the types it
//! publishes), never on the engine, the conversion (`basalt-crds`) or the scheduler. Only [`nvml::sys`] may use `unsafe`.

pub mod backend;
pub mod device_plugin;
pub mod discover;
pub mod fake;
pub mod layout_status;
pub mod metrics;
pub mod mig;
pub mod nvml;
pub mod pod_resources;
pub mod publish;
pub mod raw;
pub mod relayout_status;
pub mod round;
pub mod timeslice;
pub mod timeslice_config;

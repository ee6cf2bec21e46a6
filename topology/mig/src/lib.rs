//! NVIDIA MIG, as data and a pure search: each MIG-capable GPU model's profiles with their
//! placement rules ([`profiles`]), and the layout search that finds a valid placement of
//! wanted profiles on one GPU or says exactly why none exists ([`planner`]). No I/O, no
//! Kubernetes, no engine: the node agent applies layouts with it, the scheduler's MIG
//! re-layout policy chooses them with it.

pub mod planner;
pub mod profiles;

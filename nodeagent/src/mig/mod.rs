//! MIG partitioning: profile tables, the planner, NVIDIA mig-parted's config format, and the
//! applier that reconciles a GPU's instances with a wanted layout.

pub mod applier;
pub mod config;
pub mod planner;
pub mod profiles;

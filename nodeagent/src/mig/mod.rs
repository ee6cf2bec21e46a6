//! MIG partitioning: NVIDIA mig-parted's config format and the applier that reconciles a GPU's
//! instances with a wanted layout. The profile tables and the planner live in `basalt-mig`
//! (shared with the scheduler) and are re-exported here under their old paths.

pub mod applier;
pub mod config;
pub mod relayout;
pub use basalt_mig::{planner, profiles};

//! Basalt's scheduling engine: a pure function from a cluster [`Snapshot`] and a configured
//! [`Framework`] to a [`Plan`]. What a scheduler carries from one cycle to the next to go faster
//! is a [`Warm`] value it owns and passes in; it never changes the plan.
//!
//! Nothing here reads a clock, a random source, the network or a file: time and seeds arrive as
//! arguments, so the same input always gives the same plan. This crate depends on no other Basalt
//! crate and knows nothing of Kubernetes; policies live in `basalt-plugins`, Kubernetes types in
//! `basalt-crds`.

pub mod actions;
mod conditions;
pub mod constraints;
pub mod devices;
pub mod dra;
pub mod forecast;
pub mod framework;
mod hash;
mod interpod;
pub mod model;
pub mod plan;
mod queue_order;
pub mod refusal;
pub mod resources;
pub mod session;
pub mod share;
pub mod snapshot;
pub mod usage;
mod warm;

pub use actions::{schedule, schedule_each};
pub use constraints::*;
pub use framework::*;
pub use model::*;
pub use plan::*;
pub use refusal::{DeviceShort, JobRefusal, NoNode, Refusal};
pub use resources::*;
pub use session::*;
pub use share::Share;
pub use snapshot::*;
pub use usage::{QueueUsage, UsageWeights};
pub use warm::Warm;

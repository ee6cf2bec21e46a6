//! `basalt-sim` as a library: synthetic clusters, the benchmark, and the `plan` command's
//! rendering, shared by the binary, the tests and `cargo bench`.

pub mod bench;
pub mod bench_forecast;
pub mod commands;
pub mod dra_backlog;
pub mod fgd;
pub mod mig;
pub mod openb;
pub mod plan;
pub mod plan_forecast;
pub mod replay;
pub mod synthetic;

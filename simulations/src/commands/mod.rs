//! The `basalt-sim` subcommands: each one's flags (a clap `Args` struct) beside the function
//! that runs it. `main.rs` only names the subcommands and prints what these return.

pub mod apiserver;
pub mod bench;
pub mod fgd;
pub mod plan;
pub mod replay;

/// How a report is printed.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

//! Writes Basalt's CRDs to `deploy/crds/` (or `--out DIR`), or with `--check DIR` fails when
//! the files there differ from the code.

use std::path::PathBuf;
use std::process::ExitCode;

use basalt_crds::crdgen;

const USAGE: &str =
    "usage: crdgen [--out DIR | --check DIR]  (DIR defaults to the workspace's deploy/crds)";

enum Mode {
    Write(PathBuf),
    Check(PathBuf),
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Mode, String> {
    // Relative to the workspace, not the working directory, so `cargo run` works from anywhere.
    let default_dir =
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(crdgen::DEFAULT_DIR);
    let mode = match args.next().as_deref() {
        None => Mode::Write(default_dir()),
        Some("--out") => Mode::Write(args.next().map_or_else(default_dir, PathBuf::from)),
        Some("--check") => Mode::Check(args.next().map_or_else(default_dir, PathBuf::from)),
        Some("-h" | "--help") => return Err(USAGE.to_string()),
        Some(other) => return Err(format!("unknown argument {other:?}\n{USAGE}")),
    };
    match args.next() {
        None => Ok(mode),
        Some(extra) => Err(format!("unexpected argument {extra:?}\n{USAGE}")),
    }
}

fn main() -> ExitCode {
    let mode = match parse_args(std::env::args().skip(1)) {
        Ok(m) => m,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let result = match mode {
        Mode::Write(dir) => crdgen::write(&dir).map(|paths| {
            for p in paths {
                println!("wrote {}", p.display());
            }
        }),
        Mode::Check(dir) => crdgen::check(&dir).map(|()| {
            println!("{}: CRDs are up to date", dir.display());
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}

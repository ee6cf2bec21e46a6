//! The basalt-nodeagent image (`deploy/images/basalt-nodeagent.Dockerfile`), checked as the
//! scheduler's is (`scheduler/daemon/tests/oci/mod.rs`).

#[path = "../../scheduler/daemon/tests/oci/mod.rs"]
mod oci;

#[test]
fn the_image_names_what_exists_and_runs_the_binary() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_basalt-nodeagent"));
    oci::check(
        env!("CARGO_PKG_NAME"),
        "basalt-nodeagent",
        env!("CARGO_PKG_VERSION"),
        exe,
    );
}

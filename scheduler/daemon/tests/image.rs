//! The basalt-scheduler image (`deploy/images/basalt-scheduler.Dockerfile`): `oci/mod.rs`.

mod oci;

#[test]
fn the_image_names_what_exists_and_runs_the_binary() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_basalt-scheduler"));
    oci::check(
        env!("CARGO_PKG_NAME"),
        "basalt-scheduler",
        env!("CARGO_PKG_VERSION"),
        exe,
    );
}

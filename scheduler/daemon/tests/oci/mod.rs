//! The image of a binary, `deploy/images/<bin>.Dockerfile`: its stages name the package, binary
//! and paths that exist, it runs non-root with the workspace's version in its OCI labels, and
//! `deploy/` names it. Where `buildah` is installed the image is built for real, offline: the
//! binary the tests built stands in for the build stage's (`--build-arg BINARIES`) and an image
//! made from scratch with the libraries it links stands in for distroless's base
//! (`--build-arg RUNTIME_IMAGE`), so the final stage is the file's own; then `--help` runs inside.
//! Without buildah that part skips with the reason printed (it fails instead when
//! `BASALT_REQUIRE_TOOLS` is set). Shared by the scheduler's and the node agent's tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("deploy/images").is_dir() {
        assert!(dir.pop(), "deploy/images not found");
    }
    dir
}

/// Checks the image of `bin` (package `package`, version `version`), built from `exe`.
pub fn check(package: &str, bin: &str, version: &str, exe: &Path) {
    let repo = repo();
    let file = repo.join(format!("deploy/images/{bin}.Dockerfile"));
    let text = std::fs::read_to_string(&file).expect("the Dockerfile");
    for line in [
        format!("cargo build --release --locked -p {package} --bin {bin}"),
        format!("install -D target/release/{bin} /out/{bin}"),
        format!("COPY --from=binaries /out/{bin} /usr/local/bin/{bin}"),
        format!("ENTRYPOINT [\"/usr/local/bin/{bin}\"]"),
        format!("ARG VERSION={version}"),
        "org.opencontainers.image.version=\"${VERSION}\"".to_string(),
        "FROM ${BINARIES} AS binaries".to_string(),
    ] {
        assert!(text.contains(&line), "{}: no `{line}`", file.display());
    }
    let user = (text.lines())
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER");
    assert_ne!(uid, 0, "{}: runs as root", file.display());
    // The image deploy/ runs is this one.
    let image = format!("image: basalt/{bin}:{version}");
    let manifests = [
        "deploy/scheduler/scheduler.yaml",
        "deploy/nodeagent/nodeagent.yaml",
    ];
    let named = (manifests.iter()).any(|m| {
        std::fs::read_to_string(repo.join(m))
            .unwrap()
            .contains(&image)
    });
    assert!(named, "no manifest of deploy/ says `{image}`");
    // The version the labels carry is the binary's own.
    let out = Command::new(exe).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{bin} {version}")
    );
    build_and_run(bin, version, exe, &file);
}

fn build_and_run(bin: &str, version: &str, exe: &Path, file: &Path) {
    let Some(buildah) = which("buildah") else {
        let why = "`buildah` is not installed (Debian's package buildah)";
        assert!(
            std::env::var_os("BASALT_REQUIRE_TOOLS").is_none(),
            "BASALT_REQUIRE_TOOLS is set but {why}"
        );
        eprintln!("SKIPPED: building the image: {why}");
        return;
    };
    // A storage of the test's own, removed with it; vfs needs no kernel overlay support.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let run_root = dir.path().join("run");
    let b = |args: &[&str]| -> String {
        let out = Command::new(&buildah)
            .arg("--root")
            .arg(&root)
            .arg("--runroot")
            .arg(&run_root)
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "buildah {args:?}: {err}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let exe = exe.to_str().unwrap();
    // The binary, where the build stage would have put it.
    let c = b(&["from", "scratch"]);
    b(&["copy", &c, exe, &format!("/out/{bin}")]);
    b(&["commit", "-q", &c, "localhost/test-binaries"]);
    // The runtime: the loader and libraries the binary links (glibc's, as on distroless/cc).
    let c = b(&["from", "scratch"]);
    for lib in linked(exe) {
        b(&["copy", &c, &lib, &lib]);
    }
    b(&["commit", "-q", &c, "localhost/test-runtime"]);
    let context = dir.path().join("context");
    std::fs::create_dir(&context).unwrap();
    let tag = format!("localhost/{bin}:{version}");
    b(&[
        "bud",
        "--isolation",
        "chroot",
        "--build-arg",
        "BINARIES=localhost/test-binaries",
        "--build-arg",
        "RUNTIME_IMAGE=localhost/test-runtime",
        "-f",
        file.to_str().unwrap(),
        "-t",
        &tag,
        context.to_str().unwrap(),
    ]);
    let inspect: serde_json::Value =
        serde_json::from_str(&b(&["inspect", "--type", "image", &tag])).unwrap();
    let config = &inspect["OCIv1"]["config"];
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        version
    );
    assert_eq!(config["Labels"]["org.opencontainers.image.title"], bin);
    assert!(
        !config["User"].as_str().unwrap().starts_with('0'),
        "{config}"
    );
    let entry = format!("/usr/local/bin/{bin}");
    assert_eq!(config["Entrypoint"], serde_json::json!([entry]));
    let c = b(&["from", &tag]);
    let help = b(&["run", "--isolation", "chroot", &c, "--", &entry, "--help"]);
    assert!(help.contains("Usage:"), "{help}");
}

/// The loader and the libraries `exe` links, as `ldd` names them.
fn linked(exe: &str) -> Vec<String> {
    let out = Command::new("ldd").arg(exe).output().expect("ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    (text.split_whitespace())
        .filter(|w| w.starts_with('/'))
        .map(String::from)
        .collect()
}

fn which(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

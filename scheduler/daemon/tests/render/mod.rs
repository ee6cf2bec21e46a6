//! `kubectl kustomize` of deploy/, for the tests that check the manifests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

pub fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The install as `kubectl apply -k deploy/` makes it.
pub fn kustomize() -> Option<Vec<serde_json::Value>> {
    render(&deploy())
}

/// The install with the component `deploy/<component>` added.
pub fn with_component(component: &str) -> Option<Vec<serde_json::Value>> {
    with_components(&[component])
}

/// The install with the components `deploy/<component>` added, in this order.
pub fn with_components(components: &[&str]) -> Option<Vec<serde_json::Value>> {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(components.join("+").replace('/', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    let base = relative(&dir, &deploy());
    let listed: String = (components.iter())
        .map(|c| format!("  - {}/{c}\n", base.display()))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!("resources:\n  - {}\ncomponents:\n{listed}", base.display()),
    )
    .unwrap();
    render(&dir)
}

/// `kubectl kustomize DIR`, parsed; `None` (the test skips) without kubectl.
pub fn render(dir: &Path) -> Option<Vec<serde_json::Value>> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping: kubectl is not available ({e})");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| serde_json::Value::deserialize(doc).expect("rendered YAML"))
            .collect(),
    )
}

pub fn find<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} not rendered"))
}

pub fn all<'a>(
    docs: &'a [serde_json::Value],
    kind: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    docs.iter().filter(move |d| d["kind"] == kind)
}

/// Relative path from `from` to `to` (kustomize refuses absolute ones).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (from.canonicalize().unwrap(), to.canonicalize().unwrap());
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    out.extend(to.components().skip(common));
    out
}

//! The workspace's boundaries, checked: each crate's "must not depend on" (stated in its README)
//! against `cargo metadata`, every crate's `rust-version` inherited from the workspace, and no
//! import circle between the modules of a crate beyond those listed as not yet cut.
//!
//! The engine's purity (no clock, randomness, I/O, threads, globals) is checked by clippy:
//! `scheduler/engine/clippy.toml`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ---------------------------------------------------------------------------------------------
// Dependencies
// ---------------------------------------------------------------------------------------------

const KUBERNETES: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "kube-core",
    "k8s-openapi",
];
const ASYNC: &[&str] = &["tokio", "futures", "async-std", "smol"];
const NETWORK: &[&str] = &["axum", "hyper", "reqwest", "tower", "rustls", "tonic"];
const CLOCKS: &[&str] = &["jiff", "chrono", "time"];
const RANDOM: &[&str] = &["rand", "getrandom", "fastrand", "rand_core"];
const BASALT: &[&str] = &[
    "basalt-engine",
    "basalt-topology",
    "basalt-mig",
    "basalt-queue",
    "basalt-plugins",
    "basalt-crds",
    "basalt-crd-types",
    "basalt-cel",
    "basalt-apiserver",
    "basalt-scheduler",
    "basalt-sim",
    "basalt-nodeagent",
    "kubectl-basalt",
];

/// One crate's rule, as its README states it.
struct Rule {
    krate: &'static str,
    /// Of Basalt's crates, the only ones it may depend on (directly or through each other).
    basalt: &'static [&'static str],
    /// Other crates it must not depend on.
    never: &'static [&'static [&'static str]],
}

const RULES: &[Rule] = &[
    // scheduler/engine/README.md: "any other Basalt crate but basalt-topology, Kubernetes crates,
    // async runtimes, clocks, random sources or the file system".
    Rule {
        krate: "basalt-engine",
        basalt: &["basalt-topology"],
        never: &[KUBERNETES, ASYNC, NETWORK, CLOCKS, RANDOM],
    },
    // topology/README.md: "the engine or anything Kubernetes".
    Rule {
        krate: "basalt-topology",
        basalt: &[],
        never: &[KUBERNETES, ASYNC, NETWORK],
    },
    // topology/mig/README.md: "any other Basalt crate, Kubernetes crates, async runtimes,
    // clocks, randomness or I/O".
    Rule {
        krate: "basalt-mig",
        basalt: &[],
        never: &[KUBERNETES, ASYNC, NETWORK, CLOCKS, RANDOM],
    },
    // queue/README.md: "basalt-engine only ... Kubernetes crates, I/O or clocks".
    Rule {
        krate: "basalt-queue",
        basalt: &["basalt-engine", "basalt-topology"],
        never: &[KUBERNETES, ASYNC, NETWORK, CLOCKS],
    },
    // plugins/README.md: "Kubernetes crates, I/O, clocks or randomness; only basalt-engine,
    // basalt-queue and basalt-topology".
    Rule {
        krate: "basalt-plugins",
        basalt: &[
            "basalt-engine",
            "basalt-queue",
            "basalt-topology",
            "basalt-mig",
        ],
        never: &[KUBERNETES, ASYNC, NETWORK, CLOCKS, RANDOM],
    },
    // crds/README.md: "no kube client, no tokio or other async runtime, no network ... only
    // basalt-engine, basalt-topology, basalt-cel and basalt-crd-types" (kube's derive alone:
    // checked below).
    Rule {
        krate: "basalt-crds",
        basalt: &[
            "basalt-engine",
            "basalt-topology",
            "basalt-cel",
            "basalt-crd-types",
        ],
        never: &[ASYNC, NETWORK],
    },
    // crds/types/README.md: "any Basalt crate, a kube client, an async runtime or the network".
    Rule {
        krate: "basalt-crd-types",
        basalt: &[],
        never: &[ASYNC, NETWORK],
    },
    // crds/cel/README.md: "kube, k8s-openapi or any basalt crate".
    Rule {
        krate: "basalt-cel",
        basalt: &[],
        never: &[KUBERNETES, ASYNC, NETWORK],
    },
    // nodeagent/README.md: "basalt-crd-types and basalt-mig only; never on the engine, the
    // conversion or the scheduler".
    Rule {
        krate: "basalt-nodeagent",
        basalt: &["basalt-crd-types", "basalt-mig"],
        never: &[],
    },
    // simulations/apiserver/README.md: "no Basalt crate" (kube, k8s-openapi and basalt-crds
    // are dev-dependencies only).
    Rule {
        krate: "basalt-apiserver",
        basalt: &[],
        never: &[KUBERNETES],
    },
];

/// Crates nothing may depend on (simulations/README.md, scheduler/daemon/README.md): binaries
/// at the top.
const TOPS: &[&str] = &["basalt-sim", "basalt-scheduler", "kubectl-basalt"];

struct Package {
    rust_version: Option<String>,
    /// Normal (not dev or build) dependencies.
    deps: Vec<Value>,
}

fn metadata() -> BTreeMap<String, Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    (packages.iter())
        .map(|p| {
            let deps = (p["dependencies"].as_array().into_iter().flatten())
                .filter(|d| d["kind"].is_null())
                .cloned()
                .collect();
            let package = Package {
                rust_version: p["rust_version"].as_str().map(str::to_string),
                deps,
            };
            (p["name"].as_str().unwrap().to_string(), package)
        })
        .collect()
}

fn dep_names(p: &Package) -> impl Iterator<Item = &str> {
    p.deps.iter().map(|d| d["name"].as_str().unwrap())
}

/// Every crate `krate` depends on, through the workspace's own crates (a dependency outside
/// the workspace is named, not followed).
fn reach(packages: &BTreeMap<String, Package>, krate: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![krate.to_string()];
    while let Some(k) = todo.pop() {
        for d in packages.get(&k).into_iter().flat_map(dep_names) {
            if seen.insert(d.to_string()) && packages.contains_key(d) {
                todo.push(d.to_string());
            }
        }
    }
    seen
}

/// What breaks the rules, one line each.
fn broken_rules(packages: &BTreeMap<String, Package>) -> Vec<String> {
    let mut broken = Vec::new();
    for rule in RULES {
        assert!(packages.contains_key(rule.krate), "{} is gone", rule.krate);
        for d in reach(packages, rule.krate) {
            let basalt = BASALT.contains(&d.as_str()) && !rule.basalt.contains(&d.as_str());
            let never = rule.never.iter().any(|list| list.contains(&d.as_str()));
            if basalt || never {
                broken.push(format!("{} depends on {d}", rule.krate));
            }
        }
    }
    for (name, p) in packages {
        for top in dep_names(p).filter(|d| TOPS.contains(d)) {
            broken.push(format!(
                "{name} depends on {top}, on which nothing may depend"
            ));
        }
    }
    // crds: kube for its derive only, never the client or the runtime.
    for d in &packages["basalt-crds"].deps {
        if d["name"] == "kube" {
            let features: Vec<&str> = (d["features"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            if d["uses_default_features"] != false || features != ["derive"] {
                broken.push(format!(
                    "basalt-crds takes kube with {features:?} (default features: {}), not its derive alone",
                    d["uses_default_features"]
                ));
            }
        }
    }
    broken
}

#[test]
fn every_crate_keeps_to_what_its_readme_says_it_must_not_depend_on() {
    let broken = broken_rules(&metadata());
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The check itself: a forbidden dependency is found, also through another crate.
#[test]
fn a_forbidden_dependency_is_found() {
    let mut packages = metadata();
    let dep = |name: &str| serde_json::json!({"name": name, "kind": null});
    (packages.get_mut("basalt-topology").unwrap().deps).push(dep("tokio"));
    (packages.get_mut("basalt-nodeagent").unwrap().deps).push(dep("basalt-crds"));
    (packages.get_mut("basalt-apiserver").unwrap().deps).push(dep("basalt-sim"));
    let broken = broken_rules(&packages);
    for line in [
        "basalt-topology depends on tokio",
        "basalt-engine depends on tokio",
        "basalt-nodeagent depends on basalt-engine",
        "basalt-nodeagent depends on basalt-cel",
        "basalt-apiserver depends on basalt-sim, on which nothing may depend",
    ] {
        assert!(broken.iter().any(|b| b == line), "{line}: {broken:#?}");
    }
}

#[test]
fn every_crate_inherits_the_workspace_rust_version() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let workspace = (manifest.lines())
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace states a rust-version")
        .trim_matches('"');
    let differ: Vec<String> = (metadata().into_iter())
        .filter(|(_, p)| p.rust_version.as_deref() != Some(workspace))
        .map(|(name, p)| format!("{name}: {:?}", p.rust_version))
        .collect();
    assert!(
        differ.is_empty(),
        "not the workspace's {workspace}: {differ:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Import circles
// ---------------------------------------------------------------------------------------------

/// Circles not cut yet (issue 39 names the engine's and the daemon's parts as later work):
/// crate folder and the modules, each circle sorted. A circle not listed fails the test, and
/// so does one that grew.
const KNOWN_CIRCLES: &[(&str, &[&str])] = &[
    ("nodeagent", &["backend", "fake", "mig"]),
    ("scheduler/engine", &["constraints", "devices", "model"]),
    (
        "scheduler/engine",
        &["actions", "framework", "queue_order", "session", "warm"],
    ),
    ("simulations", &["replay::native", "replay::readers"]),
    ("simulations/apiserver", &["printers", "tables"]),
    ("simulations/apiserver", &["server", "watch"]),
];

type Module = Vec<String>;

/// A source file's module path: `src/convert/pod.rs` is `convert::pod`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        m.pop();
    }
    m
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // `src/bin` holds other crates (binaries).
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.rfind('}')) else {
        return vec![path.to_string()];
    };
    if close < open {
        return Vec::new();
    }
    let (prefix, body) = (&path[..open], &path[open + 1..close]);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    (parts.into_iter().filter(|p| !p.is_empty()))
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// The `crate::`, `super::` and `self::` paths a file names (in `use` items and in code),
/// without comments and without its `#[cfg(test)] mod tests`.
fn named_paths(text: &str) -> Vec<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    let code: String = (text.lines())
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let word_start = |i: usize| {
        i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || b"_:".contains(&bytes[i - 1]))
    };
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("use ").filter(|&(i, _)| word_start(i)) {
        let item = &code[i + 4..code[i..].find(';').map_or(code.len(), |e| i + e)];
        let path: String = item.chars().filter(|c| !c.is_whitespace()).collect();
        paths.extend(expand(&path));
    }
    for prefix in ["crate::", "super::"] {
        for (i, _) in code.match_indices(prefix).filter(|&(i, _)| word_start(i)) {
            let end = code[i..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| i + e);
            paths.push(code[i..end].trim_end_matches(':').to_string());
        }
    }
    paths
}

/// The module a path names, from module `from`, among `modules`; `None` outside the crate.
fn target(from: &Module, path: &str, modules: &BTreeSet<Module>) -> Option<Module> {
    let mut segs = path.split("::").filter(|s| !s.is_empty());
    let mut base = match segs.next()? {
        "crate" => Vec::new(),
        "super" => from[..from.len().saturating_sub(1)].to_vec(),
        "self" => from.clone(),
        _ => return None,
    };
    let mut rest: Vec<&str> = segs.collect();
    while rest.first() == Some(&"super") {
        base.pop();
        rest.remove(0);
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    (0..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// A crate's import circles: within each module, its submodules that use each other (a use of
/// `a::x` from inside `b::y` counts as `b` using `a`); a module and its ancestors may use each
/// other freely.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        for path in named_paths(&text) {
            let Some(to) = target(&from, &path, &modules) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            let (a, b) = (from[..=common].to_vec(), to[..=common].to_vec());
            edges.entry(a).or_default().insert(b);
        }
    }
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            names.sort();
            names
        })
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'e> {
        edges: &'e BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'e Module, (usize, usize)>,
        stack: Vec<&'e Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'e>(s: &mut State<'e>, v: &'e Module) {
        let i = s.index.len();
        s.index.insert(v, (i, i));
        s.stack.push(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.stack.contains(&w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn crate_dirs() -> Vec<String> {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).unwrap();
    let members = &members[..members.find(']').unwrap()];
    (members.split(','))
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn no_import_circles_but_the_known_ones() {
    let mut new = Vec::new();
    for dir in crate_dirs() {
        for circle in circles(&repo().join(&dir).join("src")) {
            let known = KNOWN_CIRCLES.iter().any(|(d, modules)| {
                *d == dir && circle.iter().all(|m| modules.contains(&m.as_str()))
            });
            if !known {
                new.push(format!("{dir}: {}", circle.join(" <-> ")));
            }
        }
    }
    assert!(
        new.is_empty(),
        "modules that use each other (move what they share into its own module):\n{}",
        new.join("\n")
    );
}

/// The check itself, on a crate written for it.
#[test]
fn an_import_circle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("convert/pod")).unwrap();
    let write = |f: &str, text: &str| std::fs::write(src.join(f), text).unwrap();
    write("lib.rs", "mod convert;\nmod other;\n");
    write("other.rs", "use crate::convert::Cx;\n");
    write("convert.rs", "mod pod;\nmod devices;\nstruct Cx;\n");
    write(
        "convert/pod.rs",
        "use super::{devices::Ask, Cx};\nmod hami;\n",
    );
    write("convert/pod/hami.rs", "use super::super::Cx;\n");
    write(
        "convert/devices.rs",
        "// use super::pod::Never;\nfn f() { super::pod::hami::Lenience::new(); }\n",
    );
    assert_eq!(circles(&src), [["convert::devices", "convert::pod"]]);
    write("convert/devices.rs", "use super::Cx;\n");
    assert!(circles(&src).is_empty());
}

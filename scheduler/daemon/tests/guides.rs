//! `docs/guide/` and the files that point into it: every link inside the repository reaches a
//! file, and a `#section` a heading of it; every guide the deploy files name exists; the
//! opt-in guide states what the component does (its label, its API version).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// GitHub's anchor of a heading: lowercase, punctuation but `-` and `_` dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    (heading.trim().to_lowercase().chars())
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    (text.lines())
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect()
}

/// The targets of the Markdown links `[text](target)` in `text`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_link_of_the_guides_reaches_a_file_and_a_heading() {
    let repo = repo();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo.join("docs/guide"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.extend(["README.md", "deploy/README.md"].map(|f| repo.join(f)));
    files.sort();
    assert!(files.len() >= 12, "{files:?}");
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in links(&text) {
            assert!(
                !link.starts_with("http"),
                "{}: {link}: links stay inside the repository",
                file.display()
            );
            let (path, section) = link.split_once('#').unwrap_or((&link, ""));
            let target = match path {
                "" => file.clone(),
                p => file.parent().unwrap().join(p),
            };
            let body = std::fs::read_to_string(&target)
                .unwrap_or_else(|_| panic!("{}: {link}: no such file", file.display()));
            if !section.is_empty() {
                assert!(
                    anchors(&body).contains(section),
                    "{}: {link}: no such heading in {}",
                    file.display(),
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked} links");
}

#[test]
fn the_guides_the_deploy_files_name_exist() {
    let repo = repo();
    let named = [
        "deploy/components/monitoring/rules.yaml",
        "deploy/README.md",
    ];
    let mut seen = 0;
    for file in named {
        let text = std::fs::read_to_string(repo.join(file)).unwrap();
        for (at, _) in text.match_indices("docs/guide/") {
            let name: String = (text[at..].chars())
                .take_while(|c| c.is_alphanumeric() || "/-_.".contains(*c))
                .collect();
            let name = name.trim_end_matches('.');
            assert!(repo.join(name).is_file(), "{file}: {name} does not exist");
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen}");
}

#[test]
fn the_opt_in_guide_states_what_the_component_does() {
    let repo = repo();
    let guide = std::fs::read_to_string(repo.join("docs/guide/opt-in.md")).unwrap();
    let policy =
        std::fs::read_to_string(repo.join("deploy/components/namespace-opt-in/policy.yaml"))
            .unwrap();
    for said in [
        "scheduling.basalt.dev/enabled",
        "admissionregistration.k8s.io/v1",
    ] {
        assert!(guide.contains(said) && policy.contains(said), "{said}");
    }
    assert!(guide.contains("1.36") && guide.contains("1.34"));
}

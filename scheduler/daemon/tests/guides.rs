//! `docs/` and the files that point into it: every link inside the repository reaches a file,
//! and a `#section` a heading of it, in every Markdown file (READMEs, `docs/`, the guides); no
//! link leaves the repository; every guide the deploy files name exists; the opt-in guide
//! states what the component does (its label, its API version); the top README names the
//! workspace's `rust-version`.

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

/// The targets of the Markdown links `[text](target)` in `text`, outside fenced code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || line.trim_start().starts_with("```") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
            }
        }
    }
    out
}

/// Every Markdown file of the repository (build outputs and hidden folders left out).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The broken links of `file`: each one that leaves the repository (a URL, or a path out of
/// `repo`), names no file, or names a `#section` the file has no heading for.
fn broken_links(repo: &Path, file: &Path) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut broken = Vec::new();
    let links = links(&text);
    for link in &links {
        let at = format!(
            "{}: {link}",
            file.strip_prefix(repo).unwrap_or(file).display()
        );
        if link.contains("://") || link.starts_with("mailto:") {
            broken.push(format!("{at}: links stay inside the repository"));
            continue;
        }
        let (path, section) = link.split_once('#').unwrap_or((link, ""));
        let target = match path {
            "" => file.to_path_buf(),
            p => file.parent().unwrap().join(p),
        };
        let Ok(target) = target.canonicalize() else {
            broken.push(format!("{at}: no such file"));
            continue;
        };
        if !target.starts_with(repo) {
            broken.push(format!("{at}: outside the repository"));
            continue;
        }
        if section.is_empty() {
            continue;
        }
        match std::fs::read_to_string(&target) {
            Ok(body) if anchors(&body).contains(section) => {}
            _ => broken.push(format!(
                "{at}: no heading #{section} in {}",
                target.display()
            )),
        }
    }
    (broken, links.len())
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
        let (broken, links) = broken_links(&repo, file);
        assert!(broken.is_empty(), "{broken:#?}");
        checked += links;
    }
    assert!(checked >= 30, "{checked} links");
}

#[test]
fn every_link_of_every_markdown_file_stays_in_the_repository_and_resolves() {
    let repo = repo();
    let mut files = Vec::new();
    markdown_files(&repo, &mut files);
    files.sort();
    let readmes = files.iter().filter(|f| f.ends_with("README.md")).count();
    let docs = files
        .iter()
        .filter(|f| f.starts_with(repo.join("docs")))
        .count();
    assert!(readmes >= 16 && docs >= 16, "{files:#?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let (bad, links) = broken_links(&repo, file);
        broken.extend(bad);
        checked += links;
    }
    assert!(broken.is_empty(), "{broken:#?}");
    assert!(checked >= 60, "{checked} links");
}

#[test]
fn a_broken_link_is_found() {
    let top = std::env::temp_dir().join(format!("basalt-guides-{}", std::process::id()));
    let dir = top.join("repo");
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    let text = "[ok](docs/a.md#a-heading) [gone](docs/b.md) [no heading](docs/a.md#nope) \
                [out](https://example.com) [up](../outside.md)\n```\n[code](not/a/link.md)\n```\n";
    std::fs::write(dir.join("README.md"), text).unwrap();
    std::fs::write(dir.join("docs/a.md"), "# A heading\n").unwrap();
    std::fs::write(top.join("outside.md"), "").unwrap();
    let dir = dir.canonicalize().unwrap();
    let (broken, links) = broken_links(&dir, &dir.join("README.md"));
    std::fs::remove_dir_all(&top).unwrap();
    assert_eq!(links, 5, "{broken:#?}");
    assert_eq!(broken.len(), 4, "{broken:#?}");
    for said in [
        "docs/b.md: no such file",
        "#nope",
        "inside the repository",
        "../outside.md",
    ] {
        assert!(
            broken.iter().any(|b| b.contains(said)),
            "{said}: {broken:#?}"
        );
    }
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

#[test]
fn the_readme_names_the_workspace_rust_version() {
    let repo = repo();
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    let version = (manifest.lines())
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace states a rust-version")
        .trim_matches('"');
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let said = format!("Rust toolchain ({version} or newer)");
    assert!(readme.contains(&said), "README.md does not say {said:?}");
}

//! What `deploy/components/monitoring` reads (its dashboard's and alerts' expressions, the
//! metric names in them) and a real Prometheus to read it with: started on loopback, scraping
//! the given targets every second, the component's alerts loaded. Shared by the scheduler's
//! tests and the node agent's (`#[path]`). A test needing `prometheus` or `promtool` skips
//! with the reason printed where they are not installed, and fails instead when
//! `BASALT_REQUIRE_TOOLS` is set (CI installs them and sets it).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The component's folder, found above the calling crate.
pub fn component() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let c = dir.join("deploy/components/monitoring");
        if c.is_dir() {
            return c;
        }
        assert!(dir.pop(), "deploy/components/monitoring not found");
    }
}

/// Every dashboard panel's queries: (panel title, expression).
pub fn panels() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(component().join("dashboard.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("dashboard.json is JSON");
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("a target's expr");
            out.push((p["title"].as_str().unwrap().to_string(), expr.to_string()));
        }
    }
    out
}

/// The PrometheusRule's spec: a Prometheus rule file.
pub fn rule_groups() -> Value {
    let text = std::fs::read_to_string(component().join("rules.yaml")).unwrap();
    let rule: Value = serde_yaml::from_str(&text).expect("rules.yaml is YAML");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

/// Every alert: (name, expression).
pub fn alerts() -> Vec<(String, String)> {
    let spec = rule_groups();
    let groups = spec["groups"].as_array().expect("groups");
    (groups.iter())
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            let name = r["alert"].as_str().expect("only alerts").to_string();
            (name, r["expr"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Writes the rules where `rules.test.yaml` expects them (`rules.extracted.yaml`) in `dir`,
/// with the unit tests beside them; returns the two paths.
pub fn extract_rules(dir: &Path) -> (PathBuf, PathBuf) {
    let rules = dir.join("rules.extracted.yaml");
    std::fs::write(&rules, serde_yaml::to_string(&rule_groups()).unwrap()).unwrap();
    let tests = dir.join("rules.test.yaml");
    std::fs::copy(component().join("rules.test.yaml"), &tests).unwrap();
    (rules, tests)
}

/// Whether an expression reads the node agent's metrics (else the scheduler's).
pub fn reads_node_agent(expr: &str) -> bool {
    expr.contains("basalt_nodeagent_") || expr.contains(r#"job="basalt-nodeagent""#)
}

/// The metric names an expression reads (`basalt_*`, and `up`).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let w = &expr[start..i];
        let is_label = bytes.get(i).is_some_and(|&b| b == b'=' || b == b'!');
        if !is_label && (w.starts_with("basalt_") || w == "up") {
            out.insert(w.to_string());
        }
        if i == start {
            i += 1;
        }
    }
    out
}

/// Finds `tool` on the PATH; `None` (and the reason printed) where it is not installed and
/// `BASALT_REQUIRE_TOOLS` is unset.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = format!("`{name}` is not installed (Debian's package prometheus carries it)");
        assert!(
            std::env::var_os("BASALT_REQUIRE_TOOLS").is_none(),
            "BASALT_REQUIRE_TOOLS is set but {why}"
        );
        eprintln!("SKIPPED: {why}");
    }
    found
}

/// A Prometheus server on loopback, stopped when dropped.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A target to scrape: its job, its address, labels added to its series.
pub struct Target<'a> {
    pub job: &'a str,
    pub addr: &'a str,
    pub labels: &'a [(&'a str, &'a str)],
}

impl Prometheus {
    /// Scrapes `targets` every second and evaluates the component's alerts every second;
    /// `None` where `prometheus` is not installed.
    pub fn start(targets: &[Target]) -> Option<Prometheus> {
        let bin = tool("prometheus")?;
        let dir = tempfile::tempdir().unwrap();
        extract_rules(dir.path());
        let mut config = String::from(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n\
             rule_files: [rules.extracted.yaml]\nscrape_configs:\n",
        );
        for t in targets {
            let labels: Vec<String> = (t.labels.iter())
                .map(|(k, v)| format!("{k}: {v:?}"))
                .collect();
            config.push_str(&format!(
                "  - job_name: {}\n    static_configs: [{{targets: [{:?}], labels: {{{}}}}}]\n",
                t.job,
                t.addr,
                labels.join(", ")
            ));
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("127.0.0.1:{}", l.local_addr().unwrap().port())
        };
        let child = Command::new(bin)
            .current_dir(dir.path())
            .arg("--config.file=prometheus.yml")
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        p.wait("Prometheus to answer", || p.try_get("/-/ready").is_some());
        Some(p)
    }

    /// Polls `f` every 200 ms, for a minute at most.
    pub fn wait(&self, what: &str, mut f: impl FnMut() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "never happened within a minute: {what}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The body of a 200 answer to GET `path` (HTTP/1.0, so never chunked).
    fn try_get(&self, path: &str) -> Option<String> {
        let mut s = std::net::TcpStream::connect(&self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200").then(|| body.to_string())
    }

    /// The API's `data` for GET `path`.
    pub fn api(&self, path: &str) -> Value {
        let body = self
            .try_get(path)
            .unwrap_or_else(|| panic!("GET {path} failed"));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{v}");
        v["data"].clone()
    }

    /// An instant query's result (one entry per series).
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(expr)));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Every rule of the loaded groups: (name, health, last error, evaluated at).
    pub fn rules(&self) -> Vec<(String, String, String, String)> {
        let data = self.api("/api/v1/rules");
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        (groups.iter())
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("health"), s("lastError"), s("lastEvaluation"))
            })
            .collect()
    }

    /// Waits until every rule has been evaluated, then fails on any whose evaluation failed.
    pub fn assert_rules_evaluate(&self) {
        let never = |t: &str| t.is_empty() || t.starts_with("0001-");
        self.wait("every alert rule to be evaluated", || {
            let rules = self.rules();
            !rules.is_empty() && rules.iter().all(|r| !never(&r.3))
        });
        for (name, health, error, _) in self.rules() {
            assert!(
                health == "ok" && error.is_empty(),
                "{name}: {health}: {error}"
            );
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

//! Scenario tables: each `tests/scenarios/NAME.yaml` holds cluster manifests, and
//! `NAME.expected.yaml` the plan `basalt-sim plan` must print for them (an optional
//! `NAME.config.yaml` is passed as `--config`). Every scenario runs the real binary, end to end
//! through its public interface.
//!
//! Expected file format:
//!
//! ```yaml
//! bindings:                 # the exact set of bindings (order does not matter)
//! - {pod: ns/a, node: n1}   # `gpus: [0, 1]` checks the GPU indices too; `devices:
//!                           # [{index: 0, memoryMiB: 30000}]` each device's listed fields
//! evictions: []             # optional; exact set when given
//! nominations: []           # optional; exact set of {pod, node} when given
//! queues:                   # optional; each listed queue must match in the fields given
//! - {name: q, state: Open, share: 0.5, deserved: {nvidia.com/gpu: "8"}, allocated: {cpu: "4"}}
//! podGroups:                # each listed group must match; unlisted groups are not checked
//! - name: ns/pg
//!   phase: Running
//!   reason: NotEnoughResources     # optional: a condition with this reason must be present
//!   message: "0/2 nodes"           # optional: ... whose message contains this text
//!   noConditions: true             # optional: the group must have no condition
//!   minMember: 4                   # optional: its gang size
//! warnings:                 # optional: each must be part of a `basalt-sim: warning:` line
//! - "spec.priorityClassName"
//! claimAllocations:         # optional; exact set of DRA claims allocated, with their devices
//! - {claim: ns/c, node: n1, devices: [gpu-0, gpu-1]}   # `requests: [gpus, gpus]` too, in order
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expected {
    bindings: Vec<ExpectedBinding>,
    evictions: Option<Vec<ExpectedEviction>>,
    nominations: Option<Vec<ExpectedNomination>>,
    #[serde(default)]
    queues: Vec<ExpectedQueue>,
    #[serde(default)]
    pod_groups: Vec<ExpectedGroup>,
    #[serde(default)]
    warnings: Vec<String>,
    claim_allocations: Option<Vec<ExpectedClaim>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedClaim {
    claim: String,
    node: String,
    devices: Vec<String>,
    requests: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedNomination {
    pod: String,
    node: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedQueue {
    name: String,
    state: Option<String>,
    /// Compared to two decimals.
    share: Option<f64>,
    /// Listed resources must match exactly (Kubernetes quantity strings as the plan prints them).
    deserved: Option<std::collections::BTreeMap<String, String>>,
    allocated: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedBinding {
    pod: String,
    node: String,
    gpus: Option<Vec<u32>>,
    devices: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedEviction {
    pod: String,
    #[serde(rename = "for")]
    for_group: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExpectedGroup {
    name: String,
    phase: String,
    reason: Option<String>,
    message: Option<String>,
    #[serde(default)]
    no_conditions: bool,
    /// The gang size the plan gives it.
    min_member: Option<i64>,
}

fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// The plan `basalt-sim plan` prints, and the warnings it writes on stderr.
fn run_plan(manifest: &Path, config: Option<&Path>) -> (serde_json::Value, Vec<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt-sim"));
    // A fixed instant: waiting times in scenarios do not depend on the wall clock.
    cmd.args(["plan", "--output", "json", "--now", "2026-12-01T00:00:00Z"])
        .arg("--snapshot")
        .arg(manifest);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd.output().expect("basalt-sim runs");
    assert!(
        out.status.success(),
        "{}: basalt-sim plan failed: {}",
        manifest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let warnings = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("basalt-sim: warning: "))
        .map(str::to_string)
        .collect();
    (
        serde_json::from_slice(&out.stdout).expect("plan JSON"),
        warnings,
    )
}

fn check(
    name: &str,
    (plan, warnings): &(serde_json::Value, Vec<String>),
    expected: &Expected,
) -> Vec<String> {
    let mut problems = Vec::new();
    for want in &expected.warnings {
        if !warnings.iter().any(|w| w.contains(want.as_str())) {
            problems.push(format!(
                "{name}: no warning containing {want:?}; got {warnings:?}"
            ));
        }
    }
    let got: BTreeSet<(String, String)> = plan["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["pod"].as_str().unwrap().into(),
                b["node"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = expected
        .bindings
        .iter()
        .map(|b| (b.pod.clone(), b.node.clone()))
        .collect();
    if got != want {
        problems.push(format!(
            "{name}: bindings differ\n  expected: {want:?}\n  got:      {got:?}"
        ));
    }
    for b in &expected.bindings {
        let Some(devices) = &b.devices else { continue };
        let actual = (plan["bindings"].as_array().unwrap().iter())
            .find(|x| x["pod"] == b.pod.as_str())
            .and_then(|x| x.get("devices").and_then(|d| d.as_array()).cloned())
            .unwrap_or_default();
        let matches = actual.len() == devices.len()
            && (devices.iter().zip(&actual))
                .all(|(want, got)| want.iter().all(|(k, v)| got.get(k) == Some(v)));
        if !matches {
            problems.push(format!(
                "{name}: {} devices: expected {devices:?}, got {actual:?}",
                b.pod
            ));
        }
    }
    for b in &expected.bindings {
        let Some(gpus) = &b.gpus else { continue };
        let actual = plan["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["pod"] == b.pod.as_str())
            .map(|x| x.get("gpus").cloned().unwrap_or(serde_json::json!([])));
        if actual != Some(serde_json::json!(gpus)) {
            problems.push(format!(
                "{name}: {} gpus: expected {gpus:?}, got {actual:?}",
                b.pod
            ));
        }
    }
    if let Some(claims) = &expected.claim_allocations {
        let empty = Vec::new();
        let allocated = plan["claimAllocations"].as_array().unwrap_or(&empty);
        let field = |results: &serde_json::Value, key: &str| -> Vec<String> {
            (results.as_array().unwrap().iter())
                .map(|r| r[key].as_str().unwrap().to_string())
                .collect()
        };
        let got: BTreeSet<(String, String, Vec<String>)> = (allocated.iter())
            .map(|c| {
                let (claim, node) = (c["claim"].as_str().unwrap(), c["node"].as_str().unwrap());
                (claim.into(), node.into(), field(&c["results"], "device"))
            })
            .collect();
        let want: BTreeSet<(String, String, Vec<String>)> = (claims.iter())
            .map(|c| (c.claim.clone(), c.node.clone(), c.devices.clone()))
            .collect();
        if got != want {
            problems.push(format!(
                "{name}: claim allocations: expected {want:?}, got {got:?}"
            ));
        }
        for c in claims {
            let Some(requests) = &c.requests else {
                continue;
            };
            let actual = (allocated.iter())
                .find(|x| x["claim"] == c.claim.as_str())
                .map(|x| field(&x["results"], "request"));
            if actual.as_ref() != Some(requests) {
                problems.push(format!(
                    "{name}: {} requests: expected {requests:?}, got {actual:?}",
                    c.claim
                ));
            }
        }
    }
    if let Some(evictions) = &expected.evictions {
        let got: BTreeSet<(String, String)> = plan["evictions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["pod"].as_str().unwrap().into(),
                    e["for"].as_str().unwrap().into(),
                )
            })
            .collect();
        let want: BTreeSet<(String, String)> = evictions
            .iter()
            .map(|e| (e.pod.clone(), e.for_group.clone()))
            .collect();
        if got != want {
            problems.push(format!("{name}: evictions: expected {want:?}, got {got:?}"));
        }
    }
    if let Some(nominations) = &expected.nominations {
        let got: BTreeSet<(String, String)> = plan["nominations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["pod"].as_str().unwrap().into(),
                    n["node"].as_str().unwrap().into(),
                )
            })
            .collect();
        let want: BTreeSet<(String, String)> = nominations
            .iter()
            .map(|n| (n.pod.clone(), n.node.clone()))
            .collect();
        if got != want {
            problems.push(format!(
                "{name}: nominations: expected {want:?}, got {got:?}"
            ));
        }
    }
    for q in &expected.queues {
        let Some(actual) = plan["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == q.name.as_str())
        else {
            problems.push(format!("{name}: queue {} missing from the plan", q.name));
            continue;
        };
        if let Some(state) = &q.state {
            if actual["state"] != state.as_str() {
                problems.push(format!(
                    "{name}: queue {} state: expected {state}, got {}",
                    q.name, actual["state"]
                ));
            }
        }
        if let Some(share) = q.share {
            let got = actual["share"].as_f64().unwrap_or(f64::NAN);
            if (got - share).abs() > 0.005 {
                problems.push(format!(
                    "{name}: queue {} share: expected {share}, got {got}",
                    q.name
                ));
            }
        }
        for (field, want) in [("deserved", &q.deserved), ("allocated", &q.allocated)] {
            let Some(want) = want else { continue };
            for (resource, quantity) in want {
                let got = actual[field]
                    .get(resource)
                    .and_then(|v| v.as_str())
                    .unwrap_or("0");
                if got != quantity {
                    problems.push(format!(
                        "{name}: queue {} {field}[{resource}]: expected {quantity}, got {got}",
                        q.name
                    ));
                }
            }
        }
    }
    for g in &expected.pod_groups {
        let Some(actual) = plan["podGroups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == g.name.as_str())
        else {
            problems.push(format!("{name}: PodGroup {} missing from the plan", g.name));
            continue;
        };
        if actual["phase"] != g.phase.as_str() {
            problems.push(format!(
                "{name}: {} phase: expected {}, got {}",
                g.name, g.phase, actual["phase"]
            ));
        }
        if g.min_member.is_some_and(|m| actual["minMember"] != m) {
            problems.push(format!(
                "{name}: {} minMember: expected {:?}, got {}",
                g.name, g.min_member, actual["minMember"]
            ));
        }
        let conditions = actual
            .get("conditions")
            .and_then(|c| c.as_array())
            .cloned()
            .unwrap_or_default();
        if g.no_conditions && !conditions.is_empty() {
            problems.push(format!("{name}: {} has conditions {conditions:?}", g.name));
        }
        if g.reason.is_some() || g.message.is_some() {
            let hit = conditions.iter().any(|c| {
                g.reason.as_ref().is_none_or(|r| c["reason"] == r.as_str())
                    && g.message
                        .as_ref()
                        .is_none_or(|m| c["message"].as_str().unwrap_or("").contains(m.as_str()))
            });
            if !hit {
                problems.push(format!(
                    "{name}: {}: no condition with reason {:?} and message containing {:?}; got {conditions:?}",
                    g.name, g.reason, g.message
                ));
            }
        }
    }
    problems
}

#[test]
fn scenarios() {
    let dir = scenario_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".yaml")?;
            (!stem.contains('.')).then(|| stem.to_string())
        })
        .collect();
    names.sort();
    assert!(names.len() >= 20, "only {} scenarios", names.len());
    let mut problems = Vec::new();
    for name in &names {
        let manifest = dir.join(format!("{name}.yaml"));
        let expected_path = dir.join(format!("{name}.expected.yaml"));
        let config = dir.join(format!("{name}.config.yaml"));
        let text = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        let expected: Expected = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        let plan = run_plan(&manifest, config.exists().then_some(config.as_path()));
        problems.extend(check(name, &plan, &expected));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

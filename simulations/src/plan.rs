//! `basalt-sim plan`: one cycle over a cluster dump, rendered for a person (text) or a program
//! (JSON, YAML).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use basalt_crds::convert::{usage_effect_message, usage_status};
use basalt_engine::{Plan, QueueUsage, Snapshot};
use basalt_plugins::Config;

/// The example cluster shipped in `examples/cluster.yaml`, planned when no snapshot is given.
pub const EXAMPLE_CLUSTER: &str = include_str!("../../examples/cluster.yaml");
pub const EXAMPLE_LABEL: &str = "examples/cluster.yaml (built in)";

/// Reads and validates a scheduler config; errors name the file and the field.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let label = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("{label}: cannot read"))?;
    parse_config(&label.to_string(), &text)
}

pub fn parse_config(label: &str, text: &str) -> anyhow::Result<Config> {
    basalt_crds::limits::check(label, text)?;
    Config::from_yaml(label, text).map_err(anyhow::Error::msg)
}

/// The snapshot `plan` schedules and the warnings on the way: the built-in example without
/// files; else the files as the scheduler reads a cluster (each object that cannot be read or
/// converted left out, with an error on stderr), or with `strict` refused at the first one.
pub fn load(
    files: &[std::path::PathBuf],
    options: &basalt_crds::ConvertOptions,
    strict: bool,
) -> anyhow::Result<(Snapshot, Vec<String>)> {
    if files.is_empty() {
        eprintln!("basalt-sim: no --snapshot given; planning {EXAMPLE_LABEL}");
        let loaded = basalt_crds::read_objects(EXAMPLE_LABEL, EXAMPLE_CLUSTER)?;
        let snapshot = basalt_crds::build_snapshot(&loaded.objects, options)?;
        return Ok((snapshot, loaded.warnings));
    }
    if strict {
        return Ok(basalt_crds::load_files(files, options)?);
    }
    let load = basalt_crds::load_files_lenient(files, options)?;
    for e in &load.errors {
        eprintln!("basalt-sim: error: {e} (left out)");
    }
    let snapshot = load
        .snapshot
        .context("no snapshot: the engine refused the cluster as a whole")?;
    Ok((snapshot, load.warnings))
}

/// What a binding takes of each of its devices, compactly: `30000MiB 25%` for a share (the
/// same on each device), `replica` for time-sliced replicas, `1g.10gb@4` for a MIG instance
/// on GPU 4, empty for whole devices.
fn share(snapshot: &Snapshot, b: &basalt_engine::Binding) -> String {
    let slices: Vec<String> = (b.devices.iter())
        .filter_map(|d| Some(format!("{}@{}", d.mig.as_ref()?.profile, d.index)))
        .collect();
    if !slices.is_empty() {
        return slices.join(",");
    }
    let Some(d) = b.devices.first() else {
        return String::new();
    };
    let node = snapshot.nodes.iter().find(|n| n.name == b.node);
    let total = node
        .and_then(|n| n.gpus.iter().find(|g| g.index == d.index))
        .and_then(|g| g.memory_mib);
    match (d.memory_mib, d.cores) {
        (m, Some(100)) if m.map(u64::from) == total => String::new(),
        (None, None) => "replica".into(),
        (Some(m), None) => format!("{m}MiB"),
        (None, Some(c)) => format!("{c}%"),
        (Some(m), Some(c)) => format!("{m}MiB {c}%"),
    }
}

/// A plain-text table: bindings, evictions, then every PodGroup with its phase and, while pods
/// wait, the aggregated reason.
pub fn render_text(snapshot: &Snapshot, plan: &Plan) -> String {
    let mut out = String::new();
    let pending = snapshot
        .tasks
        .iter()
        .filter(|t| t.state == basalt_engine::TaskState::Pending)
        .count();
    let _ = writeln!(
        out,
        "Cluster: {} nodes, {} Basalt pods ({} pending), {} pods of other schedulers, {} PodGroups\n",
        snapshot.nodes.len(),
        snapshot.tasks.len(),
        pending,
        snapshot.foreign_pods,
        snapshot.jobs.len()
    );
    let _ = writeln!(out, "BINDINGS ({})", plan.bindings.len());
    if !plan.bindings.is_empty() {
        let rows: Vec<[String; 4]> = plan
            .bindings
            .iter()
            .map(|b| {
                let gpus: Vec<String> = b.gpus.iter().map(u32::to_string).collect();
                [
                    b.pod.clone(),
                    b.node.clone(),
                    gpus.join(","),
                    share(snapshot, b),
                ]
            })
            .collect();
        table(&mut out, ["POD", "NODE", "GPUS", "SHARE"], &rows);
    }
    if !plan.claim_allocations.is_empty() {
        let _ = writeln!(out, "\nCLAIMS ({})", plan.claim_allocations.len());
        let rows: Vec<[String; 4]> = (plan.claim_allocations.iter())
            .map(|c| {
                let devices: Vec<String> = (c.results.iter())
                    .map(|r| format!("{}={}/{}/{}", r.request, r.driver, r.pool, r.device))
                    .collect();
                [
                    c.claim.clone(),
                    c.pod.clone(),
                    c.node.clone(),
                    devices.join(","),
                ]
            })
            .collect();
        table(&mut out, ["CLAIM", "POD", "NODE", "DEVICES"], &rows);
    }
    let _ = writeln!(out, "\nEVICTIONS ({})", plan.evictions.len());
    if !plan.evictions.is_empty() {
        let rows: Vec<[String; 4]> = plan
            .evictions
            .iter()
            .map(|e| {
                [
                    e.pod.clone(),
                    e.node.clone(),
                    e.reason.clone(),
                    e.for_group.clone(),
                ]
            })
            .collect();
        table(&mut out, ["POD", "NODE", "REASON", "FOR"], &rows);
    }
    let _ = writeln!(out, "\nNOMINATIONS ({})", plan.nominations.len());
    if !plan.nominations.is_empty() {
        let rows: Vec<[String; 2]> = plan
            .nominations
            .iter()
            .map(|n| [n.pod.clone(), n.node.clone()])
            .collect();
        table(&mut out, ["POD", "NODE"], &rows);
    }
    let _ = writeln!(out, "\nPODGROUPS ({})", plan.pod_groups.len());
    let rows: Vec<[String; 5]> = plan
        .pod_groups
        .iter()
        .map(|g| {
            let reason = g
                .conditions
                .iter()
                .map(|c| format!("{}: {}", c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ");
            [
                g.name.to_string(),
                g.phase.as_str().to_string(),
                format!("{}/{}", g.running + g.succeeded, g.min_member),
                g.pending.to_string(),
                reason,
            ]
        })
        .collect();
    table(
        &mut out,
        ["NAME", "PHASE", "READY/MIN", "PENDING", "REASON"],
        &rows,
    );
    let _ = writeln!(out, "\nQUEUES ({})", plan.queues.len());
    let list = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let rows: Vec<[String; 6]> = plan
        .queues
        .iter()
        .map(|q| {
            [
                q.name.clone(),
                q.parent.clone().unwrap_or_else(|| "root".into()),
                format!("{:?}", q.state),
                format!("{:.2}", q.share),
                list(&q.allocated),
                list(&q.deserved),
            ]
        })
        .collect();
    let header = ["NAME", "PARENT", "STATE", "SHARE", "ALLOCATED", "DESERVED"];
    // With a usage half-life: what each queue used (as its status writes it) and the part of
    // its siblings' weight it has once adjusted by usage.
    if plan.usage.is_empty() {
        table(&mut out, header, &rows);
    } else {
        let rows: Vec<[String; 8]> = (rows.into_iter().zip(&plan.queues))
            .map(|(row, q)| {
                let usage = usage_status(&QueueUsage {
                    used: q.usage.clone(),
                    ..QueueUsage::default()
                });
                let used = (usage.resources.iter())
                    .map(|(k, v)| format!("{k}={}", v.0))
                    .collect::<Vec<_>>()
                    .join(",");
                let weight = q.usage_weight.map_or("-".into(), |w| format!("{w:.3}"));
                let [a, b, c, d, e, f] = row;
                [a, b, c, d, e, f, used, weight]
            })
            .collect();
        let [a, b, c, d, e, f] = header;
        table(&mut out, [a, b, c, d, e, f, "USAGE", "USAGE-WEIGHT"], &rows);
        // The effect, one line a queue, worded as Queue status words it.
        for q in &plan.queues {
            if let Some(effect) = &q.usage_effect {
                let _ = writeln!(out, "{}: {}", q.name, usage_effect_message(effect));
            }
        }
    }
    out
}

/// The explanations `plan --explain` asked for, as text; an error names a job the snapshot
/// does not have.
pub fn explained(snapshot: &Snapshot, plan: &Plan, jobs: &[String]) -> anyhow::Result<String> {
    let mut out = String::new();
    for name in jobs {
        if !snapshot.jobs.iter().any(|j| *j.name == **name) {
            anyhow::bail!("--explain {name}: no such job (PodGroup, or pod without one)");
        }
        let _ = writeln!(out, "\nWHY {name}");
        let group = plan.pod_groups.iter().find(|g| *g.name == **name);
        match group.and_then(|g| g.explanation.as_deref()) {
            Some(e) => out.push_str(&e.report()),
            None => {
                let phase = group.map_or("settled", |g| g.phase.as_str());
                let _ = writeln!(out, "Not waiting ({phase}).");
            }
        }
    }
    Ok(out)
}

fn table<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    let mut width = header.map(str::len);
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: [&str; N]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ", w = width[i]);
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(out, header);
    for row in rows {
        line(out, std::array::from_fn(|i| row[i].as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deeply_nested_config_is_refused_before_parsing() {
        // 60 s in the YAML parser before the limit (issue 13, defect 6).
        let text = format!("tiers: {}\n", "[".repeat(200_000));
        let err = parse_config("deep.yaml", &text).unwrap_err().to_string();
        assert_eq!(
            err,
            "deep.yaml: line 1: nested more than 64 deep, the limit"
        );
    }
}

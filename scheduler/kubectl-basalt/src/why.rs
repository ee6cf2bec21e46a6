//! `kubectl basalt why NAMESPACE/JOB`: the whole explanation the scheduler wrote for one job.

use std::fmt::Write as _;

use basalt_crds::PodGroup;
use kube::{Api, Client};
use serde_json::json;

use crate::jobs::estimated_start;
use crate::objects::{explanation, unschedulable};
use crate::table::structured;
use crate::Format;

pub async fn run(client: &Client, ns: &str, name: &str, format: Format) -> anyhow::Result<String> {
    let api: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let group = (api.get_opt(name).await)
        .map_err(|e| anyhow::anyhow!("cannot read PodGroup {ns}/{name}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("PodGroup {ns}/{name} not found"))?;
    let status = group.status.clone().unwrap_or_default();
    let e = explanation(&group);
    let value = json!({
        "name": format!("{ns}/{name}"),
        "phase": status.phase,
        "running": status.running,
        "minMember": group.spec.min_member,
        "conditions": status.conditions,
        "explanation": status.explanation,
        "forecast": status.forecast,
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PodGroup {ns}/{name}: {:?}, {}/{} running",
        status.phase, status.running, group.spec.min_member
    );
    if let Some((reason, message)) = unschedulable(&group) {
        let _ = writeln!(out, "{:<10} {reason}: {message}", "Reason:");
    }
    match &e {
        Some(e) => out.push_str(&e.report()),
        None => {
            let _ = writeln!(out, "Not waiting: the scheduler has no explanation for it.");
        }
    }
    if let Some(f) = &status.forecast {
        let _ = writeln!(
            out,
            "{:<10} {}, computed at {}",
            "Forecast:",
            estimated_start(f),
            f.computed_at
        );
    }
    structured(format, &value, out)
}

//! `kubectl basalt jobs`: PodGroups with their state, place in their queue and why they wait.

use basalt_crds::{PodGroup, PodGroupForecast};
use kube::Client;
use serde::Serialize;

use crate::objects::{explanation, key, list, queue_of, unschedulable};
use crate::table::{structured, table};
use crate::Format;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    name: String,
    queue: String,
    phase: String,
    running: i32,
    min_member: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<(u32, u32)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    forecast: Option<PodGroupForecast>,
}

pub async fn run(
    client: &Client,
    namespace: Option<&str>,
    queue: Option<&str>,
    format: Format,
) -> anyhow::Result<String> {
    let groups: Vec<PodGroup> = list(client, namespace).await?;
    let mut rows: Vec<Row> = (groups.iter())
        .map(|g| {
            let e = explanation(g);
            let status = g.status.clone().unwrap_or_default();
            Row {
                name: key(g.metadata.namespace.as_deref(), g.metadata.name.as_deref()),
                queue: (e.as_ref().map(|e| e.position.queue.clone()))
                    .unwrap_or_else(|| queue_of(g)),
                phase: format!("{:?}", status.phase),
                running: status.running,
                min_member: g.spec.min_member,
                position: e
                    .as_ref()
                    .map(|e| (e.position.in_queue, e.position.queue_length)),
                verdict: e.as_ref().map(|e| e.verdict.as_str().to_string()),
                reason: unschedulable(g).map(|(reason, _)| reason),
                forecast: status.forecast,
            }
        })
        .filter(|r| queue.is_none_or(|q| r.queue == q))
        .collect();
    rows.sort_by(|a, b| {
        (a.queue.cmp(&b.queue))
            .then(a.position.is_none().cmp(&b.position.is_none()))
            .then(a.position.cmp(&b.position))
            .then(a.name.cmp(&b.name))
    });
    let cells: Vec<Vec<String>> = (rows.iter())
        .map(|r| {
            vec![
                r.name.clone(),
                r.queue.clone(),
                r.phase.clone(),
                format!("{}/{}", r.running, r.min_member),
                (r.position).map_or(String::new(), |(i, n)| format!("{i}/{n}")),
                r.reason.clone().unwrap_or_default(),
                r.forecast.as_ref().map_or(String::new(), estimated_start),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "QUEUE",
        "PHASE",
        "RUNNING",
        "POSITION",
        "REASON",
        "ESTIMATED START",
    ];
    structured(format, &rows, table(&header, &cells))
}

/// `2026-01-01T10:00:00Z (exact)`, or `unknown` when the forecast cannot bound it.
pub fn estimated_start(f: &PodGroupForecast) -> String {
    match &f.start {
        Some(start) => format!("{start} ({})", f.method),
        None => f.method.clone(),
    }
}

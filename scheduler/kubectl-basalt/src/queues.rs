//! `kubectl basalt queues`: the queue tree with each queue's weight, state, deserved,
//! allocated, share, pending demand and jobs, as the scheduler last wrote them.

use std::collections::BTreeMap;

use basalt_crds::Queue;
use kube::Client;
use serde::Serialize;

use crate::objects::list;
use crate::table::{structured, table};
use crate::Format;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    depth: usize,
    weight: u32,
    state: String,
    deserved: BTreeMap<String, String>,
    allocated: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    share: Option<f64>,
    pending: BTreeMap<String, String>,
    running_jobs: i32,
    waiting_jobs: i32,
}

fn strings(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> BTreeMap<String, String> {
    list.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

/// Pod slots left out: every queue may use them all.
fn one_line(list: &BTreeMap<String, String>) -> String {
    (list.iter())
        .filter(|(k, _)| k.as_str() != basalt_engine::PODS_NAME)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The queues in tree order (each parent before its children, siblings by name), with their
/// depth; a queue whose parent is not listed counts as a root.
fn tree(queues: &[Queue]) -> Vec<(&Queue, usize)> {
    let name = |q: &Queue| q.metadata.name.clone().unwrap_or_default();
    let names: Vec<String> = queues.iter().map(name).collect();
    let parent_of = |q: &Queue| {
        (q.spec.parent.clone())
            .filter(|p| p != "root" && names.contains(p))
            .unwrap_or_default()
    };
    let mut children: BTreeMap<String, Vec<&Queue>> = BTreeMap::new();
    for q in queues {
        children.entry(parent_of(q)).or_default().push(q);
    }
    for list in children.values_mut() {
        list.sort_by_key(|q| name(q));
    }
    let mut out = Vec::new();
    let mut stack: Vec<(&Queue, usize)> = (children.get("").into_iter().flatten().rev())
        .map(|&q| (q, 0))
        .collect();
    while let Some((q, depth)) = stack.pop() {
        out.push((q, depth));
        for &c in children.get(&name(q)).into_iter().flatten().rev() {
            stack.push((c, depth + 1));
        }
    }
    out
}

pub async fn run(client: &Client, format: Format) -> anyhow::Result<String> {
    let queues: Vec<Queue> = list(client, None).await?;
    let rows: Vec<Row> = (tree(&queues).into_iter())
        .map(|(q, depth)| {
            let status = q.status.clone().unwrap_or_default();
            Row {
                name: q.metadata.name.clone().unwrap_or_default(),
                parent: q.spec.parent.clone(),
                depth,
                weight: q.spec.weight,
                state: format!("{:?}", q.spec.state.unwrap_or(status.state)),
                deserved: strings(&status.deserved),
                allocated: strings(&status.allocated),
                share: status.share,
                pending: strings(&status.demand),
                running_jobs: status.running.unwrap_or(0),
                waiting_jobs: status.pending.unwrap_or(0) + status.inqueue.unwrap_or(0),
            }
        })
        .collect();
    let cells: Vec<Vec<String>> = (rows.iter())
        .map(|r| {
            vec![
                format!("{}{}", "  ".repeat(r.depth), r.name),
                r.weight.to_string(),
                r.state.clone(),
                one_line(&r.deserved),
                one_line(&r.allocated),
                r.share.map_or(String::new(), |s| format!("{s:.2}")),
                one_line(&r.pending),
                format!("{}/{}", r.running_jobs, r.waiting_jobs),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "WEIGHT",
        "STATE",
        "DESERVED",
        "ALLOCATED",
        "SHARE",
        "PENDING",
        "RUNNING/WAITING",
    ];
    structured(format, &rows, table(&header, &cells))
}

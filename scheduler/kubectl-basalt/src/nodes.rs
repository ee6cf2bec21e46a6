//! `kubectl basalt top nodes`: GPUs per node and per topology domain, used (requests of the
//! pods bound there that have not finished) and free.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use serde::Serialize;

use crate::objects::list;
use crate::table::{structured, table};
use crate::Format;

#[derive(Serialize, Default, Clone)]
struct Gpus {
    gpus: i64,
    used: i64,
    free: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeRow {
    name: String,
    /// Per tier label the node has, coarse to fine: its domain.
    domains: Vec<At>,
    #[serde(flatten)]
    gpus: Gpus,
}

#[derive(Serialize)]
struct At {
    tier: String,
    domain: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DomainRow {
    tier: String,
    name: String,
    nodes: usize,
    #[serde(flatten)]
    gpus: Gpus,
}

#[derive(Serialize)]
struct Report {
    domains: Vec<DomainRow>,
    nodes: Vec<NodeRow>,
}

/// Whole GPUs in a resource list: the entries named `<vendor>/gpu`.
fn gpus_in(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    (list.into_iter().flatten())
        .filter(|(k, _)| k.ends_with("/gpu"))
        .filter_map(|(_, q)| q.0.parse::<i64>().ok())
        .sum()
}

/// A pod's GPUs: each container's request, else its limit (what the scheduler counts).
fn pod_gpus(p: &Pod) -> i64 {
    (p.spec.iter().flat_map(|s| &s.containers))
        .map(|c| {
            let r = c.resources.as_ref();
            let requests = gpus_in(r.and_then(|r| r.requests.as_ref()));
            if requests > 0 {
                requests
            } else {
                gpus_in(r.and_then(|r| r.limits.as_ref()))
            }
        })
        .sum()
}

pub async fn run(client: &Client, tiers: Vec<String>, format: Format) -> anyhow::Result<String> {
    let tiers = if tiers.is_empty() {
        let defaults = basalt_plugins::Config::default().topology.tiers;
        defaults.into_iter().map(|t| t.node_label).collect()
    } else {
        tiers
    };
    let nodes: Vec<Node> = list(client, None).await?;
    let pods: Vec<Pod> = list(client, None).await?;
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in &pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        if let (Some(node), false) = (node, matches!(phase, Some("Succeeded" | "Failed"))) {
            *used.entry(node).or_default() += pod_gpus(p);
        }
    }
    let mut rows = Vec::new();
    let mut domains: BTreeMap<(usize, String), (usize, Gpus)> = BTreeMap::new();
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let gpus = gpus_in(n.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        let u = used.get(&name).copied().unwrap_or(0);
        let g = Gpus {
            gpus,
            used: u,
            free: (gpus - u).max(0),
        };
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let mut at = Vec::new();
        for (i, label) in tiers.iter().enumerate() {
            let Some(value) = labels.get(label) else {
                continue;
            };
            at.push(At {
                tier: label.clone(),
                domain: value.clone(),
            });
            let d = domains.entry((i, value.clone())).or_default();
            d.0 += 1;
            d.1.gpus += g.gpus;
            d.1.used += g.used;
            d.1.free += g.free;
        }
        rows.push(NodeRow {
            name,
            domains: at,
            gpus: g,
        });
    }
    let report = Report {
        domains: (domains.into_iter())
            .map(|((i, name), (nodes, gpus))| DomainRow {
                tier: tiers[i].clone(),
                name,
                nodes,
                gpus,
            })
            .collect(),
        nodes: rows,
    };
    let mut text = String::new();
    if !report.domains.is_empty() {
        let cells: Vec<Vec<String>> = (report.domains.iter())
            .map(|d| {
                vec![
                    d.tier.clone(),
                    d.name.clone(),
                    d.nodes.to_string(),
                    d.gpus.gpus.to_string(),
                    d.gpus.used.to_string(),
                    d.gpus.free.to_string(),
                ]
            })
            .collect();
        let header = ["TIER", "DOMAIN", "NODES", "GPUS", "USED", "FREE"];
        text.push_str(&table(&header, &cells));
        text.push('\n');
    }
    let cells: Vec<Vec<String>> = (report.nodes.iter())
        .map(|n| {
            let at: Vec<&str> = n.domains.iter().map(|a| a.domain.as_str()).collect();
            vec![
                n.name.clone(),
                at.join("/"),
                n.gpus.gpus.to_string(),
                n.gpus.used.to_string(),
                n.gpus.free.to_string(),
            ]
        })
        .collect();
    text.push_str(&table(&["NODE", "DOMAIN", "GPUS", "USED", "FREE"], &cells));
    structured(format, &report, text)
}

//! Publishing: one reconcile round against the API server ([`reconcile_once`]) and the pure
//! functions that decide what it writes ([`node_label_patch`], [`desired_topology`]), which the
//! unit tests check without a server.

use std::collections::BTreeMap;

use basalt_crd_types::{NodeTopology, PodGroupCondition};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Map, Value};
use thiserror::Error;

use crate::backend::{BackendError, GpuBackend};
use crate::device_plugin;
use crate::discover::{discover, DiscoverError, Discovery};
use crate::layout_status;
use crate::mig::applier::{self, Outcome};
use crate::mig::config::{self, MIG_CONFIG_LABEL};
use crate::relayout_status;
use crate::timeslice::{self, LabelChange};
use crate::timeslice_config;

// What a round is given and reports, where callers have always found it.
pub use crate::round::{kube_words, AgentConfig, ConfigMapRef, Report, Write, FIELD_MANAGER};

/// The label of NVIDIA's GPU operator that names the node's multi-node NVLink clique.
pub const CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";
/// Set on the Node when the clique label is the agent's, so it never overwrites the operator's.
pub const CLIQUE_OWNER_ANNOTATION: &str = "scheduling.basalt.dev/clique-label-owner";

/// What ends a round: a read it cannot do without (the Node), the GPUs. A failing write never
/// does; it is an error in the report.
#[derive(Debug, Error)]
pub enum ReconcileError {
    /// In words ([`kube_words`]), without a source: kube's own text already repeats it.
    #[error("{what}: {detail}")]
    Kube { what: String, detail: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("GPU report: {0}")]
    Discover(#[from] DiscoverError),
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let what = what.into();
    move |e| ReconcileError::Kube {
        what,
        detail: kube_words(&e),
    }
}

/// The NodeTopology the agent wants for `node`: the discovery, owned by the Node so it goes
/// when the Node does.
pub fn desired_topology(node: &Node, d: &Discovery, replicas: Option<u32>) -> NodeTopology {
    let name = node.metadata.name.clone().unwrap_or_default();
    let mut t = d.node_topology(&name, replicas);
    if let Some(uid) = &node.metadata.uid {
        t.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name,
            uid: uid.clone(),
            ..Default::default()
        }]);
    }
    t
}

/// The JSON merge patch of the Node's labels and annotations, or `None` when nothing changes.
/// The clique label is set only when absent or when this agent set it before (its annotation
/// says so), and removed only then.
pub fn node_label_patch(
    node: &Node,
    clique: Option<&str>,
    device_plugin: &LabelChange,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let ours = annotations.get(CLIQUE_OWNER_ANNOTATION).map(String::as_str) == Some(FIELD_MANAGER);
    let mut l = Map::new();
    let mut a = Map::new();
    match (labels.get(CLIQUE_LABEL), clique) {
        (None, Some(c)) => {
            l.insert(CLIQUE_LABEL.into(), c.into());
            a.insert(CLIQUE_OWNER_ANNOTATION.into(), FIELD_MANAGER.into());
        }
        (Some(cur), Some(c)) if ours && cur != c => {
            l.insert(CLIQUE_LABEL.into(), c.into());
        }
        (Some(_), None) if ours => {
            l.insert(CLIQUE_LABEL.into(), Value::Null);
            a.insert(CLIQUE_OWNER_ANNOTATION.into(), Value::Null);
        }
        _ => {}
    }
    match device_plugin {
        LabelChange::Set(v) => {
            l.insert(
                timeslice::DEVICE_PLUGIN_CONFIG_LABEL.into(),
                v.as_str().into(),
            );
        }
        LabelChange::Remove => {
            l.insert(timeslice::DEVICE_PLUGIN_CONFIG_LABEL.into(), Value::Null);
        }
        LabelChange::Leave => {}
    }
    if l.is_empty() && a.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    if !l.is_empty() {
        meta.insert("labels".into(), Value::Object(l));
    }
    if !a.is_empty() {
        meta.insert("annotations".into(), Value::Object(a));
    }
    Some(json!({ "metadata": meta }))
}

/// One round: read the node and the GPUs, reconcile MIG and time-slicing with the node's labels,
/// write the NodeTopology and the node's labels. Errors in the wanted state are reported and the
/// rest goes on; API and backend failures end the round.
pub async fn reconcile_once(
    client: &Client,
    backend: &dyn GpuBackend,
    cfg: &AgentConfig,
) -> Result<Report, ReconcileError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get(&cfg.node_name)
        .await
        .map_err(kube_err(format!("reading Node {}", cfg.node_name)))?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut report = Report {
        node: cfg.node_name.clone(),
        ..Default::default()
    };

    let mut raw = backend.report()?;
    let instances_before = device_plugin::instances(&raw.gpus);
    let mut discovery = discover(&raw)?;
    let topologies: Api<NodeTopology> = Api::all(client.clone());
    let mut current = topologies
        .get_opt(&cfg.node_name)
        .await
        .map_err(kube_err(format!("reading NodeTopology {}", cfg.node_name)))?;
    // GPUs the scheduler lays out are not the label's.
    let owned = relayout_status::owned_gpus(current.as_ref());

    // MIG. A layout that cannot be read, or fits no GPU it selects, is reported on the node
    // (condition, Event) and the round goes on.
    let mut layout_problem: Option<String> = None;
    let mut layout = labels.get(MIG_CONFIG_LABEL);
    if cfg.no_mig {
        if let Some(l) = layout.take() {
            report.warnings.push(format!(
                "node label {MIG_CONFIG_LABEL}={l:?} ignored: MIG changes are off (--no-mig)"
            ));
        }
    }
    if let Some(layout) = layout {
        report.mig_layout = Some(layout.clone());
        match mig_wants(client, cfg, layout, &raw.gpus).await {
            Ok(mut wants) => {
                wants.retain(|gpu, _| !owned.contains(gpu));
                let problems = applier::layout_problems(&raw.gpus, &wants);
                if !problems.is_empty() {
                    layout_problem = Some(problems.join("; "));
                    report.errors.extend(problems);
                }
                let steps = applier::plan_steps(&raw.gpus, &wants);
                let applied = applier::apply(backend, &raw.gpus, steps, cfg.dry_run);
                let changed = applied.iter().any(|s| s.outcome == Outcome::Done);
                for s in &applied {
                    if let Outcome::Failed(e) = &s.outcome {
                        report.errors.push(format!("{}: {e}", s.step));
                    }
                }
                report.mig_steps = applied;
                if changed {
                    raw = backend.report()?;
                    discovery = discover(&raw)?;
                }
            }
            Err(e) => {
                report.errors.push(e.clone());
                layout_problem = Some(e);
            }
        }
    }

    // The scheduler's MIG layouts (NodeTopology spec.migLayouts).
    let relaid = relayout_status::reconcile(
        client,
        backend,
        cfg,
        current.as_ref(),
        &raw.gpus,
        &mut report,
    )
    .await;
    if relaid.touched {
        raw = backend.report()?;
        discovery = discover(&raw)?;
    }
    if relaid.wrote {
        current = topologies
            .get_opt(&cfg.node_name)
            .await
            .map_err(kube_err(format!("reading NodeTopology {}", cfg.node_name)))?;
    }

    // Time-slicing: the node's own key of the device plugin's ConfigMap.
    let ts_change = timeslice_config::reconcile(client, cfg, &labels, &mut report).await;

    // NodeTopology, then the layout's condition in its status (and an Event when it turns bad).
    let desired = desired_topology(&node, &discovery, report.time_slice_replicas);
    match write_topology(client, cfg, &desired, current).await {
        Ok((write, conditions)) => {
            report.topology = Some(write);
            report.mig_layout_valid = layout.map(|_| layout_problem.is_none());
            let wanted = layout.map(|l| {
                layout_status::layout_condition(l, layout_problem.as_deref(), &layout_status::now())
            });
            layout_status::report_on_node(
                client,
                &node,
                &conditions,
                wanted,
                cfg.dry_run,
                &mut report,
            )
            .await;
        }
        // Without the stored condition no Event either: it is what keeps one from repeating.
        Err(e) => report.errors.push(e),
    }

    // Node labels.
    let patch = node_label_patch(&node, discovery.clique_id.as_deref(), &ts_change);
    match label_node(&nodes, cfg, patch).await {
        Ok(w) => report.node_labels = Some(w),
        Err(e) => report.errors.push(e),
    }

    report.mig_instances_changed = device_plugin::instances(&raw.gpus) != instances_before;
    report.gpus = discovery.gpus.len();
    report.islands = discovery.islands.clone();
    report.clique_id = discovery.clique_id.clone();
    report.warnings.extend(discovery.warnings);
    Ok(report)
}

/// Reads the mig-parted config and resolves the layout for this node's GPUs. Errors are text for
/// the report: a missing ConfigMap or layout is the operator's to fix, not a reason to stop.
async fn mig_wants(
    client: &Client,
    cfg: &AgentConfig,
    layout: &str,
    gpus: &[crate::raw::RawGpu],
) -> Result<BTreeMap<u32, config::GpuWant>, String> {
    let r = &cfg.mig_config_map;
    let source = format!("ConfigMap {r} key {}", cfg.mig_config_key);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &r.namespace);
    let cm = cms
        .get_opt(&r.name)
        .await
        .map_err(|e| format!("reading ConfigMap {r}: {}", kube_words(&e)))?
        .ok_or_else(|| {
            format!("node label {MIG_CONFIG_LABEL}={layout:?}, but ConfigMap {r} does not exist")
        })?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(&cfg.mig_config_key))
        .ok_or_else(|| format!("{source}: no such key"))?;
    let parsed = config::parse(&source, text).map_err(|e| e.to_string())?;
    config::wanted_for_gpus(&source, &parsed, layout, gpus).map_err(|e| e.to_string())
}

/// Creates or replaces the NodeTopology (`current`, as read at the round's start) when it
/// differs from `desired`; returns what it did and the conditions stored in its status. An error is text for the report.
async fn write_topology(
    client: &Client,
    cfg: &AgentConfig,
    desired: &NodeTopology,
    current: Option<NodeTopology>,
) -> Result<(Write, Vec<PodGroupCondition>), String> {
    let topologies: Api<NodeTopology> = Api::all(client.clone());
    let name = &cfg.node_name;
    let failed = |doing: &'static str| {
        move |e: kube::Error| format!("{doing} NodeTopology {name}: {}", kube_words(&e))
    };
    // The scheduler's wanted layouts are its own: carried over, never replaced.
    let mut desired = desired.clone();
    if let Some(cur) = &current {
        desired.spec.mig_layouts = cur.spec.mig_layouts.clone();
    }
    let conditions = current
        .as_ref()
        .and_then(|t| t.status.as_ref())
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let write = match current {
        None if cfg.dry_run => Write::DryRun,
        None => {
            topologies
                .create(&PostParams::default(), &desired)
                .await
                .map_err(failed("creating"))?;
            Write::Created
        }
        Some(cur)
            if cur.spec == desired.spec
                && cur.metadata.owner_references == desired.metadata.owner_references =>
        {
            Write::Unchanged
        }
        Some(_) if cfg.dry_run => Write::DryRun,
        Some(cur) => {
            let mut next = desired.clone();
            next.metadata.resource_version = cur.metadata.resource_version.clone();
            next.metadata.labels = cur.metadata.labels.clone();
            next.metadata.annotations = cur.metadata.annotations.clone();
            topologies
                .replace(name, &PostParams::default(), &next)
                .await
                .map_err(failed("replacing"))?;
            Write::Updated
        }
    };
    Ok((write, conditions))
}

/// Applies the Node's label patch, if any. An error is text for the report.
async fn label_node(
    nodes: &Api<Node>,
    cfg: &AgentConfig,
    patch: Option<Value>,
) -> Result<Write, String> {
    match patch {
        None => Ok(Write::Unchanged),
        Some(_) if cfg.dry_run => Ok(Write::DryRun),
        Some(patch) => nodes
            .patch(
                &cfg.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| Write::Updated)
            .map_err(|e| format!("labelling Node {}: {}", cfg.node_name, kube_words(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeBackend;

    fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        let map = |p: &[(&str, &str)]| {
            Some(
                p.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some("gpu-7".into()),
                uid: Some("0b7e-uid".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn clique_label_is_set_when_absent_and_marked_ours() {
        let p = node_label_patch(&node(&[], &[]), Some("uuid.7"), &LabelChange::Leave).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {
                "labels": {CLIQUE_LABEL: "uuid.7"},
                "annotations": {CLIQUE_OWNER_ANNOTATION: FIELD_MANAGER}
            }})
        );
    }

    #[test]
    fn operator_clique_label_is_never_touched() {
        let n = node(&[(CLIQUE_LABEL, "operator.3")], &[]);
        assert_eq!(
            node_label_patch(&n, Some("uuid.7"), &LabelChange::Leave),
            None
        );
        assert_eq!(node_label_patch(&n, None, &LabelChange::Leave), None);
    }

    #[test]
    fn our_clique_label_follows_the_fabric() {
        let n = node(
            &[(CLIQUE_LABEL, "uuid.7")],
            &[(CLIQUE_OWNER_ANNOTATION, FIELD_MANAGER)],
        );
        assert_eq!(
            node_label_patch(&n, Some("uuid.7"), &LabelChange::Leave),
            None
        );
        assert_eq!(
            node_label_patch(&n, Some("uuid.8"), &LabelChange::Leave).unwrap(),
            json!({"metadata": {"labels": {CLIQUE_LABEL: "uuid.8"}}})
        );
        assert_eq!(
            node_label_patch(&n, None, &LabelChange::Leave).unwrap(),
            json!({"metadata": {
                "labels": {CLIQUE_LABEL: null},
                "annotations": {CLIQUE_OWNER_ANNOTATION: null}
            }})
        );
    }

    #[test]
    fn device_plugin_label_patch() {
        let n = node(&[], &[]);
        assert_eq!(
            node_label_patch(&n, None, &LabelChange::Set("basalt-ts-gpu-7".into())).unwrap(),
            json!({"metadata": {"labels": {"nvidia.com/device-plugin.config": "basalt-ts-gpu-7"}}})
        );
        assert_eq!(
            node_label_patch(&n, None, &LabelChange::Remove).unwrap(),
            json!({"metadata": {"labels": {"nvidia.com/device-plugin.config": null}}})
        );
    }

    #[test]
    fn desired_topology_is_owned_by_the_node_and_reports_replicas() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gb200-nvl72-tray.yaml");
        let b = FakeBackend::from_file(&path).unwrap();
        let d = discover(&b.report().unwrap()).unwrap();
        let t = desired_topology(&node(&[], &[]), &d, Some(4));
        assert_eq!(t.metadata.name.as_deref(), Some("gpu-7"));
        let owner = &t.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Node", "0b7e-uid")
        );
        assert_eq!(t.spec.time_slice_replicas, Some(4));
        assert_eq!(t.spec.islands, vec![vec![0, 1, 2, 3]]);
        assert_eq!(t.spec.gpus.len(), 4);
        assert_eq!(t.spec.link_matrix[0], vec!["X", "NV18", "NV18", "NV18"]);
    }

    #[test]
    fn config_map_refs_parse() {
        let r: ConfigMapRef = "gpu-operator/x".parse().unwrap();
        assert_eq!(r.to_string(), "gpu-operator/x");
        assert!("x".parse::<ConfigMapRef>().is_err());
        assert!("a/b/c".parse::<ConfigMapRef>().is_err());
    }
}

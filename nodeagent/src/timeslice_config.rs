//! Time-slicing's writes: the node's key of the device plugin's ConfigMap. A write that fails
//! (the namespace missing, a 403) is an error in the report and the round goes on, leaving the
//! node label alone so the plugin is never pointed at a key that was not written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::round::{kube_words, AgentConfig, Report, Write};
use crate::timeslice::{self, LabelChange, Wanted};

/// Reconciles the node's time-slicing config with its labels; returns the change to make to the
/// node's device-plugin label. Sets `report.time_slice_replicas` only when the config is there.
pub async fn reconcile(
    client: &Client,
    cfg: &AgentConfig,
    labels: &BTreeMap<String, String>,
    report: &mut Report,
) -> LabelChange {
    let (wanted, key) = match (
        timeslice::wanted(labels),
        timeslice::config_name(&cfg.node_name),
    ) {
        (Ok(w), Ok(key)) => (w, key),
        (Ok(Wanted::Off), Err(_)) => return LabelChange::Leave,
        (Err(e), _) | (_, Err(e)) => {
            report.errors.push(e);
            return LabelChange::Leave;
        }
    };
    let change = timeslice::label_change(labels, wanted, &key);
    let written = match wanted {
        Wanted::Replicas(n) => ensure(client, cfg, &key, n).await,
        Wanted::Off if change == LabelChange::Remove => remove(client, cfg, &key).await,
        Wanted::Off => return change,
    };
    match written {
        Ok(w) => {
            report.time_slicing_config = Some(w);
            if let Wanted::Replicas(n) = wanted {
                report.time_slice_replicas = Some(n);
            }
            change
        }
        Err(e) => {
            let r = &cfg.device_plugin_config_map;
            report.errors.push(format!(
                "time-slicing for Node {}: cannot write key {key} of ConfigMap {r}: {e}",
                cfg.node_name
            ));
            // The label may still go: a node pointed at no config is the safe side.
            match change {
                LabelChange::Remove => change,
                _ => LabelChange::Leave,
            }
        }
    }
}

/// Makes sure the device plugin's ConfigMap has the config for `replicas` under `key`.
async fn ensure(
    client: &Client,
    cfg: &AgentConfig,
    key: &str,
    replicas: u32,
) -> Result<Write, String> {
    let r = &cfg.device_plugin_config_map;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &r.namespace);
    let value = timeslice::render_config(replicas);
    let current = cms.get_opt(&r.name).await.map_err(|e| kube_words(&e))?;
    match current {
        Some(cm) if cm.data.as_ref().and_then(|d| d.get(key)) == Some(&value) => {
            Ok(Write::Unchanged)
        }
        _ if cfg.dry_run => Ok(Write::DryRun),
        Some(_) => {
            // Merge patch on one key: agents on other nodes write their keys concurrently.
            let patch = json!({ "data": { key: value } });
            cms.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| kube_words(&e))?;
            Ok(Write::Updated)
        }
        None => {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(r.name.clone()),
                    namespace: Some(r.namespace.clone()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(key.to_string(), value)])),
                ..Default::default()
            };
            match cms.create(&PostParams::default(), &cm).await {
                Ok(_) => Ok(Write::Created),
                // Another node's agent created it first: add our key.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Box::pin(ensure(client, cfg, key, replicas)).await
                }
                Err(e) => Err(kube_words(&e)),
            }
        }
    }
}

/// Removes the node's `key` when time-slicing is turned off (the node label that points at it
/// goes in the same round).
async fn remove(client: &Client, cfg: &AgentConfig, key: &str) -> Result<Write, String> {
    let r = &cfg.device_plugin_config_map;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &r.namespace);
    match cms.get_opt(&r.name).await.map_err(|e| kube_words(&e))? {
        Some(cm) if cm.data.as_ref().is_some_and(|d| d.contains_key(key)) => {
            if cfg.dry_run {
                return Ok(Write::DryRun);
            }
            let patch = json!({ "data": { key: null } });
            cms.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| kube_words(&e))?;
            Ok(Write::Updated)
        }
        _ => Ok(Write::Unchanged),
    }
}

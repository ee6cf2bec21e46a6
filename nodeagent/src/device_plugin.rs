//! Telling the device plugin that the node's MIG devices changed. NVIDIA's k8s-device-plugin
//! lists MIG devices when it starts, so after the agent creates or destroys instances its pod on
//! the node is deleted and its DaemonSet starts a new one, which advertises the new devices (what
//! the GPU operator's mig-manager does after each change). HAMi's device plugin lists MIG
//! instances on each registration round and needs no restart: leave the flag off for it.
//!
//! Off unless `--restart-device-plugin NAMESPACE/SELECTOR` names the plugin's pods. A restart that
//! fails is owed: [`Owed`] keeps it until one succeeds, and each failed round says so.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::Client;

use crate::raw::RawGpu;
use crate::round::{kube_words, AgentConfig, PluginPods, Report};

/// The node's MIG instances, as `(gpu, profile, first slice)`, sorted: what the device plugin
/// advertises, so a restart is owed exactly when this changes.
pub fn instances(gpus: &[RawGpu]) -> Vec<(u32, String, u32)> {
    let mut all: Vec<(u32, String, u32)> = (gpus.iter())
        .flat_map(|g| {
            (g.mig.iter().flat_map(|m| &m.instances)).map(|i| (g.index, i.profile.clone(), i.start))
        })
        .collect();
    all.sort_unstable();
    all
}

/// A restart the device plugin is owed, carried from round to round by the agent's loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owed(bool);

impl Owed {
    /// After a round: restarts the plugin's pods on the node when the round changed MIG
    /// instances or an earlier restart failed; records the pods deleted in the report, and a
    /// failure in its errors (the restart stays owed).
    pub async fn settle(&mut self, client: &Client, cfg: &AgentConfig, report: &mut Report) {
        let Some(pods) = &cfg.restart_device_plugin else {
            return;
        };
        self.0 |= report.mig_instances_changed;
        if !self.0 || cfg.dry_run {
            return;
        }
        match restart(client, &cfg.node_name, pods).await {
            Ok(names) => {
                if names.is_empty() {
                    report.warnings.push(format!(
                        "MIG devices changed but no device plugin pod matches {pods} on Node {}: nothing restarted",
                        cfg.node_name
                    ));
                }
                report.device_plugin_restarted = names;
                self.0 = false;
            }
            Err(e) => report.errors.push(format!(
                "restarting the device plugin ({pods}) on Node {} after a MIG change: {e}; it advertises the old MIG devices until it restarts (tried again next round)",
                cfg.node_name
            )),
        }
    }
}

/// Deletes the plugin's pods on `node` (each by its uid, so a pod replaced meanwhile is left
/// alone); returns their names.
async fn restart(client: &Client, node: &str, pods: &PluginPods) -> Result<Vec<String>, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pods.namespace);
    let on_node = ListParams::default()
        .labels(&pods.selector)
        .fields(&format!("spec.nodeName={node}"));
    let list = api.list(&on_node).await.map_err(|e| kube_words(&e))?;
    let mut deleted = Vec::new();
    for pod in list.items {
        let Some(name) = pod.metadata.name else {
            continue;
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => deleted.push(name),
            // Gone already: its replacement reads the new devices.
            Err(kube::Error::Api(s)) if s.code == 404 => deleted.push(name),
            Err(e) => {
                return Err(format!(
                    "deleting pod {}/{name}: {}",
                    pods.namespace,
                    kube_words(&e)
                ))
            }
        }
    }
    Ok(deleted)
}

//! What one round is given and what it reports, shared by its parts ([`crate::publish`],
//! [`crate::layout_status`], [`crate::timeslice_config`]): the agent's configuration, the
//! report of a round and what each write did, and a kube error in words.

use serde::Serialize;

use crate::mig::applier::AppliedStep;

/// The field manager of every write the agent makes.
pub const FIELD_MANAGER: &str = "basalt-nodeagent";

/// `namespace/name` of a ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapRef {
    pub namespace: String,
    pub name: String,
}

impl std::str::FromStr for ConfigMapRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(ConfigMapRef {
                    namespace: ns.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("{s:?}: want NAMESPACE/NAME")),
        }
    }
}

impl std::fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The device plugin's pods: a namespace and a label selector (`gpu-operator/app=nvidia-device-plugin-daemonset`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginPods {
    pub namespace: String,
    pub selector: String,
}

impl std::str::FromStr for PluginPods {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, selector)) if !ns.is_empty() && !selector.trim().is_empty() => {
                Ok(PluginPods {
                    namespace: ns.into(),
                    selector: selector.trim().into(),
                })
            }
            _ => Err(format!(
                "{s:?}: want NAMESPACE/LABEL_SELECTOR (gpu-operator/app=nvidia-device-plugin-daemonset)"
            )),
        }
    }
}

impl std::fmt::Display for PluginPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.selector)
    }
}

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node_name: String,
    /// Decide and report, write nothing, change no GPU.
    pub dry_run: bool,
    /// Never change MIG instances (nodes without MIG, the default unprivileged DaemonSet): a layout
    /// label is then reported as a warning and not read.
    pub no_mig: bool,
    /// mig-parted config (the layouts `nvidia.com/mig.config` names).
    pub mig_config_map: ConfigMapRef,
    /// Key of the mig-parted config in that ConfigMap.
    pub mig_config_key: String,
    /// The device plugin's config ConfigMap, where time-slicing configs go.
    pub device_plugin_config_map: ConfigMapRef,
    /// At most one re-layout per GPU in this time (the scheduler's `spec.migLayouts`).
    pub mig_min_interval: std::time::Duration,
    /// The device plugin's pods, restarted on the node after its MIG instances change
    /// (`None`: no restart; see [`crate::device_plugin`]).
    pub restart_device_plugin: Option<PluginPods>,
    /// The kubelet's PodResources socket, read to know which pod holds which MIG device
    /// before a re-layout (`None`: processes only; see [`crate::pod_resources`]).
    pub pod_resources: Option<std::path::PathBuf>,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Write {
    Created,
    Updated,
    Unchanged,
    /// Would have changed; dry run.
    DryRun,
}

/// What one round found and did.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub node: String,
    pub gpus: usize,
    pub islands: Vec<Vec<u32>>,
    pub clique_id: Option<String>,
    pub topology: Option<Write>,
    pub node_labels: Option<Write>,
    pub mig_layout: Option<String>,
    /// Whether the layout `mig_layout` names could be read and fits the GPUs it selects
    /// (`None` when the node names none).
    pub mig_layout_valid: Option<bool>,
    pub mig_steps: Vec<AppliedStep>,
    /// What became of the scheduler's wanted layouts (`status.migLayouts`).
    pub mig_relayouts: Vec<basalt_crd_types::MigLayoutStatus>,
    /// The round created or destroyed MIG instances (the static layout or the scheduler's).
    pub mig_instances_changed: bool,
    /// Device plugin pods deleted so that their DaemonSet restarts them on the new MIG devices.
    pub device_plugin_restarted: Vec<String>,
    /// The `MigLayoutValid` condition in the NodeTopology's status.
    pub mig_layout_condition: Option<Write>,
    /// Warning Events written about the Node (their messages).
    pub events: Vec<String>,
    pub time_slice_replicas: Option<u32>,
    pub time_slicing_config: Option<Write>,
    pub warnings: Vec<String>,
    /// Problems with the wanted state (bad label, missing layout) that did not stop the round.
    pub errors: Vec<String>,
}

/// A kube error in words: the server's message, code and reason (`namespaces "gpu-operator" not
/// found (404 NotFound)`), not kube's text, which adds the whole Status as a Debug structure.
pub fn kube_words(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

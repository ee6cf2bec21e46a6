//! The round's part for the scheduler's MIG re-layouts: reads the wanted layouts from the
//! stored NodeTopology, applies them ([`crate::mig::relayout`]) and writes
//! `status.migLayouts`: `applying` before any instance changes, the outcome after.

use std::collections::HashMap;

use basalt_crd_types::{MigLayoutPhase, MigLayoutStatus, NodeTopology};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;

use crate::backend::GpuBackend;
use crate::mig::relayout::{self, Round};
use crate::pod_resources;
use crate::raw::RawGpu;
use crate::round::{kube_words, AgentConfig, Report};

/// GPUs the scheduler lays out (in `spec.migLayouts`): the `nvidia.com/mig.config` layout
/// leaves them alone.
pub fn owned_gpus(current: Option<&NodeTopology>) -> Vec<u32> {
    (current.iter().flat_map(|t| &t.spec.mig_layouts))
        .map(|w| w.gpu)
        .collect()
}

/// What [`reconcile`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relaid {
    /// Some GPU's instances were (or may have been) changed.
    pub touched: bool,
    /// The status was written (the stored object's resourceVersion moved).
    pub wrote: bool,
}

/// Applies the wanted layouts of `current` to `gpus`. Write failures go into the report's
/// errors.
pub async fn reconcile(
    client: &Client,
    backend: &dyn GpuBackend,
    cfg: &AgentConfig,
    current: Option<&NodeTopology>,
    gpus: &[RawGpu],
    report: &mut Report,
) -> Relaid {
    let Some(topology) = current else {
        return Relaid::default();
    };
    let wants = &topology.spec.mig_layouts;
    let stored: &[MigLayoutStatus] = (topology.status.as_ref())
        .map(|s| s.mig_layouts.as_slice())
        .unwrap_or_default();
    if wants.is_empty() && stored.is_empty() {
        return Relaid::default();
    }
    if cfg.no_mig {
        report
            .warnings
            .push("NodeTopology spec.migLayouts ignored: MIG changes are off (--no-mig)".into());
        return Relaid::default();
    }
    // Which pod holds which instance: the kubelet's PodResources when configured; without it
    // processes only, and the scheduler proposes only GPUs no bound pod holds. When it is
    // configured but cannot be read, nothing is re-laid this round.
    let holders = match &cfg.pod_resources {
        None => HashMap::new(),
        Some(socket) => match pod_resources::list(socket).await {
            Ok(held) => instance_holders(gpus, &held),
            Err(e) => {
                report.errors.push(format!(
                    "MIG re-layouts wait: cannot tell which pods hold MIG devices: {e}"
                ));
                return Relaid::default();
            }
        },
    };
    let held = |gpu: u32, instance: u32| holders.get(&(gpu, instance)).cloned();
    let round = Round {
        now: Timestamp::now(),
        min_interval: SignedDuration::try_from(cfg.mig_min_interval).unwrap_or(SignedDuration::MAX),
        dry_run: cfg.dry_run,
        held: &held,
    };
    let decided = relayout::decide_all(gpus, wants, stored, &round);
    let applying = decided.iter().any(|s| s.phase == MigLayoutPhase::Applying);
    let mut wrote = false;
    if applying {
        wrote |= write(client, cfg, &decided, report).await;
    }
    let done = relayout::apply_all(backend, gpus, wants, stored, decided, &round);
    if applying || done != stored {
        wrote |= write(client, cfg, &done, report).await;
    }
    for s in &done {
        if let (MigLayoutPhase::Failed, Some(why)) = (s.phase, &s.reason) {
            report
                .errors
                .push(format!("MIG re-layout of GPU {}: {why}", s.gpu));
        }
    }
    report.mig_relayouts = done;
    Relaid {
        touched: applying,
        wrote,
    }
}

/// Per (GPU, GPU instance), the pod holding one of its MIG devices, by the devices' UUIDs.
fn instance_holders(
    gpus: &[RawGpu],
    held: &pod_resources::Holdings,
) -> HashMap<(u32, u32), String> {
    let mut out = HashMap::new();
    for g in gpus {
        for i in g.mig.iter().flat_map(|m| &m.instances) {
            let uuids = i.compute_instances.iter().filter_map(|c| c.uuid.as_ref());
            if let Some(pod) = uuids.filter_map(|u| held.get(u)).next() {
                out.insert((g.index, i.id), pod.clone());
            }
        }
    }
    out
}

/// Writes `statuses` as the NodeTopology's `status.migLayouts` (a merge patch: the list is
/// ours); returns whether it did.
async fn write(
    client: &Client,
    cfg: &AgentConfig,
    statuses: &[MigLayoutStatus],
    report: &mut Report,
) -> bool {
    if cfg.dry_run {
        return false;
    }
    let api: Api<NodeTopology> = Api::all(client.clone());
    let patch = json!({ "status": { "migLayouts": statuses } });
    if let Err(e) = api
        .patch_status(
            &cfg.node_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        report.errors.push(format!(
            "writing status.migLayouts of NodeTopology {}: {}",
            cfg.node_name,
            kube_words(&e)
        ));
        return false;
    }
    true
}

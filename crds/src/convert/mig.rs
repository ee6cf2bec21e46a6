//! MIG (`docs/protocols.md`, section 3): a NodeTopology's GPUs in MIG mode as NVIDIA's
//! device plugin advertises them under GFD's `nvidia.com/mig.strategy`, and mig-manager's
//! reconfiguration hold.

use super::device_names::{mig_resource, GPU_NAME, MIG_PREFIX};
use basalt_engine::devices::MigSlice;
use basalt_engine::{Gpu, ResourceList};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::devices::{Topology, GPU_MEMORY_LABEL};
use super::Cx;

/// NVIDIA's mig-manager label: the state of the node's MIG reconfiguration.
pub const MIG_CONFIG_STATE_LABEL: &str = "nvidia.com/mig.config.state";
/// GFD's label: how MIG devices are advertised (`single`: as `nvidia.com/gpu`; `mixed`: as
/// `nvidia.com/mig-<profile>`; `none`: not at all).
pub const MIG_STRATEGY_LABEL: &str = "nvidia.com/mig.strategy";

fn label<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Basalt's node agent re-laying a GPU of the node now (`status.migLayouts` `applying`), in
/// words: the node is then reconfiguring, so no other GPU of it is proposed meanwhile.
pub(super) fn relayout_applying(t: &crate::NodeTopology) -> Option<String> {
    let statuses = t.status.as_ref()?;
    let gpus: Vec<String> = (statuses.mig_layouts.iter())
        .filter(|s| s.phase == crate::types::MigLayoutPhase::Applying)
        .map(|s| s.gpu.to_string())
        .collect();
    (!gpus.is_empty()).then(|| format!("applying a MIG layout on GPU {}", gpus.join(", ")))
}

/// The reconfiguration state mig-manager reports, when it is not `success`.
pub(super) fn reconfiguring(meta: &ObjectMeta) -> Option<&str> {
    label(meta, MIG_CONFIG_STATE_LABEL).filter(|s| *s != "success")
}

/// A node whose MIG reconfiguration has not succeeded (`nvidia.com/mig.config.state` pending,
/// rebooting or failed) takes no new MIG pods: its `nvidia.com/mig-*` resources (and, under
/// the single strategy, `nvidia.com/gpu`, which then counts MIG devices) are taken as 0, and
/// a warning says so. The slices it advertises meanwhile may be about to change.
pub(super) fn hold_mig_while_reconfiguring(
    cx: &Cx,
    meta: &ObjectMeta,
    allocatable: &mut ResourceList,
    warnings: &mut Vec<String>,
) {
    let Some(state) = reconfiguring(meta) else {
        return;
    };
    let single = label(meta, MIG_STRATEGY_LABEL) == Some("single");
    let held: Vec<String> = (allocatable.iter_mut())
        .filter(|(k, v)| **v > 0 && (k.starts_with(MIG_PREFIX) || (single && *k == GPU_NAME)))
        .map(|(k, v)| {
            *v = 0;
            k.clone()
        })
        .collect();
    if !held.is_empty() {
        warnings.push(cx.warning(
            format!("metadata.labels[{MIG_CONFIG_STATE_LABEL}]"),
            format!(
                "MIG reconfiguration is {state}: the node takes no new MIG pods ({} taken as 0)",
                held.join(", ")
            ),
        ));
    }
}

/// The node's devices as its MIG strategy advertises them, when a GPU of its NodeTopology is
/// in MIG mode (`None` otherwise, or under strategy `none`, which leaves GPUs whole):
/// - `single`: each MIG instance is an `nvidia.com/gpu` device, in its parent's NVLink island,
///   with GFD's product name (`<model>-MIG-<profile>`) and memory (`nvidia.com/gpu.memory`);
/// - `mixed` (also when no strategy is labelled but the node advertises `nvidia.com/mig-*`):
///   GPUs in MIG mode are no whole devices, and their instances are slices tied to them,
///   with memory from GFD's `nvidia.com/mig-<profile>.memory`. A profile whose instances
///   listed differ from its allocatable count stays a counted resource, with a warning.
///
/// While mig-manager reconfigures the node, its instances may be about to change: none is
/// listed (`hold_mig_while_reconfiguring` holds their resources).
pub(super) fn mig_devices(
    cx: &Cx,
    meta: &ObjectMeta,
    allocatable: &ResourceList,
    topology: &Topology,
    warnings: &mut Vec<String>,
) -> Option<(Topology, Vec<MigSlice>)> {
    if topology.mig.is_empty() {
        return None;
    }
    let advertised = allocatable.keys().any(|k| k.starts_with(MIG_PREFIX));
    let single = match label(meta, MIG_STRATEGY_LABEL) {
        Some("single") => true,
        Some("mixed") => false,
        None if advertised => false,
        _ => return None,
    };
    let held = reconfiguring(meta).is_some();
    let in_mig = |g: &Gpu| topology.mig.iter().find(|(i, _)| *i == g.index);
    let mut t = topology.clone();
    if single {
        let memory = label(meta, GPU_MEMORY_LABEL).and_then(|m| m.trim().parse().ok());
        let mut devices = Vec::new();
        for g in &topology.gpus {
            let Some((_, instances)) = in_mig(g) else {
                continue;
            };
            for d in instances.iter().filter(|_| !held) {
                let model = g.model.as_ref().map(|m| format!("{m}-MIG-{}", d.profile));
                devices.push(Gpu {
                    model,
                    memory_mib: memory,
                    nvlink_domain: g.nvlink_domain,
                    ..Gpu::new(devices.len() as u32)
                });
            }
        }
        t.gpus = devices;
        return Some((t, Vec::new()));
    }
    for g in &mut t.gpus {
        g.mig = in_mig(g).is_some();
    }
    let mut slices: Vec<MigSlice> = (topology.mig.iter())
        .filter(|_| !held)
        .flat_map(|(gpu, instances)| {
            instances.iter().map(move |d| {
                let memory = format!("{}.memory", mig_resource(&d.profile));
                MigSlice {
                    gpu: *gpu,
                    profile: d.profile.clone(),
                    resource: mig_resource(&d.profile),
                    gpu_instance_id: d.gpu_instance_id,
                    start: d.start,
                    memory_mib: label(meta, &memory).and_then(|m| m.trim().parse().ok()),
                }
            })
        })
        .collect();
    // Each profile's instances must be the ones its allocatable counts.
    let mut profiles: Vec<&str> = slices.iter().map(|s| s.profile.as_str()).collect();
    profiles.sort_unstable();
    profiles.dedup();
    let mut counted_only = Vec::new();
    for profile in profiles {
        let resource = mig_resource(profile);
        let listed = slices.iter().filter(|s| s.profile == profile).count() as i64;
        let count = allocatable.get(&resource).copied().unwrap_or(0);
        if listed != count {
            warnings.push(cx.warning(
                format!("status.allocatable[{resource}]"),
                format!(
                    "{count} advertised, {listed} in its NodeTopology: the {profile} MIG \
                     instances are counted, not tied to their GPUs"
                ),
            ));
            counted_only.push(profile.to_string());
        }
    }
    slices.retain(|s| !counted_only.contains(&s.profile));
    if slices.len() > basalt_engine::MAX_GPUS_PER_NODE {
        warnings.push(cx.warning(
            "NodeTopology spec.gpus",
            format!(
                "{} MIG instances; at most {} per node are tied to their GPUs: all are counted \
                 only",
                slices.len(),
                basalt_engine::MAX_GPUS_PER_NODE
            ),
        ));
        slices.clear();
    }
    Some((t, slices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MigDeviceInfo;

    fn cx() -> Cx<'static> {
        Cx {
            origin: "t.yaml",
            kind: "Node",
            object: ("n".to_string()).into(),
        }
    }

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        ObjectMeta {
            labels: Some(labels.collect()),
            ..ObjectMeta::default()
        }
    }

    /// GPU 0 whole; GPU 1 in MIG mode with two 3g.40gb instances.
    fn topology() -> Topology {
        let instance = |start, id| MigDeviceInfo {
            profile: "3g.40gb".into(),
            start,
            size: 4,
            gpu_instance_id: id,
            busy: false,
        };
        Topology {
            gpus: (0..2)
                .map(|i| Gpu {
                    model: Some("NVIDIA-H100-80GB-HBM3".into()),
                    nvlink_domain: i,
                    ..Gpu::new(i)
                })
                .collect(),
            time_slice_replicas: None,
            mig: vec![(1, vec![instance(0, 1), instance(4, 2)])],
            relayout_applying: None,
        }
    }

    fn read(
        labels: &[(&str, &str)],
        allocatable: &[(&str, i64)],
    ) -> (Option<(Topology, Vec<MigSlice>)>, Vec<String>) {
        let allocatable = allocatable
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let mut warnings = Vec::new();
        let out = mig_devices(
            &cx(),
            &meta(labels),
            &allocatable,
            &topology(),
            &mut warnings,
        );
        (out, warnings)
    }

    #[test]
    fn mixed_gpus_in_mig_mode_are_no_whole_devices_and_their_instances_are_slices() {
        let labels = [
            (MIG_STRATEGY_LABEL, "mixed"),
            ("nvidia.com/mig-3g.40gb.memory", "40192"),
        ];
        let (out, warnings) = read(
            &labels,
            &[("nvidia.com/gpu", 1), ("nvidia.com/mig-3g.40gb", 2)],
        );
        let (t, slices) = out.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            t.gpus.iter().map(|g| g.mig).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(slices.len(), 2);
        assert!(slices
            .iter()
            .all(|s| s.gpu == 1 && s.memory_mib == Some(40192)));
        // No strategy label: mixed when the node advertises MIG resources.
        let (out, _) = read(&[], &[("nvidia.com/gpu", 1), ("nvidia.com/mig-3g.40gb", 2)]);
        assert_eq!(out.unwrap().1.len(), 2);
    }

    #[test]
    fn a_profile_whose_count_differs_stays_counted_with_a_warning() {
        let (out, warnings) = read(
            &[(MIG_STRATEGY_LABEL, "mixed")],
            &[("nvidia.com/mig-3g.40gb", 3)],
        );
        assert!(out.unwrap().1.is_empty());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("status.allocatable[nvidia.com/mig-3g.40gb]"),
            "{warnings:?}"
        );
    }

    #[test]
    fn single_lists_the_instances_as_devices_in_their_parent_s_island() {
        let labels = [(MIG_STRATEGY_LABEL, "single"), (GPU_MEMORY_LABEL, "40192")];
        let (out, _) = read(&labels, &[("nvidia.com/gpu", 2)]);
        let (t, slices) = out.unwrap();
        assert!(slices.is_empty());
        assert_eq!(t.gpus.len(), 2);
        assert!(t
            .gpus
            .iter()
            .all(|g| g.nvlink_domain == 1 && g.memory_mib == Some(40192)));
        assert_eq!(
            t.gpus[0].model.as_deref(),
            Some("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb")
        );
    }

    #[test]
    fn strategy_none_and_reconfiguring_nodes() {
        // `none`: the plugin ignores MIG; GPUs stay as listed.
        assert!(
            read(&[(MIG_STRATEGY_LABEL, "none")], &[("nvidia.com/gpu", 2)])
                .0
                .is_none()
        );
        assert!(read(&[], &[("nvidia.com/gpu", 2)]).0.is_none());
        // While mig-manager works, GPUs in MIG mode stay taken and no instance is listed.
        let labels = [
            (MIG_STRATEGY_LABEL, "mixed"),
            (MIG_CONFIG_STATE_LABEL, "pending"),
        ];
        let (out, warnings) = read(
            &labels,
            &[("nvidia.com/gpu", 1), ("nvidia.com/mig-3g.40gb", 0)],
        );
        let (t, slices) = out.unwrap();
        assert!(slices.is_empty() && warnings.is_empty(), "{warnings:?}");
        assert!(t.gpus[1].mig);
    }
}

//! The plan's MIG re-layouts, handed to the node agents: each GPU's wanted layout goes into its
//! node's NodeTopology `spec.migLayouts` (the agent applies it and reports in
//! `status.migLayouts`). The policy proposes the same GPU every cycle until it is applied, so a
//! layout already asked is not written again; a different one raises the GPU's generation.
//! A layout the plan no longer proposes (its pods bound elsewhere or were deleted) is withdrawn
//! unless the agent has applied it or is applying it, so a refused GPU is not re-laid later
//! for nobody. A GPU Basalt has laid out before is not handed back by a withdrawal: its entry
//! is frozen at the instances it has now (the next generation), which keeps the GPU the
//! scheduler's, away from the `nvidia.com/mig.config` layout, and keeps the agent's
//! `appliedAt`, so `minInterval` still counts from the last re-layout.

use std::collections::BTreeMap;

use basalt_crds::types::{MigLayoutPhase, MigLayoutPlacement, WantedMigLayout};
use basalt_crds::NodeTopology;
use basalt_engine::{MigLayout, Plan};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::{json, Value};

use crate::scheduler::Scheduler;
use crate::stores::Stores;
use crate::writer::classify;

/// At most this many NodeTopologies written per cycle (the policy bounds the GPUs per node).
const MAX_NODES_PER_CYCLE: usize = 32;

impl Scheduler {
    /// Writes the wanted layouts of `plan` that their NodeTopology does not already ask for,
    /// and withdraws the ones the plan no longer proposes.
    pub(super) async fn write_mig_layouts(&mut self, plan: &Plan, stores: &Stores) {
        let asking: Vec<String> = (stores.topologies.state().iter())
            .filter(|t| (t.decoded.as_ref()).is_ok_and(|t| !t.spec.mig_layouts.is_empty()))
            .filter_map(|t| t.metadata.name.clone())
            .collect();
        // Nodes already asking are visited too, with nothing proposed, to withdraw.
        let mut by_node: BTreeMap<&str, Vec<&MigLayout>> =
            (asking.iter()).map(|n| (n.as_str(), vec![])).collect();
        for l in &plan.mig_layouts {
            by_node.entry(l.node.as_str()).or_default().push(l);
        }
        let mut written = 0;
        for (node, layouts) in by_node {
            let Some(stored) = stores.topologies.get(&ObjectRef::new(node)) else {
                tracing::warn!(
                    node,
                    "MIG re-layout planned for a node without NodeTopology"
                );
                continue;
            };
            let Ok(topology) = &stored.decoded else {
                continue;
            };
            let Some(patch) = wanted_layouts_patch(topology, &layouts) else {
                continue;
            };
            if written == MAX_NODES_PER_CYCLE || !self.leadership.leading() {
                return;
            }
            written += 1;
            let api: Api<NodeTopology> = Api::all(self.client.clone());
            self.limiter.acquire().await;
            if let Err(e) = api
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(node, error = %classify(&e).1, "cannot write NodeTopology spec.migLayouts");
            }
        }
    }
}

/// The merge patch of `topology`'s `spec.migLayouts` asking for `layouts`, the node's layouts
/// the plan proposes now, and withdrawing the entries not among them that the agent has not
/// done (the list is written whole; the resourceVersion makes a concurrent change fail rather
/// than be lost), or `None` when nothing changes.
pub(crate) fn wanted_layouts_patch(
    topology: &NodeTopology,
    layouts: &[&MigLayout],
) -> Option<Value> {
    let mut wanted = Vec::with_capacity(topology.spec.mig_layouts.len());
    let mut changed = false;
    for w in &topology.spec.mig_layouts {
        if layouts.iter().any(|l| l.gpu == w.gpu) || kept(topology, w) {
            wanted.push(w.clone());
            continue;
        }
        match frozen(topology, w.gpu) {
            Some(layout) if layout == sorted(w.layout.clone()) => wanted.push(w.clone()),
            Some(layout) => {
                changed = true;
                wanted.push(WantedMigLayout {
                    gpu: w.gpu,
                    generation: w.generation + 1,
                    layout,
                });
            }
            None => changed = true,
        }
    }
    for l in layouts {
        let layout: Vec<MigLayoutPlacement> = (l.layout.iter())
            .map(|p| MigLayoutPlacement {
                profile: p.profile.clone(),
                start: p.start,
            })
            .collect();
        match wanted.iter_mut().find(|w| w.gpu == l.gpu) {
            Some(w) if w.layout == layout => {}
            Some(w) => {
                w.layout = layout;
                w.generation += 1;
                changed = true;
            }
            None => {
                wanted.push(WantedMigLayout {
                    gpu: l.gpu,
                    generation: 1,
                    layout,
                });
                changed = true;
            }
        }
    }
    if !changed {
        return None;
    }
    wanted.sort_by_key(|w| w.gpu);
    Some(json!({
        "metadata": {"resourceVersion": topology.metadata.resource_version},
        "spec": {"migLayouts": wanted},
    }))
}

/// What a withdrawn entry of `gpu` becomes when Basalt has laid the GPU out before (the agent
/// reports an applied generation): the instances the GPU has now, as the agent publishes
/// them. `None` (the entry goes) when Basalt never laid it out, or its instances are unknown.
fn frozen(topology: &NodeTopology, gpu: u32) -> Option<Vec<MigLayoutPlacement>> {
    let mut statuses = topology.status.iter().flat_map(|s| &s.mig_layouts);
    statuses.find(|s| s.gpu == gpu && s.applied_generation.is_some())?;
    let published = topology.spec.gpus.iter().find(|g| g.index == gpu)?;
    let mig = published.mig.as_ref()?;
    let layout = (mig.devices.iter()).map(|d| MigLayoutPlacement {
        profile: d.profile.clone(),
        start: d.start,
    });
    Some(sorted(layout.collect()))
}

fn sorted(mut layout: Vec<MigLayoutPlacement>) -> Vec<MigLayoutPlacement> {
    layout.sort_by(|a, b| (a.start, &a.profile).cmp(&(b.start, &b.profile)));
    layout
}

/// Whether `want`, which the plan no longer proposes, stays: when the agent has applied it or
/// is applying it (withdrawing would hand the GPU back to the `nvidia.com/mig.config` layout,
/// which could re-lay it), and while the agent re-lays any GPU of the node, since the plan
/// proposes none of them then (the node counts as reconfiguring).
fn kept(topology: &NodeTopology, want: &WantedMigLayout) -> bool {
    let statuses = topology.status.iter().flat_map(|s| &s.mig_layouts);
    let mut reconfiguring = false;
    for s in statuses {
        if s.phase == MigLayoutPhase::Applying {
            reconfiguring = true;
        }
        if s.gpu == want.gpu
            && s.observed_generation == want.generation
            && matches!(s.phase, MigLayoutPhase::Applied | MigLayoutPhase::Applying)
        {
            return true;
        }
    }
    reconfiguring
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_crds::types::{
        GpuInfo, MigDeviceInfo, MigInfo, MigLayoutStatus, NodeTopologyStatus,
    };
    use basalt_engine::MigPlacement;

    fn layout(gpu: u32, profiles: &[(&str, u32)]) -> MigLayout {
        MigLayout {
            node: "gpu-1".into(),
            gpu,
            layout: (profiles.iter())
                .map(|(p, s)| MigPlacement {
                    profile: p.to_string(),
                    start: *s,
                })
                .collect(),
            pods: vec!["ns/a".into()],
        }
    }

    #[test]
    fn a_new_layout_is_asked_once_and_a_changed_one_raises_the_generation() {
        let mut t = NodeTopology::new("gpu-1", Default::default());
        t.metadata.resource_version = Some("7".into());
        let first = layout(0, &[("3g.40gb", 0), ("3g.40gb", 4)]);
        let patch = wanted_layouts_patch(&t, &[&first]).expect("a new layout is written");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let wanted: Vec<WantedMigLayout> =
            serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
        assert_eq!(wanted.len(), 1);
        assert_eq!((wanted[0].gpu, wanted[0].generation), (0, 1));
        t.spec.mig_layouts = wanted;
        // The policy proposes it again next cycle: nothing to write.
        assert_eq!(wanted_layouts_patch(&t, &[&first]), None);
        // Another GPU, the first still proposed: its entry is kept as it is.
        let other = layout(1, &[("7g.80gb", 0)]);
        let patch = wanted_layouts_patch(&t, &[&first, &other]).unwrap();
        let wanted: Vec<WantedMigLayout> =
            serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
        assert_eq!(wanted.iter().map(|w| w.gpu).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(wanted[0], t.spec.mig_layouts[0]);
        // A different layout on GPU 0: generation 2.
        let changed = layout(0, &[("7g.80gb", 0)]);
        let patch = wanted_layouts_patch(&t, &[&changed]).unwrap();
        let wanted: Vec<WantedMigLayout> =
            serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
        assert_eq!(wanted[0].generation, 2);
        assert_eq!(wanted[0].layout[0].profile, "7g.80gb");
    }

    fn reported(gpu: u32, phase: MigLayoutPhase, generation: i64) -> MigLayoutStatus {
        MigLayoutStatus {
            gpu,
            phase,
            observed_generation: generation,
            ..Default::default()
        }
    }

    #[test]
    fn a_layout_nobody_waits_for_is_withdrawn_unless_applied_or_applying() {
        let mut t = NodeTopology::new("gpu-1", Default::default());
        t.metadata.resource_version = Some("7".into());
        let (first, second) = (layout(0, &[("7g.80gb", 0)]), layout(1, &[("7g.80gb", 0)]));
        let patch = wanted_layouts_patch(&t, &[&first, &second]).unwrap();
        t.spec.mig_layouts = serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
        let gpus = |patch: Value| -> Vec<u32> {
            let wanted: Vec<WantedMigLayout> =
                serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
            wanted.iter().map(|w| w.gpu).collect()
        };
        // GPU 0 refused (busy), GPU 1 applied; the pods went elsewhere: GPU 0 is withdrawn.
        let mut status = NodeTopologyStatus {
            mig_layouts: vec![
                reported(0, MigLayoutPhase::Refused, 1),
                reported(1, MigLayoutPhase::Applied, 1),
            ],
            ..Default::default()
        };
        t.status = Some(status.clone());
        let patch = wanted_layouts_patch(&t, &[]).expect("the refused layout is withdrawn");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(gpus(patch), [1]);
        // Still proposed: kept, nothing to write.
        assert_eq!(wanted_layouts_patch(&t, &[&first]), None);
        // No status yet, or pending, or failed: withdrawn too.
        for phase in [MigLayoutPhase::Pending, MigLayoutPhase::Failed] {
            status.mig_layouts[0].phase = phase;
            t.status = Some(status.clone());
            assert_eq!(gpus(wanted_layouts_patch(&t, &[]).unwrap()), [1]);
        }
        status.mig_layouts.remove(0);
        t.status = Some(status.clone());
        assert_eq!(gpus(wanted_layouts_patch(&t, &[]).unwrap()), [1]);
        // Applied for an older generation only: this one is not done, withdrawn.
        status
            .mig_layouts
            .insert(0, reported(0, MigLayoutPhase::Applied, 1));
        t.spec.mig_layouts[0].generation = 2;
        t.status = Some(status.clone());
        assert_eq!(gpus(wanted_layouts_patch(&t, &[]).unwrap()), [1]);
        // Applying: kept, and while the node re-lays a GPU its other entries stay too.
        status.mig_layouts[0] = reported(0, MigLayoutPhase::Applying, 2);
        status.mig_layouts[1] = reported(1, MigLayoutPhase::Pending, 1);
        t.status = Some(status);
        assert_eq!(wanted_layouts_patch(&t, &[]), None);
    }

    fn gpu_with(index: u32, instances: &[(&str, u32)]) -> GpuInfo {
        let devices = (instances.iter())
            .map(|(profile, start)| MigDeviceInfo {
                profile: profile.to_string(),
                start: *start,
                ..Default::default()
            })
            .collect();
        GpuInfo {
            index,
            mig: Some(MigInfo {
                enabled: true,
                devices,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_basalt_laid_out_is_frozen_as_it_is_not_handed_back() {
        let mut t = NodeTopology::new("gpu-1", Default::default());
        t.metadata.resource_version = Some("7".into());
        // GPU 0 was laid out at generation 1 (two 3g); generation 2 (one 7g) waits for
        // minInterval when its pods go elsewhere.
        t.spec.gpus = vec![gpu_with(0, &[("3g.40gb", 4), ("3g.40gb", 0)])];
        t.spec.mig_layouts = vec![WantedMigLayout {
            gpu: 0,
            generation: 2,
            layout: vec![MigLayoutPlacement {
                profile: "7g.80gb".into(),
                start: 0,
            }],
        }];
        let mut waiting = reported(0, MigLayoutPhase::Pending, 2);
        waiting.applied_generation = Some(1);
        waiting.applied_at = Some("2026-12-06T10:00:00Z".into());
        t.status = Some(NodeTopologyStatus {
            mig_layouts: vec![waiting],
            ..Default::default()
        });
        let patch = wanted_layouts_patch(&t, &[]).expect("the entry is frozen, not removed");
        let wanted: Vec<WantedMigLayout> =
            serde_json::from_value(patch["spec"]["migLayouts"].clone()).unwrap();
        let placements: Vec<(&str, u32)> = (wanted[0].layout.iter())
            .map(|p| (p.profile.as_str(), p.start))
            .collect();
        assert_eq!((wanted[0].gpu, wanted[0].generation), (0, 3));
        assert_eq!(placements, [("3g.40gb", 0), ("3g.40gb", 4)]);
        // Frozen already: nothing more to write.
        t.spec.mig_layouts = wanted;
        assert_eq!(wanted_layouts_patch(&t, &[]), None);
        // Instances unknown (no MIG info published): the entry goes, as for a GPU never laid.
        t.spec.gpus[0].mig = None;
        let patch = wanted_layouts_patch(&t, &[]).unwrap();
        assert_eq!(patch["spec"]["migLayouts"], json!([]));
    }
}

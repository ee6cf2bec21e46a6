//! The plan's MIG re-layouts, handed to the node agents: each GPU's wanted layout goes into its
//! node's NodeTopology `spec.migLayouts` (the agent applies it and reports in
//! `status.migLayouts`). The policy proposes the same GPU every cycle until it is applied, so a
//! layout already asked is not written again; a different one raises the GPU's generation.

use std::collections::BTreeMap;

use basalt_crds::types::{MigLayoutPlacement, WantedMigLayout};
use basalt_crds::NodeTopology;
use basalt_engine::{MigLayout, Plan};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::{json, Value};

use super::{classify, Scheduler};
use crate::stores::Stores;

/// At most this many NodeTopologies written per cycle (the policy bounds the GPUs per node).
const MAX_NODES_PER_CYCLE: usize = 32;

impl Scheduler {
    /// Writes the wanted layouts of `plan` that their NodeTopology does not already ask for.
    pub(super) async fn write_mig_layouts(&mut self, plan: &Plan, stores: &Stores) {
        let mut by_node: BTreeMap<&str, Vec<&MigLayout>> = BTreeMap::new();
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

/// The merge patch of `topology`'s `spec.migLayouts` asking for `layouts` (the list is written
/// whole, other GPUs' entries as they are; the resourceVersion makes a concurrent change fail
/// rather than be lost), or `None` when each is already asked.
pub(crate) fn wanted_layouts_patch(
    topology: &NodeTopology,
    layouts: &[&MigLayout],
) -> Option<Value> {
    let mut wanted = topology.spec.mig_layouts.clone();
    let mut changed = false;
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

#[cfg(test)]
mod tests {
    use super::*;
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
        // Another GPU: the first GPU's entry is kept as it is.
        let other = layout(1, &[("7g.80gb", 0)]);
        let patch = wanted_layouts_patch(&t, &[&other]).unwrap();
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
}

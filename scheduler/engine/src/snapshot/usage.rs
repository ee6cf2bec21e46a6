//! What bound pods hold on their nodes: one charge a full build makes pod after pod and a
//! patch makes for the pods that changed, giving back what their old versions held first.

use super::*;

/// What one bound pod holds on its node: a task's, a pinned pod's or a member's about to be
/// a task (see [`Task::holding`], [`PinnedUse::holding`], [`Member::holding`]).
#[derive(Clone, Copy)]
pub(super) struct Holding<'a> {
    pub(super) node: NodeId,
    pub(super) request: &'a Resources,
    /// Its devices, whole or shared.
    pub(super) gpus: u64,
    /// What it takes of each of `gpus` on a node that shares them.
    pub(super) share: Option<crate::devices::ShareAsk>,
    /// Its devices hold different amounts: charged card by card, which a patch does not follow.
    pub(super) held_differs: bool,
}

impl Task {
    /// What the task holds, if it is bound.
    pub(super) fn holding(&self) -> Option<Holding<'_>> {
        let TaskState::Bound(node) = self.state else {
            return None;
        };
        Some(Holding {
            node,
            request: &self.request,
            gpus: self.gpus,
            share: self.share,
            held_differs: self.held.is_some(),
        })
    }
}

impl PinnedUse {
    /// Puts what the pod holds for its queue on `queue_pinned` (`add`) or takes it off.
    pub(super) fn charge_queue(&self, queue_pinned: &mut [Resources], add: bool) {
        let used = &mut queue_pinned[self.queue.index()];
        match add {
            true => used.add(&self.request),
            false => used.take_back(&self.request),
        }
    }

    pub(super) fn holding(&self) -> Holding<'_> {
        Holding {
            node: self.node,
            request: &self.request,
            gpus: self.gpus,
            share: self.share,
            held_differs: self.held_differs,
        }
    }
}

impl Member<'_> {
    /// What the member holds, if its pod is bound.
    pub(super) fn holding(&self) -> Option<Holding<'_>> {
        Some(Holding {
            node: self.node?,
            request: &self.facts.request,
            gpus: self.gpus,
            share: self.facts.share,
            held_differs: self.facts.held_differs,
        })
    }
}

/// Per node, the resources its bound pods hold and its whole GPUs in use (on a node that
/// shares its devices, those no pod can join: see `devices::close_shared`).
pub(super) struct NodeUsage {
    pub(super) used: Vec<Resources>,
    pub(super) gpus: Vec<u64>,
}

impl NodeUsage {
    /// Puts what `h` holds on its node (`add`) or takes it off.
    pub(super) fn charge(&mut self, h: &Holding, add: bool) {
        let i = h.node.index();
        if add {
            self.used[i].add(h.request);
            self.gpus[i] |= h.gpus;
        } else {
            self.used[i].take_back(h.request);
            self.gpus[i] &= !h.gpus;
        }
    }
}

/// What the bound pods hold on their nodes, pod after pod, in a full build.
pub(super) struct Holdings {
    pub(super) nodes: NodeUsage,
    pub(super) device_use: Vec<DeviceUse>,
    pub(super) slice_used: Vec<u64>,
    /// Every bound pod holds the GPUs it names so far (see [`claim_devices`]).
    pub(super) claims_as_named: bool,
}

impl Holdings {
    /// Nothing held on `nodes` (their GPUs in MIG mode aside), in `recycled` buffers when they
    /// fit; `devices` devices shared.
    pub(super) fn new(
        nodes: &[Node],
        recycled: Option<(Vec<Resources>, Vec<u64>)>,
        dims: usize,
        devices: usize,
    ) -> Self {
        // Usage buffers of an earlier snapshot with the same nodes and names, zeroed in place.
        let zero = Resources::zero(dims);
        let (node_used, mut node_gpus_used) = match recycled {
            Some((mut used, mut gpus)) if used.len() == nodes.len() => {
                used.fill(zero.clone());
                gpus.fill(0);
                (used, gpus)
            }
            _ => (vec![zero; nodes.len()], vec![0u64; nodes.len()]),
        };
        // GPUs in MIG mode are never free whole devices; their slices are tracked beside.
        let mig = nodes
            .iter()
            .any(|n| !n.slices.is_empty() || n.mig_gpus() != 0);
        let slice_used = vec![0u64; if mig { nodes.len() } else { 0 }];
        if mig {
            for n in nodes {
                node_gpus_used[n.id.index()] = n.mig_gpus();
            }
        }
        Holdings {
            nodes: NodeUsage {
                used: node_used,
                gpus: node_gpus_used,
            },
            device_use: vec![DeviceUse::default(); devices],
            slice_used,
            claims_as_named: true,
        }
    }

    /// Charges bound pod `p` to its node `n`: its request, its devices (whole or shared) and
    /// its MIG slices; the GPUs and slices it holds.
    pub(super) fn hold(&mut self, n: &Node, p: &PodSpec, facts: &PodFacts) -> (u64, u64) {
        let (i, request) = (n.id.index(), &facts.request);
        let mut slices = 0;
        if !n.slices.is_empty() {
            let used = &mut self.slice_used[i];
            slices = crate::devices::pick_slices(&n.slices, *used, request);
            *used |= slices;
        }
        let usage = devices::node_usage_mut(n, &mut self.device_use);
        let (gpus, as_named) = claim_devices(n, &mut self.nodes.gpus[i], usage, p, facts);
        if n.sharing.shares() {
            devices::charge_claim(n, usage, &p.held_devices, gpus, facts.share);
        }
        self.claims_as_named &= as_named;
        let holding = Holding {
            node: n.id,
            request,
            gpus,
            share: facts.share,
            held_differs: facts.held_differs,
        };
        self.nodes.charge(&holding, true);
        (gpus, slices)
    }

    pub(super) fn close_shared(&mut self, nodes: &[Node]) {
        for n in nodes {
            devices::close_shared(n, &self.device_use, &mut self.nodes.gpus[n.id.index()]);
        }
    }
}

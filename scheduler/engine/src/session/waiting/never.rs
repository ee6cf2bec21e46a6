//! What makes a job never fit, whatever ends: judged on the nodes its placement rules let it
//! onto (a cordon aside), its queue's capabilities and its required tier's largest domain.

use basalt_topology::TierId;

use super::super::Session;
use super::Kept;
use crate::model::{JobId, RulesId, TaskId};
use crate::plan::NeverFits;
use crate::resources::Resources;

/// Free and allocatable capacity of the nodes a placement rule lets a pod onto.
pub(super) struct RulesRoom {
    pub(super) free: Resources,
    pub(super) allocatable: Resources,
    /// What can never fit is judged on the nodes that pass the static filters but for a
    /// cordon (maintenance ends), their devices readable: their allocatable in all, and per
    /// resource the most one node has; `None` when there is no such node (labels, taints and
    /// volumes change too: no verdict then).
    lasting: Option<(Resources, Resources)>,
}

impl Session<'_> {
    pub(super) fn rules_room(&mut self, kept: &mut Kept, rules: RulesId) {
        if kept.rules.contains_key(&rules) {
            return;
        }
        self.ensure_statics(rules);
        let dims = self.snapshot.resources.len();
        let mut room = RulesRoom {
            free: Resources::zero(dims),
            allocatable: Resources::zero(dims),
            lasting: None,
        };
        let (mut total, mut largest) = (Resources::zero(dims), Resources::zero(dims));
        let mut lasting = false;
        let r = &self.snapshot.rules[rules.0 as usize];
        let statics = &self.statics[&rules].ok;
        for node in &self.snapshot.nodes {
            let ok = statics[node.id.index()];
            if ok {
                room.allocatable.add(&node.allocatable);
                for (id, v) in node.allocatable.iter() {
                    let free = v.saturating_sub(self.capacity.used(node.id).get(id)).max(0);
                    room.free.set(id, room.free.get(id).saturating_add(free));
                }
            }
            let uncordoned = || {
                let mut open = node.clone();
                open.unschedulable = false;
                self.fw.filter_node(r, &open).is_ok()
                    && self.claims_could_fit(rules, node.id).is_ok()
            };
            if node.devices_closed.is_none() && (ok || (node.unschedulable && uncordoned())) {
                lasting = true;
                total.add(&node.allocatable);
                for (id, v) in node.allocatable.iter() {
                    largest.set(id, largest.get(id).max(v));
                }
            }
        }
        room.lasting = lasting.then_some((total, largest));
        kept.rules.insert(rules, room);
    }

    /// What makes the job never fit, whatever ends (see [`NeverFits`]).
    pub(super) fn never_fits(
        &mut self,
        kept: &mut Kept,
        job: JobId,
        needed: &[TaskId],
        asked: &Resources,
        required: Option<TierId>,
        need_gpus: i64,
    ) -> Option<NeverFits> {
        let snap = self.snapshot;
        let names = &snap.resources;
        let j = snap.job(job);
        for &t in needed {
            let task = snap.task(t);
            self.rules_room(kept, task.rules);
            let Some((_, largest)) = &kept.rules[&task.rules].lasting else {
                continue;
            };
            if let Some(id) = task.request.shortfall(largest).next() {
                return Some(NeverFits::Node {
                    resource: names.name(id).to_string(),
                    asked: names.format(id, task.request.get(id)),
                    largest: names.format(id, largest.get(id)),
                });
            }
        }
        // The whole gang: what its members holding a node hold, and what the others ask.
        let mut whole = asked.clone();
        for &t in &j.tasks {
            if self.jobs.status(t).node().is_some() {
                whole.add(&snap.task(t).request);
            }
        }
        let lasting = &kept.rules[&snap.task(needed[0]).rules].lasting;
        if let Some((total, _)) = lasting {
            if let Some(id) = whole.shortfall(total).next() {
                return Some(NeverFits::Cluster {
                    resource: names.name(id).to_string(),
                    asked: names.format(id, whole.get(id)),
                    allocatable: names.format(id, total.get(id)),
                });
            }
        }
        for q in crate::snapshot::ancestors(snap, j.queue) {
            let queue = snap.queue(q);
            for (id, cap) in queue.capability.iter() {
                if whole.get(id) > cap {
                    return Some(NeverFits::Capability {
                        queue: queue.name.clone(),
                        resource: names.name(id).to_string(),
                        asked: names.format(id, whole.get(id)),
                        capability: names.format(id, cap),
                    });
                }
            }
        }
        let tier = required?;
        let largest = self.tier_largest(kept, tier);
        (need_gpus > largest).then(|| NeverFits::Tier {
            tier: self
                .topo
                .as_ref()
                .expect("a tier")
                .topology
                .tier(tier)
                .name
                .clone(),
            gpus: need_gpus,
            largest,
        })
    }

    fn tier_largest(&self, kept: &mut Kept, tier: TierId) -> i64 {
        let snap = self.snapshot;
        let topo = &self.topo.as_ref().expect("a tier").topology;
        *kept.tier_largest.entry(tier).or_insert_with(|| {
            (topo.domains.iter())
                .filter(|d| d.tier == tier)
                .map(|d| {
                    (d.nodes.iter())
                        .map(|&n| snap.nodes[n as usize].gpus.len() as i64)
                        .sum::<i64>()
                })
                .max()
                .unwrap_or(0)
        })
    }
}

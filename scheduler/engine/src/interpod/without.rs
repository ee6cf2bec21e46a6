//! A task's inter-pod rules with some bound pods taken away: what preemption asks of them, as
//! kube-scheduler's DefaultPreemption removes pods from a node and runs the filters again (the
//! InterPodAffinity, PodTopologySpread, NodePorts and VolumeRestrictions plugins' `RemovePod`).
//! The session's counts are left as they are; the pods taken away are subtracted on the fly,
//! each in the domains of its own node.

use crate::constraints::{Disk, HostPort};
use crate::model::{NodeId, TaskId};
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;

use super::spread::Verdict;
use super::terms::DomainCounts;
use super::{Check, Rules};

/// Why taking a pod away may let the task onto its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// It alone refuses the task there: the task's required anti-affinity selects it, its own
    /// required anti-affinity repels the task, or it holds a host port or disk the task asks
    /// for. Every such pod on the node must go.
    Blocks,
    /// A `DoNotSchedule` spread constraint of the task counts it: taking some away may bring
    /// the skew within `maxSkew`.
    Counted,
}

impl Check<'_> {
    /// What `pod`, bound on `node`, does to the task's rules there; `None` when taking it away
    /// can only keep them as they are or make them harder (a pod its required affinity needs).
    pub(crate) fn conflict(&self, snap: &Snapshot, node: NodeId, pod: TaskId) -> Option<Conflict> {
        let pods = self.pods;
        let theirs = pods.task_rules[pod.index()].as_deref();
        let counts_in = &pods.view(snap, pod).counts_in;
        let domains = &pods.domains;
        // Its domain under a counter's first key is the node's own: it counts there.
        let here = |c: &DomainCounts| domains.of(c.keys[0], node).is_some();
        if let Some(r) = self.rules {
            let selected = (r.anti.iter())
                .any(|&c| counts_in.contains(&c) && here(&pods.counters[c as usize]));
            if selected || theirs.is_some_and(|t| clashes(r, t)) {
                return Some(Conflict::Blocks);
            }
        }
        let repels = theirs.is_some_and(|t| {
            (t.holds.iter()).any(|&h| {
                pods.held_keys[h as usize].weight.is_none()
                    && self.view.selected_by.contains(&h)
                    && domains.of(pods.held[h as usize].keys[0], node).is_some()
            })
        });
        if repels {
            return Some(Conflict::Blocks);
        }
        let counted = (self.spread.iter()).any(|s| counts_in.contains(&s.counter()));
        counted.then_some(Conflict::Counted)
    }

    /// [`Check::check`] of `node` as if the `gone` pods (each with the node it is bound to)
    /// were not there.
    pub(crate) fn check_without(
        &self,
        snap: &Snapshot,
        node: NodeId,
        gone: &[(TaskId, NodeId)],
    ) -> Result<(), Refusal> {
        if gone.is_empty() {
            return self.check(node);
        }
        let pods = self.pods;
        if let Some(r) = self.rules {
            let on_node = || {
                (gone.iter())
                    .filter(move |&&(_, n)| n == node)
                    .filter_map(|&(g, _)| pods.task_rules[g.index()].as_deref())
            };
            let ports: Vec<&HostPort> = on_node().flat_map(|t| &t.ports).collect();
            pods.on_node.check_ports(node, &r.ports, &ports)?;
            let disks: Vec<&Disk> = on_node().flat_map(|t| &t.disks).collect();
            pods.on_node.check_disks(node, &r.disks, &disks)?;
        }
        self.check_pods_without(snap, node, gone)
    }

    /// [`Check::check_pods`] with the `gone` pods subtracted from every count.
    fn check_pods_without(
        &self,
        snap: &Snapshot,
        node: NodeId,
        gone: &[(TaskId, NodeId)],
    ) -> Result<(), Refusal> {
        let pods = self.pods;
        let domains = &pods.domains;
        // Selected pods in the node's domain under a counter's `i`th key once `gone` are away.
        let left = |counts: &DomainCounts, i: usize, counted: &dyn Fn(TaskId) -> bool| {
            let key = counts.keys[i];
            let d = domains.of(key, node)?;
            let away = (gone.iter())
                .filter(|&&(g, n)| domains.of(key, n) == Some(d) && counted(g))
                .count() as u32;
            Some(counts.in_domain(i, d).saturating_sub(away))
        };
        let counts_in = |c: u32| move |g: TaskId| pods.view(snap, g).counts_in.contains(&c);
        let present =
            |c: u32| left(&pods.counters[c as usize], 0, &counts_in(c)).is_some_and(|n| n > 0);
        if let Some(r) = self.rules {
            if let Some((c, _)) = &r.affinity {
                let counts = &pods.counters[*c as usize];
                let mut exist = true;
                for i in 0..counts.keys.len() {
                    match left(counts, i, &counts_in(*c)) {
                        Some(n) => exist &= n > 0,
                        None => return Err(Refusal::PodAffinity),
                    }
                }
                let away = (gone.iter())
                    .filter(|&&(g, n)| {
                        counts_in(*c)(g) && counts.keys.iter().any(|&k| domains.of(k, n).is_some())
                    })
                    .count() as u32;
                let first_pod = counts.total.saturating_sub(away) == 0 && self.view.self_affinity;
                if !(exist || first_pod) {
                    return Err(Refusal::PodAffinity);
                }
            }
            if r.anti.iter().any(|&c| present(c)) {
                return Err(Refusal::PodAntiAffinity);
            }
        }
        for &h in &self.view.selected_by {
            if pods.held_keys[h as usize].weight.is_some() {
                continue;
            }
            let holds = |g: TaskId| {
                (pods.task_rules[g.index()].as_deref()).is_some_and(|t| t.holds.contains(&h))
            };
            if left(&pods.held[h as usize], 0, &holds).is_some_and(|n| n > 0) {
                return Err(Refusal::ExistingPodsAntiAffinity);
            }
        }
        for s in &self.spread {
            let away: Vec<(u32, u32)> = (gone.iter())
                .filter(|&&(g, n)| s.counts_node(n) && counts_in(s.counter())(g))
                .filter_map(|&(_, n)| domains.of(s.key(), n).map(|d| (d, 1)))
                .collect();
            match s.check_without(node, domains, &away) {
                Verdict::Fits => {}
                Verdict::MissingLabel => return Err(Refusal::TopologySpreadMissingLabel),
                Verdict::Skewed => return Err(Refusal::TopologySpread),
            }
        }
        Ok(())
    }
}

/// Whether two pods may not share a node for a host port or a disk.
fn clashes(a: &Rules, b: &Rules) -> bool {
    let ports = (a.ports.iter()).any(|p| b.ports.iter().any(|q| p.conflicts(q)));
    ports || (a.disks.iter()).any(|d| b.disks.iter().any(|e| d.conflicts(e)))
}

#[cfg(test)]
mod tests;

//! Soft preferences weighed against packing: preferred node affinity, `PreferNoSchedule`
//! taints and (through the inter-pod counts) preferred pod affinity and `ScheduleAnyway`
//! spread. A task with any preference goes to the node minimising
//! `key after placing − KEY_UNITS_PER_POINT × weighted points`, ties to the lower node id
//! (see [`crate::PreferenceWeights`]); a task without one keeps the plain bucket search.
//!
//! Points are absolute, never min-max normalised over the nodes as kube-scheduler does: that
//! would need every node scored for every pod. A matching term is worth its weight, an
//! untolerated `PreferNoSchedule` taint −100, whatever the other nodes offer.
//!
//! The search stays exact without scoring every node: the nodes of a bucket share their
//! allocatable, so (the premise of the plain search, which takes a bucket's first fitting node)
//! their keys after placing follow their order in the bucket; a walk down a bucket stops at the
//! first node whose key, less the largest bonus any node of its capacity class can get, cannot
//! beat the best score found. Where rounding breaks that premise (the plugins' utilisation
//! rounds down to millionths), the walk and a full scan can differ only between nodes whose
//! scores are within that rounding, as the plain search does.

use std::ops::Bound::{Excluded, Unbounded};
use std::sync::Arc;

use super::{ReservedNodes, Session, Statics};
use crate::constraints::PreferredNodeTerm;
use crate::framework::KEY_UNITS_PER_POINT;
use crate::hash::Map;
use crate::interpod::Check;
use crate::model::{NodeId, RulesId, TaintEffect, TaskId};
use crate::resources::Resources;

/// Points per untolerated `PreferNoSchedule` taint (kube-scheduler's full TaintToleration
/// score).
const PREFER_NO_SCHEDULE_POINTS: i64 = 100;

/// Weighted static points (node affinity and taints) of one set of placement rules and
/// preferred node terms, for every node.
pub(crate) struct StaticPoints {
    terms: Vec<PreferredNodeTerm>,
    points: Vec<i64>,
    /// Per capacity class, the most points any of its nodes gets: the bound of a bucket walk.
    class_max: Vec<i64>,
}

/// What one task prefers, for one search.
pub(crate) struct TaskPreferences {
    statics: Option<Arc<StaticPoints>>,
    /// The task has inter-pod preferences (weighted by the inter-pod counts).
    pod: bool,
    /// At least its pod points on any node.
    pod_ceiling: i64,
}

/// Static points computed this session, by placement rules (which carry the tolerations).
#[derive(Default)]
pub(crate) struct PreferenceCache {
    /// Whether some node has a `PreferNoSchedule` taint (found on first use).
    prefer_no_schedule: Option<bool>,
    by_rules: Map<RulesId, Vec<Arc<StaticPoints>>>,
}

impl Session<'_> {
    /// The task's preferences, or `None` when it has none that weigh: the plain search then.
    pub(crate) fn preferences(&mut self, task: TaskId) -> Option<TaskPreferences> {
        let (weights, snapshot) = (self.fw.preferences, self.snapshot);
        let t = snapshot.task(task);
        let terms: &[PreferredNodeTerm] = match &t.constraints {
            Some(c) if weights.node_affinity > 0 => &c.preferred_node_affinity,
            _ => &[],
        };
        let taints = weights.taint_toleration > 0
            && *(self.preference_cache.prefer_no_schedule).get_or_insert_with(|| {
                (snapshot.nodes.iter()).any(|n| {
                    n.taints
                        .iter()
                        .any(|t| t.effect == TaintEffect::PreferNoSchedule)
                })
            });
        let pod = (weights.pod_affinity > 0 || weights.topology_spread > 0)
            && self.has_pod_preferences(task);
        if terms.is_empty() && !taints && !pod {
            return None;
        }
        let statics = (!terms.is_empty() || taints).then(|| self.static_points(t.rules, terms));
        Some(TaskPreferences {
            statics,
            pod,
            pod_ceiling: if pod {
                self.pod_preference_ceiling(task)
            } else {
                0
            },
        })
    }

    fn static_points(&mut self, rules: RulesId, terms: &[PreferredNodeTerm]) -> Arc<StaticPoints> {
        let cached = self.preference_cache.by_rules.get(&rules);
        if let Some(p) = cached.and_then(|list| list.iter().find(|p| p.terms == terms)) {
            return p.clone();
        }
        let weights = self.fw.preferences;
        let tolerations = &self.snapshot.rules[rules.0 as usize].tolerations;
        let points: Vec<i64> = (self.snapshot.nodes.iter())
            .map(|node| {
                let affinity: i64 = (terms.iter())
                    .filter(|t| t.term.matches(node))
                    .map(|t| t.weight as i64)
                    .sum();
                let untolerated = (node.taints.iter())
                    .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
                    .filter(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
                    .count() as i64;
                // Saturating: a reader's weights are bounded (1..=100), the config's are not.
                let penalty = (weights.taint_toleration as i64)
                    .saturating_mul(PREFER_NO_SCHEDULE_POINTS * untolerated);
                (weights.node_affinity as i64)
                    .saturating_mul(affinity)
                    .saturating_sub(penalty)
            })
            .collect();
        let classes = self.index.class.iter().max().map_or(0, |&c| c as usize + 1);
        let mut class_max = vec![i64::MIN; classes];
        for (&class, &p) in self.index.class.iter().zip(&points) {
            let max = &mut class_max[class as usize];
            *max = (*max).max(p);
        }
        let computed = Arc::new(StaticPoints {
            terms: terms.to_vec(),
            points,
            class_max,
        });
        let list = self.preference_cache.by_rules.entry(rules).or_default();
        list.push(computed.clone());
        computed
    }

    /// The task's weighted preference points on a node.
    fn preference_points(&self, task: TaskId, node: NodeId, p: &TaskPreferences) -> i128 {
        let statics = p.statics.as_ref().map_or(0, |s| s.points[node.index()]);
        let pod = if p.pod {
            self.pod_preference_points(task, node)
        } else {
            0
        };
        statics as i128 + pod as i128
    }

    /// What placing the task on the node scores (lower is better): its node-order key after
    /// placing, less its preference bonus.
    pub(crate) fn placement_score(
        &self,
        task: TaskId,
        node: NodeId,
        request: &Resources,
        p: Option<&TaskPreferences>,
    ) -> i128 {
        let key = self.key_with(node, request) as i128;
        match p {
            Some(p) => key - KEY_UNITS_PER_POINT * self.preference_points(task, node, p),
            None => key,
        }
    }

    /// The largest bonus (in key units) any node of the capacity class can give the task.
    fn bonus_ceiling(&self, p: &TaskPreferences, class: u32) -> i128 {
        let statics = p
            .statics
            .as_ref()
            .map_or(0, |s| s.class_max[class as usize]);
        KEY_UNITS_PER_POINT * (statics as i128 + p.pod_ceiling as i128)
    }

    /// The best node by [`Session::placement_score`] among those `statics` and `access` allow
    /// that have room: the first fitting node of every bucket, then each bucket walked on
    /// while a node further down could still beat the best.
    pub(super) fn find_preferred(
        &self,
        task: TaskId,
        request: &Resources,
        statics: &Statics,
        access: ReservedNodes,
        p: &TaskPreferences,
        rules: Option<&Check>,
    ) -> Option<NodeId> {
        let need = self.device_need(task);
        let usable = |n: NodeId| {
            statics.ok[n.index()]
                && self.fits(n, request)
                && self.may_use(n, access)
                && self.has_devices_for(&need, n, None)
                && rules.is_none_or(|c| c.check(n).is_ok())
        };
        let mut best: Option<(i128, NodeId)> = None;
        // Scores a node whose key after placing is `key`.
        let consider = |best: &mut Option<(i128, NodeId)>, node: NodeId, key: i128| {
            let cand = (
                key - KEY_UNITS_PER_POINT * self.preference_points(task, node, p),
                node,
            );
            if best.is_none_or(|b| cand < b) {
                *best = Some(cand);
            }
        };
        let key_after = |node: NodeId| self.key_with(node, request) as i128;
        if let Some(few) = &statics.few {
            for &node in few.iter().filter(|&&n| usable(n)) {
                consider(&mut best, node, key_after(node));
            }
            return best.map(|(_, n)| n);
        }
        let want_gpus = need.bucket();
        let mut walks = Vec::new();
        for (&(class, free_gpus), set) in &self.index.buckets {
            if free_gpus < want_gpus {
                continue;
            }
            if let Some(&first) = set.iter().find(|&&(_, n)| usable(n)) {
                let key = key_after(first.1);
                consider(&mut best, first.1, key);
                walks.push((class, set, first, key));
            }
        }
        let pod_reach = KEY_UNITS_PER_POINT * p.pod_ceiling as i128;
        for (class, set, first, key) in walks {
            let ceiling = self.bonus_ceiling(p, class);
            // No node further down the bucket has a lower key after placing than this.
            let mut floor = key;
            for &(_, node) in set.range((Excluded(first), Unbounded)) {
                let Some(b) = best else { break };
                // Nothing from here on can beat the best (ties go to the lower id: nodes of
                // equal key follow in id order).
                if (floor - ceiling, node) > b {
                    break;
                }
                // This node cannot, whatever its key: skipped without computing it.
                let reach = KEY_UNITS_PER_POINT
                    * p.statics.as_ref().map_or(0, |s| s.points[node.index()]) as i128
                    + pod_reach;
                if (floor - reach, node) > b || !usable(node) {
                    continue;
                }
                floor = key_after(node);
                consider(&mut best, node, floor);
            }
        }
        best.map(|(_, n)| n)
    }

    // ----- integration points for the inter-pod counts -----

    /// Whether the task has inter-pod preferences: preferred pod (anti-)affinity, symmetric
    /// terms of placed pods that match it, `ScheduleAnyway` spread (cached per task).
    pub fn has_pod_preferences(&self, task: TaskId) -> bool {
        self.pods.has_preferences(self.snapshot, task)
    }

    /// The task's inter-pod preference points on a node, already weighted by
    /// [`crate::PreferenceWeights::pod_affinity`] (its pod affinity and anti-affinity points,
    /// ±weight per term) and [`crate::PreferenceWeights::topology_spread`] (its spread points,
    /// 0..=100 per constraint); negative where anti-affinity outweighs. The points per rule
    /// are documented at `InterPod::preference_points`.
    pub fn pod_preference_points(&self, task: TaskId, node: NodeId) -> i64 {
        let (affinity, spread) = self.pods.preference_points(self.snapshot, task, node);
        self.weigh_pod_points(affinity, spread)
    }

    /// An upper bound of [`Session::pod_preference_points`] over every node: the positive
    /// weights of the terms that may score, and 100 per `ScheduleAnyway` constraint.
    pub fn pod_preference_ceiling(&self, task: TaskId) -> i64 {
        let (affinity, spread) = self.pods.preference_ceiling(self.snapshot, task);
        self.weigh_pod_points(affinity, spread)
    }

    fn weigh_pod_points(&self, affinity: i64, spread: i64) -> i64 {
        let w = &self.fw.preferences;
        affinity * w.pod_affinity as i64 + spread * w.topology_spread as i64
    }
}

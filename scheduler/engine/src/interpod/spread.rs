//! Topology spread (kube-scheduler's PodTopologySpread): which nodes count as domains under a
//! constraint's inclusion policies, and the skew a placement would cause.

use std::collections::BTreeMap;

use crate::constraints::{InclusionPolicy, TopologySpreadConstraint, WhenUnsatisfiable};
use crate::hash::Map;
use crate::model::{Node, NodeId, PlacementRules, RulesId, TaintEffect};

use super::terms::DomainCounts;

/// One constraint of a pod, its selector interned as a counter.
#[derive(Clone, Debug)]
pub(crate) struct SpreadRule {
    pub(crate) counter: u32,
    pub(crate) key: String,
    pub(crate) max_skew: u32,
    pub(crate) min_domains: Option<u32>,
    pub(crate) hard: bool,
    affinity_policy: InclusionPolicy,
    taints_policy: InclusionPolicy,
    /// The keys of all the pod's constraints of the same kind: a node lacking one is no domain.
    all_keys: Vec<String>,
}

impl SpreadRule {
    pub(crate) fn of(
        c: &TopologySpreadConstraint,
        counter: u32,
        all: &[&TopologySpreadConstraint],
    ) -> Self {
        let mut all_keys: Vec<String> = (all.iter())
            .filter(|o| o.when_unsatisfiable == c.when_unsatisfiable)
            .map(|o| o.topology_key.clone())
            .collect();
        all_keys.sort();
        all_keys.dedup();
        SpreadRule {
            counter,
            key: c.topology_key.clone(),
            max_skew: c.max_skew.max(1),
            min_domains: c.min_domains,
            hard: c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule,
            affinity_policy: c.node_affinity_policy,
            taints_policy: c.node_taints_policy,
            all_keys,
        }
    }

    /// Rules live as long as the session (interned once, shared), so their address names them.
    fn cache_key(&self, rules: RulesId) -> CacheKey {
        (rules, self as *const SpreadRule as usize)
    }
}

/// The pod's placement rules (which nodes it could use) and the constraint.
type CacheKey = (RulesId, usize);

/// The nodes that count as domains and every domain value (with no pods yet: 0).
struct Eligible {
    ok: Vec<bool>,
    domains: BTreeMap<String, u32>,
}

/// Per-constraint results derived from the counts, valid while the counter's version holds.
struct State {
    version: u64,
    counts: BTreeMap<String, u32>,
    min: u32,
    max: u32,
}

#[derive(Default)]
pub(crate) struct SpreadCache {
    states: Map<CacheKey, (Eligible, State)>,
}

/// Whether a node passes the pod's node selector and required node affinity.
fn node_affinity_ok(rules: &PlacementRules, node: &Node) -> bool {
    let selector_ok = (rules.node_selector.iter()).all(|(k, v)| node.labels.get(k) == Some(v));
    let affinity_ok = rules.affinity.as_ref().is_none_or(|a| {
        a.terms.iter().any(|t| {
            (t.match_expressions.iter())
                .all(|r| r.matches(node.labels.get(&r.key).map(String::as_str)))
                && (t.match_fields.iter())
                    .all(|r| r.key == "metadata.name" && r.matches(Some(node.name.as_str())))
        })
    });
    selector_ok && affinity_ok
}

/// Whether the pod tolerates every NoSchedule / NoExecute taint of the node.
fn taints_ok(rules: &PlacementRules, node: &Node) -> bool {
    (node.taints.iter())
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .all(|t| rules.tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// What a spread check sees on one node.
pub(crate) enum Verdict {
    Fits,
    MissingLabel,
    Skewed,
}

impl SpreadCache {
    fn state<'a>(
        &'a mut self,
        rule: &SpreadRule,
        rules_id: RulesId,
        rules: &PlacementRules,
        nodes: &[Node],
        counts: &DomainCounts,
    ) -> &'a State {
        let entry = self
            .states
            .entry(rule.cache_key(rules_id))
            .or_insert_with(|| {
                let ok: Vec<bool> = (nodes.iter())
                    .map(|n| {
                        rule.all_keys.iter().all(|k| n.labels.contains_key(k))
                            && (rule.affinity_policy == InclusionPolicy::Ignore
                                || node_affinity_ok(rules, n))
                            && (rule.taints_policy == InclusionPolicy::Ignore
                                || taints_ok(rules, n))
                    })
                    .collect();
                let domains = (nodes.iter())
                    .filter(|n| ok[n.id.index()])
                    .filter_map(|n| n.labels.get(&rule.key))
                    .map(|v| (v.clone(), 0))
                    .collect();
                let state = State {
                    version: u64::MAX,
                    counts: BTreeMap::new(),
                    min: 0,
                    max: 0,
                };
                (Eligible { ok, domains }, state)
            });
        let (eligible, state) = (&entry.0, &mut entry.1);
        if state.version != counts.version {
            state.counts.clone_from(&eligible.domains);
            for (&node, &n) in &counts.by_node {
                if !eligible.ok[node.index()] {
                    continue;
                }
                if let Some(c) = (nodes[node.index()].labels.get(&rule.key))
                    .and_then(|v| state.counts.get_mut(v.as_str()))
                {
                    *c += n;
                }
            }
            state.min = state.counts.values().copied().min().unwrap_or(0);
            state.max = state.counts.values().copied().max().unwrap_or(0);
            state.version = counts.version;
        }
        state
    }

    /// Whether placing the pod on `node` keeps the constraint's skew within `maxSkew`
    /// (`self_match`: the pod itself matches the selector and so adds one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check(
        &mut self,
        rule: &SpreadRule,
        rules_id: RulesId,
        rules: &PlacementRules,
        nodes: &[Node],
        counts: &DomainCounts,
        node: NodeId,
        self_match: bool,
    ) -> Verdict {
        let labels = &nodes[node.index()].labels;
        if !rule.all_keys.iter().all(|k| labels.contains_key(k)) {
            return Verdict::MissingLabel;
        }
        let value = &labels[&rule.key];
        let state = self.state(rule, rules_id, rules, nodes, counts);
        if state.counts.is_empty() {
            return Verdict::Fits;
        }
        let few = rule
            .min_domains
            .is_some_and(|m| (state.counts.len() as u64) < m as u64);
        let min = if few { 0 } else { state.min };
        let here = state.counts.get(value.as_str()).copied().unwrap_or(0);
        let skew = here as i64 + self_match as i64 - min as i64;
        if skew > rule.max_skew as i64 {
            Verdict::Skewed
        } else {
            Verdict::Fits
        }
    }

    /// A `ScheduleAnyway` constraint's points for a node, 0..=100: 100 where the domain holds
    /// the fewest matching pods, 0 where it holds the most (or lacks the key); all 0 when every
    /// domain holds as many.
    pub(crate) fn points(
        &mut self,
        rule: &SpreadRule,
        rules_id: RulesId,
        rules: &PlacementRules,
        nodes: &[Node],
        counts: &DomainCounts,
        node: NodeId,
    ) -> i64 {
        let Some(value) = nodes[node.index()].labels.get(&rule.key) else {
            return 0;
        };
        let state = self.state(rule, rules_id, rules, nodes, counts);
        let here = state
            .counts
            .get(value.as_str())
            .copied()
            .unwrap_or(state.max);
        if state.max == state.min {
            return 0;
        }
        (state.max - here.min(state.max)) as i64 * 100 / (state.max - state.min) as i64
    }
}

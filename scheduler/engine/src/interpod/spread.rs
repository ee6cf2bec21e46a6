//! Topology spread (kube-scheduler's PodTopologySpread): which nodes count as domains under a
//! constraint's inclusion policies, and the skew a placement would cause.

use std::rc::Rc;

use crate::constraints::{InclusionPolicy, TopologySpreadConstraint, WhenUnsatisfiable};
use crate::hash::Map;
use crate::model::{Node, NodeId, PlacementRules, RulesId, TaintEffect};

use super::terms::{DomainCounts, Domains};

/// One constraint of a pod, its selector interned as a counter.
#[derive(Clone, Debug)]
pub(crate) struct SpreadRule {
    pub(crate) counter: u32,
    /// The topology key, interned in [`Domains`].
    pub(crate) key: u32,
    pub(crate) max_skew: u32,
    pub(crate) min_domains: Option<u32>,
    pub(crate) hard: bool,
    affinity_policy: InclusionPolicy,
    taints_policy: InclusionPolicy,
    /// The keys of all the pod's constraints of the same kind: a node lacking one is no domain.
    all_keys: Vec<u32>,
}

impl SpreadRule {
    pub(crate) fn of(
        c: &TopologySpreadConstraint,
        counter: u32,
        all: &[&TopologySpreadConstraint],
        domains: &mut Domains,
        nodes: &[Node],
    ) -> Self {
        let mut all_keys: Vec<u32> = (all.iter())
            .filter(|o| o.when_unsatisfiable == c.when_unsatisfiable)
            .map(|o| domains.key(&o.topology_key, nodes))
            .collect();
        all_keys.sort_unstable();
        all_keys.dedup();
        SpreadRule {
            counter,
            key: domains.key(&c.topology_key, nodes),
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

    fn has_keys(&self, node: NodeId, domains: &Domains) -> bool {
        self.all_keys.iter().all(|&k| domains.of(k, node).is_some())
    }
}

/// The pod's placement rules (which nodes it could use) and the constraint.
type CacheKey = (RulesId, usize);

/// Which nodes count as domains (their domains are the eligible ones).
struct Eligible {
    node: Vec<bool>,
    domain: Vec<bool>,
    domains: usize,
}

/// Per-constraint results derived from the counts, valid while the counter's version holds.
struct State {
    version: u64,
    /// Per domain of the key (0 for those not eligible); shared with the views taken of it.
    counts: Rc<Vec<u32>>,
    min: u32,
    max: u32,
}

/// What decides which nodes count as a constraint's domains: the pod's placement rules, the
/// key, the keys of its other constraints and the two policies, not the selector, so the
/// constraints of many gangs alike share one.
type EligibleKey = (RulesId, u32, Vec<u32>, InclusionPolicy, InclusionPolicy);

#[derive(Default)]
pub(crate) struct SpreadCache {
    eligible: Map<EligibleKey, Rc<Eligible>>,
    states: Map<CacheKey, (Rc<Eligible>, State)>,
}

/// Whether a node passes the pod's node selector and required node affinity.
fn node_affinity_ok(rules: &PlacementRules, node: &Node) -> bool {
    let selector_ok = (rules.node_selector.iter()).all(|(k, v)| node.labels.get(k) == Some(v));
    let affinity_ok =
        (rules.affinity.as_ref()).is_none_or(|a| a.terms.iter().any(|t| t.matches(node)));
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
        (nodes, domains): (&[Node], &Domains),
        counts: &DomainCounts,
    ) -> (&'a Rc<Eligible>, &'a State) {
        let eligible_cache = &mut self.eligible;
        let entry = (self.states.entry(rule.cache_key(rules_id))).or_insert_with(|| {
            let key = (
                rules_id,
                rule.key,
                rule.all_keys.clone(),
                rule.affinity_policy,
                rule.taints_policy,
            );
            let eligible = eligible_cache.entry(key).or_insert_with(|| {
                let node: Vec<bool> = (nodes.iter())
                    .map(|n| {
                        rule.has_keys(n.id, domains)
                            && (rule.affinity_policy == InclusionPolicy::Ignore
                                || node_affinity_ok(rules, n))
                            && (rule.taints_policy == InclusionPolicy::Ignore
                                || taints_ok(rules, n))
                    })
                    .collect();
                let mut domain = vec![false; domains.len(rule.key)];
                for n in nodes.iter().filter(|n| node[n.id.index()]) {
                    if let Some(d) = domains.of(rule.key, n.id) {
                        domain[d as usize] = true;
                    }
                }
                Rc::new(Eligible {
                    domains: domain.iter().filter(|&&e| e).count(),
                    node,
                    domain,
                })
            });
            let state = State {
                version: u64::MAX,
                counts: Rc::default(),
                min: 0,
                max: 0,
            };
            (eligible.clone(), state)
        });
        let (eligible, state) = (&entry.0, &mut entry.1);
        if state.version != counts.version {
            let mut per_domain = vec![0; eligible.domain.len()];
            for (&node, &n) in &counts.by_node {
                if eligible.node[node.index()] {
                    if let Some(d) = domains.of(rule.key, node) {
                        per_domain[d as usize] += n;
                    }
                }
            }
            state.counts = Rc::new(per_domain);
            let mut eligible_counts = (state.counts.iter().zip(&eligible.domain))
                .filter(|(_, &e)| e)
                .map(|(&c, _)| c);
            let first = eligible_counts.next().unwrap_or(0);
            (state.min, state.max) =
                eligible_counts.fold((first, first), |(lo, hi), c| (lo.min(c), hi.max(c)));
            state.version = counts.version;
        }
        (eligible, state)
    }

    /// The constraint as it stands, for checks of many nodes in a row.
    pub(crate) fn view<'r>(
        &mut self,
        rule: &'r SpreadRule,
        (rules_id, rules): (RulesId, &PlacementRules),
        nodes: (&[Node], &Domains),
        counts: &DomainCounts,
        self_match: bool,
    ) -> SpreadView<'r> {
        let (eligible, state) = self.state(rule, rules_id, rules, nodes, counts);
        let domain_count = eligible.domains;
        let few = rule
            .min_domains
            .is_some_and(|m| (domain_count as u64) < m as u64);
        SpreadView {
            rule,
            eligible: eligible.clone(),
            counts: state.counts.clone(),
            min: if few { 0 } else { state.min },
            open: domain_count == 0,
            self_match,
        }
    }

    /// A `ScheduleAnyway` constraint's points for a node, 0..=100: 100 where the domain holds
    /// the fewest matching pods, 0 where it holds the most (or lacks the key); all 0 when every
    /// domain holds as many.
    pub(crate) fn points(
        &mut self,
        rule: &SpreadRule,
        (rules_id, rules): (RulesId, &PlacementRules),
        nodes: (&[Node], &Domains),
        counts: &DomainCounts,
        node: NodeId,
    ) -> i64 {
        let Some(d) = nodes.1.of(rule.key, node) else {
            return 0;
        };
        let (_, state) = self.state(rule, rules_id, rules, nodes, counts);
        if state.max == state.min {
            return 0;
        }
        let here = state.counts[d as usize].clamp(state.min, state.max);
        (state.max - here) as i64 * 100 / (state.max - state.min) as i64
    }
}

/// A constraint's counts taken once (see [`SpreadCache::view`]): checking a node is a lookup.
pub(crate) struct SpreadView<'r> {
    rule: &'r SpreadRule,
    /// Which nodes' pods count (those of the eligible domains).
    eligible: Rc<Eligible>,
    counts: Rc<Vec<u32>>,
    /// The global minimum (0 with fewer eligible domains than `minDomains`).
    min: u32,
    /// No eligible domain at all: nothing to skew.
    open: bool,
    self_match: bool,
}

impl SpreadView<'_> {
    pub(crate) fn key(&self) -> u32 {
        self.rule.key
    }

    /// Per domain of the key, whether a node there keeps the skew within `maxSkew` (what
    /// [`SpreadView::check`] says of a node with every key); `None` when nothing can skew.
    pub(crate) fn domains_that_fit(&self) -> Option<Vec<bool>> {
        if self.open {
            return None;
        }
        let me = self.self_match as i64;
        let limit = self.min as i64 + self.rule.max_skew as i64;
        Some(
            self.counts
                .iter()
                .map(|&c| c as i64 + me <= limit)
                .collect(),
        )
    }

    /// The counter of the pods the constraint selects.
    pub(crate) fn counter(&self) -> u32 {
        self.rule.counter
    }

    /// Whether the pods on `node` count in the constraint's domains.
    pub(crate) fn counts_node(&self, node: NodeId) -> bool {
        self.eligible.node[node.index()]
    }

    /// [`SpreadView::check`] with `away` (domain, pods) taken out of the counts: fewer pods
    /// where the task would go lower the skew, fewer elsewhere may lower the global minimum.
    pub(crate) fn check_without(
        &self,
        node: NodeId,
        domains: &Domains,
        away: &[(u32, u32)],
    ) -> Verdict {
        if away.is_empty() || self.open {
            return self.check(node, domains);
        }
        let Some(d) = domains.of(self.rule.key, node) else {
            return Verdict::MissingLabel;
        };
        if !self.rule.has_keys(node, domains) {
            return Verdict::MissingLabel;
        }
        let left = |domain: u32| {
            let gone: u32 = (away.iter())
                .filter(|&&(x, _)| x == domain)
                .map(|&(_, n)| n)
                .sum();
            self.counts[domain as usize].saturating_sub(gone)
        };
        // Counts only fall: the minimum is the old one or one of the domains pods left.
        let min = (away.iter()).fold(self.min, |m, &(x, _)| m.min(left(x)));
        let here = left(d) as i64 + self.self_match as i64;
        if here - min as i64 > self.rule.max_skew as i64 {
            Verdict::Skewed
        } else {
            Verdict::Fits
        }
    }

    /// Whether placing the pod on `node` keeps the skew within `maxSkew`.
    pub(crate) fn check(&self, node: NodeId, domains: &Domains) -> Verdict {
        let Some(d) = domains.of(self.rule.key, node) else {
            return Verdict::MissingLabel;
        };
        if !self.rule.has_keys(node, domains) {
            return Verdict::MissingLabel;
        }
        if self.open {
            return Verdict::Fits;
        }
        let here = self.counts[d as usize] as i64 + self.self_match as i64;
        if here - self.min as i64 > self.rule.max_skew as i64 {
            Verdict::Skewed
        } else {
            Verdict::Fits
        }
    }
}

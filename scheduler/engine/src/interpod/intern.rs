//! What a pod's constraints become once interned: each distinct term a counter or a held
//! term, shared by every pod stating it, and per constraints value and namespace one
//! [`Rules`].

use std::sync::Arc;

use super::spread::SpreadRule;
use super::terms::{Domains, Matcher};
use super::{CounterKey, HeldKey, Rules, HARD_POD_AFFINITY_WEIGHT};
use crate::constraints::PodConstraints;
use crate::hash::Map;
use crate::model::Node;

pub(super) struct Interner<'n> {
    pub(super) nodes: &'n [Node],
    pub(super) domains: Domains,
    pub(super) counter_ids: Map<CounterKey, u32>,
    pub(super) counter_keys: Vec<CounterKey>,
    pub(super) held_ids: Map<HeldKey, u32>,
    pub(super) held_keys: Vec<HeldKey>,
    /// Rules per constraints value, per namespace (a gang's members share both).
    pub(super) cache: Map<*const PodConstraints, Vec<(String, Arc<Rules>)>>,
}

impl Interner<'_> {
    fn counter(&mut self, all: Vec<Matcher>, keys: Vec<String>, spread: bool) -> u32 {
        let key = CounterKey { all, keys, spread };
        if let Some(&id) = self.counter_ids.get(&key) {
            return id;
        }
        let id = self.counter_keys.len() as u32;
        self.counter_keys.push(key.clone());
        self.counter_ids.insert(key, id);
        id
    }

    fn held(&mut self, key: HeldKey) -> u32 {
        if let Some(&id) = self.held_ids.get(&key) {
            return id;
        }
        let id = self.held_keys.len() as u32;
        self.held_keys.push(key.clone());
        self.held_ids.insert(key, id);
        id
    }

    pub(super) fn rules(&mut self, c: &Arc<PodConstraints>, ns: &str) -> Arc<Rules> {
        let cached = self.cache.get(&Arc::as_ptr(c)).into_iter().flatten();
        if let Some((_, r)) = cached.into_iter().find(|(n, _)| n == ns) {
            return r.clone();
        }
        let mut r = Rules {
            ports: c.host_ports.clone(),
            disks: c.disks.clone(),
            ..Rules::default()
        };
        // The symmetric side: what this pod's terms do to pods they select.
        let mut hold = |this: &mut Self, term, weight| {
            if let Some(matcher) = Matcher::of_term(term, ns) {
                let key = (term.topology_key.clone(), weight);
                r.holds.push(this.held(HeldKey {
                    matcher,
                    key: key.0,
                    weight: key.1,
                }));
            }
        };
        for t in &c.anti_affinity.required {
            hold(self, t, None);
        }
        for t in &c.affinity.required {
            hold(self, t, Some(HARD_POD_AFFINITY_WEIGHT));
        }
        for w in &c.affinity.preferred {
            hold(self, &w.term, Some(w.weight as i64));
        }
        for w in &c.anti_affinity.preferred {
            hold(self, &w.term, Some(-(w.weight as i64)));
        }
        // The pod's own view. A required affinity term without a selector selects nothing:
        // no node satisfies it (a counter that nothing ever increments).
        if !c.affinity.required.is_empty() {
            let terms = &c.affinity.required;
            let matchers: Vec<Matcher> = (terms.iter())
                .map(|t| Matcher::of_term(t, ns).unwrap_or_else(|| never(ns)))
                .collect();
            let keys = terms.iter().map(|t| t.topology_key.clone()).collect();
            r.affinity = Some((self.counter(matchers.clone(), keys, false), matchers));
        }
        for t in &c.anti_affinity.required {
            if let Some(m) = Matcher::of_term(t, ns) {
                r.anti
                    .push(self.counter(vec![m], vec![t.topology_key.clone()], false));
            }
        }
        for (w, sign) in (c.affinity.preferred.iter().map(|w| (w, 1)))
            .chain(c.anti_affinity.preferred.iter().map(|w| (w, -1)))
        {
            if let Some(m) = Matcher::of_term(&w.term, ns) {
                let id = self.counter(vec![m], vec![w.term.topology_key.clone()], false);
                r.preferred.push((id, sign * w.weight as i64));
            }
        }
        let all: Vec<_> = c.spread.iter().collect();
        for s in &c.spread {
            let m = match &s.selector {
                Some(sel) => Matcher::in_namespace(sel, ns),
                None => never(ns),
            };
            let id = self.counter(vec![m.clone()], vec![s.topology_key.clone()], true);
            let rule = SpreadRule::of(s, id, &all, &mut self.domains, self.nodes);
            r.spread.push((rule, m));
        }
        let r = Arc::new(r);
        let cached = self.cache.entry(Arc::as_ptr(c)).or_default();
        cached.push((ns.to_string(), r.clone()));
        r
    }
}

/// A matcher that selects no pod (a term or constraint without a `labelSelector`).
fn never(ns: &str) -> Matcher {
    use crate::model::{SelectorOperator, SelectorRequirement};
    let selector = crate::constraints::LabelSelector {
        requirements: vec![SelectorRequirement {
            key: String::new(),
            operator: SelectorOperator::In,
            values: Vec::new(),
        }],
    };
    Matcher::in_namespace(&selector, ns)
}

//! Which pods a term selects: label selectors over resolved namespace sets, an index from
//! label pairs to the terms that may select a pod carrying them, and the per-domain counts of
//! selected pods.

use std::collections::BTreeMap;

use crate::constraints::{LabelSelector, NamespaceSpec, PodAffinityTerm, NAMESPACE_NAME_LABEL};
use crate::hash::Map;
use crate::model::{Node, NodeId, PodMeta, SelectorOperator};

/// The labels of every namespace (`kubernetes.io/metadata.name` included, as the API server
/// sets it); a namespace no spec describes has only that one.
pub(crate) struct NamespaceLabels(Map<String, BTreeMap<String, String>>);

impl NamespaceLabels {
    pub(crate) fn new(specs: &[NamespaceSpec]) -> Self {
        let mut map = Map::default();
        for ns in specs {
            let mut labels = ns.labels.clone();
            labels.insert(NAMESPACE_NAME_LABEL.into(), ns.name.clone());
            map.insert(ns.name.clone(), labels);
        }
        NamespaceLabels(map)
    }

    fn selects(&self, selector: &LabelSelector, namespace: &str) -> bool {
        match self.0.get(namespace) {
            Some(labels) => selector.matches(labels),
            None => {
                let only = [(NAMESPACE_NAME_LABEL.to_string(), namespace.to_string())];
                selector.matches(&only.into_iter().collect())
            }
        }
    }
}

/// A label selector over a resolved set of namespaces: `names` ∪ those `ns_selector` selects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Matcher {
    pub(crate) selector: LabelSelector,
    /// Sorted.
    names: Vec<String>,
    ns_selector: Option<LabelSelector>,
}

impl Matcher {
    /// The term of a pod in `own` namespace; `None` when it selects no pod (no `labelSelector`).
    pub(crate) fn of_term(term: &PodAffinityTerm, own: &str) -> Option<Self> {
        let selector = term.selector.clone()?;
        let mut names = term.namespaces.clone();
        if names.is_empty() && term.namespace_selector.is_none() {
            names.push(own.to_string());
        }
        names.sort();
        names.dedup();
        Some(Matcher {
            selector,
            names,
            ns_selector: term.namespace_selector.clone(),
        })
    }

    /// A spread constraint's selector: pods of the pod's own namespace only.
    pub(crate) fn in_namespace(selector: &LabelSelector, own: &str) -> Self {
        Matcher {
            selector: selector.clone(),
            names: vec![own.to_string()],
            ns_selector: None,
        }
    }

    pub(crate) fn matches(&self, pod: &PodMeta, namespaces: &NamespaceLabels) -> bool {
        let in_namespace = self.names.binary_search(&pod.namespace).is_ok()
            || (self.ns_selector.as_ref()).is_some_and(|s| namespaces.selects(s, &pod.namespace));
        in_namespace && self.selector.matches(&pod.labels)
    }
}

/// Terms by a label pair every pod they select carries (an `In` requirement), so a pod is
/// matched only against terms that could select it, not against every term.
#[derive(Default)]
pub(crate) struct TermIndex {
    /// Label key → value → terms.
    by_label: Map<String, Map<String, Vec<u32>>>,
    /// Terms without an `In` requirement: tried for every pod.
    rest: Vec<u32>,
}

impl TermIndex {
    pub(crate) fn add(&mut self, id: u32, selector: &LabelSelector) {
        let key = (selector.requirements.iter()).find(|r| r.operator == SelectorOperator::In);
        match key {
            Some(r) => {
                let values = self.by_label.entry(r.key.clone()).or_default();
                for v in &r.values {
                    values.entry(v.clone()).or_default().push(id);
                }
            }
            None => self.rest.push(id),
        }
    }

    /// The terms that may select a pod with these labels, sorted, without repeats.
    pub(crate) fn candidates(&self, labels: &BTreeMap<String, String>) -> Vec<u32> {
        let mut out = self.rest.clone();
        for (k, v) in labels {
            if let Some(list) = self
                .by_label
                .get(k.as_str())
                .and_then(|m| m.get(v.as_str()))
            {
                out.extend_from_slice(list);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Topology keys interned, and per key every node's domain: label values numbered, so a
/// count is an array index, not a string lookup.
#[derive(Default)]
pub(crate) struct Domains {
    ids: Map<String, u32>,
    /// Per key: per node its value's number (`NONE` without the label), and how many values.
    of_node: Vec<Vec<u32>>,
    len: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Domains {
    pub(crate) fn key(&mut self, key: &str, nodes: &[Node]) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let mut values: Map<&str, u32> = Map::default();
        let of_node = (nodes.iter())
            .map(|n| match n.labels.get(key) {
                Some(v) => {
                    let next = values.len() as u32;
                    *values.entry(v.as_str()).or_insert(next)
                }
                None => NONE,
            })
            .collect();
        let id = self.of_node.len() as u32;
        self.of_node.push(of_node);
        self.len.push(values.len() as u32);
        self.ids.insert(key.to_string(), id);
        id
    }

    /// The node's domain under the key; `None` when it lacks the label.
    pub(crate) fn of(&self, key: u32, node: NodeId) -> Option<u32> {
        let d = self.of_node[key as usize][node.index()];
        (d != NONE).then_some(d)
    }

    /// How many domains the key has.
    pub(crate) fn len(&self, key: u32) -> usize {
        self.len[key as usize] as usize
    }
}

/// Pods placed per domain: per topology key, per domain of it, how many selected pods run
/// there; per node too (spread counts only eligible nodes).
#[derive(Default)]
pub(crate) struct DomainCounts {
    pub(crate) keys: Vec<u32>,
    by_domain: Vec<PerDomain>,
    pub(crate) by_node: Map<NodeId, u32>,
    /// Pods counted on nodes that carry at least one of the keys.
    pub(crate) total: u32,
    /// Bumped on every change (spread caches what it derives from the counts).
    pub(crate) version: u64,
}

/// Counts per domain of one key: a vector over few domains (zones, racks), a map over many
/// (hostnames), where a gang's counter touches a handful of the thousands and a vector each
/// would be megabytes to zero every cycle. Allocated on the first pod counted.
enum PerDomain {
    Dense(Vec<u32>),
    Sparse(Map<u32, u32>),
}

/// Keys with more domains than this count sparsely.
const DENSE_DOMAINS: usize = 256;

impl PerDomain {
    fn get(&self, d: u32) -> u32 {
        match self {
            PerDomain::Dense(v) => v.get(d as usize).copied().unwrap_or(0),
            PerDomain::Sparse(m) => m.get(&d).copied().unwrap_or(0),
        }
    }

    fn change(&mut self, d: u32, len: usize, add: bool) {
        let n = match self {
            PerDomain::Dense(v) => {
                if v.is_empty() {
                    v.resize(len, 0);
                }
                &mut v[d as usize]
            }
            PerDomain::Sparse(m) => m.entry(d).or_default(),
        };
        *n = if add { *n + 1 } else { *n - 1 };
    }
}

impl DomainCounts {
    pub(crate) fn new(keys: Vec<u32>, domains: &Domains) -> Self {
        DomainCounts {
            by_domain: (keys.iter())
                .map(|&k| match domains.len(k) > DENSE_DOMAINS {
                    true => PerDomain::Sparse(Map::default()),
                    false => PerDomain::Dense(Vec::new()),
                })
                .collect(),
            keys,
            ..DomainCounts::default()
        }
    }

    /// Pods in domain `d` of the `i`th key.
    pub(crate) fn in_domain(&self, i: usize, d: u32) -> u32 {
        self.by_domain[i].get(d)
    }

    /// Pods in the node's domain under the `i`th key; `None` when the node lacks that key.
    pub(crate) fn at(&self, i: usize, node: NodeId, domains: &Domains) -> Option<u32> {
        domains
            .of(self.keys[i], node)
            .map(|d| self.by_domain[i].get(d))
    }

    pub(crate) fn change(&mut self, node: NodeId, domains: &Domains, add: bool) {
        self.version += 1;
        let mut any = false;
        for (i, &key) in self.keys.iter().enumerate() {
            if let Some(d) = domains.of(key, node) {
                any = true;
                self.by_domain[i].change(d, domains.len(key), add);
            }
        }
        let n = self.by_node.entry(node).or_default();
        if add {
            *n += 1;
        } else {
            *n -= 1;
            if *n == 0 {
                self.by_node.remove(&node);
            }
        }
        if any {
            self.total = if add { self.total + 1 } else { self.total - 1 };
        }
    }
}

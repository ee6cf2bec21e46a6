//! The topology graph: tiers named in config, coarse to fine, each read from a node label (a
//! spine, a rack, an NVLink clique), then the node itself. Nodes sharing a tier's label value
//! (and the values of the coarser tiers of the same ladder) form one domain; a node missing the
//! label stands alone at that tier. Domains are vertices of a petgraph forest whose edges run
//! from each domain to the domains directly inside it.
//!
//! Two ladders can coexist: the configured tiers, and Volcano's HyperNode tiers
//! (`topology.volcano.sh/tier-N` node labels, written by the crds reader from HyperNode
//! objects), which appear as tiers named `volcano-tier-N` unless the config names them. A gang's
//! constraints pick the ladder its tier names belong to.
//!
//! This crate knows nothing of pods or capacity: the engine keeps free capacity per domain and
//! runs the search; here is only the structure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};

/// The built-in finest tier: one domain per node.
pub const NODE_TIER: &str = "node";
/// Node labels the crds reader derives from Volcano HyperNodes, and the tier names they get.
pub const VOLCANO_TIER_LABEL: &str = "topology.volcano.sh/tier-";
pub const VOLCANO_TIER_NAME: &str = "volcano-tier-";

/// One configured tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierSpec {
    pub name: String,
    /// The node label whose value names the node's domain at this tier.
    pub node_label: String,
    /// The domains are NVLink domains (e.g. `nvidia.com/gpu.clique`): a labelled domain links
    /// all its GPUs; an unlabelled node's NVLink domains are its in-node NVLink islands.
    #[serde(default)]
    pub nvlink: bool,
}

/// Position of a tier in [`Topology::tiers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TierId(pub u32);

/// Position of a domain in [`Topology::domains`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainId(pub u32);

impl DomainId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    pub name: String,
    /// `None` for the node tier.
    pub label: Option<String>,
    pub nvlink: bool,
    /// Which ladder the tier belongs to (0: configured, 1: Volcano's). The node tier is in both.
    pub ladder: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    pub tier: TierId,
    /// The label values from the ladder's coarsest tier down to this one, joined by `/`
    /// (`node:NAME` where a node stands alone; coarser tiers a node has no label for are left
    /// out).
    pub name: String,
    /// Indices of its nodes (in the caller's node order), ascending.
    pub nodes: Vec<u32>,
    /// Whether the domain stands for a single node missing the tier's label.
    pub alone: bool,
}

/// A problem with the configured tiers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("topology.tiers: {0}")]
pub struct TierError(pub String);

/// Checks the configured tiers: unique, non-empty names, none called `node`, distinct labels,
/// and at most one NVLink tier, which must be the finest.
pub fn validate_tiers(tiers: &[TierSpec]) -> Result<(), TierError> {
    let mut names = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for (i, t) in tiers.iter().enumerate() {
        if t.name.is_empty() || t.node_label.is_empty() {
            return Err(TierError(format!(
                "[{i}]: name and nodeLabel must not be empty"
            )));
        }
        if t.name == NODE_TIER {
            return Err(TierError(format!(
                "[{i}]: {NODE_TIER:?} is the built-in finest tier and cannot be configured"
            )));
        }
        if !names.insert(&t.name) {
            return Err(TierError(format!(
                "[{i}]: duplicate tier name {:?}",
                t.name
            )));
        }
        if !labels.insert(&t.node_label) {
            return Err(TierError(format!(
                "[{i}]: node label {:?} is used by two tiers",
                t.node_label
            )));
        }
        if t.nvlink && i + 1 != tiers.len() {
            return Err(TierError(format!(
                "[{i}]: the NVLink tier {:?} must be the finest (last) configured tier",
                t.name
            )));
        }
    }
    Ok(())
}

/// The tiers and domains of one cluster.
#[derive(Clone, Debug)]
pub struct Topology {
    pub tiers: Vec<Tier>,
    pub domains: Vec<Domain>,
    /// Per ladder: its tiers coarse to fine, ending with the node tier.
    pub ladders: Vec<Vec<TierId>>,
    /// Per node, per tier: the node's domain (`None` for tiers of a ladder the node has no
    /// label of at all, which cannot happen: a node without a label stands alone).
    node_domains: Vec<Vec<DomainId>>,
    graph: DiGraph<DomainId, ()>,
    vertex: Vec<NodeIndex>,
}

impl Topology {
    /// Builds the domains of `nodes` (name and labels, in the caller's order) under the
    /// configured tiers (already validated) plus any Volcano HyperNode tiers found on nodes.
    pub fn build<'n>(
        tiers: &[TierSpec],
        nodes: &[(&'n str, &'n BTreeMap<String, String>)],
    ) -> Topology {
        let mut all: Vec<Tier> = tiers
            .iter()
            .map(|t| Tier {
                name: t.name.clone(),
                label: Some(t.node_label.clone()),
                nvlink: t.nvlink,
                ladder: 0,
            })
            .collect();
        let mut ladders = vec![(0..all.len() as u32).map(TierId).collect::<Vec<_>>()];
        // Volcano tiers not configured under their own label, coarsest (highest N) first.
        let configured: BTreeSet<&str> = tiers.iter().map(|t| t.node_label.as_str()).collect();
        let volcano: BTreeSet<std::cmp::Reverse<u32>> = nodes
            .iter()
            .flat_map(|(_, labels)| labels.keys())
            .filter(|k| !configured.contains(k.as_str()))
            .filter_map(|k| k.strip_prefix(VOLCANO_TIER_LABEL)?.parse().ok())
            .map(std::cmp::Reverse)
            .collect();
        if !volcano.is_empty() {
            let mut ladder = Vec::new();
            for std::cmp::Reverse(n) in volcano {
                ladder.push(TierId(all.len() as u32));
                all.push(Tier {
                    name: format!("{VOLCANO_TIER_NAME}{n}"),
                    label: Some(format!("{VOLCANO_TIER_LABEL}{n}")),
                    nvlink: false,
                    ladder: 1,
                });
            }
            ladders.push(ladder);
        }
        let node_tier = TierId(all.len() as u32);
        all.push(Tier {
            name: NODE_TIER.to_string(),
            label: None,
            nvlink: false,
            ladder: 0,
        });
        for ladder in &mut ladders {
            ladder.push(node_tier);
        }

        let mut domains: Vec<Domain> = Vec::new();
        let mut graph = DiGraph::new();
        let mut vertex = Vec::new();
        // Label values and value paths are interned, so the per-node work hashes integers,
        // never strings it has to build.
        const STAR: u32 = u32::MAX;
        let mut values: HashMap<&str, u32> = HashMap::new();
        let mut chains: HashMap<(u32, u32), u32> = HashMap::new();
        let mut labelled: HashMap<(u32, u32), DomainId> = HashMap::new();
        let node_tier_index = node_tier.0 as usize;
        let mut node_domains = vec![vec![DomainId(u32::MAX); all.len()]; nodes.len()];
        let mut shown: Vec<&str> = Vec::new();
        let mut new_domain = |domains: &mut Vec<Domain>, tier, name: String, alone| {
            let id = DomainId(domains.len() as u32);
            domains.push(Domain {
                tier,
                name,
                nodes: Vec::new(),
                alone,
            });
            vertex.push(graph.add_node(id));
            id
        };
        let mut edges: Vec<(DomainId, DomainId)> = Vec::new();
        for (i, (name, labels)) in nodes.iter().enumerate() {
            for ladder in &ladders {
                // The coarser tiers' values; a missing one is shared ("*"), so nodes without a
                // spine label but in the same rack still form one rack.
                let mut chain = 0u32;
                shown.clear();
                let mut parent: Option<DomainId> = None;
                for &tier in ladder {
                    let t = &all[tier.0 as usize];
                    let id = if tier.0 as usize == node_tier_index {
                        // One node domain per node, shared by the ladders.
                        match node_domains[i][node_tier_index] {
                            d if d.0 != u32::MAX => d,
                            _ => new_domain(&mut domains, tier, name.to_string(), false),
                        }
                    } else {
                        let value = t.label.as_ref().and_then(|l| labels.get(l));
                        let next = values.len() as u32;
                        let vid = value.map_or(STAR, |v| *values.entry(v.as_str()).or_insert(next));
                        let next = chains.len() as u32 + 1;
                        chain = *chains.entry((chain, vid)).or_insert(next);
                        match value {
                            Some(v) => {
                                shown.push(v);
                                match labelled.get(&(tier.0, chain)) {
                                    Some(&d) => d,
                                    None => {
                                        let d =
                                            new_domain(&mut domains, tier, shown.join("/"), false);
                                        labelled.insert((tier.0, chain), d);
                                        d
                                    }
                                }
                            }
                            // A node missing the label stands alone at this tier.
                            None => new_domain(&mut domains, tier, format!("node:{name}"), true),
                        }
                    };
                    let d = &mut domains[id.index()];
                    if d.nodes.last() != Some(&(i as u32)) {
                        d.nodes.push(i as u32);
                    }
                    node_domains[i][tier.0 as usize] = id;
                    if let Some(p) = parent {
                        edges.push((p, id));
                    }
                    parent = Some(id);
                }
            }
        }
        edges.sort_unstable();
        edges.dedup();
        for (a, b) in edges {
            graph.add_edge(vertex[a.index()], vertex[b.index()], ());
        }
        Topology {
            tiers: all,
            domains,
            ladders,
            node_domains,
            graph,
            vertex,
        }
    }

    pub fn tier_id(&self, name: &str) -> Option<TierId> {
        self.tiers
            .iter()
            .position(|t| t.name == name)
            .map(|i| TierId(i as u32))
    }

    pub fn tier(&self, id: TierId) -> &Tier {
        &self.tiers[id.0 as usize]
    }

    pub fn node_tier(&self) -> TierId {
        TierId(self.tiers.len() as u32 - 1)
    }

    pub fn domain(&self, id: DomainId) -> &Domain {
        &self.domains[id.index()]
    }

    /// The node's domain at `tier`.
    pub fn domain_of(&self, node: usize, tier: TierId) -> DomainId {
        self.node_domains[node][tier.0 as usize]
    }

    /// The one domain of `tier` holding all of `d`'s nodes, if there is one. A coarser tier's
    /// domain usually is; not when `d`'s nodes stand alone at `tier` (missing its label).
    pub fn enclosing(&self, d: DomainId, tier: TierId) -> Option<DomainId> {
        let nodes = &self.domain(d).nodes;
        let first = self.domain_of(*nodes.first()? as usize, tier);
        nodes
            .iter()
            .all(|&n| self.domain_of(n as usize, tier) == first)
            .then_some(first)
    }

    /// Every domain the node is in, one per tier.
    pub fn domains_of(&self, node: usize) -> &[DomainId] {
        &self.node_domains[node]
    }

    /// The domains directly inside `id` (one tier finer in the same ladder).
    pub fn children(&self, id: DomainId) -> impl Iterator<Item = DomainId> + '_ {
        self.graph
            .neighbors(self.vertex[id.index()])
            .map(|v| self.graph[v])
    }

    /// The ladder a set of tiers belongs to: the Volcano ladder when any is a Volcano tier.
    pub fn ladder_for(&self, tiers: impl IntoIterator<Item = TierId>) -> &[TierId] {
        let ladder = tiers
            .into_iter()
            .map(|t| self.tier(t).ladder)
            .find(|&l| l > 0)
            .unwrap_or(0);
        &self.ladders[ladder.min(self.ladders.len() - 1)]
    }

    /// The names of all tiers, for messages.
    pub fn tier_names(&self) -> Vec<&str> {
        self.tiers.iter().map(|t| t.name.as_str()).collect()
    }

    /// Whether any node carries a label of some tier: without one, every domain above the node
    /// is a single node and a topology search has nothing to choose.
    pub fn is_flat(&self) -> bool {
        self.domains.iter().all(|d| d.alone || d.nodes.len() <= 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers() -> Vec<TierSpec> {
        vec![
            TierSpec {
                name: "spine".into(),
                node_label: "spine".into(),
                nvlink: false,
            },
            TierSpec {
                name: "rack".into(),
                node_label: "rack".into(),
                nvlink: false,
            },
            TierSpec {
                name: "nvlink".into(),
                node_label: "nvidia.com/gpu.clique".into(),
                nvlink: true,
            },
        ]
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn same_rack_name_under_two_spines_is_two_domains() {
        let a = labels(&[("spine", "s1"), ("rack", "r1")]);
        let b = labels(&[("spine", "s2"), ("rack", "r1")]);
        let c = labels(&[("spine", "s1"), ("rack", "r1")]);
        let t = Topology::build(&tiers(), &[("a", &a), ("b", &b), ("c", &c)]);
        let rack = t.tier_id("rack").unwrap();
        assert_eq!(t.domain_of(0, rack), t.domain_of(2, rack));
        assert_ne!(t.domain_of(0, rack), t.domain_of(1, rack));
        assert_eq!(t.domain(t.domain_of(0, rack)).name, "s1/r1");
        let spine = t.domain_of(0, t.tier_id("spine").unwrap());
        let kids: Vec<DomainId> = t.children(spine).collect();
        assert_eq!(kids, vec![t.domain_of(0, rack)]);
    }

    #[test]
    fn unlabelled_node_stands_alone() {
        let a = labels(&[("spine", "s1")]);
        let b = labels(&[("spine", "s1")]);
        let t = Topology::build(&tiers(), &[("a", &a), ("b", &b)]);
        let rack = t.tier_id("rack").unwrap();
        assert_ne!(t.domain_of(0, rack), t.domain_of(1, rack));
        assert!(t.domain(t.domain_of(0, rack)).alone);
        assert!(!t.is_flat());
    }

    #[test]
    fn missing_coarser_label_does_not_split_a_rack() {
        let a = labels(&[("rack", "r1")]);
        let b = labels(&[("rack", "r1")]);
        let c = labels(&[("spine", "s1"), ("rack", "r1")]);
        let t = Topology::build(&tiers(), &[("a", &a), ("b", &b), ("c", &c)]);
        let rack = t.tier_id("rack").unwrap();
        let spine = t.tier_id("spine").unwrap();
        assert_eq!(t.domain_of(0, rack), t.domain_of(1, rack));
        assert_ne!(t.domain_of(0, rack), t.domain_of(2, rack));
        assert_ne!(t.domain_of(0, spine), t.domain_of(1, spine));
        assert_eq!(t.domain(t.domain_of(0, rack)).name, "r1");
        // Rack r1 of the spine-less nodes lies in no single spine domain.
        assert_eq!(t.enclosing(t.domain_of(0, rack), spine), None);
        assert_eq!(
            t.enclosing(t.domain_of(2, rack), spine),
            Some(t.domain_of(2, spine))
        );
    }

    #[test]
    fn volcano_tiers_form_their_own_ladder() {
        let a = labels(&[
            ("topology.volcano.sh/tier-1", "leaf-a"),
            ("topology.volcano.sh/tier-2", "spine"),
        ]);
        let b = labels(&[
            ("topology.volcano.sh/tier-1", "leaf-b"),
            ("topology.volcano.sh/tier-2", "spine"),
        ]);
        let t = Topology::build(&tiers(), &[("a", &a), ("b", &b)]);
        let t1 = t.tier_id("volcano-tier-1").unwrap();
        let t2 = t.tier_id("volcano-tier-2").unwrap();
        assert_eq!(t.ladder_for([t1]), &[t2, t1, t.node_tier()]);
        assert_eq!(t.domain_of(0, t2), t.domain_of(1, t2));
        assert_ne!(t.domain_of(0, t1), t.domain_of(1, t1));
    }

    #[test]
    fn tier_validation() {
        let mut bad = tiers();
        bad.swap(1, 2);
        assert!(validate_tiers(&bad).unwrap_err().0.contains("finest"));
        assert!(validate_tiers(&tiers()).is_ok());
        let mut dup = tiers();
        dup[1].name = "spine".into();
        assert!(validate_tiers(&dup).unwrap_err().0.contains("duplicate"));
    }
}

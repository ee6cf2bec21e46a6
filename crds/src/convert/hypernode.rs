//! Volcano's HyperNodes (`topology.volcano.sh/v1alpha1`) to node labels: every node a
//! HyperNode of tier N contains, directly or through child HyperNodes, gets
//! `topology.volcano.sh/tier-N: <HyperNode>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{label_selector, ConvertError, Cx};
use crate::read::Object;
use crate::types::volcano::{self, HyperNode, MemberType};

/// One HyperNode, checked: its tier and its members resolved to node names and child HyperNodes.
struct Hyper<'a> {
    cx: Cx<'a>,
    name: String,
    tier: i64,
    /// Nodes named or selected directly.
    nodes: BTreeSet<String>,
    /// Child HyperNodes, with the member index that names each.
    children: Vec<(usize, String)>,
}

/// The node labels Volcano's HyperNodes stand for: for every node that a HyperNode of tier N
/// contains, directly or through child HyperNodes, `topology.volcano.sh/tier-N: <HyperNode>`.
/// Keyed by node name. A node in two HyperNodes of one tier gets the first by name, with a
/// warning.
pub(super) fn hypernode_labels(
    objects: &[(String, Object)],
    warnings: &mut Vec<String>,
) -> Result<HashMap<String, BTreeMap<String, String>>, ConvertError> {
    let nodes: Vec<(&str, BTreeMap<String, String>)> = objects
        .iter()
        .filter_map(|(_, o)| match o {
            Object::Node(n) => Some((
                n.metadata.name.as_deref()?,
                n.metadata.labels.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect();
    let mut hypers: Vec<Hyper> = Vec::new();
    for (origin, object) in objects {
        let Object::HyperNode(h) = object else {
            continue;
        };
        let cx = Cx {
            origin,
            kind: "HyperNode",
            object: super::Named::Of(object),
        };
        let hyper = check_hypernode(cx, h, &nodes)?;
        if hypers.iter().any(|o| o.name == hyper.name) {
            return Err(hyper.cx.err("metadata.name", "duplicate HyperNode"));
        }
        hypers.push(hyper);
    }
    if hypers.is_empty() {
        return Ok(HashMap::new());
    }
    // By name: "first by name wins" and the messages do not depend on the input order.
    hypers.sort_by(|a, b| a.name.cmp(&b.name));
    let index: HashMap<&str, usize> = hypers
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.as_str(), i))
        .collect();
    for h in &hypers {
        for (m, child) in &h.children {
            if !index.contains_key(child.as_str()) {
                warnings.push(h.cx.warning(
                    format!("spec.members[{m}].selector.exactMatch.name"),
                    format!("HyperNode {child} does not exist; member skipped"),
                ));
            }
        }
    }
    let mut all: Vec<Option<BTreeSet<String>>> = vec![None; hypers.len()];
    for i in 0..hypers.len() {
        let mut path = Vec::new();
        contained_nodes(&hypers, &index, i, &mut path, &mut all)?;
    }

    // Node -> label -> HyperNode.
    let mut out: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    for (h, nodes) in hypers.iter().zip(all) {
        let key = volcano::tier_label(h.tier);
        // Every entry is Some: contained_nodes resolved them all.
        for node in nodes.into_iter().flatten() {
            let labels = out.entry(node.clone()).or_default();
            match labels.get(&key) {
                None => {
                    labels.insert(key.clone(), h.name.clone());
                }
                Some(first) => warnings.push(h.cx.warning(
                    "spec.members",
                    format!(
                        "node {node} is also in HyperNode {first} of tier {}; {first} wins (first by name)",
                        h.tier
                    ),
                )),
            }
        }
    }
    Ok(out)
}

/// The nodes HyperNode `i` contains, through its children too, memoized in `all`. `path` is the
/// chain of HyperNodes being resolved, to report a cycle.
fn contained_nodes(
    hypers: &[Hyper],
    index: &HashMap<&str, usize>,
    i: usize,
    path: &mut Vec<usize>,
    all: &mut Vec<Option<BTreeSet<String>>>,
) -> Result<(), ConvertError> {
    if all[i].is_some() {
        return Ok(());
    }
    path.push(i);
    let h = &hypers[i];
    let mut nodes = h.nodes.clone();
    for (m, child) in &h.children {
        let Some(&c) = index.get(child.as_str()) else {
            continue;
        };
        if let Some(start) = path.iter().position(|&p| p == c) {
            let cycle: Vec<&str> = path[start..]
                .iter()
                .chain([&c])
                .map(|&p| hypers[p].name.as_str())
                .collect();
            return Err(h.cx.err(
                format!("spec.members[{m}]"),
                format!("HyperNodes form a cycle: {}", cycle.join(" -> ")),
            ));
        }
        contained_nodes(hypers, index, c, path, all)?;
        nodes.extend(all[c].iter().flatten().cloned());
    }
    path.pop();
    all[i] = Some(nodes);
    Ok(())
}

/// Checks one HyperNode and resolves its node members against `nodes` (name and labels).
fn check_hypernode<'a>(
    cx: Cx<'a>,
    h: &HyperNode,
    nodes: &[(&str, BTreeMap<String, String>)],
) -> Result<Hyper<'a>, ConvertError> {
    let name = cx.name(&h.metadata)?.to_string();
    let tier = match &h.spec.tier {
        None => return Err(cx.err("spec.tier", "missing")),
        Some(t) => match t.value() {
            Ok(n) if n >= 0 => n,
            Ok(n) => return Err(cx.err("spec.tier", format!("must not be negative, got {n}"))),
            Err(text) => {
                return Err(cx.err("spec.tier", format!("expected an integer, got {text:?}")))
            }
        },
    };
    let mut direct = BTreeSet::new();
    let mut children = Vec::new();
    for (m, member) in h.spec.members.iter().enumerate() {
        let at = format!("spec.members[{m}].selector");
        let sel = &member.selector;
        let set = [
            sel.exact_match.is_some(),
            sel.regex_match.is_some(),
            sel.label_match.is_some(),
        ]
        .into_iter()
        .filter(|&b| b)
        .count();
        if set != 1 {
            return Err(cx.err(
                &at,
                format!("expected exactly one of exactMatch, regexMatch and labelMatch, got {set}"),
            ));
        }
        if let Some(exact) = &sel.exact_match {
            if exact.name.is_empty() {
                return Err(cx.err(format!("{at}.exactMatch.name"), "must not be empty"));
            }
            match member.type_ {
                MemberType::Node => {
                    direct.insert(exact.name.clone());
                }
                MemberType::HyperNode => children.push((m, exact.name.clone())),
            }
            continue;
        }
        if member.type_ == MemberType::HyperNode {
            return Err(cx.err(
                &at,
                "a HyperNode member is named by exactMatch only (as in Volcano)",
            ));
        }
        if let Some(r) = &sel.regex_match {
            let field = format!("{at}.regexMatch.pattern");
            if r.pattern.is_empty() {
                return Err(cx.err(field, "must not be empty"));
            }
            let re = regex::Regex::new(&r.pattern)
                .map_err(|e| cx.err(&field, format!("invalid regular expression: {e}")))?;
            // Unanchored, as Go's regexp.MatchString in Volcano.
            direct.extend(
                nodes
                    .iter()
                    .filter(|(n, _)| re.is_match(n))
                    .map(|(n, _)| n.to_string()),
            );
        }
        if let Some(selector) = &sel.label_match {
            let matches = label_selector(&cx, &format!("{at}.labelMatch"), selector)?;
            direct.extend(
                nodes
                    .iter()
                    .filter(|(_, labels)| matches(labels))
                    .map(|(n, _)| n.to_string()),
            );
        }
    }
    Ok(Hyper {
        cx,
        name,
        tier,
        nodes: direct,
        children,
    })
}

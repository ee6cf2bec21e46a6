//! Gang topology: Basalt's `topology` / `subGroups`, Volcano's `networkTopology` /
//! `subGroupPolicy` and HyperNodes, from manifests to the engine's specs and snapshot, and the
//! messages for bad input.

mod common;

use std::collections::BTreeMap;

use basalt_crds::types::volcano::{tier_label, tier_name};
use basalt_crds::{
    build_snapshot, build_snapshot_with_warnings, cluster_spec, cluster_spec_with_warnings,
    load_files, read_objects, ConvertOptions, Object, PodGroup,
};
use basalt_engine::{GroupSpec, SelectorOperator, SelectorRequirement, SubGroupSpec, TopologySpec};
use common::{data, objects};

fn tiers(required: Option<&str>, preferred: Option<&str>) -> TopologySpec {
    TopologySpec {
        required: required.map(str::to_string),
        preferred: preferred.map(str::to_string),
    }
}

fn group<'s>(groups: &'s [GroupSpec], name: &str) -> &'s GroupSpec {
    groups.iter().find(|g| g.name == name).unwrap()
}

/// Reads `text` as `file` and converts it, returning the error message.
fn fail(file: &str, text: &str) -> String {
    let objects = match read_objects(file, text) {
        Ok(l) => l.objects,
        Err(e) => return e.to_string(),
    };
    build_snapshot(&objects, &ConvertOptions::default())
        .map(|_| ())
        .expect_err("expected an error")
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Basalt PodGroup
// ---------------------------------------------------------------------------------------------

#[test]
fn basalt_topology_and_sub_groups_reach_the_group_spec() {
    let spec = cluster_spec(&data("topology.yaml").objects, &ConvertOptions::default()).unwrap();
    let tp = group(&spec.groups, "tp");
    assert_eq!(tp.topology, tiers(Some("rack"), Some("nvlink")));
    assert_eq!(
        tp.sub_groups,
        [SubGroupSpec {
            name: "tp".into(),
            size: 2,
            match_label_keys: vec![],
            topology: tiers(Some("nvlink"), None),
            ..SubGroupSpec::default()
        }]
    );
    let pd = group(&spec.groups, "pd");
    assert_eq!(pd.topology, TopologySpec::default());
    assert_eq!(
        pd.sub_groups,
        [SubGroupSpec {
            name: "shard".into(),
            size: 1,
            match_label_keys: vec!["example.com/tp-group".into()],
            topology: tiers(None, Some("nvlink")),
            ..SubGroupSpec::default()
        }]
    );
    let ranks: BTreeMap<&str, Option<u32>> = spec
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.rank))
        .collect();
    assert_eq!(ranks["w-0"], Some(0));
    assert_eq!(ranks["w-1"], Some(1));
    assert_eq!(ranks["w-2"], Some(2));
    assert_eq!(ranks["w-3"], Some(3));
    assert_eq!(ranks["pd-a"], None);
}

#[test]
fn snapshot_cuts_rank_blocks_and_label_groups() {
    let snap = build_snapshot(&data("topology.yaml").objects, &ConvertOptions::default()).unwrap();
    let job = snap.jobs.iter().find(|j| &*j.name == "ml/tp").unwrap();
    assert_eq!(job.topology, tiers(Some("rack"), Some("nvlink")));
    let blocks: Vec<(&str, Vec<&str>)> = job
        .sub_groups
        .iter()
        .map(|g| {
            let names = g.tasks.iter().map(|&t| &*snap.task(t).name);
            (g.name.as_str(), names.collect())
        })
        .collect();
    // The file lists w-3, w-1, w-2, w-0: the blocks follow the rank labels.
    assert_eq!(
        blocks,
        [
            ("tp-0", vec!["ml/w-0", "ml/w-1"]),
            ("tp-1", vec!["ml/w-2", "ml/w-3"])
        ]
    );
    assert!(job
        .sub_groups
        .iter()
        .all(|g| g.topology == tiers(Some("nvlink"), None)));

    let job = snap.jobs.iter().find(|j| &*j.name == "ml/pd").unwrap();
    let mut groups: Vec<(&str, Vec<&str>)> = job
        .sub_groups
        .iter()
        .map(|g| {
            let mut names: Vec<&str> = g.tasks.iter().map(|&t| &*snap.task(t).name).collect();
            names.sort();
            (g.name.as_str(), names)
        })
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        [
            ("shard-a", vec!["ml/pd-a", "ml/pd-a2"]),
            ("shard-b", vec!["ml/pd-b"])
        ]
    );
}

#[test]
fn fields_keep_their_names_when_written_back() {
    let loaded = data("topology.yaml");
    let g = loaded
        .objects
        .iter()
        .find_map(|(_, o)| match o {
            Object::PodGroup(g) if g.metadata.name.as_deref() == Some("tp") => Some(g),
            _ => None,
        })
        .unwrap();
    let value = serde_json::to_value(g.as_ref()).unwrap();
    assert_eq!(
        value["spec"]["topology"],
        serde_json::json!({"required": "rack", "preferred": "nvlink"})
    );
    assert_eq!(
        value["spec"]["subGroups"],
        serde_json::json!([{"name": "tp", "size": 2, "topology": {"required": "nvlink"}}])
    );
    // And an empty constraint is not written at all.
    let plain = PodGroup::new("p", Default::default());
    let value = serde_json::to_value(&plain).unwrap();
    assert!(value["spec"].get("topology").is_none(), "{value}");
    assert!(value["spec"].get("subGroups").is_none(), "{value}");
}

const PG_HEAD: &str =
    "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n";

#[test]
fn bad_basalt_sub_groups_and_tiers_name_the_field() {
    let cases = [
        (
            "spec:\n  subGroups:\n  - {name: '', size: 2}\n",
            "spec.subGroups[0].name: must not be empty",
        ),
        (
            "spec:\n  subGroups:\n  - {name: a, size: 2}\n  - {name: b, size: 0}\n",
            "spec.subGroups[1].size: must be at least 1, got 0",
        ),
        (
            "spec:\n  subGroups:\n  - {name: a, size: -3}\n",
            "spec.subGroups[0].size: must be at least 1, got -3",
        ),
        (
            "spec:\n  subGroups:\n  - {name: tp, size: 2}\n  - {name: tp, size: 4}\n",
            "spec.subGroups[1].name: duplicate sub-group name \"tp\" (also spec.subGroups[0])",
        ),
        (
            "spec:\n  topology: {required: ''}\n",
            "spec.topology.required: must name a tier, not be empty",
        ),
        (
            "spec:\n  topology: {required: rack, preferred: ''}\n",
            "spec.topology.preferred: must name a tier, not be empty",
        ),
        (
            "spec:\n  subGroups:\n  - {name: tp, size: 2, topology: {required: ''}}\n",
            "spec.subGroups[0].topology.required: must name a tier, not be empty",
        ),
        (
            "spec:\n  subGroups:\n  - {name: tp, size: 2, matchLabelKeys: [a, '']}\n",
            "spec.subGroups[0].matchLabelKeys[1]: must not be empty",
        ),
    ];
    for (spec, want) in cases {
        let msg = fail("g.yaml", &format!("{PG_HEAD}{spec}"));
        assert_eq!(msg, format!("g.yaml: document 1: PodGroup ml/g: {want}"));
    }
}

#[test]
fn basalt_sub_group_without_name_or_size_is_a_read_error() {
    let msg = fail(
        "g.yaml",
        &format!("{PG_HEAD}spec:\n  subGroups:\n  - {{size: 2}}\n"),
    );
    assert_eq!(
        msg,
        "g.yaml: document 1: PodGroup ml/g: spec.subGroups[0]: missing field `name`"
    );
    let msg = fail(
        "g.yaml",
        &format!("{PG_HEAD}spec:\n  subGroups:\n  - {{name: tp}}\n"),
    );
    assert_eq!(
        msg,
        "g.yaml: document 1: PodGroup ml/g: spec.subGroups[0]: missing field `size`"
    );
}

// ---------------------------------------------------------------------------------------------
// Volcano PodGroup and HyperNodes
// ---------------------------------------------------------------------------------------------

#[test]
fn volcano_network_topology_and_sub_group_policy() {
    let spec = cluster_spec(&data("hypernodes.yaml").objects, &ConvertOptions::default()).unwrap();
    let llm = group(&spec.groups, "llm");
    assert_eq!(llm.topology, tiers(Some("volcano-tier-2"), None));
    assert_eq!(
        llm.sub_groups,
        [
            SubGroupSpec {
                name: "part".into(),
                size: 2,
                match_label_keys: vec!["volcano.sh/partition-id".into()],
                topology: tiers(Some("volcano-tier-1"), None),
                ..SubGroupSpec::default()
            },
            SubGroupSpec {
                name: "rest".into(),
                size: 1,
                match_label_keys: vec![],
                // Soft without a tier: the closest tier, preferred.
                topology: tiers(None, Some("volcano-tier-1")),
                ..SubGroupSpec::default()
            }
        ]
    );
    assert_eq!(
        group(&spec.groups, "best-effort").topology,
        tiers(None, Some("volcano-tier-2"))
    );
    assert_eq!(
        group(&spec.groups, "default-mode").topology,
        tiers(Some("spine"), None),
        "mode defaults to hard; highestTierName is taken as the tier name"
    );
    assert_eq!(tier_name(2), "volcano-tier-2");
}

#[test]
fn hypernodes_become_tier_labels_on_their_nodes() {
    let (spec, warnings) =
        cluster_spec_with_warnings(&data("hypernodes.yaml").objects, &ConvertOptions::default())
            .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let labels = |node: &str| -> Vec<(String, String)> {
        let n = spec.nodes.iter().find(|n| n.name == node).unwrap();
        n.labels
            .iter()
            .filter(|(k, _)| k.starts_with("topology.volcano.sh/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let l = |pairs: &[(i64, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(t, h)| (tier_label(t), h.to_string()))
            .collect()
    };
    assert_eq!(labels("node-0"), l(&[(1, "s0"), (2, "s2")]));
    assert_eq!(labels("node-1"), l(&[(1, "s0"), (2, "s2")]));
    assert_eq!(labels("node-2"), l(&[(1, "s1"), (2, "s2")]));
    assert_eq!(labels("node-3"), l(&[(1, "s1"), (2, "s2")]));
    assert_eq!(labels("node-4"), l(&[(1, "s3")]), "labelMatch");
    assert_eq!(labels("node-5"), l(&[]), "zone DoesNotExist excludes it");
    // Other labels stay.
    let n4 = spec.nodes.iter().find(|n| n.name == "node-4").unwrap();
    assert_eq!(n4.labels["pool"], "extra");
}

#[test]
fn regex_members_are_unanchored_like_go() {
    let text = "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: gpu-a1}\n- metadata: {name: cpu-b1}\n- metadata: {name: big-gpu-a9}\n---\n\
                apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: h}\n\
                spec:\n  tier: 1\n  members:\n  - {type: Node, selector: {regexMatch: {pattern: gpu-a}}}\n";
    let spec = cluster_spec(&objects("h.yaml", text), &ConvertOptions::default()).unwrap();
    let inside: Vec<&str> = spec
        .nodes
        .iter()
        .filter(|n| n.labels.contains_key("topology.volcano.sh/tier-1"))
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(inside, ["gpu-a1", "big-gpu-a9"]);
}

const NODES: &str = "apiVersion: v1\nkind: NodeList\nitems:\n\
                     - metadata: {name: n0}\n\
                     - metadata: {name: n1, labels: {topology.volcano.sh/tier-1: own}}\n";

fn hypernode(name: &str, tier: &str, members: &str) -> String {
    format!(
        "---\napiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {{name: {name}}}\n\
         spec:\n  tier: {tier}\n  members:\n{members}"
    )
}

#[test]
fn conflicts_keep_the_first_hypernode_and_the_nodes_own_labels_with_warnings() {
    let text = format!(
        "{NODES}{}{}{}",
        hypernode(
            "b",
            "1",
            "  - {type: Node, selector: {exactMatch: {name: n0}}}\n"
        ),
        hypernode(
            "a",
            "1",
            "  - {type: Node, selector: {regexMatch: {pattern: '^n'}}}\n"
        ),
        hypernode(
            "top",
            "2",
            "  - {type: HyperNode, selector: {exactMatch: {name: a}}}\n  - {type: HyperNode, selector: {exactMatch: {name: gone}}}\n"
        ),
    );
    let objects = objects("h.yaml", &text);
    let (snapshot, warnings) =
        build_snapshot_with_warnings(&objects, &ConvertOptions::default()).unwrap();
    let label = |node: &str, tier: i64| {
        let n = snapshot.nodes.iter().find(|n| n.name == node).unwrap();
        n.labels.get(&tier_label(tier)).cloned()
    };
    assert_eq!(label("n0", 1).as_deref(), Some("a"), "first by name wins");
    assert_eq!(label("n1", 1).as_deref(), Some("own"), "never overwritten");
    assert_eq!(label("n0", 2).as_deref(), Some("top"));
    assert_eq!(label("n1", 2).as_deref(), Some("top"));
    assert_eq!(
        warnings,
        [
            "h.yaml: document 4: HyperNode top: spec.members[1].selector.exactMatch.name: HyperNode gone does not exist; member skipped",
            "h.yaml: document 2: HyperNode b: spec.members: node n0 is also in HyperNode a of tier 1; a wins (first by name)",
            "h.yaml: document 1: items[1]: Node n1: metadata.labels[topology.volcano.sh/tier-1]: kept \"own\", not HyperNode a that contains the node",
        ]
    );
}

#[test]
fn load_files_reports_read_and_conversion_warnings() {
    let dir = std::env::temp_dir().join(format!("basalt-crds-topology-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.yaml");
    let text = format!(
        "{NODES}{}{}---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: j, namespace: ml}}\n\
         spec:\n  subGroupPolicy:\n  - name: p\n    labelSelector: {{matchLabels: {{role: w}}}}\n    minSubGroups: 2\n",
        hypernode("a", "1", "  - {type: Node, selector: {exactMatch: {name: n0}}}\n"),
        hypernode("b", "1", "  - {type: Node, selector: {exactMatch: {name: n0}}}\n"),
    );
    std::fs::write(&path, text).unwrap();
    let (snapshot, warnings) =
        load_files(std::slice::from_ref(&path), &ConvertOptions::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let file = path.display().to_string();
    assert_eq!(
        warnings,
        [
            format!("{file}: document 3: HyperNode b: spec.members: node n0 is also in HyperNode a of tier 1; a wins (first by name)"),
        ]
    );
    assert_eq!(snapshot.nodes.len(), 2);
    // labelSelector and minSubGroups are honoured, not warned about.
    let job = &snapshot.jobs[0];
    assert_eq!(job.sub_group_policies[0].min_sub_groups, 2);
}

#[test]
fn sub_group_label_selector_and_min_sub_groups_convert() {
    let text = format!(
        "{VPG_HEAD}spec:\n  subGroupPolicy:\n  - name: p\n    matchLabelKeys: [part]\n    minSubGroups: 1\n    \
         labelSelector: {{matchLabels: {{role: w}}, matchExpressions: [{{key: tier, operator: NotIn, values: [x]}}]}}\n"
    );
    let spec = cluster_spec(&objects("v.yaml", &text), &ConvertOptions::default()).unwrap();
    let sg = &spec.groups[0].sub_groups[0];
    assert_eq!(sg.min_sub_groups, 1);
    assert_eq!(
        sg.selector,
        [
            SelectorRequirement {
                key: "role".into(),
                operator: SelectorOperator::In,
                values: vec!["w".into()],
            },
            SelectorRequirement {
                key: "tier".into(),
                operator: SelectorOperator::NotIn,
                values: vec!["x".into()],
            },
        ]
    );
    for (bad, field) in [
        (
            "minSubGroups: -1",
            "spec.subGroupPolicy[0].minSubGroups: must not be negative, got -1",
        ),
        (
            "labelSelector: {matchExpressions: [{key: a, operator: Near}]}",
            "labelSelector.matchExpressions[0].operator: unknown operator \"Near\"",
        ),
    ] {
        let text = format!("{VPG_HEAD}spec:\n  subGroupPolicy:\n  - name: p\n    {bad}\n");
        let err = match read_objects("v.yaml", &text) {
            Err(e) => e.to_string(),
            Ok(l) => cluster_spec(&l.objects, &ConvertOptions::default())
                .unwrap_err()
                .to_string(),
        };
        assert!(err.contains(field), "{err}");
    }
}

const VPG_HEAD: &str =
    "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: j, namespace: ml}\n";

#[test]
fn volcano_pod_group_with_null_spec_gets_defaults() {
    let spec = cluster_spec(
        &objects("v.yaml", &format!("{VPG_HEAD}spec:\n")),
        &ConvertOptions::default(),
    )
    .unwrap();
    assert_eq!(spec.groups[0].min_member, 1);
    assert_eq!(spec.groups[0].topology, TopologySpec::default());
    assert!(spec.groups[0].sub_groups.is_empty());
}

#[test]
fn bad_volcano_topology_names_the_field() {
    let cases = [
        (
            "spec:\n  networkTopology: {mode: hard}\n",
            "spec.networkTopology.highestTierAllowed: required in hard mode (or highestTierName)",
        ),
        (
            "spec:\n  networkTopology: {}\n",
            "spec.networkTopology.highestTierAllowed: required in hard mode (or highestTierName)",
        ),
        (
            "spec:\n  networkTopology: {mode: strict, highestTierAllowed: 1}\n",
            "spec.networkTopology.mode: unknown mode \"strict\": expected hard or soft",
        ),
        (
            "spec:\n  networkTopology: {highestTierAllowed: 1, highestTierName: spine}\n",
            "spec.networkTopology: highestTierAllowed and highestTierName exclude each other",
        ),
        (
            "spec:\n  networkTopology: {mode: soft, highestTierAllowed: -1}\n",
            "spec.networkTopology.highestTierAllowed: must not be negative, got -1",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {name: p, subGroupSize: 0}\n",
            "spec.subGroupPolicy[0].subGroupSize: must be at least 1, got 0",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {subGroupSize: 2}\n",
            "spec.subGroupPolicy[0].name: must not be empty",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {name: p}\n  - {name: p}\n",
            "spec.subGroupPolicy[1].name: duplicate sub-group name \"p\"",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {name: p, matchLabelKeys: ['']}\n",
            "spec.subGroupPolicy[0].matchLabelKeys[0]: must not be empty",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {name: p, networkTopology: {mode: Hard, highestTierAllowed: 1}}\n",
            "spec.subGroupPolicy[0].networkTopology.mode: unknown mode \"Hard\": expected hard or soft",
        ),
        (
            "spec:\n  subGroupPolicy:\n  - {name: p, networkTopology: {mode: hard}}\n",
            "spec.subGroupPolicy[0].networkTopology.highestTierAllowed: required in hard mode (or highestTierName)",
        ),
    ];
    for (spec, want) in cases {
        let msg = fail("v.yaml", &format!("{VPG_HEAD}{spec}"));
        assert_eq!(msg, format!("v.yaml: document 1: PodGroup ml/j: {want}"));
    }
}

#[test]
fn bad_hypernodes_name_the_object_and_field() {
    let node = "  - {type: Node, selector: {exactMatch: {name: n0}}}\n";
    let child =
        |c: &str| format!("  - {{type: HyperNode, selector: {{exactMatch: {{name: {c}}}}}}}\n");
    let cases = [
        (
            format!("{}{}", hypernode("a", "2", &child("b")), hypernode("b", "1", &format!("{node}{}", child("a")))),
            "h.yaml: document 3: HyperNode b: spec.members[1]: HyperNodes form a cycle: a -> b -> a",
        ),
        (
            hypernode("a", "1", &child("a")),
            "h.yaml: document 2: HyperNode a: spec.members[0]: HyperNodes form a cycle: a -> a",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {regexMatch: {pattern: ''}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector.regexMatch.pattern: must not be empty",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector: expected exactly one of exactMatch, regexMatch and labelMatch, got 0",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {exactMatch: {name: n0}, regexMatch: {pattern: n}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector: expected exactly one of exactMatch, regexMatch and labelMatch, got 2",
        ),
        (
            hypernode("a", "2", "  - {type: HyperNode, selector: {regexMatch: {pattern: s}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector: a HyperNode member is named by exactMatch only (as in Volcano)",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {exactMatch: {name: ''}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector.exactMatch.name: must not be empty",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {labelMatch: {matchExpressions: [{key: k, operator: Near}]}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector.labelMatch.matchExpressions[0].operator: unknown operator \"Near\": expected In, NotIn, Exists or DoesNotExist",
        ),
        (
            hypernode("a", "1", "  - {type: Node, selector: {labelMatch: {matchExpressions: [{key: k, operator: In}]}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].selector.labelMatch.matchExpressions[0].values: operator In needs at least one value",
        ),
        (
            hypernode("a", "-1", node),
            "h.yaml: document 2: HyperNode a: spec.tier: must not be negative, got -1",
        ),
        (
            hypernode("a", "top", node),
            "h.yaml: document 2: HyperNode a: spec.tier: expected an integer, got \"top\"",
        ),
        (
            "---\napiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: a}\nspec:\n  members: []\n".to_string(),
            "h.yaml: document 2: HyperNode a: spec.tier: missing",
        ),
        (
            format!("{}{}", hypernode("a", "1", node), hypernode("a", "1", node)),
            "h.yaml: document 3: HyperNode a: metadata.name: duplicate HyperNode",
        ),
        (
            hypernode("a", "1", "  - {type: Switch, selector: {exactMatch: {name: n0}}}\n"),
            "h.yaml: document 2: HyperNode a: spec.members[0].type: unknown variant `Switch`, expected `Node` or `HyperNode`",
        ),
    ];
    for (hypernodes, want) in cases {
        assert_eq!(fail("h.yaml", &format!("{NODES}{hypernodes}")), want);
    }
}

#[test]
fn bad_regex_names_the_hypernode_and_pattern() {
    let text = format!(
        "{NODES}{}",
        hypernode(
            "leaf",
            "1",
            "  - {type: Node, selector: {regexMatch: {pattern: 'node-['}}}\n"
        )
    );
    let msg = fail("h.yaml", &text);
    assert!(
        msg.starts_with(
            "h.yaml: document 2: HyperNode leaf: spec.members[0].selector.regexMatch.pattern: invalid regular expression: "
        ),
        "{msg}"
    );
}

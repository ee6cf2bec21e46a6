//! A pending pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding and
//! VolumeRestrictions judge them: waits naming the claim, and the nodes its volumes allow.

use basalt_crds::{build_snapshot_tolerant, cluster_spec, read_objects, ConvertOptions};
use basalt_engine::{
    NodeSelectorTerm, PodSpec, SelectorOperator, SelectorRequirement, VolumeNodeRule, Wait,
};

/// A pod `ns/NAME` of ours (pending unless `node`) using claim `data` through volume `v`.
fn pod(name: &str, node: Option<&str>, volume: &str) -> String {
    let node = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  schedulerName: basalt\n{node}  containers: [{{name: c}}]\n  volumes: [{{name: v, {volume}}}]\n---\n")
}

const CLAIM: &str = "persistentVolumeClaim: {claimName: data}";

fn claim(spec: &str) -> String {
    format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: ns}}\nspec: {spec}\n---\n")
}

fn pv(name: &str, spec: &str, phase: &str) -> String {
    format!("apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}, labels: {{tier: fast}}}}\nspec: {spec}\nstatus: {{phase: {phase}}}\n---\n")
}

fn class(name: &str, rest: &str) -> String {
    format!("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\n{rest}\n---\n")
}

fn pods(text: &str) -> Vec<PodSpec> {
    let loaded = read_objects("c.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    (cluster_spec(&loaded.objects, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{e}")))
        .pods
}

fn first(text: &str) -> PodSpec {
    pods(text).into_iter().next().unwrap()
}

fn volume_waits(p: &PodSpec) -> Vec<String> {
    (p.waits.iter())
        .map(|w| match w {
            Wait::Volume(m) => m.clone(),
            Wait::Unsupported { field, .. } => panic!("unexpected unsupported {field}"),
            Wait::Claim(m) => panic!("unexpected claim wait {m}"),
        })
        .collect()
}

fn hostname_term(node: &str) -> NodeSelectorTerm {
    zone_term("kubernetes.io/hostname", &[node])
}

fn zone_term(key: &str, values: &[&str]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: vec![SelectorRequirement {
            key: key.into(),
            operator: SelectorOperator::In,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
        match_fields: vec![],
    }
}

const LOCAL_AFFINITY: &str = "nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]}]}}";

#[test]
fn missing_claim_waits_naming_it() {
    let p = first(&pod("p", None, CLAIM));
    assert_eq!(
        volume_waits(&p),
        ["persistentvolumeclaim \"ns/data\" not found"]
    );
    let e = first(&pod(
        "p",
        None,
        "ephemeral: {volumeClaimTemplate: {spec: {}}}",
    ));
    assert_eq!(
        volume_waits(&e),
        ["persistentvolumeclaim \"ns/p-v\" not found"]
    );
}

#[test]
fn foreign_and_bound_pods_are_not_judged() {
    let foreign = pod("p", None, CLAIM).replace("schedulerName: basalt", "schedulerName: x");
    assert!(first(&foreign).waits.is_empty());
    let bound = first(&pod("p", Some("n1"), CLAIM));
    assert!(bound.waits.is_empty());
    assert!(bound.rules.volumes.is_empty());
}

#[test]
fn claim_being_deleted_waits() {
    let text = format!(
        "{}apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: ns, deletionTimestamp: '2026-01-01T00:00:00Z'}}\nspec: {{volumeName: pv1}}\n",
        pod("p", None, CLAIM)
    );
    assert_eq!(
        volume_waits(&first(&text)),
        ["persistentvolumeclaim \"ns/data\" is being deleted"]
    );
}

#[test]
fn bound_to_missing_volume_waits() {
    let text = pod("p", None, CLAIM) + &claim("{volumeName: gone}");
    assert_eq!(
        volume_waits(&first(&text)),
        ["persistentvolumeclaim \"ns/data\" is bound to persistentvolume \"gone\", which does not exist"]
    );
}

#[test]
fn bound_local_volume_pins_the_pod() {
    let text = pod("p", None, CLAIM)
        + &claim("{volumeName: local1}")
        + &pv("local1", &format!("{{{LOCAL_AFFINITY}}}"), "Bound");
    let p = first(&text);
    assert!(p.waits.is_empty());
    assert_eq!(
        p.rules.volumes,
        [VolumeNodeRule {
            bound: true,
            terms: vec![hostname_term("n2")],
        }]
    );
    // kube-scheduler's VolumeZone: the volume's zone labels restrict it too.
    let zoned = pod("p", None, CLAIM)
        + &claim("{volumeName: local1}")
        + &pv("local1", &format!("{{{LOCAL_AFFINITY}}}"), "Bound")
            .replace("labels: {", "labels: {topology.kubernetes.io/zone: a__b, ");
    let mut term = hostname_term("n2");
    term.match_expressions
        .extend(zone_term("topology.kubernetes.io/zone", &["a", "b"]).match_expressions);
    assert_eq!(
        first(&zoned).rules.volumes,
        [VolumeNodeRule {
            bound: true,
            terms: vec![term],
        }]
    );
    let zone_only = pod("p", None, CLAIM)
        + &claim("{volumeName: ebs}")
        + &pv("ebs", "{}", "Bound")
            .replace("labels: {", "labels: {topology.kubernetes.io/zone: c, ");
    assert_eq!(
        first(&zone_only).rules.volumes,
        [VolumeNodeRule {
            bound: true,
            terms: vec![zone_term("topology.kubernetes.io/zone", &["c"])],
        }]
    );
    // A bound volume without node affinity or zone allows every node.
    let anywhere = pod("p", None, CLAIM) + &claim("{volumeName: nfs}") + &pv("nfs", "{}", "Bound");
    assert!(first(&anywhere).rules.volumes.is_empty());
}

#[test]
fn unbound_immediate_and_missing_class_wait() {
    let immediate = pod("p", None, CLAIM)
        + &claim("{storageClassName: std}")
        + &class("std", "provisioner: ebs.csi.aws.com");
    assert_eq!(
        volume_waits(&first(&immediate)),
        ["pod has unbound immediate PersistentVolumeClaims (ns/data)"]
    );
    let no_class = pod("p", None, CLAIM) + &claim("{}");
    assert_eq!(
        volume_waits(&first(&no_class)),
        ["pod has unbound immediate PersistentVolumeClaims (ns/data)"]
    );
    let missing = pod("p", None, CLAIM) + &claim("{storageClassName: gold}");
    assert_eq!(
        volume_waits(&first(&missing)),
        ["persistentvolumeclaim \"ns/data\" names storageclass.storage.k8s.io \"gold\", which does not exist"]
    );
}

#[test]
fn wait_for_first_consumer_rule_from_volumes_and_allowed_topologies() {
    let wfc = "provisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\nallowedTopologies: [{matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [a, b]}]}]";
    let fits = format!("{{storageClassName: wfc, accessModes: [ReadWriteOnce], capacity: {{storage: 10Gi}}, {LOCAL_AFFINITY}}}");
    let text = pod("p", None, CLAIM)
        + &claim("{storageClassName: wfc, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}, selector: {matchLabels: {tier: fast}}}")
        + &class("wfc", wfc)
        + &pv("fits", &fits, "Available")
        // Each of these could not bind the claim.
        + &pv("small", &fits.replace("10Gi", "1Gi").replace("n2", "n3"), "Available")
        + &pv("taken", &fits.replace("n2", "n4"), "Bound")
        + &pv("other-class", &fits.replace("wfc", "std").replace("n2", "n5"), "Available")
        + &pv("rox", &fits.replace("ReadWriteOnce", "ReadOnlyMany").replace("n2", "n6"), "Available")
        + &pv("block", &fits.replace("capacity", "volumeMode: Block, capacity").replace("n2", "n7"), "Available");
    let p = first(&text);
    assert!(p.waits.is_empty(), "{:?}", p.waits);
    assert_eq!(
        p.rules.volumes,
        [VolumeNodeRule {
            bound: false,
            terms: vec![
                hostname_term("n2"),
                zone_term("topology.kubernetes.io/zone", &["a", "b"]),
            ],
        }]
    );
}

#[test]
fn wait_for_first_consumer_without_limits_or_provisioner() {
    let claim_text = claim("{storageClassName: wfc, resources: {requests: {storage: 5Gi}}}");
    // Provisions anywhere: no rule at all.
    let anywhere = pod("p", None, CLAIM)
        + &claim_text
        + &class(
            "wfc",
            "provisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer",
        );
    let p = first(&anywhere);
    assert!(p.waits.is_empty() && p.rules.volumes.is_empty(), "{p:?}");
    // Local volumes only, none available: a rule no node matches.
    let none = pod("p", None, CLAIM)
        + &claim_text
        + &class(
            "wfc",
            "provisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer",
        );
    assert_eq!(
        first(&none).rules.volumes,
        [VolumeNodeRule {
            bound: false,
            terms: vec![],
        }]
    );
}

#[test]
fn read_write_once_pod_in_use_waits_naming_both() {
    let rwop =
        claim("{volumeName: pv1, accessModes: [ReadWriteOncePod]}") + &pv("pv1", "{}", "Bound");
    let text = pod("a", Some("n1"), CLAIM) + &pod("b", None, CLAIM) + &rwop;
    let b = &pods(&text)[1];
    assert_eq!(
        volume_waits(b),
        ["persistentvolumeclaim \"ns/data\" is ReadWriteOncePod and used by pod ns/a, so pod ns/b cannot use it"]
    );
    // Two pending pods of ours: the first by name gets it.
    let text = pod("y", None, CLAIM) + &pod("x", None, CLAIM) + &rwop;
    let both = pods(&text);
    assert_eq!(
        volume_waits(&both[0]),
        ["persistentvolumeclaim \"ns/data\" is ReadWriteOncePod and used by pod ns/x, so pod ns/y cannot use it"]
    );
    assert!(both[1].waits.is_empty());
    // A finished pod no longer uses it.
    let done = pod("a", Some("n1"), CLAIM).replace("---\n", "status: {phase: Succeeded}\n---\n")
        + &pod("b", None, CLAIM)
        + &rwop;
    assert!(pods(&done)[1].waits.is_empty());
}

#[test]
fn ephemeral_claim_must_belong_to_the_pod() {
    let eph = "ephemeral: {volumeClaimTemplate: {spec: {}}}";
    let claim_of = |owner: &str| {
        format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: p-v\n  namespace: ns\n  ownerReferences: [{{apiVersion: v1, kind: Pod, name: {owner}, uid: u1, controller: true}}]\nspec: {{volumeName: pv1}}\n---\n")
    };
    let ok = pod("p", None, eph) + &claim_of("p") + &pv("pv1", "{}", "Bound");
    assert!(first(&ok).waits.is_empty());
    let other = pod("p", None, eph) + &claim_of("q") + &pv("pv1", "{}", "Bound");
    assert_eq!(
        volume_waits(&first(&other)),
        ["PVC ns/p-v was not created for pod ns/p (pod is not owner)"]
    );
    // Left by an earlier pod of the same name: the uid differs.
    let mine = ok.replace(
        "{name: p, namespace: ns}",
        "{name: p, namespace: ns, uid: u1}",
    );
    assert!(first(&mine).waits.is_empty());
    let earlier = ok.replace(
        "{name: p, namespace: ns}",
        "{name: p, namespace: ns, uid: u2}",
    );
    assert_eq!(volume_waits(&first(&earlier)).len(), 1);
}

#[test]
fn the_tolerant_build_keeps_volumes_when_a_context_object_is_bad() {
    // A bad PriorityClass sends the tolerant build to its retry, which must still see volumes.
    let text = pod("p", None, CLAIM)
        + &claim("{volumeName: local1}")
        + &pv("local1", &format!("{{{LOCAL_AFFINITY}}}"), "Bound")
        + "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: dup}\nvalue: 1\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: dup}\nvalue: 2\n";
    let loaded = read_objects("c.yaml", &text).unwrap();
    let t = build_snapshot_tolerant(&loaded.objects, &ConvertOptions::default());
    assert_eq!(t.errors.len(), 1, "{:?}", t.errors);
    let snapshot = t.snapshot.unwrap();
    let rules = snapshot.rules.iter().find(|r| !r.volumes.is_empty());
    assert!(rules.is_some(), "the pod's volume rule survived the retry");
}

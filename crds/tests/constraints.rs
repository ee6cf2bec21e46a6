//! Pods' inter-pod affinity and anti-affinity, topology spread constraints, host ports, in-tree
//! disks and preferred node affinity to the engine's `PodConstraints`; namespaces; fields Basalt
//! does not act on holding the pod.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_crds::{cluster_spec_with_warnings, read_objects, ConvertOptions};
use basalt_engine::{
    ClusterSpec, Disk, HostPort, InclusionPolicy, LabelSelector, PodConstraints, PodSpec,
    SelectorOperator::{self, *},
    SelectorRequirement, Wait, WhenUnsatisfiable,
};

/// A pending pod `ns/NAME` labelled `app: web, gang: g1`, scheduled by `scheduler`, with `spec`
/// lines (indented two spaces), and one bare container unless they state containers.
fn pod_yaml(name: &str, scheduler: &str, spec: &str) -> String {
    let containers = match spec.contains("\n  containers:") || spec.starts_with("  containers:") {
        true => "",
        false => "  containers: [{name: c}]\n",
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n  labels: {{app: web, gang: g1}}\nspec:\n  schedulerName: {scheduler}\n{containers}{spec}"
    )
}

fn convert(text: &str) -> Result<(ClusterSpec, Vec<String>), String> {
    let loaded = read_objects("c.yaml", text).map_err(|e| e.to_string())?;
    cluster_spec_with_warnings(&loaded.objects, &ConvertOptions::default())
        .map_err(|e| e.to_string())
}

fn ours(spec: &str) -> PodSpec {
    let (cluster, _) = convert(&pod_yaml("p", "basalt", spec)).unwrap_or_else(|e| panic!("{e}"));
    cluster.pods.into_iter().next().unwrap()
}

fn constraints(spec: &str) -> Arc<PodConstraints> {
    ours(spec).constraints.expect("constraints stated")
}

fn error(spec: &str) -> String {
    convert(&pod_yaml("p", "basalt", spec)).unwrap_err()
}

fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
    SelectorRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

#[test]
fn no_constraints_stated_is_none() {
    assert_eq!(ours("").constraints, None);
    assert!(ours("").waits.is_empty());
}

#[test]
fn required_anti_affinity_with_match_label_keys_merged() {
    let c = constraints(
        "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector:\n          matchLabels: {app: web}\n          matchExpressions: [{key: tier, operator: NotIn, values: [db]}]\n        matchLabelKeys: [gang, missing]\n        mismatchLabelKeys: [app]\n        topologyKey: kubernetes.io/hostname\n        namespaces: [ns, other]\n        namespaceSelector: {matchLabels: {team: a}}\n",
    );
    let term = &c.anti_affinity.required[0];
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    assert_eq!(term.namespaces, ["ns", "other"]);
    assert_eq!(
        term.namespace_selector,
        Some(LabelSelector::from_labels([("team", "a")]))
    );
    assert_eq!(
        term.selector.as_ref().unwrap().requirements,
        [
            req("app", In, &["web"]),
            req("tier", NotIn, &["db"]),
            // matchLabelKeys from the pod's own labels; `missing` it lacks is ignored.
            req("gang", In, &["g1"]),
            req("app", NotIn, &["web"]),
        ]
    );
    assert!(c.affinity.is_empty());
}

#[test]
fn merged_keys_are_not_added_twice_and_absent_selector_stays_absent() {
    // As the API server stored it: the merged requirement is already there.
    let c = constraints(
        "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchExpressions: [{key: gang, operator: In, values: [g1]}]}\n        matchLabelKeys: [gang]\n        topologyKey: zone\n      - matchLabelKeys: [gang]\n        topologyKey: zone\n",
    );
    let required = &c.affinity.required;
    assert_eq!(
        required[0].selector.as_ref().unwrap().requirements,
        [req("gang", In, &["g1"])]
    );
    assert_eq!(
        required[1].selector, None,
        "no labelSelector matches no pod"
    );
}

#[test]
fn preferred_pod_affinity_with_weights() {
    let c = constraints(
        "  affinity:\n    podAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - weight: 40\n        podAffinityTerm: {labelSelector: {}, topologyKey: zone}\n",
    );
    assert_eq!(c.affinity.preferred[0].weight, 40);
    assert_eq!(
        c.affinity.preferred[0].term.selector,
        Some(LabelSelector::default())
    );
    for bad in [0, 101] {
        let e = error(&format!("  affinity:\n    podAntiAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - weight: {bad}\n        podAffinityTerm: {{labelSelector: {{}}, topologyKey: zone}}\n"));
        assert!(
            e.contains("spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be in the range 1-100"),
            "{e}"
        );
    }
}

#[test]
fn affinity_errors_name_the_field() {
    let cases = [
        (
            "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchExpressions: [{key: a, operator: In, values: [x]}, {key: b, operator: Gt, values: ['1']}]}\n        topologyKey: zone\n",
            "Pod ns/p: spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[1].operator: unknown operator \"Gt\"",
        ),
        (
            "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {}\n        topologyKey: ''\n",
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: must not be empty",
        ),
        (
            "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}\n        topologyKey: zone\n",
            "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].values: must be empty for operator Exists",
        ),
        (
            "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchExpressions: [{key: a, operator: NotIn}]}\n        topologyKey: zone\n",
            "matchExpressions[0].values: operator NotIn needs at least one value",
        ),
        (
            "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {}\n        matchLabelKeys: [gang]\n        mismatchLabelKeys: [gang]\n        topologyKey: zone\n",
            "requiredDuringSchedulingIgnoredDuringExecution[0].mismatchLabelKeys[0]: \"gang\" is also in matchLabelKeys",
        ),
        (
            "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {}\n        namespaceSelector: {matchExpressions: [{key: a, operator: Near}]}\n        topologyKey: zone\n",
            "requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector.matchExpressions[0].operator: unknown operator \"Near\"",
        ),
    ];
    for (spec, expected) in cases {
        let e = error(spec);
        assert!(e.contains(expected), "{e}\nexpected: {expected}");
        assert!(e.starts_with("c.yaml: document 1: Pod ns/p: "), "{e}");
    }
}

#[test]
fn spread_constraints_with_defaults_and_merged_keys() {
    let c = constraints(
        "  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [gang], minDomains: 3}\n  - {maxSkew: 2, topologyKey: rack, whenUnsatisfiable: ScheduleAnyway, nodeAffinityPolicy: Ignore, nodeTaintsPolicy: Honor}\n",
    );
    let [zone, rack] = &c.spread[..] else {
        panic!("{:?}", c.spread)
    };
    assert_eq!(zone.max_skew, 1);
    assert_eq!(zone.topology_key, "zone");
    assert_eq!(zone.when_unsatisfiable, WhenUnsatisfiable::DoNotSchedule);
    assert_eq!(zone.min_domains, Some(3));
    assert_eq!(
        zone.selector.as_ref().unwrap().requirements,
        [req("app", In, &["web"]), req("gang", In, &["g1"])]
    );
    // Kubernetes' defaults.
    assert_eq!(zone.node_affinity_policy, InclusionPolicy::Honor);
    assert_eq!(zone.node_taints_policy, InclusionPolicy::Ignore);
    assert_eq!(rack.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
    assert_eq!(rack.selector, None);
    assert_eq!(rack.min_domains, None);
    assert_eq!(rack.node_affinity_policy, InclusionPolicy::Ignore);
    assert_eq!(rack.node_taints_policy, InclusionPolicy::Honor);
}

#[test]
fn spread_errors_name_the_field() {
    let one = |c: &str| format!("  topologySpreadConstraints:\n  - {c}\n");
    let cases = [
        ("{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}", "spec.topologySpreadConstraints[0].maxSkew: must be at least 1, got 0"),
        ("{maxSkew: 1, topologyKey: '', whenUnsatisfiable: DoNotSchedule}", "spec.topologySpreadConstraints[0].topologyKey: must not be empty"),
        ("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}", "spec.topologySpreadConstraints[0].whenUnsatisfiable: unknown value \"Sometimes\""),
        ("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}", "spec.topologySpreadConstraints[0].minDomains: only allowed with whenUnsatisfiable: DoNotSchedule"),
        ("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, minDomains: 0}", "spec.topologySpreadConstraints[0].minDomains: must be at least 1, got 0"),
        ("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Maybe}", "spec.topologySpreadConstraints[0].nodeTaintsPolicy: unknown value \"Maybe\""),
        ("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: ['']}", "spec.topologySpreadConstraints[0].matchLabelKeys[0]: must not be empty"),
    ];
    for (c, expected) in cases {
        let e = error(&one(c));
        assert!(e.contains(expected), "{e}\nexpected: {expected}");
    }
    let twice = error("  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n  - {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n");
    assert!(
        twice.contains("spec.topologySpreadConstraints[1].topologyKey: \"zone\" with DoNotSchedule is also spec.topologySpreadConstraints[0]"),
        "{twice}"
    );
}

#[test]
fn host_ports_with_defaults_and_host_network() {
    let c = constraints(
        "  initContainers: [{name: i, ports: [{containerPort: 9, hostPort: 9}]}]\n  containers:\n  - name: a\n    ports: [{containerPort: 80, hostPort: 8080}, {containerPort: 81}, {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}]\n",
    );
    let hp = |ip: &str, protocol: &str, port| HostPort {
        host_ip: ip.into(),
        protocol: protocol.into(),
        port,
    };
    // Only `spec.containers` count, as kube-scheduler's NodePorts counts them.
    assert_eq!(
        c.host_ports,
        [hp("0.0.0.0", "TCP", 8080), hp("10.0.0.1", "UDP", 53)]
    );
    let net = constraints(
        "  hostNetwork: true\n  containers: [{name: a, ports: [{containerPort: 80}]}]\n",
    );
    assert_eq!(net.host_ports, [hp("0.0.0.0", "TCP", 80)]);
}

#[test]
fn host_port_errors_name_the_field() {
    let e = error("  containers: [{name: a, ports: [{containerPort: 80, hostPort: 70000}]}]\n");
    assert!(
        e.contains("spec.containers[0].ports[0].hostPort: must be in the range 1-65535, got 70000"),
        "{e}"
    );
    let e = error(
        "  containers: [{name: a, ports: [{containerPort: 80, hostPort: 80, protocol: ICMP}]}]\n",
    );
    assert!(
        e.contains("spec.containers[0].ports[0].protocol: unknown protocol \"ICMP\""),
        "{e}"
    );
    let e = error("  containers:\n  - {name: a, ports: [{containerPort: 80, hostPort: 80}]}\n  - {name: b, ports: [{containerPort: 81, hostPort: 80}]}\n");
    assert!(
        e.contains("spec.containers[1].ports[0].hostPort: duplicate host port 80/TCP on 0.0.0.0"),
        "{e}"
    );
}

#[test]
fn preferred_node_affinity_is_read() {
    let c = constraints(
        "  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - weight: 7\n        preference: {matchExpressions: [{key: gpu, operator: In, values: [h100]}]}\n",
    );
    let p = &c.preferred_node_affinity[0];
    assert_eq!(p.weight, 7);
    assert_eq!(p.term.match_expressions, [req("gpu", In, &["h100"])]);
    let e = error("  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - weight: 1\n        preference: {matchExpressions: [{key: gpu, operator: Near}]}\n");
    assert!(e.contains("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator: unknown operator \"Near\""), "{e}");
}

#[test]
fn equal_constraints_share_one_arc() {
    let spec = "  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}\n";
    let text = format!(
        "{}\n---\n{}",
        pod_yaml("a", "basalt", spec),
        pod_yaml("b", "basalt", spec)
    );
    let (cluster, _) = convert(&text).unwrap();
    let a = cluster.pods[0].constraints.as_ref().unwrap();
    let b = cluster.pods[1].constraints.as_ref().unwrap();
    assert!(Arc::ptr_eq(a, b));
}

#[test]
fn other_schedulers_pods_are_read_leniently() {
    let spec = "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}\n  topologySpreadConstraints:\n  - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n  containers: [{name: a, ports: [{containerPort: 80, hostPort: 80}]}]\n";
    let (cluster, warnings) = convert(&pod_yaml("p", "default-scheduler", spec)).unwrap();
    let c = cluster.pods[0].constraints.as_ref().unwrap();
    // Its anti-affinity and its ports still count; the bad spread is left out.
    assert_eq!(c.anti_affinity.required.len(), 1);
    assert_eq!(c.host_ports.len(), 1);
    assert!(c.spread.is_empty());
    assert_eq!(
        warnings,
        ["c.yaml: document 1: Pod ns/p: spec.topologySpreadConstraints[0].maxSkew: must be at least 1, got 0; ignored on a pod of another scheduler"]
    );
    assert!(cluster.pods[0].waits.is_empty());
}

#[test]
fn namespaces_are_read_with_the_name_label() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: a}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n";
    let (cluster, _) = convert(text).unwrap();
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(cluster.namespaces.len(), 2);
    assert_eq!(cluster.namespaces[0].name, "ml");
    assert_eq!(
        cluster.namespaces[0].labels,
        labels(&[("team", "a"), ("kubernetes.io/metadata.name", "ml")])
    );
    assert_eq!(
        cluster.namespaces[1].labels,
        labels(&[("kubernetes.io/metadata.name", "web")])
    );
}

#[test]
fn unsupported_fields_hold_pods_of_ours_only() {
    let spec = "  resources: {requests: {cpu: '2', hugepages-2Mi: 1Gi}}\n";
    let p = ours(spec);
    let fields: Vec<&str> = (p.waits.iter())
        .map(|w| match w {
            Wait::Unsupported { field, .. } => field.as_str(),
            Wait::Volume(m) | Wait::Claim(m) => panic!("{m}"),
        })
        .collect();
    assert_eq!(fields, ["spec.resources.requests[hugepages-2Mi]"]);
    let (cluster, _) = convert(&pod_yaml("p", "default-scheduler", spec)).unwrap();
    assert!(cluster.pods[0].waits.is_empty());
}

#[test]
fn pod_level_resources_replace_the_containers_aggregate() {
    let p = ours("  resources: {requests: {cpu: '4'}, limits: {cpu: '8', memory: 2Gi}}\n  overhead: {cpu: 250m}\n  containers: [{name: a, resources: {requests: {cpu: '1', memory: 1Gi, nvidia.com/gpu: '1'}}}]\n");
    assert_eq!(p.request["cpu"], 4250, "pod-level request plus overhead");
    assert_eq!(
        p.request["memory"],
        2 << 30,
        "the limit stands in for the request"
    );
    assert_eq!(p.request["nvidia.com/gpu"], 1, "from the containers");
}

#[test]
fn in_tree_disks_are_read_for_volume_restrictions_not_held() {
    let spec = "  volumes:\n  - {name: a, gcePersistentDisk: {pdName: pd, readOnly: true}}\n  - {name: b, awsElasticBlockStore: {volumeID: vol-1}}\n  - {name: c, rbd: {monitors: [m1, m2], image: img}}\n  - {name: d, iscsi: {targetPortal: '10.0.0.1:3260', iqn: iqn.x, lun: 3, readOnly: true}}\n  - {name: e, emptyDir: {}}\n";
    let want = [
        Disk::GcePd {
            pd_name: "pd".into(),
            read_only: true,
        },
        Disk::AwsEbs {
            volume_id: "vol-1".into(),
        },
        Disk::Rbd {
            monitors: vec!["m1".into(), "m2".into()],
            pool: "rbd".into(),
            image: "img".into(),
            read_only: false,
        },
        Disk::Iscsi {
            iqn: "iqn.x".into(),
            read_only: true,
        },
    ];
    let p = ours(spec);
    assert!(p.waits.is_empty(), "{:?}", p.waits);
    assert_eq!(p.constraints.expect("disks").disks, want);
    // Another scheduler's pod mounts them too: they count on its node.
    let (cluster, _) = convert(&pod_yaml("p", "default-scheduler", spec)).unwrap();
    assert_eq!(cluster.pods[0].constraints.as_ref().unwrap().disks, want);
}

#[test]
fn a_deletion_timestamp_marks_the_pod_terminating() {
    let text = pod_yaml("p", "default-scheduler", "  nodeName: n1\n").replace(
        "  namespace: ns\n",
        "  namespace: ns\n  deletionTimestamp: '2026-01-01T00:00:00Z'\n",
    );
    let (cluster, _) = convert(&text).unwrap();
    assert!(cluster.pods[0].terminating);
    assert!(!ours("").terminating);
}

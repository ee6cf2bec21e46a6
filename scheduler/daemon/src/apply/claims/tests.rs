use super::*;
use serde_json::Value;

#[derive(Default)]
struct Map {
    claims: HashMap<(String, String), Arc<PersistentVolumeClaim>>,
    classes: HashMap<String, Arc<StorageClass>>,
}

impl Volumes for Map {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(name).cloned()
    }
    fn node_labels(&self, name: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())])
    }
}

impl Map {
    fn claim_of(mut self, v: Value) -> Self {
        let c: PersistentVolumeClaim = serde_json::from_value(v).unwrap();
        let key = (
            c.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            c.metadata.name.clone().unwrap(),
        );
        self.claims.insert(key, Arc::new(c));
        self
    }
    fn class_of(mut self, name: &str, mode: &str) -> Self {
        let c: StorageClass = serde_json::from_value(json!({"metadata": {"name": name},
            "provisioner": "example.com/p", "volumeBindingMode": mode}))
        .unwrap();
        self.classes.insert(name.into(), Arc::new(c));
        self
    }
}

fn claim(name: &str, class: &str, extra: Value) -> Value {
    let mut c = json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"storageClassName": class}});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "spec" {
                for (sk, sv) in v.as_object().unwrap() {
                    c["spec"]
                        .as_object_mut()
                        .unwrap()
                        .insert(sk.clone(), sv.clone());
                }
            } else {
                c["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .insert(k.clone(), v.clone());
            }
        }
    }
    c
}

fn pod(volumes: Value) -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
        "spec": {"containers": [{"name": "main"}], "volumes": volumes}}),
    )
    .unwrap()
}

fn on(claim: &str) -> Value {
    json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
}

fn selected(claims: &[&str]) -> Vec<Selection> {
    claims
        .iter()
        .map(|c| Selection {
            namespace: "default".into(),
            claim: c.to_string(),
            node: "n1".into(),
            volume: None,
        })
        .collect()
}

#[test]
fn only_unbound_claims_of_a_waiting_class_not_yet_on_the_node_are_selected() {
    let map = Map::default()
        .class_of("wfc", "WaitForFirstConsumer")
        .class_of("now", "Immediate")
        .claim_of(claim("a", "wfc", json!({})))
        .claim_of(claim(
            "bound",
            "wfc",
            json!({"spec": {"volumeName": "pv-1"}}),
        ))
        .claim_of(claim("immediate", "now", json!({})))
        .claim_of(claim(
            "there",
            "wfc",
            json!({"annotations": {SELECTED_NODE: "n1"}}),
        ))
        .claim_of(claim(
            "elsewhere",
            "wfc",
            json!({"annotations": {SELECTED_NODE: "n2"}}),
        ))
        .claim_of(claim("no-class", "", json!({})))
        .claim_of(claim("unknown-class", "gone", json!({})));
    let p = pod(
        json!([on("a"), on("bound"), on("immediate"), on("there"), on("elsewhere"),
        on("no-class"), on("unknown-class"), {"name": "scratch", "emptyDir": {}}]),
    );
    assert_eq!(
        selections(&p, "n1", &map, &[], &mut Decided::default()).unwrap(),
        selected(&["a", "elsewhere"])
    );
}

#[test]
fn the_beta_class_annotation_names_the_class_when_the_field_is_unset() {
    let mut c = claim("a", "", json!({"annotations": {BETA_STORAGE_CLASS: "wfc"}}));
    c["spec"]
        .as_object_mut()
        .unwrap()
        .remove("storageClassName");
    let map = Map::default()
        .class_of("wfc", "WaitForFirstConsumer")
        .claim_of(c);
    assert_eq!(
        selections(
            &pod(json!([on("a")])),
            "n1",
            &map,
            &[],
            &mut Decided::default()
        )
        .unwrap(),
        selected(&["a"])
    );
}

#[test]
fn a_missing_or_deleted_claim_or_another_pods_ephemeral_claim_refuses_the_bind() {
    let map = Map::default().class_of("wfc", "WaitForFirstConsumer");
    let e = selections(
        &pod(json!([on("a")])),
        "n1",
        &map,
        &[],
        &mut Decided::default(),
    )
    .unwrap_err();
    assert_eq!(e, "persistentvolumeclaim \"a\" not found (volume a)");

    let map = map.claim_of(claim(
        "a",
        "wfc",
        json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
    ));
    let e = selections(
        &pod(json!([on("a")])),
        "n1",
        &map,
        &[],
        &mut Decided::default(),
    )
    .unwrap_err();
    assert_eq!(e, "persistentvolumeclaim \"a\" is being deleted");

    let ephemeral =
        json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
    let owner = |uid: &str| {
        json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
            "uid": uid, "controller": true}]})
    };
    let map = Map::default()
        .class_of("wfc", "WaitForFirstConsumer")
        .claim_of(claim("p-scratch", "wfc", owner("u-other")));
    let e = selections(
        &pod(ephemeral.clone()),
        "n1",
        &map,
        &[],
        &mut Decided::default(),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "persistentvolumeclaim \"p-scratch\" was not created for pod default/p (pod is not owner)"
    );
    let map = map.claim_of(claim("p-scratch", "wfc", owner("u-p")));
    assert_eq!(
        selections(&pod(ephemeral), "n1", &map, &[], &mut Decided::default()).unwrap(),
        selected(&["p-scratch"])
    );
}

fn local_pv(name: &str, host: &str, extra: Value) -> Arc<PersistentVolume> {
    let mut v = json!({"metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "wfc", "local": {"path": "/mnt"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}},
        "status": {"phase": "Available"}});
    if let Some(r) = extra.get("claimRef") {
        v["spec"]["claimRef"] = r.clone();
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

#[test]
fn a_static_volume_on_the_node_is_reserved_once_and_one_reserved_elsewhere_refuses() {
    let map = Map::default()
        .class_of("wfc", "WaitForFirstConsumer")
        .claim_of(claim("a", "wfc", json!({"uid": "u-a"})))
        .claim_of(claim("b", "wfc", json!({})));
    let pvs = vec![
        local_pv("pv-n2", "n2", json!({})),
        local_pv("pv-n1", "n1", json!({})),
    ];
    let mut decided = Decided::default();
    let mut twice = on("a");
    twice["name"] = json!("a-again");
    let p = pod(json!([on("a"), on("b"), twice]));
    let got = selections(&p, "n1", &map, &pvs, &mut decided).unwrap();
    assert_eq!(got.len(), 2, "one write per claim: {got:?}");
    // One volume fits on n1: the first claim gets it, the second the node annotation.
    assert_eq!(
        got[0].volume,
        Some(Reservation {
            volume: "pv-n1".into(),
            resource_version: "7".into(),
            claim_uid: "u-a".into()
        })
    );
    assert_eq!(got[1].volume, None);
    // Another pod of the cycle sharing the claim on the node waits for the same write; on
    // another node it is refused.
    let mut q = pod(json!([on("a")]));
    q.metadata.name = Some("q".into());
    let same = selections(&q, "n1", &map, &pvs, &mut decided).unwrap();
    assert_eq!(same, vec![got[0].clone()]);
    let e = selections(&q, "n2", &map, &pvs, &mut decided).unwrap_err();
    assert_eq!(
        e,
        "persistentvolumeclaim \"a\" is selected for node n1 by pod default/p in this cycle"
    );
    // A claim with a volume reserved for it needs nothing where the volume is, and may not
    // go anywhere else.
    let reserved = vec![local_pv(
        "pv-n1",
        "n1",
        json!({"claimRef": {"namespace": "default", "name": "a", "uid": "u-a"}}),
    )];
    let only_a = pod(json!([on("a")]));
    let got = selections(&only_a, "n1", &map, &reserved, &mut Decided::default()).unwrap();
    assert!(got.is_empty(), "{got:?}");
    let e = selections(&only_a, "n2", &map, &reserved, &mut Decided::default()).unwrap_err();
    assert_eq!(
        e,
        "persistentvolume \"pv-n1\" reserved for persistentvolumeclaim \"a\" does not admit node n2"
    );
}

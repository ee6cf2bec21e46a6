//! Static PersistentVolumes for `WaitForFirstConsumer` claims, as kube-scheduler's VolumeBinding
//! finds them: the PV controller binds no such claim to a volume by itself (it leaves that to the
//! scheduler), so a claim that an available volume fits on the pod's node is reserved that
//! volume (`spec.claimRef`) before the bind, the smallest that fits first.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use basalt_crds::convert::{volume_admits_node, volume_can_bind};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

/// What a claim's pod needs of the node's labels and a volume's fit.
pub struct Node<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// The volume already reserved for `claim` (its `claimRef` names it), if any.
pub fn prebound<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &'a [Arc<PersistentVolume>],
) -> Option<&'a Arc<PersistentVolume>> {
    volumes.iter().find(|v| reserved_for(v, claim))
}

fn reserved_for(v: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name == claim.metadata.name
        && r.namespace.as_deref().unwrap_or("default")
            == claim.metadata.namespace.as_deref().unwrap_or("default")
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
}

/// The smallest available volume of the claim's class that fits it (as the reader matches a
/// volume to a claim: capacity, access modes, volume mode, the claim's selector) and whose node
/// affinity admits `node`, not in `taken`.
pub fn best_fit<'a>(
    claim: &PersistentVolumeClaim,
    class: &str,
    node: &Node,
    volumes: &'a [Arc<PersistentVolume>],
    taken: &HashSet<String>,
) -> Option<&'a Arc<PersistentVolume>> {
    let claim_key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    volumes
        .iter()
        .filter_map(|v| {
            let vs = v.spec.as_ref()?;
            let size = vs
                .capacity
                .as_ref()
                .and_then(|c| c.get("storage"))
                .and_then(|q| basalt_crds::quantity::parse_scaled(&q.0, 1).ok())?;
            let available = v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
            let fits = available
                && v.metadata.deletion_timestamp.is_none()
                && vs.claim_ref.is_none()
                && !taken.contains(v.metadata.name.as_deref().unwrap_or(""))
                && vs.storage_class_name.as_deref().unwrap_or("") == class
                && volume_can_bind(&claim_key, claim, v)
                && admits(v, node);
            fits.then_some((size, v))
        })
        .min_by(|(a, va), (b, vb)| {
            a.cmp(b)
                .then_with(|| va.metadata.name.cmp(&vb.metadata.name))
        })
        .map(|(_, v)| v)
}

/// Whether the volume's `nodeAffinity.required` admits the node (none: every node). As in
/// Kubernetes, the terms are ORed and a term with no requirement matches no node.
pub fn admits(v: &PersistentVolume, node: &Node) -> bool {
    volume_admits_node(v, node.name, node.labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn pv(name: &str, size: &str, extra: Value) -> Arc<PersistentVolume> {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "local"},
            "status": {"phase": "Available"}});
        for (k, x) in extra.as_object().unwrap() {
            match k.as_str() {
                "labels" => v["metadata"]["labels"] = x.clone(),
                "phase" => v["status"]["phase"] = x.clone(),
                _ => v["spec"][k] = x.clone(),
            }
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn on_node(host: &str) -> Value {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}})
    }

    fn claim(size: &str, extra: Value) -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": "data", "namespace": "ml", "uid": "u-c"},
            "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}}}});
        for (k, x) in extra.as_object().unwrap() {
            c["spec"][k] = x.clone();
        }
        serde_json::from_value(c).unwrap()
    }

    fn names(v: Option<&Arc<PersistentVolume>>) -> Option<&str> {
        v.and_then(|v| v.metadata.name.as_deref())
    }

    #[test]
    fn the_smallest_available_volume_that_fits_on_the_node_is_chosen() {
        let labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), "n1".to_string())]);
        let n1 = Node {
            name: "n1",
            labels: &labels,
        };
        let volumes = vec![
            pv("big", "100Gi", json!({"nodeAffinity": on_node("n1")})),
            pv("small", "10Gi", json!({"nodeAffinity": on_node("n1")})),
            pv("tiny", "1Gi", json!({"nodeAffinity": on_node("n1")})),
            pv("elsewhere", "10Gi", json!({"nodeAffinity": on_node("n2")})),
            pv("released", "10Gi", json!({"phase": "Released"})),
            pv("other-class", "10Gi", json!({"storageClassName": "fast"})),
            pv(
                "read-only",
                "10Gi",
                json!({"accessModes": ["ReadOnlyMany"]}),
            ),
            pv("block", "10Gi", json!({"volumeMode": "Block"})),
        ];
        let none = HashSet::new();
        let c = claim("5Gi", json!({}));
        assert_eq!(
            names(best_fit(&c, "local", &n1, &volumes, &none)),
            Some("small")
        );
        let taken = HashSet::from(["small".to_string()]);
        assert_eq!(
            names(best_fit(&c, "local", &n1, &volumes, &taken)),
            Some("big")
        );
        let labels2 = BTreeMap::from([("kubernetes.io/hostname".to_string(), "n3".to_string())]);
        let n3 = Node {
            name: "n3",
            labels: &labels2,
        };
        assert_eq!(names(best_fit(&c, "local", &n3, &volumes, &none)), None);
        // The claim's selector narrows the volumes.
        let volumes = vec![
            pv("a", "10Gi", json!({"labels": {"tier": "gold"}})),
            pv("b", "5Gi", json!({"labels": {"tier": "iron"}})),
        ];
        let picky = claim(
            "5Gi",
            json!({"selector": {"matchLabels": {"tier": "gold"}}}),
        );
        assert_eq!(
            names(best_fit(&picky, "local", &n3, &volumes, &none)),
            Some("a")
        );
    }

    #[test]
    fn node_affinity_terms_are_ored_and_an_empty_term_admits_no_node() {
        let labels = BTreeMap::from([("zone".to_string(), "a".to_string())]);
        let n = Node {
            name: "n1",
            labels: &labels,
        };
        let v = |affinity: Value| pv("v", "1Gi", json!({"nodeAffinity": affinity}));
        assert!(admits(&v(json!({})), &n));
        let terms = |t: Value| json!({"required": {"nodeSelectorTerms": t}});
        assert!(!admits(&v(terms(json!([{}]))), &n));
        assert!(admits(
            &v(terms(json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]))),
            &n
        ));
        assert!(!admits(
            &v(terms(json!([
                {"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]},
            ]))),
            &n
        ));
    }

    #[test]
    fn a_volume_whose_claim_ref_names_the_claim_is_its_reservation() {
        let c = claim("1Gi", json!({}));
        let volumes = vec![
            pv(
                "other",
                "1Gi",
                json!({"claimRef": {"namespace": "ml", "name": "else"}}),
            ),
            pv(
                "mine",
                "1Gi",
                json!({"claimRef": {"namespace": "ml", "name": "data", "uid": "u-c"}}),
            ),
        ];
        assert_eq!(names(prebound(&c, &volumes)), Some("mine"));
        let stale = vec![pv(
            "old",
            "1Gi",
            json!({"claimRef": {"namespace": "ml", "name": "data", "uid": "u-old"}}),
        )];
        assert_eq!(names(prebound(&c, &stale)), None);
    }
}

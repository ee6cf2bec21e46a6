//! A pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding and VolumeRestrictions
//! plugins judge them: what makes the pod wait ([`Wait::Volume`], naming the claim) and which
//! nodes its volumes allow ([`VolumeNodeRule`]).
//!
//! Only pods of ours are judged: another scheduler's pod is already where its volumes allowed.

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{
    NodeSelectorTerm, SelectorOperator, SelectorRequirement, VolumeNodeRule, Wait,
};
use k8s_openapi::api::core::v1::{
    NodeSelector, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::selectors::{requirements, selector_requirements};
use super::Cx;
use crate::quantity;
use crate::read::Object;

/// The provisioner of classes whose volumes an administrator creates by hand.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// The claims, volumes and classes of the cluster, and which live pods use each claim.
#[derive(Default)]
pub(super) struct Volumes {
    claims: HashMap<(String, String), PersistentVolumeClaim>,
    volumes: HashMap<String, PersistentVolume>,
    /// The names of volumes in phase `Available`, per storage class, in name order: the
    /// candidates of an unbound claim, found without a scan of every volume.
    available: HashMap<String, Vec<String>>,
    classes: HashMap<String, StorageClass>,
    /// Per claim (`namespace`, `name`), the live pods that use it.
    users: HashMap<(String, String), Vec<User>>,
}

struct User {
    /// `namespace/name`.
    pod: String,
    bound: bool,
    scheduler: String,
}

/// Whether any of a pod's volumes uses a claim (see [`claim_names`]): such a pod informs the
/// conversion of other pods using the same claim.
pub(crate) fn uses_claims(spec: &PodSpec) -> bool {
    (spec.volumes.iter().flatten())
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

/// The claim names a pod's volumes use: `persistentVolumeClaim.claimName`, and for a generic
/// ephemeral volume the claim Kubernetes makes for it, `<pod>-<volume>`.
/// Each comes with whether it is ephemeral.
fn claim_names<'p>(
    pod_name: &'p str,
    spec: &'p PodSpec,
) -> impl Iterator<Item = (String, bool)> + 'p {
    (spec.volumes.iter().flatten()).filter_map(move |v| match &v.persistent_volume_claim {
        Some(c) => Some((c.claim_name.clone(), false)),
        None => (v.ephemeral.is_some()).then(|| (format!("{pod_name}-{}", v.name), true)),
    })
}

impl Volumes {
    pub(super) fn collect(objects: &[(String, Object)]) -> Volumes {
        let mut out = Volumes::default();
        for (_, object) in objects {
            match object {
                Object::PersistentVolumeClaim(c) => {
                    let key = (super::namespace(&c.metadata), name(&c.metadata));
                    out.claims.insert(key, (**c).clone());
                }
                Object::PersistentVolume(v) => {
                    out.volumes.insert(name(&v.metadata), (**v).clone());
                }
                Object::StorageClass(s) => {
                    out.classes.insert(name(&s.metadata), (**s).clone());
                }
                Object::Pod(p) => out.add_user(p),
                _ => {}
            }
        }
        for users in out.users.values_mut() {
            users.sort_by(|a, b| a.pod.cmp(&b.pod));
        }
        for (pv_name, pv) in &out.volumes {
            let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase != Some("Available") || pv.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let class = (pv.spec.as_ref()).and_then(|s| s.storage_class_name.clone());
            (out.available.entry(class.unwrap_or_default()).or_default()).push(pv_name.clone());
        }
        for names in out.available.values_mut() {
            names.sort();
        }
        out
    }

    fn add_user(&mut self, p: &Pod) {
        let (Some(spec), Some(pod_name)) = (&p.spec, p.metadata.name.as_deref()) else {
            return;
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return;
        }
        let namespace = super::namespace(&p.metadata);
        for (claim, _) in claim_names(pod_name, spec) {
            self.users
                .entry((namespace.clone(), claim))
                .or_default()
                .push(User {
                    pod: format!("{namespace}/{pod_name}"),
                    bound: spec.node_name.as_deref().is_some_and(|n| !n.is_empty()),
                    scheduler: (spec.scheduler_name.clone())
                        .unwrap_or_else(|| "default-scheduler".to_string()),
                });
        }
    }

    /// The node rules and waits of a pending pod of ours (`schedulers`: the names that mean
    /// ours, for claims two pending pods of ours share).
    pub(super) fn judge(
        &self,
        namespace: &str,
        pod_name: &str,
        uid: Option<&str>,
        spec: &PodSpec,
        schedulers: &[String],
    ) -> (Vec<VolumeNodeRule>, Vec<Wait>) {
        let mut rules = Vec::new();
        let mut waits = Vec::new();
        let me = format!("{namespace}/{pod_name}");
        for (claim_name, ephemeral) in claim_names(pod_name, spec) {
            let claim_key = format!("{namespace}/{claim_name}");
            let Some(claim) = self
                .claims
                .get(&(namespace.to_string(), claim_name.clone()))
            else {
                waits.push(Wait::Volume(format!(
                    "persistentvolumeclaim \"{claim_key}\" not found"
                )));
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                waits.push(Wait::Volume(format!(
                    "persistentvolumeclaim \"{claim_key}\" is being deleted"
                )));
                continue;
            }
            if ephemeral && !owned_by(claim, pod_name, uid) {
                waits.push(Wait::Volume(format!(
                    "PVC {claim_key} was not created for pod {me} (pod is not owner)"
                )));
                continue;
            }
            match self.claim(&claim_key, claim) {
                Ok(Some(rule)) => rules.push(rule),
                Ok(None) => {}
                Err(message) => {
                    waits.push(Wait::Volume(message));
                    continue;
                }
            }
            if let Some(other) = self.rwop_conflict(namespace, &claim_name, claim, &me, schedulers)
            {
                waits.push(Wait::Volume(format!(
                    "persistentvolumeclaim \"{claim_key}\" is ReadWriteOncePod and used by pod {other}, so pod {me} cannot use it"
                )));
            }
        }
        rules.sort();
        rules.dedup();
        (rules, waits)
    }

    /// The rule of one claim that exists: `None` when it allows every node, `Err` with the
    /// reason to wait.
    fn claim(
        &self,
        claim_key: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<Option<VolumeNodeRule>, String> {
        let spec = claim.spec.as_ref();
        if let Some(pv_name) = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
        {
            let Some(pv) = self.volumes.get(pv_name) else {
                return Err(format!(
                    "persistentvolumeclaim \"{claim_key}\" is bound to persistentvolume \"{pv_name}\", which does not exist"
                ));
            };
            let required = (pv.spec.as_ref())
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref());
            let mut terms = match required {
                None => vec![NodeSelectorTerm::default()],
                Some(sel) => node_terms(sel).map_err(|e| {
                    format!("persistentvolume \"{pv_name}\": spec.nodeAffinity.required: {e}")
                })?,
            };
            // kube-scheduler's VolumeZone: a volume's zone and region labels restrict it too.
            let zones = zone_requirements(pv);
            if zones.is_empty() && required.is_none() {
                return Ok(None);
            }
            for t in &mut terms {
                t.match_expressions.extend(zones.iter().cloned());
            }
            return Ok(Some(VolumeNodeRule { bound: true, terms }));
        }
        let class_name = spec
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default();
        if class_name.is_empty() {
            return Err(unbound_immediate(claim_key));
        }
        let Some(class) = self.classes.get(class_name) else {
            return Err(format!(
                "persistentvolumeclaim \"{claim_key}\" names storageclass.storage.k8s.io \"{class_name}\", which does not exist"
            ));
        };
        if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
            return Err(unbound_immediate(claim_key));
        }
        self.delayed(claim_key, claim, class).map(|terms| {
            terms.map(|terms| VolumeNodeRule {
                bound: false,
                terms,
            })
        })
    }

    /// Where an unbound `WaitForFirstConsumer` claim can be satisfied: the node affinity of each
    /// available volume that could bind it, ORed with the class's `allowedTopologies` when it
    /// can provision. `None`: anywhere.
    fn delayed(
        &self,
        claim_key: &str,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<Option<Vec<NodeSelectorTerm>>, String> {
        let mut terms = Vec::new();
        let class_name = name(&class.metadata);
        let candidates = self.available.get(&class_name).into_iter().flatten();
        for pv in candidates.filter_map(|n| self.volumes.get(n)) {
            if !can_bind(claim_key, claim, pv)? {
                continue;
            }
            let required = (pv.spec.as_ref())
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref());
            match required.map(node_terms) {
                // A volume usable on every node: the claim can bind anywhere.
                None => return Ok(None),
                Some(Ok(t)) => terms.extend(t),
                // A volume whose affinity cannot be read is no candidate.
                Some(Err(_)) => {}
            }
        }
        if class.provisioner != NO_PROVISIONER {
            let allowed = class.allowed_topologies.as_deref().unwrap_or_default();
            if allowed.is_empty() {
                return Ok(None);
            }
            for t in allowed {
                let match_expressions = (t.match_label_expressions.iter().flatten())
                    .map(|r| SelectorRequirement {
                        key: r.key.clone(),
                        operator: SelectorOperator::In,
                        values: r.values.clone(),
                    })
                    .collect();
                terms.push(NodeSelectorTerm {
                    match_expressions,
                    match_fields: Vec::new(),
                });
            }
        }
        terms.sort();
        terms.dedup();
        Ok(Some(terms))
    }

    /// Another live pod using a `ReadWriteOncePod` claim: a bound one, or a pending pod of ours
    /// before this one by `namespace/name` (the first gets it).
    fn rwop_conflict(
        &self,
        namespace: &str,
        claim_name: &str,
        claim: &PersistentVolumeClaim,
        me: &str,
        schedulers: &[String],
    ) -> Option<&str> {
        let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_deref());
        if !modes
            .unwrap_or_default()
            .iter()
            .any(|m| m == READ_WRITE_ONCE_POD)
        {
            return None;
        }
        let users = self
            .users
            .get(&(namespace.to_string(), claim_name.to_string()))?;
        let others = users.iter().filter(|u| u.pod != me);
        let bound = others.clone().find(|u| u.bound);
        let earlier_ours = || {
            others
                .clone()
                .find(|u| u.pod.as_str() < me && schedulers.contains(&u.scheduler))
        };
        bound.or_else(earlier_ours).map(|u| u.pod.as_str())
    }
}

/// The zone and region labels of a volume (`a__b` lists several values), as requirements on
/// the node's label of the same key.
fn zone_requirements(pv: &PersistentVolume) -> Vec<SelectorRequirement> {
    const ZONE_LABELS: [&str; 4] = [
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    ];
    let labels = pv.metadata.labels.as_ref();
    (ZONE_LABELS.iter())
        .filter_map(|key| Some((key, labels?.get(*key)?)))
        .map(|(key, value)| SelectorRequirement {
            key: key.to_string(),
            operator: SelectorOperator::In,
            values: value.split("__").map(str::to_string).collect(),
        })
        .collect()
}

fn unbound_immediate(claim_key: &str) -> String {
    format!("pod has unbound immediate PersistentVolumeClaims ({claim_key})")
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// Whether a generic ephemeral volume's claim was made for this pod: its controller owner is
/// the pod, by uid when the pod states one (a claim left by an earlier pod of the same name is
/// not its), else by name.
fn owned_by(claim: &PersistentVolumeClaim, pod_name: &str, uid: Option<&str>) -> bool {
    let owners = claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    owners.iter().any(|o| {
        o.controller == Some(true)
            && o.kind == "Pod"
            && o.name == pod_name
            && uid.is_none_or(|uid| o.uid == uid)
    })
}

/// A PersistentVolume's required node affinity as node selector terms.
fn node_terms(sel: &NodeSelector) -> Result<Vec<NodeSelectorTerm>, String> {
    let cx = Cx {
        origin: "",
        kind: "PersistentVolume",
        object: (String::new()).into(),
    };
    let mut terms = Vec::with_capacity(sel.node_selector_terms.len());
    for (i, term) in sel.node_selector_terms.iter().enumerate() {
        let base = format!("nodeSelectorTerms[{i}]");
        let expressions = requirements(
            &cx,
            &format!("{base}.matchExpressions"),
            term.match_expressions.as_deref(),
        );
        let fields = requirements(
            &cx,
            &format!("{base}.matchFields"),
            term.match_fields.as_deref(),
        );
        let show = |e: super::ConvertError| format!("{}: {}", e.field, e.message);
        terms.push(NodeSelectorTerm {
            match_expressions: expressions.map_err(show)?,
            match_fields: fields.map_err(show)?,
        });
    }
    Ok(terms)
}

/// Whether the volume's `nodeAffinity.required` admits a node of this name and labels (none:
/// every node; terms ORed, an empty term admits none; one that cannot be read admits none).
pub fn volume_admits_node(
    pv: &PersistentVolume,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let required = (pv.spec.as_ref())
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    let Some(required) = required else {
        return true;
    };
    node_terms(required).is_ok_and(|terms| terms.iter().any(|t| t.matches_labels(name, labels)))
}

/// [`can_bind`] for the daemon's bind-time choice of a static volume: a claim or volume that
/// cannot be read binds nothing.
pub fn volume_can_bind(
    claim_key: &str,
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> bool {
    can_bind(claim_key, claim, pv).unwrap_or(false)
}

/// Whether an available volume of the claim's class could bind the claim, as the PV controller
/// matches them: not reserved for another claim, capacity at least the request, every access
/// mode the claim asks for, the same volume mode, the claim's selector.
fn can_bind(
    claim_key: &str,
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Result<bool, String> {
    let (Some(cs), Some(ps)) = (claim.spec.as_ref(), pv.spec.as_ref()) else {
        return Ok(false);
    };
    if let Some(r) = &ps.claim_ref {
        let (ns, n) = claim_key.split_once('/').unwrap_or_default();
        if r.name.as_deref() != Some(n) || r.namespace.as_deref().unwrap_or("default") != ns {
            return Ok(false);
        }
    }
    let request = (cs.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let request = match request {
        None => 0,
        Some(q) => quantity::parse_for_resource("storage", &q.0).map_err(|e| {
            format!("persistentvolumeclaim \"{claim_key}\": spec.resources.requests[storage]: {e}")
        })?,
    };
    let capacity = (ps.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| quantity::parse_clamped("storage", &q.0).ok())
        .map_or(0, |(v, _)| v);
    if capacity < request {
        return Ok(false);
    }
    let pv_modes = ps.access_modes.as_deref().unwrap_or_default();
    if !(cs.access_modes.iter().flatten()).all(|m| pv_modes.contains(m)) {
        return Ok(false);
    }
    let mode = |m: Option<&str>| m.unwrap_or("Filesystem").to_string();
    if mode(cs.volume_mode.as_deref()) != mode(ps.volume_mode.as_deref()) {
        return Ok(false);
    }
    if let Some(selector) = &cs.selector {
        let cx = Cx {
            origin: "",
            kind: "PersistentVolumeClaim",
            object: (claim_key.to_string()).into(),
        };
        let requirements = selector_requirements(&cx, "spec.selector", selector).map_err(|e| {
            format!(
                "persistentvolumeclaim \"{claim_key}\": {}: {}",
                e.field, e.message
            )
        })?;
        let empty = BTreeMap::new();
        let labels = pv.metadata.labels.as_ref().unwrap_or(&empty);
        if !(requirements.iter()).all(|r| r.matches(labels.get(&r.key).map(String::as_str))) {
            return Ok(false);
        }
    }
    Ok(true)
}

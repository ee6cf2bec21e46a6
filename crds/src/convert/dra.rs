//! DRA (`resource.k8s.io/v1`) objects to the engine's [`DraSpec`] and a pod's claims to its
//! [`ClaimNeed`], as kube-scheduler's DynamicResources plugin reads them.
//!
//! - **Pools**: per (driver, pool), only slices of the newest `pool.generation`; a pool with
//!   fewer slices of it than `resourceSliceCount` is incomplete and none of its devices is
//!   used (kube-scheduler skips it for `ExactCount` requests and fails `All` ones; here both
//!   see no device of it).
//! - **Reach**: a slice's `nodeName`, the nodes its `nodeSelector` selects, or `allNodes`.
//!   Devices Basalt does not allocate are left out with a warning: partitionable devices
//!   (`consumesCounters`), devices with binding conditions, `perDeviceNodeSelection` slices,
//!   and devices that allow multiple allocations (consumable capacity).
//! - **Selectors** (the class's, then the request's) are CEL, evaluated by `basalt-cel` once
//!   per distinct (class, selectors) over every device, never per pod; the engine sees each
//!   request's matching devices as a set. A CEL error on any device refuses the request, as
//!   kube-scheduler's allocator fails the claim.
//! - **Allocated** devices: every claim's `status.allocation`, admin-access results excepted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use basalt_cel::{AttributeValue, DeviceView, Quantity, SelectorCache};
use basalt_engine::dra::{
    Alternative, AttrValue, ClaimAsk, ClaimNeed, ClaimState, ConstraintAsk, Count, DeviceSet,
    DraDevice, DraSpec, Reach, RequestAsk,
};
use basalt_engine::{NodeSelectorTerm, Wait};
use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceRequest, DeviceSelector, DeviceTaint, DeviceToleration, ExactDeviceRequest,
    ResourceClaim, ResourceSlice,
};

use crate::read::Object;

/// What conversion knows of DRA: classes, the usable devices, claims, and the matching sets
/// made so far (filled as pods are converted).
#[derive(Default)]
pub(crate) struct Dra {
    classes: HashMap<String, Arc<DeviceClass>>,
    devices: Vec<DraDevice>,
    /// Per device, what CEL sees of it.
    views: Vec<View>,
    index: HashMap<(String, String, String), u32>,
    claims: HashMap<String, Arc<ResourceClaim>>,
    /// Templates by `ns/name`.
    templates: std::collections::HashSet<String>,
    allocated: DeviceSet,
    /// Every node's name and labels: the nodes an allocation's `nodeSelector` allows.
    nodes: Vec<(String, BTreeMap<String, String>)>,
    /// Per node, the attributes all its own devices (`nodeName` slices) agree on, as text
    /// (`None`: they differ): a topology tier may name one as its node label.
    uniform: HashMap<String, BTreeMap<String, Option<String>>>,
    /// Per node, its own devices (`nodeName` slices) per driver: what queues and admission
    /// count DRA devices by (see [`Dra::node_counts`]).
    counts: HashMap<String, BTreeMap<String, i64>>,
    matching: Mutex<Matching>,
}

struct View {
    driver: String,
    attributes: BTreeMap<String, AttributeValue>,
    capacity: BTreeMap<String, Quantity>,
    /// Taints that keep requests off it unless tolerated (`NoSchedule`, `NoExecute`).
    taints: Vec<DeviceTaint>,
}

#[derive(Default)]
struct Matching {
    cel: SelectorCache,
    /// (class, selector expressions) → index into `sets`, or why it cannot match.
    ids: HashMap<MatchKey, Result<u32, String>>,
    sets: Vec<DeviceSet>,
    /// Per set: the driver of all its devices when they are one driver's and node-local.
    drivers: Vec<Option<String>>,
}

type Key = (String, String, String);

/// A class, the selector expressions (the class's, then the request's) and the tolerations.
type MatchKey = (String, Vec<String>, Vec<String>);

impl Dra {
    pub(crate) fn collect(objects: &[(String, Object)], warnings: &mut Vec<String>) -> Dra {
        let mut dra = Dra::default();
        let mut nodes: Vec<(&str, &BTreeMap<String, String>)> = Vec::new();
        let empty = BTreeMap::new();
        let mut slices: Vec<(&str, &ResourceSlice)> = Vec::new();
        for (origin, o) in objects {
            match o {
                Object::Node(n) => nodes.push((
                    n.metadata.name.as_deref().unwrap_or(""),
                    n.metadata.labels.as_ref().unwrap_or(&empty),
                )),
                Object::DeviceClass(c) => {
                    let name = c.metadata.name.clone().unwrap_or_default();
                    dra.classes.insert(name, c.clone());
                }
                Object::ResourceSlice(s) => slices.push((origin, s)),
                Object::ResourceClaim(c) => {
                    dra.claims.insert(o.key(), c.clone());
                }
                Object::ResourceClaimTemplate(_) => {
                    dra.templates.insert(o.key());
                }
                _ => {}
            }
        }
        // Newest generation per pool, and how many slices of it are here.
        let mut newest: HashMap<(&str, &str), (i64, i64, usize)> = HashMap::new();
        for (_, s) in &slices {
            let p = &s.spec.pool;
            let e = newest
                .entry((s.spec.driver.as_str(), p.name.as_str()))
                .or_insert((p.generation, p.resource_slice_count, 0));
            if p.generation > e.0 {
                *e = (p.generation, p.resource_slice_count, 0);
            }
            if p.generation == e.0 {
                e.2 += 1;
            }
        }
        let mut found: Vec<(Key, DraDevice, View)> = Vec::new();
        for (origin, s) in &slices {
            let spec = &s.spec;
            let (generation, count, seen) =
                newest[&(spec.driver.as_str(), spec.pool.name.as_str())];
            let slice = s.metadata.name.as_deref().unwrap_or("<unnamed>");
            if spec.pool.generation != generation || (seen as i64) < count {
                if spec.pool.generation == generation {
                    warnings.push(format!(
                        "{origin}: ResourceSlice {slice}: spec.pool: pool {} of {} has {seen} of \
                         its {count} slices; its devices are not used until it is complete",
                        spec.pool.name, spec.driver
                    ));
                }
                continue;
            }
            let reach = if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Reach::Node(n.to_string())
            } else if let Some(sel) = &spec.node_selector {
                Reach::Nodes(
                    (nodes.iter())
                        .filter(|(n, labels)| selects(sel, n, labels))
                        .map(|(n, _)| n.to_string())
                        .collect(),
                )
            } else if spec.all_nodes == Some(true) {
                Reach::All
            } else {
                warnings.push(format!(
                    "{origin}: ResourceSlice {slice}: spec.perDeviceNodeSelection: not \
                     supported by Basalt; its devices are not used"
                ));
                continue;
            };
            let domain = spec.driver.as_str();
            for (i, d) in spec.devices.iter().flatten().enumerate() {
                let unsupported = if d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty()) {
                    Some("consumesCounters (partitionable devices)")
                } else if d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()) {
                    Some("bindingConditions")
                } else if d.allow_multiple_allocations == Some(true) {
                    Some("allowMultipleAllocations (consumable capacity)")
                } else {
                    None
                };
                if let Some(what) = unsupported {
                    warnings.push(format!(
                        "{origin}: ResourceSlice {slice}: spec.devices[{i}]: {what} is not \
                         supported by Basalt; device {} is not used",
                        d.name
                    ));
                    continue;
                }
                let qualify = |k: &str| {
                    if k.contains('/') {
                        k.to_string()
                    } else {
                        format!("{domain}/{k}")
                    }
                };
                let mut attributes = BTreeMap::new();
                let mut cel_attributes = BTreeMap::new();
                for (k, a) in d.attributes.iter().flatten() {
                    let (v, c) = if let Some(x) = a.int {
                        (AttrValue::Int(x), AttributeValue::Int(x))
                    } else if let Some(x) = a.bool {
                        (AttrValue::Bool(x), AttributeValue::Bool(x))
                    } else if let Some(x) = &a.string {
                        (
                            AttrValue::String(x.clone()),
                            AttributeValue::String(x.clone()),
                        )
                    } else if let Some(x) = &a.version {
                        (
                            AttrValue::Version(x.clone()),
                            AttributeValue::Version(x.clone()),
                        )
                    } else {
                        continue;
                    };
                    attributes.insert(qualify(k), v);
                    cel_attributes.insert(qualify(k), c);
                }
                let mut capacity = BTreeMap::new();
                for (k, c) in d.capacity.iter().flatten() {
                    match Quantity::parse(&c.value.0) {
                        Ok(q) => {
                            capacity.insert(qualify(k), q);
                        }
                        Err(e) => warnings.push(format!(
                            "{origin}: ResourceSlice {slice}: spec.devices[{i}].capacity[{k}]: \
                             {e}; left out"
                        )),
                    }
                }
                let key = (spec.driver.clone(), spec.pool.name.clone(), d.name.clone());
                found.push((
                    key,
                    DraDevice {
                        driver: Arc::from(spec.driver.as_str()),
                        pool: Arc::from(spec.pool.name.as_str()),
                        name: Arc::from(d.name.as_str()),
                        reach: reach.clone(),
                        attributes,
                    },
                    View {
                        driver: spec.driver.clone(),
                        attributes: cel_attributes,
                        capacity,
                        taints: (d.taints.iter().flatten())
                            .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
                            .cloned()
                            .collect(),
                    },
                ));
            }
        }
        // Device order, whatever order the slices came in.
        found.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, device, _) in &found {
            let Reach::Node(node) = &device.reach else {
                continue;
            };
            *(dra.counts.entry(node.clone()).or_default())
                .entry(device.driver.to_string())
                .or_default() += 1;
            let agreed = dra.uniform.entry(node.clone()).or_default();
            for (k, v) in &device.attributes {
                let text = match v {
                    AttrValue::Int(x) => x.to_string(),
                    AttrValue::Bool(x) => x.to_string(),
                    AttrValue::String(x) | AttrValue::Version(x) => x.clone(),
                };
                agreed
                    .entry(k.clone())
                    .and_modify(|seen| {
                        if seen.as_deref() != Some(text.as_str()) {
                            *seen = None;
                        }
                    })
                    .or_insert(Some(text));
            }
        }
        found.dedup_by(|a, b| a.0 == b.0);
        dra.nodes = (nodes.iter())
            .map(|(n, l)| (n.to_string(), (*l).clone()))
            .collect();
        for (i, (key, device, view)) in found.into_iter().enumerate() {
            dra.index.insert(key, i as u32);
            dra.devices.push(device);
            dra.views.push(view);
        }
        let allocations = (dra.claims.values())
            .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref());
        for r in allocations.flat_map(|d| d.results.iter().flatten()) {
            if r.admin_access == Some(true) {
                continue;
            }
            let key = (r.driver.clone(), r.pool.clone(), r.device.clone());
            if let Some(&d) = dra.index.get(&key) {
                dra.allocated.insert(d);
            }
        }
        dra
    }

    /// The node's own devices per driver (`gpu.nvidia.com: 8`): added to its allocatable, so
    /// that a pod's devices count on its node, its queue (capability, fair share) and in
    /// admission like any resource, by driver name. The device search stays the exact check;
    /// these counts only let quotas see DRA devices.
    pub(crate) fn node_counts(&self, node: &str) -> Option<&BTreeMap<String, i64>> {
        self.counts.get(node)
    }

    /// The devices a bound pod holds through its own claims (made from templates), per
    /// driver, as counted on nodes ([`Dra::node_counts`]): node-local devices of its claims'
    /// allocations, admin access excepted. Claims named by `resourceClaimName`, which pods may
    /// share, count nothing.
    pub(crate) fn held_counts(&self, pod: &Pod, namespace: &str) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        for e in entries.into_iter().flatten() {
            if e.resource_claim_template_name.is_none() {
                continue;
            }
            let made = (statuses.into_iter().flatten())
                .find(|s| s.name == e.name)
                .and_then(|s| s.resource_claim_name.as_deref());
            let Some(claim) = made.and_then(|n| self.claims.get(&format!("{namespace}/{n}")))
            else {
                continue;
            };
            let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
            let results = allocation
                .into_iter()
                .flat_map(|a| a.devices.iter().flat_map(|d| d.results.iter().flatten()));
            for r in results.filter(|r| r.admin_access != Some(true)) {
                let key = (r.driver.clone(), r.pool.clone(), r.device.clone());
                let local = (self.index.get(&key))
                    .is_some_and(|&d| matches!(self.devices[d as usize].reach, Reach::Node(_)));
                if local {
                    *out.entry(r.driver.clone()).or_default() += 1;
                }
            }
        }
        out
    }

    /// What a pending pod's own unallocated claims ask, per driver, as counted on nodes: per
    /// request the least of its alternatives (one for `All`), when each may take only one
    /// driver's node-local devices. Shared claims and admin access count nothing.
    pub(crate) fn asked_counts(&self, need: &ClaimNeed) -> BTreeMap<String, i64> {
        let m = lock(&self.matching);
        let mut out = BTreeMap::new();
        for c in need.claims.iter().filter(|c| c.shared.is_none()) {
            let ClaimState::Pending { requests, .. } = &c.state else {
                continue;
            };
            for r in requests {
                let counted = (r.alternatives.iter())
                    .map(|a| {
                        let driver = m.drivers.get(a.eligible as usize).cloned().flatten();
                        let n = match a.count {
                            Count::Exactly(n) => n as i64,
                            Count::All => 1,
                        };
                        driver.filter(|_| !a.admin_access).map(|d| (d, n))
                    })
                    .collect::<Option<Vec<_>>>();
                let Some(counted) = counted else { continue };
                let one_driver = counted.windows(2).all(|w| w[0].0 == w[1].0);
                if let (true, Some(n)) = (one_driver, counted.iter().map(|c| c.1).min()) {
                    *out.entry(counted[0].0.clone()).or_default() += n;
                }
            }
        }
        out
    }

    /// The value every device of the node gives attribute `name` (qualified), when they agree.
    pub(crate) fn node_attribute(&self, node: &str, name: &str) -> Option<&str> {
        self.uniform.get(node)?.get(name)?.as_deref()
    }

    /// The engine's view, with every matching set made while converting pods.
    pub(crate) fn spec(&self) -> DraSpec {
        if self.devices.is_empty() {
            return DraSpec::default();
        }
        DraSpec {
            devices: self.devices.clone(),
            eligible: lock(&self.matching).sets.clone(),
            allocated: self.allocated.clone(),
        }
    }

    /// A pending pod's claims: what they ask, with their `ns/name`s, or why the pod waits.
    pub(crate) fn pod_claims(
        &self,
        pod: &Pod,
        namespace: &str,
    ) -> Result<Option<(ClaimNeed, Vec<String>)>, Vec<Wait>> {
        let Some(entries) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()) else {
            return Ok(None);
        };
        if entries.is_empty() {
            return Ok(None);
        }
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        let mut need = ClaimNeed::default();
        let mut names = Vec::new();
        let mut waits = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let (name, shared) = if let Some(n) = &e.resource_claim_name {
                (n.clone(), true)
            } else if let Some(t) = &e.resource_claim_template_name {
                let made = (statuses.into_iter().flatten())
                    .find(|s| s.name == e.name)
                    .and_then(|s| s.resource_claim_name.clone());
                match made {
                    Some(n) => (n, false),
                    None => {
                        let template = format!("{namespace}/{t}");
                        // Only a dump that has templates can tell a missing one.
                        let known = self.templates.is_empty() || self.templates.contains(&template);
                        let why = if known {
                            "is not made yet"
                        } else {
                            "is not made yet, and the template does not exist"
                        };
                        waits.push(Wait::Claim(format!(
                            "spec.resourceClaims[{i}]: the claim of template {template} {why}"
                        )));
                        continue;
                    }
                }
            } else {
                waits.push(Wait::Claim(format!(
                    "spec.resourceClaims[{i}]: names neither a claim nor a template"
                )));
                continue;
            };
            let key = format!("{namespace}/{name}");
            let Some(claim) = self.claims.get(&key) else {
                waits.push(Wait::Claim(format!("claim {key} does not exist")));
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                waits.push(Wait::Claim(format!("claim {key} is being deleted")));
                continue;
            }
            // A template's claim must be the pod's own (kube-scheduler's IsForPod); checked
            // where the pod has a uid, as every pod read from a cluster has.
            let uid = pod.metadata.uid.as_deref();
            let owned = |uid: &str| {
                (claim.metadata.owner_references.iter().flatten())
                    .any(|o| o.controller == Some(true) && o.uid == uid)
            };
            if !shared && uid.is_some_and(|u| !owned(u)) {
                waits.push(Wait::Claim(format!(
                    "claim {key} was not made for this pod (the pod is not its controller)"
                )));
                continue;
            }
            let label = if shared { key.clone() } else { e.name.clone() };
            let state = match claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                Some(a) => ClaimState::Allocated {
                    nodes: a.node_selector.as_ref().map(|sel| {
                        (self.nodes.iter())
                            .filter(|(n, labels)| selects(sel, n, labels))
                            .map(|(n, _)| n.clone())
                            .collect()
                    }),
                },
                None => self.pending(claim),
            };
            need.claims.push(ClaimAsk {
                label,
                shared: shared.then(|| key.clone()),
                state,
            });
            names.push(key);
        }
        if !waits.is_empty() {
            return Err(waits);
        }
        Ok(Some((need, names)))
    }

    /// What an unallocated claim asks, or why it cannot be allocated anywhere.
    fn pending(&self, claim: &ResourceClaim) -> ClaimState {
        let devices = &claim.spec.devices;
        let mut requests = Vec::new();
        for (i, r) in devices
            .iter()
            .flat_map(|d| d.requests.iter().flatten())
            .enumerate()
        {
            match self.request(r) {
                Ok(ask) => requests.push(ask),
                Err(why) => {
                    return ClaimState::Refused(format!("spec.devices.requests[{i}]: {why}"))
                }
            }
        }
        let constraints = (devices.iter().flat_map(|d| d.constraints.iter().flatten()))
            .filter_map(|c| {
                let (attribute, distinct) = match (&c.match_attribute, &c.distinct_attribute) {
                    (Some(a), _) => (a.clone(), false),
                    (None, Some(a)) => (a.clone(), true),
                    (None, None) => return None,
                };
                Some(ConstraintAsk {
                    requests: c.requests.clone().unwrap_or_default(),
                    attribute,
                    distinct,
                })
            })
            .collect();
        ClaimState::Pending {
            requests,
            constraints,
        }
    }

    fn request(&self, r: &DeviceRequest) -> Result<RequestAsk, String> {
        let mut alternatives = Vec::new();
        if let Some(x) = &r.exactly {
            alternatives.push(self.alternative(r.name.clone(), x)?);
        }
        for (j, sub) in r.first_available.iter().flatten().enumerate() {
            let as_exact = ExactDeviceRequest {
                device_class_name: sub.device_class_name.clone(),
                selectors: sub.selectors.clone(),
                allocation_mode: sub.allocation_mode.clone(),
                count: sub.count,
                capacity: sub.capacity.clone(),
                tolerations: sub.tolerations.clone(),
                admin_access: None,
            };
            let name = format!("{}/{}", r.name, sub.name);
            alternatives.push(
                (self.alternative(name, &as_exact))
                    .map_err(|e| format!("firstAvailable[{j}]: {e}"))?,
            );
        }
        if alternatives.is_empty() {
            return Err(format!(
                "request {} states neither exactly nor firstAvailable",
                r.name
            ));
        }
        Ok(RequestAsk {
            name: r.name.clone(),
            alternatives,
        })
    }

    fn alternative(&self, name: String, x: &ExactDeviceRequest) -> Result<Alternative, String> {
        if x.capacity.is_some() {
            return Err("capacity requests (consumable capacity) are not supported".into());
        }
        let count = match x.allocation_mode.as_deref().unwrap_or("ExactCount") {
            "ExactCount" => match x.count.unwrap_or(1) {
                n if n >= 1 && n <= u32::MAX as i64 => Count::Exactly(n as u32),
                n => return Err(format!("count {n} is not a positive number")),
            },
            "All" => Count::All,
            other => return Err(format!("unknown allocationMode {other:?}")),
        };
        let Some(class) = self.classes.get(&x.device_class_name) else {
            return Err(format!(
                "device class {} does not exist",
                x.device_class_name
            ));
        };
        let cel = |s: &DeviceSelector| s.cel.as_ref().map(|c| c.expression.clone());
        let mut expressions: Vec<String> = (class.spec.selectors.iter().flatten())
            .filter_map(cel)
            .collect();
        let of_class = expressions.len();
        expressions.extend(x.selectors.iter().flatten().filter_map(cel));
        let tolerations = x.tolerations.as_deref().unwrap_or_default();
        let eligible = self.matching(&x.device_class_name, of_class, expressions, tolerations)?;
        Ok(Alternative {
            name,
            eligible,
            count,
            admin_access: x.admin_access == Some(true),
        })
    }

    /// The set of devices every expression selects and whose taints the tolerations allow,
    /// made once per (class, expressions, tolerations).
    fn matching(
        &self,
        class: &str,
        of_class: usize,
        expressions: Vec<String>,
        tolerations: &[DeviceToleration],
    ) -> Result<u32, String> {
        let mut m = lock(&self.matching);
        // Named as kube-scheduler names them, with the start of the expression.
        let describe = |i: usize| {
            let e = &expressions[i];
            let short: String = e.chars().take(64).collect();
            let short = if short.len() < e.len() {
                short + "…"
            } else {
                short
            };
            match i.checked_sub(of_class) {
                None => format!("class {class} selector #{i} ({short})"),
                Some(j) => format!("selector #{j} ({short})"),
            }
        };
        let names: Vec<String> = (0..expressions.len()).map(describe).collect();
        let tolerations_key = (tolerations.iter())
            .map(|t| format!("{:?}", (&t.key, &t.operator, &t.value, &t.effect)))
            .collect();
        let key = (class.to_string(), expressions, tolerations_key);
        if let Some(id) = m.ids.get(&key) {
            return id.clone();
        }
        let result = (|| {
            let mut selectors = Vec::new();
            for (e, name) in key.1.iter().zip(&names) {
                selectors.push(m.cel.get(e).map_err(|err| format!("{name}: {err}"))?);
            }
            let mut set = DeviceSet::default();
            for (d, v) in self.views.iter().enumerate() {
                if !v.taints.iter().all(|t| tolerated(t, tolerations)) {
                    continue;
                }
                let view = DeviceView {
                    driver: &v.driver,
                    attributes: &v.attributes,
                    capacity: &v.capacity,
                };
                let mut all = true;
                for (s, name) in selectors.iter().zip(&names) {
                    let ok = s.matches(&view).map_err(|err| {
                        format!(
                            "{name} on device {}/{}/{}: {err}",
                            self.devices[d].driver, self.devices[d].pool, self.devices[d].name
                        )
                    })?;
                    if !ok {
                        all = false;
                        break;
                    }
                }
                if all {
                    set.insert(d as u32);
                }
            }
            let one = {
                let mut devices = set.iter().map(|d| &self.devices[d as usize]);
                let first = devices.next();
                first
                    .filter(|f| {
                        let local = |d: &DraDevice| matches!(d.reach, Reach::Node(_));
                        local(f) && devices.all(|d| d.driver == f.driver && local(d))
                    })
                    .map(|d| d.driver.to_string())
            };
            m.drivers.push(one);
            m.sets.push(set);
            Ok((m.sets.len() - 1) as u32)
        })();
        m.ids.insert(key, result.clone());
        result
    }
}

/// Whether some toleration tolerates the taint (as a pod's tolerate a node's: an empty key with
/// `Exists` tolerates every key, an empty effect every effect).
fn tolerated(taint: &DeviceTaint, tolerations: &[DeviceToleration]) -> bool {
    tolerations.iter().any(|t| {
        let effect = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let exists = t.operator.as_deref() == Some("Exists");
        let key = match t.key.as_deref().filter(|k| !k.is_empty()) {
            None => exists,
            Some(k) => {
                k == taint.key
                    && (exists
                        || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""))
            }
        };
        effect && key
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another conversion panicked: what it holds is still valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a node selector (its terms ORed) selects the node.
pub(crate) fn selects(sel: &NodeSelector, name: &str, labels: &BTreeMap<String, String>) -> bool {
    sel.node_selector_terms
        .iter()
        .any(|t| term(t).is_some_and(|t| t.matches_labels(name, labels)))
}

fn term(t: &k8s_openapi::api::core::v1::NodeSelectorTerm) -> Option<NodeSelectorTerm> {
    let reqs = |r: Option<&Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>| {
        (r.into_iter().flatten())
            .map(|r| {
                use basalt_engine::SelectorOperator as Op;
                let operator = match r.operator.as_str() {
                    "In" => Op::In,
                    "NotIn" => Op::NotIn,
                    "Exists" => Op::Exists,
                    "DoesNotExist" => Op::DoesNotExist,
                    "Gt" => Op::Gt,
                    "Lt" => Op::Lt,
                    _ => return None,
                };
                Some(basalt_engine::SelectorRequirement {
                    key: r.key.clone(),
                    operator,
                    values: r.values.clone().unwrap_or_default(),
                })
            })
            .collect::<Option<Vec<_>>>()
    };
    Some(NodeSelectorTerm {
        match_expressions: reqs(t.match_expressions.as_ref())?,
        match_fields: reqs(t.match_fields.as_ref())?,
    })
}

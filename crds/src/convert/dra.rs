//! DRA (`resource.k8s.io/v1`) objects to the engine's [`DraSpec`], and (in `claims.rs`) a pod's
//! claims to its `ClaimNeed`, as kube-scheduler's DynamicResources plugin reads them.
//!
//! - **Pools**: per (driver, pool), only slices of the newest `pool.generation`; a pool with
//!   fewer slices of it than `resourceSliceCount` is incomplete and none of its devices is
//!   used (kube-scheduler skips it for `ExactCount` requests and fails `All` ones; here both
//!   see no device of it).
//! - **Reach**: a slice's `nodeName`, the nodes its `nodeSelector` selects, or `allNodes`.
//!   Devices Basalt does not allocate are left out with a warning: devices with binding
//!   conditions, `perDeviceNodeSelection` slices, and devices that allow multiple allocations
//!   (consumable capacity). Partitionable devices (`consumesCounters`) are allocated within
//!   their pool's shared counters ([`counters`]).
//! - **Selectors** (the class's, then the request's) are CEL, evaluated by `basalt-cel` once
//!   per distinct (class, selectors, tolerations) over every device, never per pod; device
//!   taints (`NoSchedule`, `NoExecute`) keep untolerating requests off; the engine sees each
//!   request's matching devices as a set. A CEL error on any device refuses the request, as
//!   kube-scheduler's allocator fails the claim.
//! - **Allocated** devices: every claim's `status.allocation`, admin-access results excepted.
//! - **Bound**: a node's own devices (`nodeName` slices), and a pool's that reach several
//!   nodes, at most [`MAX_DRA_DEVICES_PER_NODE`]; past it none of them is used, with a warning.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use basalt_cel::{AttributeValue, Quantity, SelectorCache};
use basalt_engine::dra::{AttrValue, DeviceSet, DraDevice, DraSpec, Reach};
use basalt_engine::{NodeSelectorTerm, NodeSpec};
use basalt_topology::TierSpec;
use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaint, ResourceClaim, ResourceSlice};

use crate::limits::MAX_DRA_DEVICES_PER_NODE;
use crate::read::Object;

mod claims;
mod counters;

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
    /// The shared counters' capacities (partitionable devices).
    counters: Vec<i64>,
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
        let usable = |s: &ResourceSlice| {
            let (generation, count, seen) =
                newest[&(s.spec.driver.as_str(), s.spec.pool.name.as_str())];
            s.spec.pool.generation == generation && (seen as i64) >= count
        };
        let mut over = over_bound(slices.iter().map(|(_, s)| *s).filter(|s| usable(s)));
        let usable_slices = slices.iter().filter(|(_, s)| usable(s)).copied();
        let shared = counters::Counters::collect(usable_slices, warnings);
        let mut found: Vec<(Key, DraDevice, View)> = Vec::new();
        for (origin, s) in &slices {
            let spec = &s.spec;
            let (generation, count, seen) =
                newest[&(spec.driver.as_str(), spec.pool.name.as_str())];
            let slice = s.metadata.name.as_deref().unwrap_or("<unnamed>");
            if !usable(s) {
                if spec.pool.generation == generation {
                    warnings.push(format!(
                        "{origin}: ResourceSlice {slice}: spec.pool: pool {} of {} has {seen} of \
                         its {count} slices; its devices are not used until it is complete",
                        spec.pool.name, spec.driver
                    ));
                }
                continue;
            }
            if let Some(unsaid) = over.get_mut(&bound_key(s)) {
                // Said once, on the first of its slices.
                if let Some(n) = unsaid.take() {
                    warnings.push(format!(
                        "{origin}: ResourceSlice {slice}: spec.devices: {} has {n} devices, more \
                         than {MAX_DRA_DEVICES_PER_NODE} (the limit per node); none of them is used",
                        bound_key(s)
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
                let unsupported = if d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()) {
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
                let consumes = match shared.consumption(s, d) {
                    Ok(c) => c,
                    Err(e) => {
                        warnings.push(format!(
                            "{origin}: ResourceSlice {slice}: spec.devices[{i}].{e}; device {} is not used",
                            d.name
                        ));
                        continue;
                    }
                };
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
                        consumes,
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
        dra.counters = shared.capacities;
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

    /// What a node's own devices (`nodeName` slices) add to it:
    /// - per driver, their number as allocatable (`gpu.nvidia.com: 8`), so that a pod's devices
    ///   count on its node, its queue (capability, fair share) and in admission like any
    ///   resource, by driver name; the device search stays the exact check, these counts only
    ///   let quotas see DRA devices;
    /// - for a tier naming a device attribute (an NVLink clique, a ComputeDomain), the value
    ///   they all agree on as the node's label, so the node is in that domain (a label the
    ///   node carries itself wins).
    pub(crate) fn add_to_node(&self, spec: &mut NodeSpec, tiers: &[TierSpec]) {
        for (driver, n) in self.counts.get(&spec.name).into_iter().flatten() {
            spec.allocatable.entry(driver.clone()).or_insert(*n);
        }
        let Some(agreed) = self.uniform.get(&spec.name) else {
            return;
        };
        for tier in tiers {
            if let (false, Some(Some(v))) = (
                spec.labels.contains_key(&tier.node_label),
                agreed.get(&tier.node_label),
            ) {
                spec.labels.insert(tier.node_label.clone(), v.clone());
            }
        }
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
            counters: self.counters.clone(),
        }
    }
}

/// What the bound on devices counts a slice's under: its node's own devices, or its pool's
/// when the slice reaches several nodes (so no node reaches more than the bound from one pool).
fn bound_key(s: &ResourceSlice) -> String {
    match s.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        Some(node) => format!("node {node}"),
        None => format!("pool {} of {}", s.spec.pool.name, s.spec.driver),
    }
}

/// The keys ([`bound_key`]) of the usable slices whose devices together exceed
/// [`MAX_DRA_DEVICES_PER_NODE`], each with its count (taken when warned of). Counted before any
/// device is read, so an oversized node costs no memory past its objects.
fn over_bound<'s>(
    usable: impl Iterator<Item = &'s ResourceSlice>,
) -> HashMap<String, Option<usize>> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for s in usable {
        let n = s.spec.devices.as_ref().map_or(0, Vec::len);
        *counts.entry(bound_key(s)).or_default() += n;
    }
    (counts.into_iter())
        .filter(|&(_, n)| n > MAX_DRA_DEVICES_PER_NODE)
        .map(|(k, n)| (k, Some(n)))
        .collect()
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
                Some(basalt_engine::SelectorRequirement {
                    key: r.key.clone(),
                    operator: super::selectors::node_operator(&r.operator)?,
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

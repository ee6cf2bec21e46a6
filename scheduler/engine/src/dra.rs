//! Dynamic Resource Allocation (`resource.k8s.io/v1`): the devices ResourceSlices publish, what
//! a pod's ResourceClaims ask of them, and the search that picks devices for a pod's claims on
//! one node.
//!
//! CEL selectors depend only on the device, never on what is in use, so the reader evaluates
//! them once and hands the engine each request's matching devices as a set
//! ([`DraSpec::eligible`]). What a session changes is which devices are free; the search below
//! is kube-scheduler's allocator (claims, then requests with their `firstAvailable`
//! alternatives in order, then device slots, backtracking, first solution wins) over those sets.
//!
//! Partitionable devices (KEP-4815, `sharedCounters` / `consumesCounters`): devices that
//! overlap, such as the MIG placements of one GPU, consume counters of a set their pool shares;
//! a device is allocated only while every counter it consumes has room for it beside the
//! devices in use and the ones the search picked. The reader flattens the counters: each
//! (pool, counter set, counter) is one index into [`DraSpec::counters`].

use std::collections::BTreeMap;
use std::sync::Arc;

/// Devices and claims as the reader found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraSpec {
    /// Every device of a complete pool's newest generation, in (driver, pool, name) order.
    pub devices: Vec<DraDevice>,
    /// Sets of devices that match a request's class and selectors (`Alternative::eligible`
    /// indexes them): one per distinct (class, selectors), shared by every claim asking so.
    pub eligible: Vec<DeviceSet>,
    /// Devices allocated to claims before this cycle (admin access excluded).
    pub allocated: DeviceSet,
    /// Each shared counter's capacity, in milli-units.
    pub counters: Vec<i64>,
}

impl DraSpec {
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraDevice {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub name: Arc<str>,
    /// The nodes that can use it.
    pub reach: Reach,
    /// Attribute values by qualified name (`gpu.nvidia.com/productName`): what `matchAttribute`
    /// and `distinctAttribute` constraints compare.
    pub attributes: BTreeMap<String, AttrValue>,
    /// What it takes of the shared counters while allocated: (index into
    /// [`DraSpec::counters`], milli-units). Empty for a device that shares nothing.
    pub consumes: Vec<(u32, i64)>,
}

/// Which nodes can use a device: its slice's `nodeName`, the nodes its `nodeSelector` selects
/// (resolved by the reader), or `allNodes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    Node(String),
    Nodes(Vec<String>),
    All,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttrValue {
    Int(i64),
    Bool(bool),
    String(String),
    Version(String),
}

/// A set of devices by index, one bit each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceSet(Vec<u64>);

impl DeviceSet {
    pub fn contains(&self, d: u32) -> bool {
        (self.0.get(d as usize / 64)).is_some_and(|w| w & (1 << (d % 64)) != 0)
    }

    pub fn insert(&mut self, d: u32) {
        let i = d as usize / 64;
        if i >= self.0.len() {
            self.0.resize(i + 1, 0);
        }
        self.0[i] |= 1 << (d % 64);
    }

    pub fn remove(&mut self, d: u32) {
        if let Some(w) = self.0.get_mut(d as usize / 64) {
            *w &= !(1 << (d % 64));
        }
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (self.0.iter().enumerate()).flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| (i * 64 + b) as u32)
        })
    }
}

impl FromIterator<u32> for DeviceSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = DeviceSet::default();
        iter.into_iter().for_each(|d| s.insert(d));
        s
    }
}

/// What a pod's ResourceClaims ask, in `spec.resourceClaims` order: part of its placement
/// rules, so pods whose claims come from one template share feasibility results (the claims'
/// own names are the task's, [`crate::Task::claims`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimNeed {
    pub claims: Vec<ClaimAsk>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimAsk {
    /// The claim in messages: `ns/name` of a claim the pod names, or the pod's entry name
    /// (`spec.resourceClaims[].name`) for one made from a template.
    pub label: String,
    /// `ns/name` of a claim several pods may use (one the pod names itself): one allocation,
    /// made by the first of them placed, that the others follow.
    pub shared: Option<String>,
    pub state: ClaimState,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClaimState {
    /// Allocated before this cycle: its devices are taken; the pod may go only where the
    /// allocation's `nodeSelector` allows (`None`: anywhere).
    Allocated { nodes: Option<Vec<String>> },
    /// To allocate on the pod's node.
    Pending {
        requests: Vec<RequestAsk>,
        constraints: Vec<ConstraintAsk>,
    },
    /// Cannot be allocated on any node; the reason (a CEL error, a class that does not exist,
    /// a feature Basalt does not allocate).
    Refused(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestAsk {
    pub name: String,
    /// `exactly` is one alternative; `firstAvailable` its sub-requests, tried in order.
    pub alternatives: Vec<Alternative>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Alternative {
    /// `request` or `request/subrequest`, as the allocation result names it.
    pub name: String,
    /// Index into [`DraSpec::eligible`].
    pub eligible: u32,
    pub count: Count,
    /// Admin access: may take devices in use, and holds none.
    pub admin_access: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Count {
    Exactly(u32),
    /// Every matching device the node can use (at least one).
    All,
}

/// `matchAttribute` (every device of the requests has the attribute, with one value) or
/// `distinctAttribute` (every one a different value).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConstraintAsk {
    /// Request names it covers: `r` covers `r` and its sub-requests `r/sub`, `r/sub` only that
    /// sub-request; empty: all.
    pub requests: Vec<String>,
    pub attribute: String,
    pub distinct: bool,
}

impl ConstraintAsk {
    fn covers(&self, request: &str) -> bool {
        let parent = request.split_once('/').map_or(request, |(r, _)| r);
        self.requests.is_empty() || (self.requests.iter()).any(|r| r == request || r == parent)
    }
}

/// The devices a pending claim takes: per result, the request (`r` or `r/sub`) and the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPick {
    pub results: Vec<(String, u32, bool)>,
}

impl ClaimPick {
    /// Devices it holds (admin-access results hold none).
    pub fn held(&self) -> impl Iterator<Item = u32> + '_ {
        (self.results.iter()).filter(|r| !r.2).map(|r| r.1)
    }
}

/// The snapshot's view of DRA: devices, the sets requests match and what each node reaches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraTable {
    pub devices: Vec<DraDevice>,
    pub eligible: Vec<DeviceSet>,
    pub allocated: DeviceSet,
    /// Per node (by [`crate::NodeId`] index): the devices it can use, in device order.
    pub reach: Vec<Vec<u32>>,
    /// Each shared counter's capacity ([`DraSpec::counters`]).
    pub counters: Vec<i64>,
}

impl DraTable {
    pub fn new(spec: DraSpec, node_names: &[&str]) -> DraTable {
        let ids: std::collections::HashMap<&str, usize> = (node_names.iter().enumerate())
            .map(|(i, n)| (*n, i))
            .collect();
        let mut reach = vec![Vec::new(); node_names.len()];
        for (d, device) in spec.devices.iter().enumerate() {
            let d = d as u32;
            match &device.reach {
                Reach::Node(n) => {
                    if let Some(&i) = ids.get(n.as_str()) {
                        reach[i].push(d);
                    }
                }
                Reach::Nodes(ns) => {
                    for i in ns.iter().filter_map(|n| ids.get(n.as_str())) {
                        reach[*i].push(d);
                    }
                }
                Reach::All => reach.iter_mut().for_each(|r| r.push(d)),
            }
        }
        DraTable {
            devices: spec.devices,
            eligible: spec.eligible,
            allocated: spec.allocated,
            reach,
            counters: spec.counters,
        }
    }

    /// The shared counters that `held` devices take, per counter.
    pub fn counters_held(&self, held: impl IntoIterator<Item = u32>) -> Vec<i64> {
        let mut used = vec![0; self.counters.len()];
        for d in held {
            self.charge(&mut used, d, 1);
        }
        used
    }

    /// Adds (`sign` 1) or takes back (-1) what device `d` consumes to `used`.
    pub fn charge(&self, used: &mut [i64], d: u32, sign: i64) {
        for &(c, amount) in &self.devices[d as usize].consumes {
            if let Some(u) = used.get_mut(c as usize) {
                *u += sign * amount;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The devices matching set `id`: none when the table has no such set (a snapshot
    /// without devices keeps none).
    fn set(&self, id: u32) -> &DeviceSet {
        static NONE: DeviceSet = DeviceSet(Vec::new());
        self.eligible.get(id as usize).unwrap_or(&NONE)
    }

    /// Whether the node could hold the claims with nothing in use: the static part of the
    /// check, the same for every pod with these rules.
    pub fn could_fit(
        &self,
        need: &ClaimNeed,
        node: usize,
        node_name: &str,
    ) -> Result<(), ClaimRefusal> {
        let reach = self.reach.get(node).map_or(&[][..], Vec::as_slice);
        for (claim, c) in (0..).zip(&need.claims) {
            let refuse = |why| Err(ClaimRefusal { claim, why });
            match &c.state {
                ClaimState::Allocated { nodes: None } => {}
                ClaimState::Allocated { nodes: Some(nodes) } => {
                    if !nodes.iter().any(|n| n == node_name) {
                        return refuse(ClaimShort::AllocatedElsewhere);
                    }
                }
                ClaimState::Refused(_) => return refuse(ClaimShort::Refused),
                ClaimState::Pending { requests, .. } => {
                    for (request, r) in (0..).zip(requests) {
                        let enough = r.alternatives.iter().any(|a| {
                            let set = self.set(a.eligible);
                            let n = reach.iter().filter(|&&d| set.contains(d)).count();
                            match a.count {
                                Count::Exactly(k) => n >= k as usize,
                                Count::All => n >= 1,
                            }
                        });
                        if !enough {
                            return refuse(ClaimShort::NoDeviceMatches { request });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Steps one search may take before it gives up on the node (kube-scheduler bounds its search
/// by time; a bound in steps keeps the outcome deterministic).
pub const SEARCH_STEPS: u32 = 100_000;

/// Why a node cannot hold a pod's claims: which claim (its position in
/// [`ClaimNeed::claims`]) and what stops it. Plain data: worded only when a message is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimRefusal {
    pub claim: u32,
    pub why: ClaimShort,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClaimShort {
    /// Allocated before this cycle where the node is not allowed.
    AllocatedElsewhere,
    /// Cannot be allocated on any node ([`ClaimState::Refused`] says why).
    Refused,
    /// No device the node reaches matches the selectors of this request (its position in
    /// the claim's requests).
    NoDeviceMatches { request: u32 },
    /// The claim's requests cannot all be met with the node's free devices.
    TooFewFreeDevices,
    /// Shared, and allocated this cycle (for another of its pods) to devices the node does
    /// not reach; worded as too few free devices.
    SharedElsewhere,
    /// The search ran out of steps.
    SearchGaveUp,
}

impl ClaimShort {
    /// Evictions free devices; they change neither where a claim is allocated nor which
    /// devices a node reaches.
    pub(crate) fn resolvable_by_preemption(self) -> bool {
        matches!(
            self,
            ClaimShort::TooFewFreeDevices | ClaimShort::SearchGaveUp
        )
    }
}

impl ClaimRefusal {
    /// kube-scheduler's wording; `need` holds the claims the refusal was made for.
    pub fn describe(&self, need: &ClaimNeed) -> String {
        let c = &need.claims[self.claim as usize];
        let why = match (&self.why, &c.state) {
            (ClaimShort::AllocatedElsewhere, _) => {
                return format!("claim {} is allocated on other nodes", c.label)
            }
            (ClaimShort::Refused, ClaimState::Refused(why)) => why.clone(),
            (ClaimShort::NoDeviceMatches { request }, ClaimState::Pending { requests, .. }) => {
                let name = &requests[*request as usize].name;
                format!("no device matches selectors of request {name}")
            }
            (ClaimShort::TooFewFreeDevices | ClaimShort::SharedElsewhere, _) => {
                "too few free devices".to_string()
            }
            (ClaimShort::SearchGaveUp, _) => {
                format!("the device search gave up after {SEARCH_STEPS} steps")
            }
            (why, state) => unreachable!("claim refusal {why:?} for a claim in state {state:?}"),
        };
        format!("cannot allocate claim {}: {why}", c.label)
    }
}

mod search;
pub use search::search;

#[cfg(test)]
mod tests;

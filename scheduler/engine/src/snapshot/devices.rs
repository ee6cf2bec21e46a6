//! The snapshot's side of shared devices: HAMi nodes' share totals as allocatable, the flat
//! per-device usage table, and what each bound pod holds of it.

use super::{err, SnapshotError};
use crate::devices::{DeviceUse, HeldDevice, ShareAsk, ShareMemory, ShareNames, Sharing};
use crate::model::{Gpu, Node};
use crate::resources::ResourceList;
use crate::snapshot::NodeSpec;

/// A HAMi node's devices, summed, as allocatable in HAMi's request names: memory (MiB),
/// memory percentage (100 per device) and compute (`devcore`). The kubelet never advertises
/// them; they bound a node's shares as its allocatable bounds everything else, and a node
/// without them (no HAMi) refuses a pod that asks for them. Being made up, they are never
/// named in a refusal: the cards' reasons are, in HAMi's words (`CardInsufficientMemory`;
/// `NodeInsufficientDevice` on a node without HAMi), see `Session::devices_short`.
///
/// A Volcano vGPU node's plugin advertises memory and compute itself; only the percentage is
/// added (and the others when a node lacks them).
pub(super) fn with_share_totals(mut spec: NodeSpec) -> NodeSpec {
    if spec.devices_closed.is_some() {
        return closed(spec);
    }
    let shares = spec.shares.clone();
    let Some(names) = shares.as_deref().and_then(|s| s.of(spec.sharing)) else {
        return spec;
    };
    let gpus = spec.gpus.as_deref().unwrap_or_default();
    let healthy = || gpus.iter().filter(|g| g.healthy);
    let memory: u64 = healthy().map(|g| g.memory_mib.unwrap_or(0)).sum();
    let totals = [
        (&names.memory, memory as i64),
        (&names.percent, 100 * healthy().count() as i64),
        (&names.cores, healthy().map(|g| g.cores as i64).sum()),
    ];
    let list: &mut ResourceList = &mut spec.allocatable;
    for (name, total) in totals {
        list.entry(name.clone()).or_insert(total);
    }
    spec
}

/// A node whose devices are closed: none listed, and its share totals 0 (its device count is
/// set to 0 once interned, see `build_node`), so the fast paths refuse what asks for them;
/// `session/explain.rs` words why.
fn closed(mut spec: NodeSpec) -> NodeSpec {
    if let Some(shares) = spec.shares.clone() {
        for name in shares.names() {
            if let Some(v) = spec.allocatable.get_mut(name) {
                *v = 0;
            }
        }
    }
    spec.gpus = None;
    spec.sharing = Sharing::Exclusive;
    // MIG instances are tied to listed GPUs: with none listed they are counted only.
    spec.slices.clear();
    spec
}

/// The ids of the share resources the nodes' reader names (every node names the same).
pub(super) fn share_ids(names: &crate::resources::ResourceNames, nodes: &[NodeSpec]) -> ShareNames {
    ShareNames::in_table(names, nodes.iter().find_map(|n| n.shares.as_deref()))
}

/// Whether `request` asks for what a closed node offers none of: its device count or a share.
pub(crate) fn asks_closed(
    node: &Node,
    shares: &ShareNames,
    request: &crate::resources::Resources,
) -> bool {
    let s = shares;
    let ids = [
        s.memory,
        s.percent,
        s.cores,
        s.vgpu_number,
        s.vgpu_memory,
        s.vgpu_percent,
    ];
    (ids.into_iter()
        .chain([s.vgpu_cores, Some(node.device_kind)]))
    .flatten()
    .any(|id| request.get(id) > 0)
}

/// The devices of a node that shares them: they must be listed (the count of slots does not
/// say how many devices there are), at most 64 of them.
pub(super) fn check_shared(n: &NodeSpec) -> Result<(), SnapshotError> {
    if !n.sharing.shares() {
        return Ok(());
    }
    if !n.sharing.replicas() && n.shares.is_none() {
        let message = format!(
            "shares its devices ({:?}) but names no share resources",
            n.sharing
        );
        return Err(err("Node", &n.name, "shares", message));
    }
    match &n.gpus {
        None => Err(err(
            "Node",
            &n.name,
            "gpus",
            format!("shares its devices ({:?}) but lists none", n.sharing),
        )),
        Some(g) if g.len() > super::MAX_GPUS_PER_NODE => Err(err(
            "Node",
            &n.name,
            "gpus",
            format!(
                "{} devices; at most {} per node are supported",
                g.len(),
                super::MAX_GPUS_PER_NODE
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// Numbers the shared nodes' devices into one flat table; returns its length.
pub(super) fn assign_bases(nodes: &mut [Node]) -> usize {
    let mut next = 0u32;
    for n in nodes {
        n.device_base = next;
        if n.sharing.shares() {
            next += n.gpus.len() as u32;
        }
    }
    next as usize
}

/// What a task takes of each device it holds on a node that shares them: on a time-sliced
/// node only a slot (`None`); on a HAMi node its share, whole devices when it states none.
pub fn ask_on(sharing: Sharing, share: Option<ShareAsk>) -> Option<ShareAsk> {
    match sharing {
        Sharing::Hami => Some(share.unwrap_or(ShareAsk::WHOLE)),
        // Volcano's default: all memory, no compute share (`vgpu.go`).
        Sharing::VolcanoVgpu => Some(share.unwrap_or(ShareAsk {
            memory: ShareMemory::Percent(100),
            cores: 0,
        })),
        Sharing::Exclusive | Sharing::TimeSliced | Sharing::Mps => None,
    }
}

/// The containers' device asks of a pod whose containers ask separately (two or more ask for
/// devices). `None` for every other pod, so a pod of one container pays nothing.
pub(super) fn container_asks(
    containers: &[crate::devices::ContainerAsk],
) -> Option<std::sync::Arc<[crate::devices::ContainerAsk]>> {
    let asking = || containers.iter().filter(|c| c.count > 0);
    (asking().count() >= 2).then(|| asking().copied().collect())
}

/// Whether a bound pod's devices hold different amounts (HAMi's record of a pod whose
/// containers asked apart): then its usage is charged device by device ([`charge_held`]).
pub(crate) fn held_differs(held: &[HeldDevice]) -> bool {
    held.windows(2)
        .any(|w| (w[0].memory_mib, w[0].cores) != (w[1].memory_mib, w[1].cores))
}

/// Puts what a bound pod holds of each device, by UUID, on (or takes it off) the node's
/// devices; a UUID the node does not list holds nothing here.
pub(crate) fn charge_held(gpus: &[Gpu], usage: &mut [DeviceUse], held: &[HeldDevice], add: bool) {
    for d in held {
        if let Some(p) = gpus.iter().position(|g| g.uuid.as_deref() == Some(&d.uuid)) {
            usage[p].charge(d.memory_mib, d.cores, add);
        }
    }
}

/// The share a pod holds of each of its devices: what HAMi's annotation records (the largest
/// amounts, when its devices differ: a task holds the same of each), else its request's.
pub(super) fn held_share(held: &[HeldDevice], asked: Option<ShareAsk>) -> Option<ShareAsk> {
    if held.is_empty() {
        return asked;
    }
    Some(ShareAsk {
        memory: ShareMemory::Mib(held.iter().map(|d| d.memory_mib).max().unwrap_or(0)),
        cores: held.iter().map(|d| d.cores).max().unwrap_or(0),
    })
}

/// The devices a bound pod on a shared node names: the UUIDs HAMi's annotation records, else
/// the indices Basalt's annotation records when they are as many as it takes. `None` when it
/// names none that way: then which devices it holds depends on the pods charged before it.
pub(super) fn named_shared(
    gpus: &[Gpu],
    held: &[HeldDevice],
    named: &[u32],
    want: usize,
) -> Option<u64> {
    if !held.is_empty() {
        let by_uuid = |d: &HeldDevice| gpus.iter().position(|g| g.uuid.as_deref() == Some(&d.uuid));
        return Some(held.iter().filter_map(by_uuid).fold(0, |m, p| m | 1 << p));
    }
    let mask: u64 = if named.len() == want && named.iter().all(|&i| (i as usize) < gpus.len()) {
        named.iter().fold(0, |m, &i| m | 1 << i)
    } else {
        0
    };
    (mask.count_ones() as usize == want.min(gpus.len())).then_some(mask)
}

/// The devices a bound pod holds on a shared node ([`named_shared`], else the first devices
/// with room for its share beside `usage`) and whether it named them.
pub(super) fn pick_shared(
    node: &Node,
    usage: &[DeviceUse],
    held: &[HeldDevice],
    named: &[u32],
    want: usize,
    share: Option<ShareAsk>,
) -> (u64, bool) {
    let gpus = &node.gpus;
    let ask = ask_on(node.sharing, share);
    let named = named_shared(gpus, held, named, want);
    let mask = named.unwrap_or_else(|| {
        let mut mask = 0u64;
        for (p, g) in gpus.iter().enumerate() {
            if mask.count_ones() as usize == want {
                break;
            }
            if usage[p].fits(g, ask.map(|a| (a, a.memory_on(g)))) {
                mask |= 1 << p;
            }
        }
        mask
    });
    (mask, named.is_some())
}

/// Charges what a bound pod holds of the devices `mask` of a shared node on their `usage`:
/// card by card as HAMi records it when its devices hold different amounts, else one share of
/// each. A bound pod is where it is: its usage counts even past a device's capacity.
pub(super) fn charge_claim(
    node: &Node,
    usage: &mut [DeviceUse],
    held: &[HeldDevice],
    mask: u64,
    share: Option<ShareAsk>,
) {
    match held_differs(held) {
        true => charge_held(&node.gpus, usage, held, true),
        false => charge_shares(&node.gpus, usage, mask, ask_on(node.sharing, share), true),
    }
}

/// The usage of `node`'s devices in the flat table `usage` (none unless it shares them).
pub(super) fn node_usage<'u>(node: &Node, usage: &'u [DeviceUse]) -> &'u [DeviceUse] {
    match node.sharing.shares() {
        true => &usage[node.device_base as usize..][..node.gpus.len()],
        false => &[],
    }
}

pub(super) fn node_usage_mut<'u>(node: &Node, usage: &'u mut [DeviceUse]) -> &'u mut [DeviceUse] {
    match node.sharing.shares() {
        true => &mut usage[node.device_base as usize..][..node.gpus.len()],
        false => &mut [],
    }
}

/// A shared node's GPU mask is of the devices no pod can join, not of those held: `gpus_used`
/// of `node` set so from `usage` (left as it is on a node that does not share).
pub(super) fn close_shared(node: &Node, usage: &[DeviceUse], gpus_used: &mut u64) {
    if node.sharing.shares() {
        *gpus_used = closed_devices(node, node_usage(node, usage));
    }
}

/// Puts one share on (or takes it off) each device of `mask`.
pub(crate) fn charge_shares(
    gpus: &[Gpu],
    usage: &mut [DeviceUse],
    mask: u64,
    ask: Option<ShareAsk>,
    add: bool,
) {
    for (p, g) in gpus.iter().enumerate() {
        if mask & (1 << p) != 0 {
            let (memory, cores) = share_on(ask, g);
            usage[p].charge(memory, cores, add);
        }
    }
}

/// The memory (MiB) and compute one share `ask` takes of device `g` (none on a time-sliced
/// device).
fn share_on(ask: Option<ShareAsk>, g: &Gpu) -> (u32, u32) {
    ask.map_or((0, 0), |a| (a.memory_on(g), a.cores))
}

/// What a patch changes of shared devices' usage, per device of the flat table: slots, memory
/// and compute, summed before any is applied so that the patch can decline while nothing is
/// changed yet.
#[derive(Default)]
pub(super) struct SharedDelta(crate::hash::Map<usize, [i64; 3]>);

impl SharedDelta {
    /// Puts one share on (or takes it off) each device of `mask` on `node`, if it shares them.
    pub(super) fn charge(&mut self, node: &Node, mask: u64, share: Option<ShareAsk>, add: bool) {
        if !node.sharing.shares() {
            return;
        }
        let ask = ask_on(node.sharing, share);
        let sign = if add { 1 } else { -1 };
        for (p, g) in node.gpus.iter().enumerate() {
            if mask & (1 << p) != 0 {
                let (memory, cores) = share_on(ask, g);
                let d = self.0.entry(node.device_base as usize + p).or_default();
                d[0] += sign;
                d[1] += sign * memory as i64;
                d[2] += sign * cores as i64;
            }
        }
    }

    /// Whether applying it to `usage` gives what charging every holder anew would: no device's
    /// usage saturates (the sums [`DeviceUse::charge`] keeps are saturating) or goes below 0.
    pub(super) fn exact(&self, usage: &[DeviceUse]) -> bool {
        self.0.iter().all(|(&i, delta)| {
            let u = &usage[i];
            let now = [u.slots, u.memory_mib, u.cores];
            now.iter()
                .zip(delta)
                .all(|(&v, &d)| v < u32::MAX && (0..u32::MAX as i64).contains(&(v as i64 + d)))
        })
    }

    pub(super) fn apply(self, usage: &mut [DeviceUse]) {
        for (i, [slots, memory, cores]) in self.0 {
            let u = &mut usage[i];
            u.slots = (u.slots as i64 + slots) as u32;
            u.memory_mib = (u.memory_mib as i64 + memory) as u32;
            u.cores = (u.cores as i64 + cores) as u32;
        }
    }
}

/// The devices of a shared node no pod can join any more.
pub(crate) fn closed_devices(node: &Node, usage: &[DeviceUse]) -> u64 {
    (node.gpus.iter().zip(usage).enumerate())
        .filter(|(_, (g, u))| u.closed(g, node.sharing))
        .fold(0, |m, (p, _)| m | 1 << p)
}

/// A node's MIG slices, interned: each on a GPU of the node in MIG mode, advertised as a
/// resource of its allocatable, at most 64.
pub(super) fn node_slices(
    names: &crate::resources::ResourceNames,
    n: &NodeSpec,
    gpus: &[Gpu],
) -> Result<Vec<crate::devices::Slice>, SnapshotError> {
    if n.slices.len() > super::MAX_GPUS_PER_NODE {
        return Err(err(
            "Node",
            &n.name,
            "slices",
            format!(
                "{} MIG instances; at most {} per node are supported",
                n.slices.len(),
                super::MAX_GPUS_PER_NODE
            ),
        ));
    }
    let mut out = Vec::with_capacity(n.slices.len());
    for (i, s) in n.slices.iter().enumerate() {
        if !gpus.iter().any(|g| g.index == s.gpu && g.mig) {
            let message = format!(
                "[{i}] is on GPU {}, which is not a GPU of the node in MIG mode",
                s.gpu
            );
            return Err(err("Node", &n.name, "slices", message));
        }
        let kind = names.id(&s.resource).ok_or_else(|| {
            let message = format!("[{i}]: {} is not in its allocatable", s.resource);
            err("Node", &n.name, "slices", message)
        })?;
        out.push(crate::devices::Slice {
            kind,
            mig: s.clone(),
        });
    }
    Ok(out)
}

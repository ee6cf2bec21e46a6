//! One node of a snapshot from its spec, and the whole GPUs its bound pods hold.

use super::*;

pub(super) fn duplicate_node(name: &str) -> SnapshotError {
    err("Node", name, "metadata.name", "duplicate node".into())
}

/// One node of the snapshot, its resources interned with `names`.
pub(super) fn build_node(
    names: &ResourceNames,
    id: NodeId,
    n: &NodeSpec,
) -> Result<Node, SnapshotError> {
    let mut allocatable = names.resources(&n.allocatable);
    if !n.allocatable.contains_key(crate::resources::PODS_NAME) {
        allocatable.set(PODS, DEFAULT_MAX_PODS);
    }
    devices::check_shared(n)?;
    let device_kind = match &n.device_resource {
        None => GPU,
        Some(name) => names.id(name).ok_or_else(|| {
            err(
                "Node",
                &n.name,
                "device_resource",
                format!("{name} is not in its allocatable"),
            )
        })?,
    };
    // A node whose devices are closed offers none (see `devices::closed`).
    if n.devices_closed.is_some() {
        allocatable.set(device_kind, 0);
    }
    let count = allocatable.get(device_kind).max(0) as usize;
    // A shared node's allocatable counts slots; its devices are listed (`check_shared`).
    if count > MAX_GPUS_PER_NODE && !n.sharing.shares() {
        return Err(err(
            "Node",
            &n.name,
            "status.allocatable",
            format!(
                "{count} {}; at most {MAX_GPUS_PER_NODE} devices per node are supported",
                names.name(device_kind)
            ),
        ));
    }
    // GPUs in MIG mode are listed but not counted as whole devices.
    let gpus = match &n.gpus {
        Some(g) if g.iter().filter(|g| !g.mig).count() == count || n.sharing.shares() => {
            sorted_gpus(g)
        }
        _ => (0..count as u32).map(Gpu::new).collect(),
    };
    let slices = devices::node_slices(names, n, &gpus)?;
    Ok(Node {
        id,
        name: n.name.clone(),
        labels: n.labels.clone(),
        taints: n.taints.clone(),
        unschedulable: n.unschedulable,
        allocatable,
        gpus,
        sharing: n.sharing,
        device_kind,
        device_base: 0,
        slices,
        devices_closed: n.devices_closed.as_deref().map(Arc::from),
        mig_reconfiguring: n.mig_reconfiguring.as_deref().map(Arc::from),
    })
}

/// The nodes of `specs` (sorted by name, none twice), ids in order.
pub(super) fn build_nodes(
    names: &ResourceNames,
    specs: &[NodeSpec],
) -> Result<Vec<Node>, SnapshotError> {
    (specs.iter().enumerate())
        .map(|(i, n)| build_node(names, NodeId(i as u32), n))
        .collect()
}

pub(super) fn sorted_gpus(gpus: &[Gpu]) -> Vec<Gpu> {
    let mut g = gpus.to_vec();
    g.sort_by_key(|g| g.index);
    g
}

/// Marks the GPUs a bound pod holds: the ids it names when they are valid and free, otherwise
/// the lowest free ones; and whether it holds what it names (it wants none, or they were
/// valid), which makes its claim independent of the other pods' order.
pub(super) fn claim_gpus(used: &mut u64, count: usize, named: &[u32], want: usize) -> (u64, bool) {
    let (mask, as_named) = match named_gpus(*used, count, named, want) {
        Some(mask) => (mask, true),
        None => {
            let lowest = (0..count as u32)
                .filter(|&i| *used & (1u64 << i) == 0)
                .take(want)
                .fold(0, |mask, i| mask | 1u64 << i);
            (lowest, want == 0)
        }
    };
    *used |= mask;
    (mask, as_named)
}

/// The GPUs a bound pod names, as a mask, when they are `want` valid GPUs of the node's
/// `count`, free in `used` and none named twice.
pub(super) fn named_gpus(used: u64, count: usize, named: &[u32], want: usize) -> Option<u64> {
    let mut mask = 0u64;
    let valid = named.len() == want
        && named.iter().all(|&i| {
            let ok = (i as usize) < count && (used | mask) & (1u64 << i) == 0;
            mask |= if ok { 1u64 << i } else { 0 };
            ok
        });
    valid.then_some(mask)
}

/// The devices bound pod `p` holds on its node `n`, and whether they are the ones it names
/// (then its claim is the same in any pod order): whole devices claimed on `used`, the node's
/// mask; shared ones picked beside `shared`, the node's devices' usage, and charged apart
/// (`devices::charge_claim`). A full build and a patch both claim here.
pub(super) fn claim_devices(
    n: &Node,
    used: &mut u64,
    shared: &[DeviceUse],
    p: &PodSpec,
    facts: &PodFacts,
) -> (u64, bool) {
    let want = devices_wanted(n, &facts.request);
    match n.sharing.shares() {
        true => devices::pick_shared(n, shared, &p.held_devices, &p.gpu_ids, want, facts.share),
        false => claim_gpus(used, n.gpus.len(), &p.gpu_ids, want),
    }
}

/// How many of `n`'s devices a request asks for.
fn devices_wanted(n: &Node, request: &Resources) -> usize {
    request.get(n.device_kind).max(0) as usize
}

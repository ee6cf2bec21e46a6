//! What pods hold on their own node that another pod may not share: host ports (kube-scheduler's
//! NodePorts) and in-tree disks (its VolumeRestrictions). Placing a pod changes its node alone.

use crate::constraints::{Disk, HostPort};
use crate::hash::Map;
use crate::model::NodeId;
use crate::refusal::Refusal;

/// Host ports taken and in-tree disks mounted, per node.
#[derive(Default)]
pub(super) struct OnNode {
    ports: Map<NodeId, Vec<HostPort>>,
    disks: Map<NodeId, Vec<Disk>>,
}

impl OnNode {
    /// A pod's ports and disks go on (`add`) or off a node.
    pub(super) fn change(&mut self, node: NodeId, ports: &[HostPort], disks: &[Disk], add: bool) {
        take(&mut self.ports, node, ports, add);
        take(&mut self.disks, node, disks, add);
    }

    /// NodePorts: a port the pod asks for is taken on the node, once the pods taken away
    /// (`gone`, their ports) have freed theirs.
    pub(super) fn check_ports(
        &self,
        node: NodeId,
        ports: &[HostPort],
        gone: &[&HostPort],
    ) -> Result<(), Refusal> {
        match clash(&self.ports, node, ports, gone, HostPort::conflicts) {
            true => Err(Refusal::HostPorts),
            false => Ok(()),
        }
    }

    /// VolumeRestrictions: a disk the pod mounts is mounted on the node in a way that forbids
    /// sharing it, once the pods taken away (`gone`, their disks) have unmounted theirs.
    pub(super) fn check_disks(
        &self,
        node: NodeId,
        disks: &[Disk],
        gone: &[&Disk],
    ) -> Result<(), Refusal> {
        match clash(&self.disks, node, disks, gone, Disk::conflicts) {
            true => Err(Refusal::DiskConflict),
            false => Ok(()),
        }
    }
}

/// Adds (or removes, one of each) a pod's items to what a node holds.
fn take<T: PartialEq + Clone>(
    held: &mut Map<NodeId, Vec<T>>,
    node: NodeId,
    items: &[T],
    add: bool,
) {
    if items.is_empty() {
        return;
    }
    let taken = held.entry(node).or_default();
    for p in items {
        if add {
            taken.push(p.clone());
        } else if let Some(i) = taken.iter().position(|q| q == p) {
            taken.swap_remove(i);
        }
    }
}

/// Whether an item asked conflicts with one the node holds, less one of each of `gone`.
fn clash<T: PartialEq>(
    held: &Map<NodeId, Vec<T>>,
    node: NodeId,
    asked: &[T],
    gone: &[&T],
    conflicts: fn(&T, &T) -> bool,
) -> bool {
    // Most pods ask for neither: no lookup for them.
    if asked.is_empty() {
        return false;
    }
    let taken = held.get(&node).map_or(&[][..], Vec::as_slice);
    if gone.is_empty() {
        return asked.iter().any(|a| taken.iter().any(|t| conflicts(a, t)));
    }
    let mut left: Vec<&T> = taken.iter().collect();
    for g in gone {
        if let Some(i) = left.iter().position(|t| *t == *g) {
            left.swap_remove(i);
        }
    }
    asked.iter().any(|a| left.iter().any(|t| conflicts(a, t)))
}

//! What the nodes hold: usage per node and in all, devices taken whole, shared or sliced, and
//! DRA claims. Only placing and undoing tasks (`transact.rs`), holds for nominated pods
//! (`holds.rs`) and opening the session (`carry.rs`) change it, through the methods here.

use crate::devices::{DeviceUse, Take};
use crate::dra::{ClaimNeed, ClaimPick, DraTable};
use crate::hash::Map;
use crate::model::{Node, NodeId, TaskId};
use crate::resources::Resources;
use crate::snapshot::Snapshot;

use super::dra;

/// The session's capacity: what each node and the cluster hold now.
pub(super) struct Capacity {
    /// Per node (empty until the session's nodes are started, see `carry.rs`).
    used: Vec<Resources>,
    /// The sum of `used`, kept up to date so admission never sums every node per job.
    cluster_used: Resources,
    /// Per node: the devices no pod can take or join now, as a mask of positions.
    gpus_used: Vec<u64>,
    /// Per device of the nodes that share them (see [`Snapshot::device_use`]).
    device_use: Vec<DeviceUse>,
    /// Per node, the MIG slices taken (see [`Snapshot::slice_used`]).
    slice_used: Vec<u64>,
    /// The MIG slices each task placed by this cycle takes.
    placed_slices: Map<TaskId, u64>,
    /// What each container of a multi-container task placed this cycle takes (see
    /// `Session::container_takes`), in container order.
    placed_takes: Map<TaskId, Vec<Take>>,
    /// DRA devices in use and the claims this cycle allocated.
    claims: dra::Claims,
}

impl Capacity {
    /// The snapshot's devices, slices and claims; node usage comes with [`Self::start`].
    pub(super) fn new(snapshot: &Snapshot) -> Capacity {
        Capacity {
            used: Vec::new(),
            cluster_used: Resources::zero(snapshot.resources.len()),
            gpus_used: Vec::new(),
            device_use: snapshot.device_use.clone(),
            slice_used: snapshot.slice_used.clone(),
            placed_slices: Map::default(),
            placed_takes: Map::default(),
            claims: dra::Claims::new(&snapshot.dra),
        }
    }

    /// Starts from node usage and closed devices: the snapshot's, or a last session's.
    pub(super) fn start(&mut self, used: Vec<Resources>, gpus_used: Vec<u64>) {
        (self.used, self.gpus_used) = (used, gpus_used);
    }

    /// Brings a node to the snapshot's usage and closed devices; returns the devices it had
    /// closed before and whether its usage differed.
    pub(super) fn follow_snapshot(&mut self, snap: &Snapshot, node: NodeId) -> (u64, bool) {
        let i = node.index();
        let (used, gpus) = (&snap.node_used[i], snap.node_gpus_used[i]);
        let was = std::mem::replace(&mut self.gpus_used[i], gpus);
        let usage_moved = self.used[i] != *used;
        if usage_moved {
            self.used[i].clone_from(used);
        }
        (was, usage_moved)
    }

    /// Counts usage no node entry shows into the cluster's (the snapshot's, at opening).
    pub(super) fn count_in_cluster(&mut self, used: &Resources) {
        self.cluster_used.add(used);
    }

    /// The node usage, closed devices and shared devices' usage the session ends with.
    pub(super) fn into_node_state(self) -> (Vec<Resources>, Vec<u64>, Vec<DeviceUse>) {
        (self.used, self.gpus_used, self.device_use)
    }

    pub(super) fn used(&self, node: NodeId) -> &Resources {
        &self.used[node.index()]
    }

    pub(super) fn cluster_used(&self) -> &Resources {
        &self.cluster_used
    }

    /// The node's devices no pod can take or join now, as a mask of positions.
    pub(super) fn closed(&self, node: NodeId) -> u64 {
        self.gpus_used[node.index()]
    }

    /// What is in use on each device of a node that shares them.
    pub(super) fn shared_use(&self, n: &Node) -> &[DeviceUse] {
        let base = n.device_base as usize;
        &self.device_use[base..base + n.gpus.len()]
    }

    /// Whether a node's shared devices are in use otherwise than `kept` says.
    pub(super) fn shared_use_differs(&self, kept: &[DeviceUse], n: &Node) -> bool {
        let range = n.device_base as usize..n.device_base as usize + n.gpus.len();
        kept.get(range.clone()) != self.device_use.get(range)
    }

    /// The MIG slices taken on a node.
    pub(super) fn slices_used(&self, node: NodeId) -> u64 {
        self.slice_used.get(node.index()).copied().unwrap_or(0)
    }

    /// The MIG slices a task holds: those this cycle chose, else those it held when bound.
    pub(super) fn slices_of(&self, snap: &Snapshot, task: TaskId) -> u64 {
        let held = snap.task(task).slices;
        self.placed_slices.get(&task).copied().unwrap_or(held)
    }

    /// What each container of a task placed this cycle takes, when it was allocated per
    /// container.
    pub(super) fn takes(&self, task: TaskId) -> Option<&[Take]> {
        self.placed_takes.get(&task).map(Vec::as_slice)
    }

    pub(super) fn claims(&self) -> &dra::Claims {
        &self.claims
    }

    /// Holds the devices a task's placement picked for its claims.
    pub(super) fn take_claims(
        &mut self,
        table: &DraTable,
        need: &ClaimNeed,
        task: TaskId,
        picks: Vec<Option<ClaimPick>>,
    ) {
        self.claims.take(table, need, task, picks);
    }

    /// Gives back what [`Self::take_claims`] held for the task.
    pub(super) fn give_back_claims(&mut self, table: &DraTable, need: &ClaimNeed, task: TaskId) {
        self.claims.give_back(table, need, task);
    }

    /// Puts a request on a node (and the cluster).
    pub(super) fn take(&mut self, node: NodeId, request: &Resources) {
        self.used[node.index()].add(request);
        self.cluster_used.add(request);
    }

    /// Takes a request off a node (and the cluster).
    pub(super) fn give_back(&mut self, node: NodeId, request: &Resources) {
        self.used[node.index()].take_back(request);
        self.cluster_used.take_back(request);
    }

    /// Notes the MIG slices a task about to be placed on a node takes (see
    /// [`crate::devices::pick_slices`]); [`Self::charge_devices`] takes them.
    pub(super) fn take_slices(&mut self, snap: &Snapshot, task: TaskId, node: NodeId) {
        let n = snap.node(node);
        if n.slices.is_empty() {
            return;
        }
        let request = &snap.task(task).request;
        let taken = self.slice_used[node.index()];
        let slices = crate::devices::pick_slices(&n.slices, taken, request);
        if slices != 0 {
            self.placed_slices.insert(task, slices);
        }
    }

    /// Notes what each container of a task about to be placed takes.
    pub(super) fn keep_takes(&mut self, task: TaskId, takes: Vec<Take>) {
        self.placed_takes.insert(task, takes);
    }

    /// Forgets the slices and takes noted for a task whose placement is undone.
    pub(super) fn forget_takes(&mut self, task: TaskId) {
        self.placed_slices.remove(&task);
        self.placed_takes.remove(&task);
    }

    /// Puts the task's share on (or takes it off) each shared device of `gpus`, or marks whole
    /// devices used (or free); the node's closed-device mask follows.
    pub(super) fn charge_devices(
        &mut self,
        snap: &Snapshot,
        task: TaskId,
        node: NodeId,
        gpus: u64,
        add: bool,
    ) {
        let i = node.index();
        let n = snap.node(node);
        if !n.slices.is_empty() {
            let slices = self.slices_of(snap, task);
            match add {
                true => self.slice_used[i] |= slices,
                false => self.slice_used[i] &= !slices,
            }
        }
        if !n.sharing.shares() {
            match add {
                true => self.gpus_used[i] |= gpus,
                false => self.gpus_used[i] &= !gpus,
            }
            return;
        }
        let base = n.device_base as usize;
        let usage = &mut self.device_use[base..base + n.gpus.len()];
        if let Some(takes) = self.placed_takes.get(&task) {
            for t in takes {
                usage[t.position as usize].charge(t.memory_mib, t.cores, add);
            }
        } else if let Some(held) = snap.task(task).held.as_deref() {
            crate::snapshot::charge_held(&n.gpus, usage, held, add);
        } else {
            let ask = crate::snapshot::ask_on(n.sharing, snap.task(task).share);
            crate::snapshot::charge_shares(&n.gpus, usage, gpus, ask, add);
        }
        self.gpus_used[i] = crate::snapshot::closed_devices(n, usage);
    }
}

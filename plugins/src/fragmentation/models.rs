//! What the measure reads of the cluster: the session's device models, each node's and
//! each model's share of the devices, and what a node has free.

use basalt_engine::{NodeId, SessionView, TaskId, CPU};

use super::{ModelSet, FULL};

/// What a node has free, as the measure reads it.
#[derive(Clone, Debug, Default)]
pub struct NodeFree {
    pub model: Option<u8>,
    pub cpu: i64,
    /// Free share of each device, in milli.
    pub gpus: Vec<u16>,
}

/// The session's device models (sorted, at most 63: the rest count as none), each node's, and
/// each model's share of the cluster's devices.
pub struct Models {
    names: Vec<String>,
    of_node: Vec<Option<u8>>,
    /// Devices of each model id, then of nodes of none.
    devices: Vec<u64>,
}

impl Models {
    pub fn of(session: &SessionView) -> Self {
        let model = |n: &basalt_engine::Node| n.gpus.first().and_then(|g| g.model.clone());
        let mut names: Vec<String> = session.snapshot.nodes.iter().filter_map(model).collect();
        names.sort_unstable();
        names.dedup();
        names.truncate(63);
        let id = |m: Option<String>| m.and_then(|m| names.binary_search(&m).ok().map(|i| i as u8));
        let of_node = session
            .snapshot
            .nodes
            .iter()
            .map(|n| id(model(n)))
            .collect();
        let mut models = Models {
            devices: vec![0; names.len() + 1],
            names,
            of_node,
        };
        for (n, i) in session.snapshot.nodes.iter().zip(0..) {
            let m = models.index(models.of_node[i]);
            models.devices[m] += n.gpus.len() as u64;
        }
        models
    }

    /// Each model id, then none, as an `Option<u8>`.
    pub(super) fn all(&self) -> impl Iterator<Item = Option<u8>> {
        let n = self.names.len();
        (0..=n).map(move |m| (m < n).then_some(m as u8))
    }

    /// The index of `model` in per-model tables: its id, or the last for none.
    pub(super) fn index(&self, model: Option<u8>) -> usize {
        model.map_or(self.names.len(), usize::from)
    }

    /// `model`'s share of the cluster's devices (0 on a cluster without devices).
    pub fn capacity_share(&self, model: Option<u8>) -> f64 {
        let total: u64 = self.devices.iter().sum();
        match total {
            0 => 0.0,
            t => self.devices[self.index(model)] as f64 / t as f64,
        }
    }

    pub fn id(&self, name: &str) -> Option<u8> {
        self.names
            .binary_search_by(|m| m.as_str().cmp(name))
            .ok()
            .map(|i| i as u8)
    }

    pub fn of_node(&self, node: NodeId) -> Option<u8> {
        self.of_node[node.index()]
    }

    /// The models whose first node passes the static filters of the task's rules.
    pub(super) fn allowed(&self, session: &SessionView, task: TaskId) -> ModelSet {
        let snap = session.snapshot;
        let rules = &snap.rules[snap.task(task).rules.0 as usize];
        let fw = session.framework();
        if snap.nodes.iter().all(|n| fw.filter_node(rules, n).is_ok()) {
            return ModelSet::ANY;
        }
        let mut set = 0u64;
        for m in 0..self.names.len() {
            let first = self.of_node.iter().position(|&x| x == Some(m as u8));
            if first.is_some_and(|i| fw.filter_node(rules, &snap.nodes[i]).is_ok()) {
                set |= 1 << m;
            }
        }
        ModelSet(set)
    }

    /// What the node has free now.
    pub fn node_free(&self, session: &SessionView, node: NodeId, out: &mut NodeFree) {
        let n = session.snapshot.node(node);
        out.model = self.of_node(node);
        out.cpu = n.allocatable.get(CPU) - session.used(node).get(CPU);
        let closed = session.closed_devices(node);
        let usage = session.device_use(node);
        out.gpus.clear();
        out.gpus.extend(n.gpus.iter().enumerate().map(|(p, g)| {
            if closed & (1 << p) != 0 {
                0
            } else if let Some(u) = usage.get(p) {
                let left = g.cores.saturating_sub(u.cores) as u64;
                (left * FULL as u64 / g.cores.max(1) as u64) as u16
            } else {
                FULL
            }
        }));
    }
}

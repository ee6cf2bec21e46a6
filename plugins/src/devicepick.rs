//! Which devices of the chosen node a pod takes (the engine hands over those it could take).
//!
//! [`KeepIslandsWhole`], Basalt's default: whole devices inside one NVLink island when one can
//! hold them all (the fullest such island, so whole islands stay free for pods that need
//! them), else the lowest free positions; shared devices the same way, and inside an island
//! the least used first (HAMi's default `spread`) or the most used (`binpack`), as the pod's
//! `hami.io/gpu-scheduler-policy` says.

use std::collections::BTreeMap;

use basalt_engine::devices::DevicePolicy;
use basalt_engine::{DeviceChooser, DevicePick, NodeId, Session, TaskId};

pub struct KeepIslandsWhole;

impl DevicePick for KeepIslandsWhole {
    fn name(&self) -> &str {
        "keep-islands-whole"
    }

    fn prepare<'s>(&'s self, _: &Session) -> Box<dyn DeviceChooser + 's> {
        Box::new(KeepIslandsWhole)
    }
}

impl DeviceChooser for KeepIslandsWhole {
    fn pick(
        &mut self,
        session: &Session,
        task: TaskId,
        node: NodeId,
        open: u64,
        count: u32,
    ) -> u64 {
        let n = session.snapshot.node(node);
        let mut islands: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (p, g) in n.gpus.iter().enumerate() {
            if open & (1 << p) != 0 {
                islands.entry(g.nvlink_domain).or_default().push(p);
            }
        }
        let count = count as usize;
        let fitting = (islands.values()).filter(|free| free.len() >= count);
        let mut chosen: Vec<usize> = match fitting.min_by_key(|free| free.len()) {
            Some(free) => free.clone(),
            None => (0..n.gpus.len())
                .filter(|&p| open & (1 << p) != 0)
                .collect(),
        };
        if n.sharing.shares() {
            let usage = session.device_use(node);
            let policy = (session.device_filters(task))
                .map(|f| f.policy)
                .unwrap_or_default();
            // Stable: equally used devices keep index order.
            chosen.sort_by_key(|&p| match policy {
                DevicePolicy::Spread => usage[p].slots as i64,
                DevicePolicy::Binpack => -(usage[p].slots as i64),
            });
        }
        chosen.iter().take(count).fold(0, |m, &p| m | 1 << p)
    }

    /// Islands, usage and the pod's policy: never the node's name or labels.
    fn by_state(&self) -> bool {
        true
    }
}

//! Which devices of the chosen node a pod takes (the engine hands over those it could take).
//!
//! [`KeepIslandsWhole`], Basalt's default: whole devices inside one NVLink island when one can
//! hold them all (the fullest such island, so whole islands stay free for pods that need
//! them), else the lowest free positions; shared devices the same way, and inside an island
//! the least used first (HAMi's default `spread`) or the most used (`binpack`), as the pod's
//! `hami.io/gpu-scheduler-policy` says.

use basalt_engine::devices::DevicePolicy;
use basalt_engine::{lowest_bits, DeviceChooser, DevicePick, NodeId, SessionView, TaskId};

pub struct KeepIslandsWhole;

impl DevicePick for KeepIslandsWhole {
    fn name(&self) -> &str {
        "keep-islands-whole"
    }

    fn prepare<'s>(&'s self, _: &SessionView) -> Box<dyn DeviceChooser + 's> {
        Box::new(KeepIslandsWhole)
    }
}

impl DeviceChooser for KeepIslandsWhole {
    fn pick(
        &mut self,
        session: &SessionView,
        task: TaskId,
        node: NodeId,
        open: u64,
        count: u32,
    ) -> u64 {
        let n = session.snapshot.node(node);
        let islands = |p: usize| n.gpus[p].nvlink_domain;
        let chosen = fullest_island(n.gpus.len(), &islands, open, count);
        if !n.sharing.shares() {
            return lowest_bits(chosen, count);
        }
        let usage = session.device_use(node);
        let policy = (session.device_filters(task))
            .map(|f| f.policy)
            .unwrap_or_default();
        let order = |p: usize| match policy {
            DevicePolicy::Spread => usage[p].slots as i64,
            DevicePolicy::Binpack => -(usage[p].slots as i64),
        };
        first_by(chosen, count, &order)
    }

    /// Islands, usage and the pod's policy: never the node's name or labels.
    fn by_state(&self) -> bool {
        true
    }

    /// The pod's policy is part of its placement rules.
    fn by_shape(&self) -> bool {
        true
    }
}

/// The positions of `mask`, lowest first.
fn positions(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let p = (mask != 0).then(|| mask.trailing_zeros() as usize)?;
        mask &= mask - 1;
        Some(p)
    })
}

/// The open devices (of `devices`, each in island `island(p)`) of the island with the fewest
/// open that still holds `count` (the lowest island on ties), so whole islands stay free for
/// pods that need them; all open devices when no island holds them.
fn fullest_island(devices: usize, island: &dyn Fn(usize) -> u32, open: u64, count: u32) -> u64 {
    let open = open
        & u64::MAX
            .checked_shr(64 - devices.min(64) as u32)
            .unwrap_or(0);
    let mut best: Option<(u32, u32, u64)> = None;
    let mut seen = 0u64;
    for p in positions(open) {
        if seen & (1 << p) != 0 {
            continue;
        }
        let mine = positions(open)
            .filter(|&q| island(q) == island(p))
            .fold(0u64, |m, q| m | 1 << q);
        seen |= mine;
        let key = (mine.count_ones(), island(p), mine);
        if key.0 >= count && best.is_none_or(|b| (key.0, key.1) < (b.0, b.1)) {
            best = Some(key);
        }
    }
    best.map_or(open, |(_, _, mine)| mine)
}

/// The first `count` positions of `mask` by `order`, lower positions first on ties.
fn first_by(mask: u64, count: u32, order: &dyn Fn(usize) -> i64) -> u64 {
    let mut picked = 0u64;
    for _ in 0..count {
        let next = positions(mask & !picked).min_by_key(|&p| (order(p), p));
        let Some(p) = next else {
            break;
        };
        picked |= 1 << p;
    }
    picked
}

#[cfg(test)]
mod tests;

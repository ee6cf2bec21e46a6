//! Free whole GPUs per topology domain ([`TopoState`]).

use super::*;

/// Free whole GPUs per topology domain, kept up to date as the session places and evicts, and
/// per tier the domains ordered by free GPUs (so the best fit for a gang is a range lookup).
pub struct TopoState {
    pub topology: Arc<Topology>,
    pub(super) free: Vec<i64>,
    pub(super) by_tier: Vec<BTreeSet<(i64, DomainId)>>,
}

impl TopoState {
    pub fn free(&self, domain: DomainId) -> i64 {
        self.free[domain.index()]
    }

    /// Domains of `tier` with at least `need` free GPUs, the fullest (least left over) first.
    pub fn fitting(&self, tier: TierId, need: i64) -> impl Iterator<Item = DomainId> + '_ {
        self.by_tier[tier.0 as usize]
            .range((need, DomainId(0))..)
            .map(|&(_, d)| d)
    }

    /// The domain of `tier` with the most free GPUs.
    pub fn roomiest(&self, tier: TierId) -> Option<DomainId> {
        self.by_tier[tier.0 as usize].last().map(|&(_, d)| d)
    }

    pub(super) fn change(&mut self, node: NodeId, delta: i64) {
        // A share that leaves the node's free whole GPUs as they were moves no domain.
        if delta == 0 {
            return;
        }
        for &d in self.topology.domains_of(node.index()) {
            let tier = self.topology.domain(d).tier.0 as usize;
            let set = &mut self.by_tier[tier];
            set.remove(&(self.free[d.index()], d));
            self.free[d.index()] += delta;
            set.insert((self.free[d.index()], d));
        }
    }
}

//! Which topology domains a gang tries, in order: [`BestFit`].
//!
//! - A gang: the best fits first (the fewest free GPUs left over), ties broken by the enclosing
//!   domains (the fuller the next tier up, and then the one above, the better), so equal
//!   candidates never break a whole free rack or clique.
//! - A sub-group, inside its gang's domain: the best fits first, ties by domain id.
//! - Evictions: the roomiest domains first (the fewest victims likely).

use std::cmp::Reverse;

use basalt_engine::{DomainAsk, DomainPurpose, Domains, SessionView, TopoState};
use basalt_topology::DomainId;

pub struct BestFit;

impl Domains for BestFit {
    fn name(&self) -> &str {
        "best-fit"
    }

    fn choose(
        &self,
        session: &SessionView,
        ask: &DomainAsk,
        candidates: &mut dyn Iterator<Item = DomainId>,
    ) -> Vec<DomainId> {
        let topo = session
            .topology()
            .expect("domains are chosen on a topology");
        match ask.purpose {
            DomainPurpose::Gang | DomainPurpose::SubGroup => best_fits(topo, ask, candidates),
            DomainPurpose::Evictions => {
                let mut all: Vec<DomainId> = candidates.collect();
                all.sort_by_key(|&d| (Reverse(topo.free(d)), d));
                all.truncate(ask.limit);
                all
            }
        }
    }
}

/// The first `ask.limit` candidates (which come fewest free first), the ties with the first
/// one's free GPUs among them broken by the enclosing domains of `ask.coarser`.
fn best_fits(
    topo: &TopoState,
    ask: &DomainAsk,
    candidates: &mut dyn Iterator<Item = DomainId>,
) -> Vec<DomainId> {
    /// Ties examined for the tie-break; beyond that the order by id stands.
    const TIES: usize = 64;
    /// Enclosing tiers compared in the tie-break (the nearest ones matter most).
    const DEPTH: usize = 4;
    let t = &topo.topology;
    // Ordered by free GPUs, then the enclosing domains' free GPUs, then id: keys are unique.
    let key = |d: DomainId| {
        let node = t.domain(d).nodes[0] as usize;
        let mut enclosing = [0i64; DEPTH];
        for (slot, &c) in enclosing.iter_mut().zip(ask.coarser) {
            *slot = topo.free(t.domain_of(node, c));
        }
        (topo.free(d), enclosing, d)
    };
    let mut found = Vec::with_capacity(TIES);
    let mut first_free = None;
    for d in candidates {
        let free = topo.free(d);
        let tie = first_free.is_none_or(|f| f == free);
        if found.len() >= ask.limit && (!tie || found.len() >= TIES) {
            break;
        }
        first_free.get_or_insert(free);
        found.push(key(d));
    }
    // The first `ask.limit` in that order: the least ones, then sorted.
    if found.len() > ask.limit {
        found.select_nth_unstable(ask.limit);
        found.truncate(ask.limit);
    }
    found.sort_unstable();
    found.into_iter().map(|(_, _, d)| d).collect()
}

//! Which topology domains a gang (or a sub-group, or an eviction search) tries, in order.

use basalt_topology::{DomainId, TierId};

use crate::model::JobId;
use crate::session::SessionView;

/// What the engine asks topology domains for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainPurpose {
    /// A domain for the whole gang.
    Gang,
    /// A domain for one of its sub-groups, inside the gang's.
    SubGroup,
    /// A domain of the gang's required tier to search for victims in (reclaim, preempt).
    Evictions,
}

/// What a gang (or one of its sub-groups) asks of the domains of one topology tier.
pub struct DomainAsk<'a> {
    pub purpose: DomainPurpose,
    pub job: JobId,
    pub tier: TierId,
    /// The free whole GPUs a domain needs (none for [`DomainPurpose::Evictions`]).
    pub gpus: i64,
    /// Enclosing tiers a policy may weigh, finest first: for a gang its tiers above `tier` up
    /// to the required one; none for a sub-group (it stays inside the gang's domain).
    pub coarser: &'a [TierId],
    /// How many domains the engine tries at most.
    pub limit: usize,
}

/// Which topology domains a gang tries, in order. The engine walks the gang's tiers (the finest
/// first, up to its required tier), lists the domains it could use, dry-runs the chosen ones in
/// a statement one by one and keeps the first that makes the gang ready (for evictions: the one
/// needing the cheapest victims).
pub trait Domains: Send + Sync {
    fn name(&self) -> &str;
    /// Up to `ask.limit` of `candidates`, in the order to try them. The candidates are the
    /// domains of `ask.tier` the engine found possible (free GPUs, where the gang's members
    /// already run, the required tier; for a sub-group its CPU and memory; for evictions every
    /// domain of the tier), the fewest free GPUs first, ties by domain id: a best fit reads a
    /// few, another rule may read them all.
    fn choose(
        &self,
        session: &SessionView,
        ask: &DomainAsk,
        candidates: &mut dyn Iterator<Item = DomainId>,
    ) -> Vec<DomainId>;
}

/// The engine's neutral domain choice: the first candidates as listed (plugins configure the
/// scheduler's own, which keeps whole racks and cliques free).
pub struct FirstListed;

impl Domains for FirstListed {
    fn name(&self) -> &str {
        "first-listed"
    }
    fn choose(
        &self,
        _: &SessionView,
        ask: &DomainAsk,
        candidates: &mut dyn Iterator<Item = DomainId>,
    ) -> Vec<DomainId> {
        candidates.take(ask.limit).collect()
    }
}

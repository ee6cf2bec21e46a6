//! The [`Victims`] extension point: who `reclaim` or `preempt` may evict, and what a set of
//! victims costs. Each action has its own policy ([`crate::Framework::victims`]): the action
//! fixes the scope, the policy chooses inside it.

use std::cmp::Ordering;

use crate::model::{JobId, QueueId, TaskId};
use crate::resources::{ResourceId, Resources};
use crate::session::SessionView;

/// Which eviction action asks: `reclaim` takes back what other queues borrowed, `preempt`
/// displaces pods of the starving gang's own queue. The action defines that scope; its
/// [`Victims`] policy chooses inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionKind {
    Reclaim,
    Preempt,
}

/// Who one eviction action (reclaim or preempt, see [`EvictionKind`]) may evict to make room
/// for a starving gang (or, after every gang below its minimum, for an elastic job's extra
/// members), and who goes first. The engine owns the search: the nodes holding pods of the
/// policy's queues, victims taken in the policy's order until the member fits (each with the
/// gang mates whose minimum it would break: no gang is left below its minimum; victims whose
/// gang keeps its minimums without them first), the gang's whole placement simulated in a
/// statement, no unit its placement does not need, and the cheapest set by the policy's costs. It never evicts the gang's own pods, a gang this cycle is
/// starting, pods outside the action's scope ([`EvictionKind`]), or, for an extra member, a pod
/// some gang needs for its minimum (an extra never stops a job).
///
/// A search that found no victims is not repeated in the same action for a member of the same
/// shape, queue, job priority and inter-pod view: the answers may depend on the preemptor's job
/// through those. The preemptor's inter-pod rules are the engine's to apply (pods it conflicts
/// with are victims too, by the same policy).
pub trait Victims: Send + Sync {
    fn name(&self) -> &str;
    /// Whether `job` may evict at all: a cheap check before any search.
    fn may_evict_for(&self, session: &SessionView, job: JobId) -> bool;
    /// The queues whose pods may make room for a member of `job` asking `request`: the engine
    /// searches only the nodes that held their pods when the session opened.
    fn queues(&self, session: &SessionView, job: JobId, request: &Resources) -> Vec<QueueId>;
    /// Whether `job`'s queue may end up holding `more` than it holds now, counted in the
    /// `resources` victims are taken for (e.g. a reclaimer above its deserved share would have
    /// its gain taken back). Asked on each node before its victims are searched (`more`: the
    /// member's request) and once the whole gang is placed (`more`: nothing).
    fn may_keep(
        &self,
        session: &SessionView,
        job: JobId,
        more: &Resources,
        resources: &[ResourceId],
    ) -> bool;
    /// Whether `unit` may be evicted for `job`, all of it.
    fn may_take(&self, session: &SessionView, job: JobId, unit: &VictimUnit) -> bool;
    /// The order victims are taken in on one node: `Less`, `a` first; `Equal` defers to the
    /// task order (name).
    fn compare_victims(&self, session: &SessionView, a: TaskId, b: TaskId) -> Ordering;
    /// What a set of victims for `job` costs: of two sets (on two nodes, from two first
    /// victims, or in two topology domains) the engine takes the lower cost, the one found first
    /// on a tie. Asked while the victims still hold their nodes: a set holding every member a
    /// job still holds stops it.
    fn cost(&self, session: &SessionView, job: JobId, victims: &[TaskId]) -> VictimCost;
    /// Whether a simulated eviction is worth committing: `victims` (evicted in the session now)
    /// for `placed`, the members of `job` it places, counted in the `resources` the victims were
    /// taken for. Asked once the gang's placement is simulated, before it is committed; on a
    /// `false`, asked again with the job's other pending members that the room left lets start
    /// placed too (they take it next, in the same plan).
    fn worth_evicting(
        &self,
        session: &SessionView,
        job: JobId,
        victims: &[TaskId],
        placed: &[TaskId],
        resources: &[ResourceId],
    ) -> bool;
}

/// The cost of a set of victims, compared key by key, lower first: a policy fills the keys in
/// its order of importance (each set's cost is computed once, not per comparison).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct VictimCost(pub [i64; 6]);

/// Victims judged as one eviction: a pod alone while its gang keeps every minimum without it,
/// else every bound member of its gang not taken yet.
pub struct VictimUnit<'a> {
    pub tasks: &'a [TaskId],
    /// The unit is every member its gang still holds: evicting it stops the job.
    pub stops_job: bool,
    /// Their requests summed.
    pub request: &'a Resources,
    /// The resources the member lacks on the node: those the eviction is for.
    pub short: &'a [ResourceId],
    /// What the units chosen before this one on the node take from each queue (each victim's
    /// leaf queue and every ancestor of it).
    pub taken: &'a [(QueueId, Resources)],
}

impl VictimUnit<'_> {
    /// What the units chosen before this one take from `queue`, if anything.
    pub fn taken_from(&self, queue: QueueId) -> Option<&Resources> {
        self.taken.iter().find(|(q, _)| *q == queue).map(|(_, r)| r)
    }
}

/// The engine's neutral victims: none (plugins configure the scheduler's own, by priority and
/// fair share).
pub struct NoVictims;

impl Victims for NoVictims {
    fn name(&self) -> &str {
        "none"
    }
    fn may_evict_for(&self, _: &SessionView, _: JobId) -> bool {
        false
    }
    fn queues(&self, _: &SessionView, _: JobId, _: &Resources) -> Vec<QueueId> {
        Vec::new()
    }
    fn may_keep(&self, _: &SessionView, _: JobId, _: &Resources, _: &[ResourceId]) -> bool {
        true
    }
    fn may_take(&self, _: &SessionView, _: JobId, _: &VictimUnit) -> bool {
        false
    }
    fn compare_victims(&self, _: &SessionView, _: TaskId, _: TaskId) -> Ordering {
        Ordering::Equal
    }
    fn cost(&self, _: &SessionView, _: JobId, _: &[TaskId]) -> VictimCost {
        VictimCost::default()
    }
    fn worth_evicting(
        &self,
        _: &SessionView,
        _: JobId,
        _: &[TaskId],
        _: &[TaskId],
        _: &[ResourceId],
    ) -> bool {
        true
    }
}

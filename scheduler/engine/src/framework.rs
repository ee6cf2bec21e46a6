//! Extension points. Each is one small trait; a [`Framework`] is a plain value holding the
//! configured plugins (no global registration), built by `basalt-plugins` from the config.

use std::cmp::Ordering;

use crate::model::{Job, JobId, Node, NodeId, PlacementRules, QueueId, Task, TaskId};
use crate::refusal::{JobRefusal, Refusal};
use crate::resources::Resources;
use crate::session::{Session, SessionView};

mod domains;
mod placement;
mod relayout;
mod victims;

pub use domains::{DomainAsk, DomainPurpose, Domains, FirstListed};
pub use placement::{
    lowest_bits, DeviceChooser, DevicePick, LeastAllocated, LowestOpen, NodeFilter, NodeOrder,
    NodeScorer, Score,
};
pub use relayout::{MigRelayout, RelayoutProposal, MIG_RELAYOUT};
pub use victims::{EvictionKind, NoVictims, VictimCost, VictimUnit, Victims};

/// Orders jobs; `Ordering::Equal` defers to the next plugin (and finally to the job name).
pub trait JobOrder: Send + Sync {
    fn name(&self) -> &str;
    fn compare(&self, a: &Job, b: &Job) -> Ordering;
}

/// Orders the pending members of one job, the order they are placed in (by `allocate`, and by
/// `reclaim` and `preempt` for a starving gang): `Less`, `a` first; `Equal` defers to the next
/// plugin, then to the engine's own order (members a role still needs for its minimum first,
/// then rank).
pub trait TaskOrder: Send + Sync {
    fn name(&self) -> &str;
    fn compare(&self, a: &Task, b: &Task) -> Ordering;
}

/// Whether a job may be scheduled at all this cycle (e.g. it has fewer pods than its minimum);
/// a no is a [`JobRefusal`], worded only when the plan is written.
pub trait JobValid: Send + Sync {
    fn name(&self) -> &str;
    fn validate(&self, session: &SessionView, job: JobId) -> Result<(), JobRefusal>;
}

/// Whether the members a job holds (bound, running, succeeded or placed in the open statement)
/// are enough to let it start.
pub trait JobReady: Send + Sync {
    fn name(&self) -> &str;
    fn ready(&self, session: &SessionView, job: JobId) -> bool;
}

/// Admission of a pending job into the schedulable set (the `enqueue` action); a no is a
/// [`JobRefusal`], worded only when the plan is written.
pub trait Admit: Send + Sync {
    fn name(&self) -> &str;
    fn admit(&self, session: &SessionView, job: JobId) -> Result<(), JobRefusal>;
}

/// A per-task check on the job's side of a placement (e.g. its queue's capability), evaluated
/// before any node is searched. `request` is what the task would add to its queue and each
/// ancestor; for a member placed over victims, `given_back` is what those victims give back to
/// each queue they leave: a queue the victims share with the member (its own for preempt, a
/// common ancestor for reclaim) grows only by the difference.
pub trait TaskAdmit: Send + Sync {
    fn name(&self) -> &str;
    fn admit(
        &self,
        session: &SessionView,
        task: TaskId,
        request: &Resources,
        given_back: GivenBack,
    ) -> Result<(), Refusal>;
}

/// What evicted pods give back to the queues they leave: per queue (each victim's leaf and
/// every ancestor of it), their requests summed. A handful of entries: a plain slice.
#[derive(Clone, Copy, Debug, Default)]
pub struct GivenBack<'a>(pub &'a [(QueueId, Resources)]);

impl GivenBack<'_> {
    /// Nothing evicted.
    pub const NONE: GivenBack<'static> = GivenBack(&[]);

    /// What the victims give back to `queue`, if anything.
    pub fn to(&self, queue: QueueId) -> Option<&Resources> {
        self.0.iter().find(|(q, _)| *q == queue).map(|(_, r)| r)
    }
}

/// The default [`Framework::gang_backoff_ms`]: a minute.
pub const DEFAULT_GANG_BACKOFF_MS: i64 = 60_000;

/// The order in which sibling queues are served: `allocate` walks the queue tree from the root,
/// at each level taking the first child with work. `Less`: `a` first; `Equal` defers to the
/// name. Must depend only on the two queues (their spec, allocation and deserved share): the
/// engine keeps siblings sorted and asks again only about queues whose allocation changed.
pub trait QueueOrder: Send + Sync {
    fn name(&self) -> &str;
    fn compare(&self, session: &SessionView, a: QueueId, b: QueueId) -> Ordering;
}

/// The engine's neutral queue order: by name (plugins configure the scheduler's own, by
/// priority and fair share).
pub struct QueuesByName;

impl QueueOrder for QueuesByName {
    fn name(&self) -> &str {
        "by-name"
    }
    fn compare(&self, _: &SessionView, _: QueueId, _: QueueId) -> Ordering {
        Ordering::Equal
    }
}

/// Computes every queue's deserved share when a session opens.
pub trait FairShare: Send + Sync {
    fn name(&self) -> &str;
    fn deserved(&self, session: &SessionView) -> Vec<Resources>;

    /// The weights capacity beyond guarantees and entitlements is divided by, per queue, when
    /// the policy adjusts them by what queues used ([`SessionView::queue_usage`]); asked once, before
    /// [`FairShare::deserved`], whose [`SessionView::weight`] they become, with the part of the
    /// cluster each queue used (the plan's effect reports it). `None`: the queues' own weights.
    fn weights(&self, _session: &SessionView) -> Option<crate::UsageWeights> {
        None
    }
}

/// The actions a cycle runs, in the configured order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Enqueue,
    Allocate,
    Reclaim,
    Preempt,
}

impl Action {
    /// The name the config file gives it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Enqueue => "enqueue",
            Action::Allocate => "allocate",
            Action::Reclaim => "reclaim",
            Action::Preempt => "preempt",
        }
    }
}

/// The configured plugins and actions of one scheduler.
pub struct Framework {
    pub actions: Vec<Action>,
    pub job_order: Vec<Box<dyn JobOrder>>,
    /// The order of a job's own pending members (see [`TaskOrder`]).
    pub task_order: Vec<Box<dyn TaskOrder>>,
    pub job_valid: Vec<Box<dyn JobValid>>,
    pub job_ready: Vec<Box<dyn JobReady>>,
    pub admit: Vec<Box<dyn Admit>>,
    pub task_admit: Vec<Box<dyn TaskAdmit>>,
    pub filters: Vec<Box<dyn NodeFilter>>,
    /// Private so that it never changes under a [`crate::Warm`], whose node index is keyed by it.
    node_order: Box<dyn NodeOrder>,
    pub fair_share: Option<Box<dyn FairShare>>,
    /// Which sibling queue is served first.
    pub queue_order: Box<dyn QueueOrder>,
    /// Who `preempt` may evict (of the starving gang's own queue), and who goes first.
    pub preempt_victims: Box<dyn Victims>,
    /// Who `reclaim` may evict (of other queues), and who goes first.
    pub reclaim_victims: Box<dyn Victims>,
    /// Which topology domains a gang tries, in order.
    pub domains: Box<dyn Domains>,
    /// Pod-aware scorers (see [`Score`]); none: the bucketed [`NodeOrder`] alone.
    pub scores: Vec<Box<dyn Score>>,
    /// Which devices of the chosen node a task takes.
    pub device_pick: Box<dyn DevicePick>,
    /// For ties between equal [`Score`] sums: the rank of each node by its position in name
    /// order (the snapshot's node ids); the least rank wins, nodes beyond the list after all
    /// listed ones, then by name. `None`: name order. An experiment hands a ranking drawn
    /// from its seed here (the engine draws nothing).
    pub node_rank: Option<std::sync::Arc<[u32]>>,
    /// A gang that has waited this long (milliseconds) reserves the nodes it will start on.
    pub reserve_after_ms: Option<i64>,
    /// How long a gang that timed out (its `scheduleTimeoutSeconds` waited without starting)
    /// sits out before it is tried again.
    pub gang_backoff_ms: i64,
    /// Topology tiers, coarse to fine (validated by whoever builds the framework).
    pub tiers: Vec<basalt_topology::TierSpec>,
    /// The half-life of queue usage, in milliseconds (see [`crate::usage`]); 0: off, no usage
    /// read, kept or returned.
    pub usage_half_life_ms: i64,
    /// Whether the plan reports every queue's deserved and allocated quantities (formatted as
    /// Kubernetes strings). On by default: the daemon writes them to Queue status; a replay,
    /// which only applies the plan's decisions, turns it off. Decisions never depend on it.
    pub report_queues: bool,
    /// Whether a member no node takes gets the full reason in its PodGroup condition ("0/92
    /// nodes are available: 60 insufficient nvidia.com/gpu, …", a scan of every node) or just
    /// [`NO_NODE_FITS`]. On by default (users read it); a replay, which never reads conditions,
    /// turns it off. Decisions never depend on it.
    pub explain_failures: bool,
    /// With `explain_failures`: how many jobs at the head of each queue get the dear part of
    /// their explanation (who holds the capacity, which running jobs' end would free it).
    pub explain_detail: u32,
    /// Jobs (`namespace/name`) explained in full wherever they stand in their queue.
    pub explain_jobs: Vec<String>,
    /// How much a pod's stated preferences weigh against the node order (all 0 here: pure
    /// packing; `basalt-plugins` sets its `scoring` defaults).
    pub preferences: PreferenceWeights,
    /// Whether the plan lists the status of PodGroups this cycle leaves settled: no member
    /// placed, pipelined, evicted or pending, and the phase the snapshot gave them. On by
    /// default (the daemon writes every PodGroup's status); a replay, which reads only phase
    /// changes, turns it off and finds the few changed groups without reading thousands.
    /// Decisions never depend on it.
    pub report_settled_groups: bool,
    /// Proposes MIG layouts for idle GPUs from the MIG demand left pending (see
    /// [`MigRelayout`]); `None` (the default): layouts stay as they are.
    pub mig_relayout: Option<Box<dyn MigRelayout>>,
}

/// Weights of a pod's soft preferences against the node order, per kind, as kube-scheduler's
/// plugin weights. A node's preference points, times its kind's weight, count
/// [`KEY_UNITS_PER_POINT`] each against its node-order key (lower is better): the search picks
/// the node minimising `key after placing − Σ weight × points × KEY_UNITS_PER_POINT`. All 0 is
/// pure packing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreferenceWeights {
    /// Preferred node affinity: the weights (1..=100) of the pod's terms the node matches.
    pub node_affinity: u32,
    /// Preferred pod affinity (+weight) and anti-affinity (−weight), both the pod's own and
    /// the symmetric terms of pods already placed.
    pub pod_affinity: u32,
    /// `ScheduleAnyway` topology spread constraints.
    pub topology_spread: u32,
    /// `PreferNoSchedule` taints: −100 points per such taint the pod does not tolerate.
    pub taint_toleration: u32,
}

/// Node-order key units one weighted preference point is worth: 1 % utilisation on the
/// plugins' 0..=1,000,000 scale, the way one kube-scheduler score point (0..=100 per plugin)
/// is 1 % of NodeResourcesFit's.
pub const KEY_UNITS_PER_POINT: i128 = 10_000;

/// Jobs at the head of each queue explained in full (see [`Framework::explain_detail`]).
pub const DEFAULT_EXPLAIN_DETAIL: u32 = 3;

/// The reason a member was not placed when [`Framework::explain_failures`] is off (worded in
/// `conditions`, below the refusals that use it).
pub use crate::conditions::NO_NODE_FITS;

impl Framework {
    /// A framework with the given actions and node order and no other plugins.
    pub fn new(actions: Vec<Action>, node_order: Box<dyn NodeOrder>) -> Self {
        Framework {
            actions,
            job_order: Vec::new(),
            task_order: Vec::new(),
            job_valid: Vec::new(),
            job_ready: Vec::new(),
            admit: Vec::new(),
            task_admit: Vec::new(),
            filters: Vec::new(),
            node_order,
            fair_share: None,
            queue_order: Box::new(QueuesByName),
            preempt_victims: Box::new(NoVictims),
            reclaim_victims: Box::new(NoVictims),
            domains: Box::new(FirstListed),
            scores: Vec::new(),
            device_pick: Box::new(LowestOpen),
            node_rank: None,
            reserve_after_ms: None,
            gang_backoff_ms: DEFAULT_GANG_BACKOFF_MS,
            tiers: Vec::new(),
            usage_half_life_ms: 0,
            report_queues: true,
            explain_failures: true,
            explain_detail: DEFAULT_EXPLAIN_DETAIL,
            explain_jobs: Vec::new(),
            report_settled_groups: true,
            preferences: PreferenceWeights::default(),
            mig_relayout: None,
        }
    }

    /// Whether `job` has waited long enough at `now_ms` to reserve the nodes it will start on
    /// ([`Framework::reserve_after_ms`]); a job without a creation time (0) has no known wait.
    pub fn waited_to_reserve(&self, job: &Job, now_ms: i64) -> bool {
        self.reserve_after_ms.is_some_and(|after| {
            job.created_ms > 0 && now_ms.saturating_sub(job.created_ms) >= after
        })
    }

    /// For a gang with a schedule timeout that has not started (no member bound: `started`
    /// false), at `now_ms`: `Some(ms left)` while it backs off. Its wait since creation runs
    /// in periods of timeout + backoff: tried for the timeout, then sitting out the backoff,
    /// then tried again, so the rule needs no state carried between cycles.
    pub fn timed_out(&self, job: &Job, started: bool, now_ms: i64) -> Option<i64> {
        let timeout = job.schedule_timeout_ms?;
        if started || job.created_ms <= 0 || self.gang_backoff_ms <= 0 {
            return None;
        }
        let waited = now_ms.saturating_sub(job.created_ms);
        let period = timeout.saturating_add(self.gang_backoff_ms);
        let at = waited.rem_euclid(period);
        (waited >= timeout && at >= timeout).then(|| period - at)
    }

    /// The tie rank of a node among equal [`Score`] sums (see [`Framework::node_rank`]).
    pub fn tie_rank(&self, node: NodeId) -> (u32, NodeId) {
        let rank = self.node_rank.as_ref().and_then(|r| r.get(node.index()));
        (rank.copied().unwrap_or(u32::MAX), node)
    }

    /// The victims policy of one eviction action.
    pub fn victims(&self, kind: EvictionKind) -> &dyn Victims {
        match kind {
            EvictionKind::Preempt => &*self.preempt_victims,
            EvictionKind::Reclaim => &*self.reclaim_victims,
        }
    }

    pub fn node_order(&self) -> &dyn NodeOrder {
        &*self.node_order
    }

    /// Every configured plugin by the extension point it serves, in the order each point asks
    /// them: what a scheduler says it runs (the names are the plugins' own).
    pub fn plugins(&self) -> Vec<(&'static str, &str)> {
        let mut out: Vec<(&'static str, &str)> = Vec::new();
        out.extend(self.job_order.iter().map(|p| ("JobOrder", p.name())));
        out.extend(self.task_order.iter().map(|p| ("TaskOrder", p.name())));
        out.extend(self.job_valid.iter().map(|p| ("JobValid", p.name())));
        out.extend(self.job_ready.iter().map(|p| ("JobReady", p.name())));
        out.extend(self.admit.iter().map(|p| ("Admit", p.name())));
        out.extend(self.task_admit.iter().map(|p| ("TaskAdmit", p.name())));
        out.extend(self.filters.iter().map(|p| ("NodeFilter", p.name())));
        out.push(("NodeOrder", self.node_order.name()));
        out.extend(self.fair_share.iter().map(|p| ("FairShare", p.name())));
        out.push(("QueueOrder", self.queue_order.name()));
        out.push(("Victims(preempt)", self.preempt_victims.name()));
        out.push(("Victims(reclaim)", self.reclaim_victims.name()));
        out.push(("Domains", self.domains.name()));
        out.extend(self.scores.iter().map(|p| ("Score", p.name())));
        out.push(("DevicePick", self.device_pick.name()));
        out.extend(self.mig_relayout.iter().map(|p| ("MigRelayout", p.name())));
        out
    }

    pub fn compare_jobs(&self, a: &Job, b: &Job) -> Ordering {
        self.job_order
            .iter()
            .map(|o| o.compare(a, b))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| a.name.cmp(&b.name))
    }

    /// The configured order of two members of one job; `Equal` when no plugin tells them apart.
    pub fn compare_tasks(&self, a: &Task, b: &Task) -> Ordering {
        self.task_order
            .iter()
            .map(|o| o.compare(a, b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    pub fn validate_job(&self, session: &Session, job: JobId) -> Result<(), JobRefusal> {
        self.job_valid
            .iter()
            .try_for_each(|p| p.validate(&session.view(), job))
    }

    /// With no readiness plugin every placed member is enough (no gang semantics).
    pub fn job_ready(&self, session: &Session, job: JobId) -> bool {
        self.job_ready.iter().all(|p| p.ready(&session.view(), job))
    }

    pub fn admit_job(&self, session: &Session, job: JobId) -> Result<(), JobRefusal> {
        self.admit
            .iter()
            .try_for_each(|p| p.admit(&session.view(), job))
    }

    pub fn admit_task(
        &self,
        session: &Session,
        task: TaskId,
        request: &Resources,
    ) -> Result<(), Refusal> {
        self.admit_task_over(session, task, request, GivenBack::NONE)
    }

    /// [`Framework::admit_task`] for a member placed over victims that give back `given_back`.
    pub fn admit_task_over(
        &self,
        session: &Session,
        task: TaskId,
        request: &Resources,
        given_back: GivenBack,
    ) -> Result<(), Refusal> {
        self.task_admit
            .iter()
            .try_for_each(|p| p.admit(&session.view(), task, request, given_back))
    }

    pub fn filter_node(&self, rules: &PlacementRules, node: &Node) -> Result<(), Refusal> {
        self.filters.iter().try_for_each(|f| f.filter(rules, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobPhase, QueueId};

    #[test]
    fn a_gang_backs_off_after_its_timeout_in_periods_of_timeout_and_backoff() {
        let fw = Framework::new(vec![Action::Allocate], Box::new(LeastAllocated));
        let job = |timeout: Option<i64>| Job {
            id: JobId(0),
            name: "ns/g".into(),
            queue: QueueId(0),
            min_member: 2,
            min_task_member: Default::default(),
            min_resources: None,
            priority: 0,
            created_ms: 1_000_000,
            phase: JobPhase::Inqueue,
            tasks: Vec::new(),
            implicit: false,
            topology: Default::default(),
            sub_groups: Vec::new(),
            sub_group_policies: Vec::new(),
            schedule_timeout_ms: timeout,
        };
        let g = job(Some(10_000));
        let at = |waited: i64| fw.timed_out(&g, false, 1_000_000 + waited);
        assert_eq!(at(9_999), None);
        assert_eq!(at(10_000), Some(DEFAULT_GANG_BACKOFF_MS));
        assert_eq!(at(69_999), Some(1));
        // Tried again for a timeout's length, then backing off again.
        assert_eq!(at(70_000), None);
        assert_eq!(at(80_000), Some(DEFAULT_GANG_BACKOFF_MS));
        // Started gangs and gangs without a timeout never time out.
        assert_eq!(fw.timed_out(&g, true, 1_000_000 + 10_000), None);
        assert_eq!(fw.timed_out(&job(None), false, i64::MAX), None);
    }
}

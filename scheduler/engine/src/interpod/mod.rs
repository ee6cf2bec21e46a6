//! Inter-pod rules, as kube-scheduler's InterPodAffinity, PodTopologySpread, NodePorts and
//! VolumeRestrictions plugins enforce them: required pod affinity and anti-affinity (the
//! symmetric rule included: an existing pod's required anti-affinity repels pods it selects),
//! `DoNotSchedule` topology spread, host ports and in-tree disks, plus the points of the soft
//! forms for scoring.
//!
//! They depend on what is placed, so the session keeps, per distinct term (its selector over a
//! resolved namespace set) and topology key, how many selected pods run in each domain, updated
//! by [`InterPod::charge`] on every place, evict and undo; a check is a lookup. Pods are matched
//! to terms through an index by label pair ([`terms::TermIndex`]), once per distinct
//! (rules, namespace, labels the selectors read): a gang's members share one view. Bound pods of
//! other schedulers count as ours do. A cluster where no pod states any of this has no terms:
//! every call returns at once.

mod intern;
mod on_node;
mod spread;
mod terms;
mod views;
mod without;

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::constraints::{Disk, HostPort, PodConstraints};
use crate::hash::Map;
use crate::model::{JobId, NodeId, TaskId, TaskState};
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;

use intern::Interner;
use on_node::OnNode;
use spread::{SpreadCache, SpreadRule, SpreadView, Verdict};
use terms::{DomainCounts, Domains, Matcher, NamespaceLabels, TermIndex};
use views::{SharedViews, TaskView};
pub(crate) use without::Conflict;

/// kube-scheduler's `hardPodAffinityWeight`: an existing pod's required affinity term that
/// selects the incoming pod scores like a preferred term of this weight.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// Counts of pods a term selects, per domain: the incoming pod's view (its required affinity,
/// as one conjunction of all its terms, as kube counts it; each anti-affinity, preferred and
/// spread term).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CounterKey {
    all: Vec<Matcher>,
    keys: Vec<String>,
    /// A spread constraint's: terminating pods do not count in it (kube-scheduler's
    /// PodTopologySpread skips them; InterPodAffinity does not).
    spread: bool,
}

/// A term some pod holds, counted at the holders' domains: the symmetric view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HeldKey {
    matcher: Matcher,
    key: String,
    /// `None`: required anti-affinity (a filter); else the points it gives a pod it selects.
    weight: Option<i64>,
}

/// What one pod's constraints become once interned (shared by the members of a gang).
#[derive(Default)]
struct Rules {
    /// The counter of pods matching all required affinity terms, and those terms' matchers.
    affinity: Option<(u32, Vec<Matcher>)>,
    anti: Vec<u32>,
    /// (counter, weight): + for preferred affinity, − for preferred anti-affinity.
    preferred: Vec<(u32, i64)>,
    spread: Vec<(SpreadRule, Matcher)>,
    /// Held terms this pod holds (the symmetric side).
    holds: Vec<u32>,
    ports: Vec<HostPort>,
    disks: Vec<Disk>,
}

impl Rules {
    fn filters(&self) -> bool {
        self.affinity.is_some()
            || !self.anti.is_empty()
            || !self.ports.is_empty()
            || !self.disks.is_empty()
            || self.spread.iter().any(|(s, _)| s.hard)
    }

    /// Feasibility that can grow as pods are placed (required affinity, spread).
    fn dynamic(&self) -> bool {
        self.affinity.is_some() || self.spread.iter().any(|(s, _)| s.hard)
    }
}

/// How a task's failures may be cached (see `Session::find_node_with`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Guard {
    /// No inter-pod rule applies: its shape's cache holds.
    Free,
    /// Only rules that placing pods can make harder (anti-affinity, ports, disks): a failure
    /// holds until capacity is given back, but per task, not per shape.
    PerTask,
    /// Required affinity or spread: placing pods can make it feasible; never cached.
    Never,
}

pub(crate) struct InterPod {
    active: bool,
    namespaces: NamespaceLabels,
    domains: Domains,
    counter_keys: Vec<CounterKey>,
    counters: Vec<DomainCounts>,
    counter_index: TermIndex,
    held_keys: Vec<HeldKey>,
    held: Vec<DomainCounts>,
    held_index: TermIndex,
    /// Whether any pod holds a required anti-affinity term (else no pod is repelled).
    any_hard_held: bool,
    /// Per task with constraints, its interned rules.
    task_rules: Vec<Option<Arc<Rules>>>,
    views: Vec<OnceCell<Rc<TaskView>>>,
    /// Label keys any term's selector reads: two pods alike in these, their namespace and
    /// their rules have the same view (a gang's members, mostly), derived once.
    selector_keys: Vec<String>,
    shared_views: RefCell<SharedViews>,
    foreign_rules: Vec<Option<Arc<Rules>>>,
    /// Host ports taken and disks mounted per node.
    on_node: OnNode,
    spread: RefCell<SpreadCache>,
    /// Per-task failure cache for [`Guard::PerTask`]: the `released` epoch it failed at.
    failures: Map<TaskId, u64>,
}

impl InterPod {
    /// Interns every pod's terms and counts the bound pods (ours and other schedulers').
    pub(crate) fn new(snap: &Snapshot) -> Self {
        let namespaces = NamespaceLabels::new(&snap.namespaces);
        let any = snap.tasks.iter().any(|t| t.constraints.is_some())
            || snap.foreign.iter().any(|p| p.constraints.is_some());
        let mut this = InterPod {
            active: any,
            namespaces,
            domains: Domains::default(),
            counter_keys: Vec::new(),
            counters: Vec::new(),
            counter_index: TermIndex::default(),
            held_keys: Vec::new(),
            held: Vec::new(),
            held_index: TermIndex::default(),
            any_hard_held: false,
            task_rules: Vec::new(),
            views: Vec::new(),
            selector_keys: Vec::new(),
            shared_views: RefCell::default(),
            foreign_rules: Vec::new(),
            on_node: OnNode::default(),
            spread: RefCell::default(),
            failures: Map::default(),
        };
        if !any {
            return this;
        }
        let mut interner = Interner {
            nodes: &snap.nodes,
            domains: Domains::default(),
            counter_ids: Map::default(),
            counter_keys: Vec::new(),
            held_ids: Map::default(),
            held_keys: Vec::new(),
            cache: Map::default(),
        };
        // A job's pods share a namespace and mostly one constraints value: the last rules
        // derived serve the next member without reading its namespace.
        let mut last: Option<(JobId, *const PodConstraints, Arc<Rules>)> = None;
        let task_rules: Vec<Option<Arc<Rules>>> = (snap.tasks.iter())
            .map(|t| {
                let live = matches!(t.state, TaskState::Pending | TaskState::Bound(_));
                let c = t.constraints.as_ref().filter(|_| live)?;
                if let Some((job, ptr, r)) = &last {
                    if *job == t.job && *ptr == Arc::as_ptr(c) {
                        return Some(r.clone());
                    }
                }
                let r = interner.rules(c, &t.meta.namespace);
                last = Some((t.job, Arc::as_ptr(c), r.clone()));
                Some(r)
            })
            .collect();
        let foreign_rules: Vec<Option<Arc<Rules>>> = (snap.foreign.iter())
            .map(|p| {
                let c = p.constraints.as_ref()?;
                Some(interner.rules(c, &p.meta.namespace))
            })
            .collect();
        let (counter_keys, held_keys) = (interner.counter_keys, interner.held_keys);
        let mut domains = interner.domains;
        let mut key_ids = |keys: &[String]| -> Vec<u32> {
            keys.iter().map(|k| domains.key(k, &snap.nodes)).collect()
        };
        let counter_ids: Vec<Vec<u32>> = counter_keys.iter().map(|k| key_ids(&k.keys)).collect();
        let held_ids: Vec<Vec<u32>> = (held_keys.iter())
            .map(|k| key_ids(std::slice::from_ref(&k.key)))
            .collect();
        for (i, k) in counter_keys.iter().enumerate() {
            this.counter_index.add(i as u32, &k.all[0].selector);
        }
        let selectors =
            (counter_keys.iter().flat_map(|k| &k.all)).chain(held_keys.iter().map(|k| &k.matcher));
        this.selector_keys = (selectors.flat_map(|m| &m.selector.requirements))
            .map(|r| r.key.clone())
            .collect();
        this.selector_keys.sort_unstable();
        this.selector_keys.dedup();
        for (i, k) in held_keys.iter().enumerate() {
            this.held_index.add(i as u32, &k.matcher.selector);
        }
        this.counters = (counter_ids.into_iter())
            .map(|k| DomainCounts::new(k, &domains))
            .collect();
        this.held = (held_ids.into_iter())
            .map(|k| DomainCounts::new(k, &domains))
            .collect();
        this.domains = domains;
        this.any_hard_held = held_keys.iter().any(|k| k.weight.is_none());
        (this.counter_keys, this.held_keys) = (counter_keys, held_keys);
        this.views = (0..snap.tasks.len()).map(|_| OnceCell::new()).collect();
        this.task_rules = task_rules;
        this.foreign_rules = foreign_rules;
        for (i, p) in snap.foreign.iter().enumerate() {
            let counts_in = this.counts_in(&p.meta);
            let rules = this.foreign_rules[i].clone();
            this.change(p.node, &counts_in, rules.as_deref(), true);
        }
        for t in &snap.tasks {
            if let TaskState::Bound(node) = t.state {
                this.charge(snap, t.id, node, true);
            }
        }
        this
    }

    /// Moves a pod's counts, held terms, host ports and disks on or off a node.
    fn change(&mut self, node: NodeId, counts_in: &[u32], rules: Option<&Rules>, add: bool) {
        for &c in counts_in {
            self.counters[c as usize].change(node, &self.domains, add);
        }
        let Some(rules) = rules else {
            return;
        };
        for &h in &rules.holds {
            self.held[h as usize].change(node, &self.domains, add);
        }
        (self.on_node).change(node, &rules.ports, &rules.disks, add);
    }

    /// A task goes on (`add`) or off a node: called by the session's `charge`.
    pub(crate) fn charge(&mut self, snap: &Snapshot, task: TaskId, node: NodeId, add: bool) {
        if !self.active {
            return;
        }
        self.view(snap, task);
        let view = self.views[task.index()]
            .get()
            .cloned()
            .expect("derived above");
        let rules = self.task_rules[task.index()].clone();
        self.change(node, &view.counts_in, rules.as_deref(), add);
    }

    /// How the task's failures may be cached; [`Guard::Free`] for a task no rule concerns.
    pub(crate) fn guard(&self, snap: &Snapshot, task: TaskId) -> Guard {
        if !self.active {
            return Guard::Free;
        }
        let view = self.view(snap, task);
        *view.guard.get_or_init(|| {
            let rules = self.task_rules[task.index()].as_deref();
            let repelled = self.any_hard_held
                && (view.selected_by.iter()).any(|&h| self.held_keys[h as usize].weight.is_none());
            match rules {
                Some(r) if r.dynamic() => Guard::Never,
                Some(r) if r.filters() => Guard::PerTask,
                _ if repelled => Guard::PerTask,
                _ => Guard::Free,
            }
        })
    }

    pub(crate) fn failed_at(&self, task: TaskId) -> Option<u64> {
        self.failures.get(&task).copied()
    }

    pub(crate) fn note_failure(&mut self, task: TaskId, epoch: u64) {
        self.failures.insert(task, epoch);
    }

    /// Whether the task's inter-pod rules let it onto the node now; the refusal when not.
    pub(crate) fn allows(
        &self,
        snap: &Snapshot,
        task: TaskId,
        node: NodeId,
    ) -> Result<(), Refusal> {
        self.prepare(snap, task).map_or(Ok(()), |c| c.check(node))
    }

    /// The task's rules with their counts taken once, for checks of many nodes in a row;
    /// `None` when no rule concerns it.
    pub(crate) fn prepare(&self, snap: &Snapshot, task: TaskId) -> Option<Check<'_>> {
        if self.guard(snap, task) == Guard::Free {
            return None;
        }
        let view = self.view(snap, task);
        let rules = self.task_rules[task.index()].as_deref();
        let mut spread = Vec::new();
        if let Some(r) = rules.filter(|r| r.spread.iter().any(|(s, _)| s.hard)) {
            let t = snap.task(task);
            let placement = (t.rules, &snap.rules[t.rules.0 as usize]);
            let mut cache = self.spread.borrow_mut();
            for (i, (s, _)) in r.spread.iter().enumerate().filter(|(_, (s, _))| s.hard) {
                let counts = &self.counters[s.counter as usize];
                let nodes = (snap.nodes.as_slice(), &self.domains);
                spread.push(cache.view(s, placement, nodes, counts, view.self_spread[i]));
            }
        }
        Some(Check {
            pods: self,
            view,
            rules,
            spread,
        })
    }
    /// Whether the task has any soft inter-pod rule (its own preferred terms or
    /// `ScheduleAnyway` spread, or existing pods' terms that select it): without, its
    /// [`InterPod::preference_points`] are 0 on every node.
    pub(crate) fn has_preferences(&self, snap: &Snapshot, task: TaskId) -> bool {
        if !self.active {
            return false;
        }
        let view = self.view(snap, task);
        *view.preferences.get_or_init(|| {
            let own = self.task_rules[task.index()]
                .as_deref()
                .is_some_and(|r| !r.preferred.is_empty() || r.spread.iter().any(|(s, _)| !s.hard));
            own || (view.selected_by.iter()).any(|&h| self.held_keys[h as usize].weight.is_some())
        })
    }

    /// The task's inter-pod preference points for a node, as (pod affinity points, spread
    /// points), each the sum over rules:
    /// - its preferred affinity term: +weight (1..=100) when a pod it selects runs in the
    ///   node's domain; its preferred anti-affinity term: −weight when one does;
    /// - an existing pod's preferred affinity (anti-affinity) term that selects the task:
    ///   +weight (−weight) when such a pod runs in the node's domain; an existing pod's
    ///   required affinity term: +1 (kube's `hardPodAffinityWeight`), once per distinct term;
    /// - its `ScheduleAnyway` spread constraint: 0..=100, 100 where the node's domain holds
    ///   the fewest pods the constraint selects, 0 where it holds the most or lacks the key.
    ///
    /// Presence, not counts: a term scores alike whether one or ten pods satisfy it.
    pub(crate) fn preference_points(
        &self,
        snap: &Snapshot,
        task: TaskId,
        node: NodeId,
    ) -> (i64, i64) {
        if !self.has_preferences(snap, task) {
            return (0, 0);
        }
        let view = self.view(snap, task);
        let domains = &self.domains;
        let present = |counts: &DomainCounts| counts.at(0, node, domains).is_some_and(|n| n > 0);
        let mut affinity = 0;
        for &h in &view.selected_by {
            if let Some(w) = self.held_keys[h as usize].weight {
                if present(&self.held[h as usize]) {
                    affinity += w;
                }
            }
        }
        let Some(r) = self.task_rules[task.index()].as_deref() else {
            return (affinity, 0);
        };
        for &(c, w) in &r.preferred {
            if present(&self.counters[c as usize]) {
                affinity += w;
            }
        }
        let t = snap.task(task);
        let placement = &snap.rules[t.rules.0 as usize];
        let mut cache = self.spread.borrow_mut();
        let mut spread = 0;
        for (s, _) in r.spread.iter().filter(|(s, _)| !s.hard) {
            let counts = &self.counters[s.counter as usize];
            let nodes = (snap.nodes.as_slice(), domains);
            spread += cache.points(s, (t.rules, placement), nodes, counts, node);
        }
        (affinity, spread)
    }

    /// An upper bound of [`InterPod::preference_points`] over all nodes.
    pub(crate) fn preference_ceiling(&self, snap: &Snapshot, task: TaskId) -> (i64, i64) {
        if !self.has_preferences(snap, task) {
            return (0, 0);
        }
        let view = self.view(snap, task);
        let held = (view.selected_by.iter()).filter_map(|&h| self.held_keys[h as usize].weight);
        let rules = self.task_rules[task.index()].as_deref();
        let own = rules
            .into_iter()
            .flat_map(|r| r.preferred.iter().map(|&(_, w)| w));
        let affinity = held.chain(own).filter(|&w| w > 0).sum();
        let soft = rules.map_or(0, |r| r.spread.iter().filter(|(s, _)| !s.hard).count());
        (affinity, 100 * soft as i64)
    }
}

/// A task's inter-pod rules ready to check node after node (see [`InterPod::prepare`]).
pub(crate) struct Check<'a> {
    pods: &'a InterPod,
    view: &'a TaskView,
    rules: Option<&'a Rules>,
    spread: Vec<SpreadView<'a>>,
}

/// The domain slot of nodes that lack a key, in [`InterPod::domain_slot`] numbering.
pub(crate) const NO_DOMAIN: u32 = u32::MAX;

impl InterPod {
    /// Topology keys a hard rule restricts on whose domains are few (at most one per eight
    /// nodes, as zones and racks are): the session indexes free nodes per domain of these, so a
    /// pod whose rules allow only some domains searches those alone instead of stepping over
    /// every node of the others (see [`Check::allowed`]). Hostname-like keys are left out: their
    /// rules exclude few nodes.
    pub(crate) fn coarse_keys(&self, nodes: usize) -> Vec<u32> {
        let coarse = |k: u32| self.domains.len(k) * 8 <= nodes;
        let mut keys: Vec<u32> = Vec::new();
        let rules = (self.task_rules.iter()).flatten();
        for r in rules {
            let affinity = r
                .affinity
                .iter()
                .flat_map(|(c, _)| &self.counters[*c as usize].keys);
            let anti = r.anti.iter().flat_map(|&c| &self.counters[c as usize].keys);
            let spread = r.spread.iter().filter(|(s, _)| s.hard).map(|(s, _)| &s.key);
            keys.extend(
                affinity
                    .chain(anti)
                    .chain(spread)
                    .copied()
                    .filter(|&k| coarse(k)),
            );
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Whether no two of `tasks` may share a node: one required anti-affinity term on a key
    /// every node has its own value of (the hostname) is held by each of them and selects each
    /// of them (the training pattern: anti-affinity on the gang's own label).
    pub(crate) fn one_per_node(&self, snap: &Snapshot, tasks: &[TaskId]) -> bool {
        let rules = |t: TaskId| self.task_rules.get(t.index()).and_then(|r| r.as_deref());
        let Some(first) = tasks.first().and_then(|&t| rules(t)) else {
            return false;
        };
        let nodes = snap.nodes.len();
        (first.anti.iter())
            .filter(|&&c| self.domains.len(self.counters[c as usize].keys[0]) == nodes)
            .any(|c| {
                tasks.iter().all(|&t| {
                    rules(t).is_some_and(|r| r.anti.contains(c))
                        && self.view(snap, t).counts_in.contains(c)
                })
            })
    }

    /// Whether placing the task changes what the rules of a task alike (same rules and view)
    /// see on its node alone: it has no required affinity and no spread (both read counts
    /// over all domains), and each anti-affinity term it states or holds against pods like it
    /// is on a key every node has its own value of.
    pub(crate) fn local_to_node(&self, snap: &Snapshot, task: TaskId) -> bool {
        if !self.active {
            return true;
        }
        let per_node = |key: u32| self.domains.len(key) == snap.nodes.len();
        let view = self.view(snap, task);
        let Some(r) = self.task_rules[task.index()].as_deref() else {
            return true;
        };
        r.affinity.is_none()
            && r.spread.is_empty()
            && (r.anti.iter()).all(|&c| per_node(self.counters[c as usize].keys[0]))
            && (r.holds.iter())
                .filter(|h| view.selected_by.contains(h))
                .all(|&h| per_node(self.held[h as usize].keys[0]))
    }

    /// Names the task's view: tasks with equal ids have equal rules and are selected alike.
    pub(crate) fn view_id(&self, snap: &Snapshot, task: TaskId) -> usize {
        if !self.active {
            return 0;
        }
        self.view(snap, task) as *const TaskView as usize
    }

    /// Whether the task must spread (a `DoNotSchedule` topology spread constraint).
    pub(crate) fn must_spread(&self, task: TaskId) -> bool {
        (self.task_rules.get(task.index()).and_then(|r| r.as_deref()))
            .is_some_and(|r| r.spread.iter().any(|(s, _)| s.hard))
    }

    /// The node's slot under a key: its domain, or [`NO_DOMAIN`].
    pub(crate) fn domain_slot(&self, key: u32, node: NodeId) -> u32 {
        self.domains.of(key, node).unwrap_or(NO_DOMAIN)
    }
}

impl Check<'_> {
    /// Per slot of `key` (its domains `0..n`, then at `n` the nodes without it), whether
    /// [`Check::check`] may allow a node there, when its hard rules rule some slots out; `None`
    /// when no rule on the key narrows the search. A superset of what `check` allows.
    pub(crate) fn allowed(&self, key: u32) -> Option<Vec<bool>> {
        let pods = self.pods;
        let len = pods.domains.len(key) as u32;
        let mut allowed: Option<Vec<bool>> = None;
        let mut narrow = |keep: &dyn Fn(u32) -> bool, none_ok: bool| {
            let slots = allowed.get_or_insert_with(|| vec![true; len as usize + 1]);
            for d in 0..len {
                slots[d as usize] &= keep(d);
            }
            slots[len as usize] &= none_ok;
        };
        if let Some(r) = self.rules {
            if let Some((c, _)) = &r.affinity {
                let counts = &pods.counters[*c as usize];
                let first_pod = counts.total == 0 && self.view.self_affinity;
                for (i, _) in counts.keys.iter().enumerate().filter(|(_, &k)| k == key) {
                    if !first_pod {
                        narrow(&|d| counts.in_domain(i, d) > 0, false);
                    }
                }
            }
            for &c in &r.anti {
                let counts = &pods.counters[c as usize];
                if counts.keys[0] == key {
                    narrow(&|d| counts.in_domain(0, d) == 0, true);
                }
            }
        }
        for s in self.spread.iter().filter(|s| s.key() == key) {
            if let Some(fits) = s.domains_that_fit() {
                narrow(&|d| fits[d as usize], false);
            }
        }
        allowed.filter(|slots| !slots.iter().all(|&ok| ok))
    }

    pub(crate) fn check(&self, node: NodeId) -> Result<(), Refusal> {
        if let Some(r) = self.rules {
            // NodePorts, then VolumeRestrictions, in kube-scheduler's order.
            self.pods.on_node.check_ports(node, &r.ports, &[])?;
            self.pods.on_node.check_disks(node, &r.disks, &[])?;
        }
        self.check_pods(node)
    }

    /// The rules about other pods: affinity, anti-affinity (both sides) and spread (asked
    /// after resources fit, as kube-scheduler does).
    pub(crate) fn check_pods(&self, node: NodeId) -> Result<(), Refusal> {
        let pods = self.pods;
        let domains = &pods.domains;
        let present = |counts: &DomainCounts| counts.at(0, node, domains).is_some_and(|n| n > 0);
        if let Some(r) = self.rules {
            if let Some((c, _)) = &r.affinity {
                let counts = &pods.counters[*c as usize];
                let mut exist = true;
                for i in 0..counts.keys.len() {
                    match counts.at(i, node, domains) {
                        Some(n) => exist &= n > 0,
                        None => return Err(Refusal::PodAffinity),
                    }
                }
                // kube's first-pod rule: nothing selected anywhere, and the pod selects itself.
                let first_pod = counts.total == 0 && self.view.self_affinity;
                if !(exist || first_pod) {
                    return Err(Refusal::PodAffinity);
                }
            }
            for &c in &r.anti {
                if present(&pods.counters[c as usize]) {
                    return Err(Refusal::PodAntiAffinity);
                }
            }
        }
        for &h in &self.view.selected_by {
            if pods.held_keys[h as usize].weight.is_none() && present(&pods.held[h as usize]) {
                return Err(Refusal::ExistingPodsAntiAffinity);
            }
        }
        for s in &self.spread {
            match s.check(node, domains) {
                Verdict::Fits => {}
                Verdict::MissingLabel => return Err(Refusal::TopologySpreadMissingLabel),
                Verdict::Skewed => return Err(Refusal::TopologySpread),
            }
        }
        Ok(())
    }
}

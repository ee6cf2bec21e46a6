//! Which nodes can take a task now and which is best: static filters cached per placement
//! rules, capacity, reservations and inter-pod rules, then the bucket search over the free
//! index (narrowed to the domains the task's rules allow), and why no node takes it.

use std::collections::BTreeMap;

use super::classes::StateClasses;
use super::score::Candidate;
use super::{domains, ReservedNodes, Session, Statics};
use crate::interpod::{Check, Guard, NO_DOMAIN};
use crate::model::{NodeId, RulesId, ShapeId, TaskId};
use crate::refusal::NoNode;
use crate::resources::Resources;

/// Per bucket (capacity class, free GPUs) with room for `want_gpus`, its first usable node, as
/// (current key, node).
fn first_usable<'b>(
    buckets: &'b domains::Buckets,
    want_gpus: u32,
    usable: &'b dyn Fn(NodeId) -> bool,
) -> impl Iterator<Item = ((u32, u32), (u64, NodeId))> + 'b {
    (buckets.iter())
        .filter(move |(&(_, free_gpus), _)| free_gpus >= want_gpus)
        .filter_map(|(&b, set)| Some((b, *set.iter().find(|&&(_, n)| usable(n))?)))
}

/// Per capacity class, its usable node of the least (current key, node) among the buckets with
/// room for `want_gpus`. Nodes of one class take a request in the order of their keys (see
/// [`Session::order_key`]), so that node is the class's best, and the walk skips what cannot
/// hold it: buckets go in the order of their least key, each down to its first usable node,
/// and a class's walk stops at the first bucket or node past the best it found. A node index
/// of many buckets per class (shared devices by level) then asks few nodes per pod.
fn best_per_class(
    buckets: &domains::Buckets,
    want_gpus: u32,
    usable: &dyn Fn(NodeId) -> bool,
) -> Vec<(u64, NodeId)> {
    let mut best = Vec::new();
    let mut class_sets: Vec<&std::collections::BTreeSet<(u64, NodeId)>> = Vec::new();
    let mut walk = |sets: &mut Vec<&std::collections::BTreeSet<(u64, NodeId)>>| {
        sets.sort_unstable_by_key(|set| set.first().copied());
        let mut found: Option<(u64, NodeId)> = None;
        for set in sets.drain(..) {
            let past = |entry: &(u64, NodeId)| found.is_some_and(|f| *entry >= f);
            if set.first().is_none_or(past) {
                break;
            }
            if let Some(&head) = set
                .iter()
                .take_while(|e| !past(e))
                .find(|&&(_, n)| usable(n))
            {
                found = Some(head);
            }
        }
        best.extend(found);
    };
    let mut class = None;
    for (&(c, coordinate), set) in buckets {
        if class != Some(c) {
            walk(&mut class_sets);
            class = Some(c);
        }
        if coordinate >= want_gpus {
            class_sets.push(set);
        }
    }
    walk(&mut class_sets);
    best
}

impl Session<'_> {
    pub(super) fn ensure_statics(&mut self, rules: RulesId) {
        if self.statics.contains_key(&rules) {
            return;
        }
        let r = &self.snapshot.rules[rules.0 as usize];
        if let Some(kept) = self.kept_statics.remove(r) {
            self.statics.insert(rules, kept);
            return;
        }
        let ok: Vec<bool> = self
            .snapshot
            .nodes
            .iter()
            .map(|n| {
                self.fw.filter_node(r, n).is_ok() && self.claims_could_fit(rules, n.id).is_ok()
            })
            .collect();
        let passing = ok.iter().filter(|&&b| b).count();
        // Scanning a short list of feasible nodes beats walking buckets full of infeasible ones.
        let few = (passing * 8 < ok.len()).then(|| {
            ok.iter()
                .enumerate()
                .filter(|(_, &b)| b)
                .map(|(i, _)| NodeId(i as u32))
                .collect()
        });
        self.statics.insert(rules, Statics { ok, few });
    }

    /// Whether the node passes the static filters for the task's placement rules.
    pub fn passes_filters(&mut self, task: TaskId, node: NodeId) -> bool {
        let rules = self.snapshot.task(task).rules;
        self.ensure_statics(rules);
        self.statics[&rules].ok[node.index()]
    }

    /// Nodes that pass the static filters for the task's placement rules, in name order.
    pub fn feasible_nodes(&mut self, task: TaskId) -> Vec<NodeId> {
        let rules = self.snapshot.task(task).rules;
        self.ensure_statics(rules);
        let s = &self.statics[&rules];
        match &s.few {
            Some(few) => few.clone(),
            None => (0..s.ok.len() as u32)
                .map(NodeId)
                .filter(|n| s.ok[n.index()])
                .collect(),
        }
    }

    pub fn fits(&self, node: NodeId, request: &Resources) -> bool {
        let alloc = &self.snapshot.nodes[node.index()].allocatable;
        let used = self.capacity.used(node);
        request.fits_on(used, alloc)
    }

    /// The node's capacity class and node-order key now. Nodes of one class take the same
    /// request in the order of their keys (the premise of the bucket search, see
    /// `session::prefer`), so among them only the first by (key, id) can score best.
    pub(crate) fn order_key(&self, node: NodeId) -> (u32, u64) {
        (
            self.index.class[node.index()],
            self.index.key[node.index()].1,
        )
    }

    pub(crate) fn key_with(&self, node: NodeId, request: &Resources) -> u64 {
        let mut after = self.capacity.used(node).clone();
        after.add(request);
        (self.fw.node_order()).key(&self.snapshot.nodes[node.index()].allocatable, &after)
    }

    /// Whether the node can take the task now: static filters, reservations, room in every
    /// resource and enough free whole GPUs (inside NVLink island `island`, when given).
    pub fn can_take(
        &mut self,
        task: TaskId,
        node: NodeId,
        access: ReservedNodes,
        island: Option<u32>,
    ) -> bool {
        let request = &self.snapshot.task(task).request;
        self.passes_filters(task, node)
            && self.may_use(node, access)
            && self.fits(node, request)
            && self.has_devices(task, node, island)
            && self.pod_rules_allow(task, node)
    }

    /// The nodes of `nodes` that can take the task now ([`Session::can_take`] of each), its
    /// inter-pod rules prepared once for all of them.
    pub fn nodes_that_take(
        &mut self,
        task: TaskId,
        nodes: impl IntoIterator<Item = NodeId>,
        access: ReservedNodes,
        island: Option<u32>,
    ) -> Vec<NodeId> {
        let t = self.snapshot.task(task);
        self.ensure_statics(t.rules);
        let request = &t.request;
        let statics = &self.statics[&t.rules];
        let check = self.pods.prepare(self.snapshot, task);
        let need = self.device_need(task);
        (nodes.into_iter())
            .filter(|&node| {
                statics.ok[node.index()]
                    && self.may_use(node, access)
                    && self.fits(node, request)
                    && self.has_devices_for(&need, node, island)
                    && check.as_ref().is_none_or(|c| c.check(node).is_ok())
            })
            .collect()
    }

    /// Whether no two of the tasks may share a node (see `InterPod::one_per_node`).
    pub fn one_per_node(&self, tasks: &[TaskId]) -> bool {
        self.pods.one_per_node(self.snapshot, tasks)
    }

    /// Whether the task states a `DoNotSchedule` topology spread constraint.
    pub fn must_spread(&self, task: TaskId) -> bool {
        self.pods.must_spread(task)
    }

    /// Whether the task's inter-pod rules (pod affinity and anti-affinity, the existing pods'
    /// anti-affinity, `DoNotSchedule` spread, host ports, disks) let it onto the node now.
    pub fn pod_rules_allow(&self, task: TaskId, node: NodeId) -> bool {
        self.pods.allows(self.snapshot, task, node).is_ok()
    }

    /// The task's inter-pod rules, ready to check nodes with some pods taken away (the victim
    /// search); `None` when no rule concerns it.
    pub(crate) fn pod_rules(&self, task: TaskId) -> Option<Check<'_>> {
        self.pods.prepare(self.snapshot, task)
    }

    /// Names the task's inter-pod view: tasks of equal ids are refused alike by the same pods.
    pub(crate) fn pod_view(&self, task: TaskId) -> usize {
        self.pods.view_id(self.snapshot, task)
    }

    pub fn may_use(&self, node: NodeId, access: ReservedNodes) -> bool {
        match (access, self.reservations.reserved_for(node)) {
            (_, None) | (ReservedNodes::Use, _) => true,
            // Work ahead of the reserving job in job order may still use its nodes.
            (ReservedNodes::Avoid(job), Some(owner)) => {
                let snap = self.snapshot;
                job == owner || self.fw.compare_jobs(snap.job(job), snap.job(owner)).is_lt()
            }
        }
    }

    /// The best node for a task, if any (see [`Session::why_no_node`] for the reason). Shapes
    /// that failed since capacity was last given back fail at once, so a long backlog of
    /// identical pods costs one search.
    pub fn find_node(&mut self, task: TaskId) -> Option<NodeId> {
        let job = self.snapshot.task(task).job;
        self.find_node_with(task, ReservedNodes::Avoid(job))
    }

    /// Without reservations every access sees the same nodes: they share cache entries.
    pub(super) fn effective(&self, access: ReservedNodes) -> ReservedNodes {
        if self.reservations.any() {
            access
        } else {
            ReservedNodes::Use
        }
    }

    pub fn find_node_with(&mut self, task: TaskId, access: ReservedNodes) -> Option<NodeId> {
        let snap = self.snapshot;
        let t = snap.task(task);
        let (shape, rules) = (t.shape, t.rules);
        let access = self.effective(access);
        // A task with inter-pod rules does not share its shape's failures (see `Guard`).
        let guard = self.pods.guard(snap, task);
        // Inter-pod rules only take nodes away: where the shape found none, neither does the task.
        let released = self.refusals.released();
        let failed = self.refusals.failed(shape, access)
            || (guard == Guard::PerTask && self.pods.failed_at(task) == Some(released));
        if failed {
            return None;
        }
        let preferences = self.preferences(task);
        self.ensure_statics(rules);
        let request = &snap.shapes[shape.0 as usize].1;
        let misses = match preferences {
            None => self.take_room_misses(shape),
            Some(_) => None,
        };
        let misses = std::cell::RefCell::new(misses);
        let statics = &self.statics[&rules];
        let check = self.pods.prepare(snap, task);
        if let Some(p) = &preferences {
            let found = self.find_preferred(task, request, statics, access, p, check.as_ref());
            drop(check);
            if found.is_none() {
                self.note_no_node(task, shape, access, guard);
            }
            return found;
        }
        let need = self.device_need(task);
        if self.scores_pods() {
            // After a session's first scored task (one task alone does not pay for grouping
            // the nodes), one node per state is scored (see `classes.rs`).
            let by_state = statics.few.is_none()
                && !need.per_node()
                && self.scored_tasks > 0
                && self.scores_by_state();
            self.scored_tasks += 1;
            let mut classes = None;
            if by_state {
                let kept = self.classes.take();
                let mut states = kept.unwrap_or_else(|| StateClasses::new(self));
                states.refresh(self);
                classes = Some(states);
            }
            let passes = |n: NodeId| {
                statics.ok[n.index()]
                    && self.may_use(n, access)
                    && check.as_ref().is_none_or(|c| c.check(n).is_ok())
            };
            let room = |n: NodeId| self.fits(n, request) && self.has_devices_for(&need, n, None);
            // What a state offers is the state's: known once per state and request.
            let key = t.containers.is_none().then_some((shape, t.share));
            let feasible: Vec<Candidate> = match (&mut classes, &statics.few) {
                (Some(classes), _) => classes.candidates(key, room, passes),
                (None, few) => {
                    let feasible = |n: NodeId| {
                        (passes(n) && room(n)).then_some(Candidate {
                            scored: n,
                            taken: n,
                            state: None,
                        })
                    };
                    match few {
                        Some(few) => few.iter().copied().filter_map(feasible).collect(),
                        None => (0..snap.nodes.len() as u32)
                            .map(NodeId)
                            .filter_map(feasible)
                            .collect(),
                    }
                }
            };
            drop(check);
            let by_shape = self.scores_by_shape();
            let known = match (&mut classes, key) {
                (Some(classes), Some(key)) if by_shape => Some(classes.scores(key)),
                _ => None,
            };
            let found = self.best_scored(task, &need, &feasible, known);
            if classes.is_some() {
                self.classes = classes.take();
            }
            if found.is_none() {
                self.note_no_node(task, shape, access, guard);
            }
            return found;
        }
        // Room (resources and devices) only shrinks until capacity is given back: a miss is
        // kept (see `room_misses`).
        let room = |n: NodeId| match misses.borrow_mut().as_mut() {
            None => self.fits(n, request) && self.has_devices_for(&need, n, None),
            Some(missed) => {
                let (word, bit) = (n.index() / 64, 1u64 << (n.index() % 64));
                let known = missed[word] & bit != 0;
                let ok = !known && self.fits(n, request) && self.has_devices_for(&need, n, None);
                if !ok {
                    missed[word] |= bit;
                }
                ok
            }
        };
        let usable = |n: NodeId| {
            statics.ok[n.index()]
                && self.may_use(n, access)
                && room(n)
                && check.as_ref().is_none_or(|c| c.check(n).is_ok())
        };
        let mut best: Option<(u64, NodeId)> = None;
        let mut consider = |node: NodeId| {
            let cand = (self.key_with(node, request), node);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        };
        if let Some(few) = &statics.few {
            few.iter()
                .copied()
                .filter(|&n| usable(n))
                .for_each(&mut consider);
        } else {
            let want_gpus = need.bucket();
            let heads = |buckets| first_usable(buckets, want_gpus, &usable);
            // Where the inter-pod rules allow only some domains, only their nodes are walked.
            let narrowed = (check.as_ref())
                .and_then(|c| (self.domain_index.keys()).find_map(|k| Some((k, c.allowed(k)?))));
            match narrowed {
                // Most domains allowed (a spread over zones): the walk of all nodes steps over
                // few of the others.
                Some((key, allowed))
                    if allowed.iter().filter(|&&a| a).count() * 4 >= allowed.len() =>
                {
                    let none = allowed.len() - 1;
                    let pods = &self.pods;
                    let slot_allowed = |n: NodeId| match pods.domain_slot(key, n) {
                        NO_DOMAIN => allowed[none],
                        d => allowed[d as usize],
                    };
                    let usable_there = |n: NodeId| slot_allowed(n) && usable(n);
                    (best_per_class(&self.index.buckets, want_gpus, &usable_there).into_iter())
                        .for_each(|(_, node)| consider(node));
                }
                Some((key, allowed)) => {
                    // The first usable node of a bucket over all allowed domains is the one
                    // the walk of every node would take: one key to compute per bucket, not
                    // one per bucket and domain.
                    let none = allowed.len() - 1;
                    let slots = (0..allowed.len()).filter(|&i| allowed[i]);
                    let mut first: BTreeMap<(u32, u32), (u64, NodeId)> = BTreeMap::new();
                    for slot in slots.map(|i| if i == none { NO_DOMAIN } else { i as u32 }) {
                        let all = &self.index.buckets;
                        let buckets = self.domain_index.buckets(key, slot, &self.pods, all);
                        for (b, head) in buckets.into_iter().flat_map(heads) {
                            let kept = first.entry(b).or_insert(head);
                            *kept = (*kept).min(head);
                        }
                    }
                    first.into_values().for_each(|(_, node)| consider(node));
                }
                None => (best_per_class(&self.index.buckets, want_gpus, &usable).into_iter())
                    .for_each(|(_, node)| consider(node)),
            }
        }
        drop(check);
        if let Some(missed) = misses.into_inner() {
            self.refusals.keep_room_misses(shape, missed);
        }
        if best.is_none() {
            self.note_no_node(task, shape, access, guard);
        }
        best.map(|(_, node)| node)
    }

    /// The shape's [`Session::room_misses`] still valid (none yet: all clear), or `None`
    /// where no node shares its devices and the shape claims no DRA devices (a whole-device
    /// check costs less than the bit; a claim's device search costs more).
    fn take_room_misses(&mut self, shape: ShapeId) -> Option<Vec<u64>> {
        let snap = self.snapshot;
        let rules = snap.shapes[shape.0 as usize].0;
        let claims = snap.rules[rules.0 as usize].claims.is_some();
        if snap.device_use.is_empty() && !claims {
            return None;
        }
        let words = self.snapshot.nodes.len().div_ceil(64);
        Some(self.refusals.take_room_misses(shape, words))
    }

    /// Whether reasons are wanted: an action that will not report why a pod found no node
    /// (allocate's first pass, and its gangs' minimums when the explanation words them)
    /// spares the scans. Decisions never depend on it.
    pub fn set_quiet(&mut self, quiet: bool) {
        self.refusals.set_quiet(quiet);
    }

    /// Caches that the task found no node, as its inter-pod rules allow (see `Guard`).
    pub(super) fn note_no_node(
        &mut self,
        task: TaskId,
        shape: ShapeId,
        access: ReservedNodes,
        guard: Guard,
    ) {
        match guard {
            Guard::Free => {
                self.refusals.note_failed(shape, access);
            }
            Guard::PerTask => self.pods.note_failure(task, self.refusals.released()),
            Guard::Never => {}
        }
    }

    /// Why no node takes the task now: the nodes counted per refusal, worded when the plan is
    /// written ("0/3 nodes are available: 2 insufficient nvidia.com/gpu, 1 didn't match node
    /// selector."). Counted once per shape until capacity changes; a full scan, so only asked
    /// for when a reason must reach the user.
    pub fn why_no_node(&mut self, task: TaskId, access: ReservedNodes) -> NoNode {
        if !self.fw.explain_failures || self.refusals.quiet() {
            return NoNode::Uncounted;
        }
        let t = self.snapshot.task(task);
        let (shape, rules) = (t.shape, t.rules);
        let access = self.effective(access);
        self.ensure_statics(rules);
        // With inter-pod rules the reason is the gang's own, not its shape's. A gang tries
        // domain after domain before it commits or gives up, and reports one reason: its
        // members of one shape are explained once per commit (the reason as the first try
        // found it), not once per member and try, each a scan.
        if self.pods.guard(self.snapshot, task) != Guard::Free {
            let epoch = self.committed.len() as u64;
            let key = (t.job, shape, access);
            if let Some(why) = self.refusals.gang_reason(key, epoch) {
                return why.clone();
            }
            let request = &self.snapshot.shapes[shape.0 as usize].1;
            let why = self.explain(task, shape, rules, request, access);
            (self.refusals).keep_gang_reason(key, epoch, why.clone());
            return why;
        }
        if let Some(why) = self.refusals.reason(shape, access) {
            return why.clone();
        }
        let request = &self.snapshot.shapes[shape.0 as usize].1;
        let why = self.explain(task, shape, rules, request, access);
        (self.refusals).keep_reason(shape, access, why.clone());
        why
    }
}

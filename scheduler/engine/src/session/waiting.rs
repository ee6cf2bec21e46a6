//! Why each job that has not started waits ([`Explanation`]), computed once the cycle's actions
//! are done, on the state they leave: the gang's own dry runs are undone by then, so node
//! counts never include members it placed and took back.
//!
//! Cost: what depends only on the end state is kept for the pass (free capacity per placement
//! rules, node counts per shape, holders per domain), so a backlog of alike jobs costs one
//! computation. Who holds the capacity and what would free it (`holders.rs`) are the dear
//! parts: they are worked out for the first [`crate::Framework::explain_detail`] jobs of each
//! queue, and for the jobs named in [`crate::Framework::explain_jobs`], not for the rest of a
//! long queue (whose first answer is the jobs ahead of it). The rest of such a queue is mostly
//! alike jobs: those share one explanation (`alike.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_topology::{DomainId, TierId};

use super::{Op, ReservedNodes, Session};
use crate::hash::Map;
use crate::interpod::Guard;
use crate::model::{JobId, NodeId, RulesId, ShapeId, TaskId};
use crate::plan::{
    DomainRoom, Explanation, NodeCounts, NodeRefusal, Position, Reservation, ResourceNeed,
    Together, Unblock, Verdict,
};
use crate::refusal::{worded_counts, Refusal};
use crate::resources::{Resources, PODS};

mod alike;
mod holders;
mod never;

/// What the pass keeps: each depends only on the end state, which the pass does not change.
#[derive(Default)]
pub(super) struct Kept {
    /// Per placement rules, over the nodes passing their static filters.
    rules: Map<RulesId, never::RulesRoom>,
    /// Per shape (tasks without inter-pod rules) and node access: the counts, and how many
    /// of the shape the available nodes take.
    shapes: Map<(ShapeId, ReservedNodes), (Arc<NodeCounts>, u64)>,
    /// Per tier: the most GPUs one of its domains has.
    tier_largest: Map<TierId, i64>,
    /// The starving gangs that reserved nodes, and how many each.
    reservations: Option<Vec<(JobId, u32)>>,
    /// Per placement rules and ask: what [`Session::resource_needs`] words (alike gangs
    /// share it).
    needs: Map<RulesId, Map<Resources, Arc<[ResourceNeed]>>>,
    holders: holders::Kept,
}

/// How many of `request` fit into `free`, at most `cap`.
pub(super) fn fit_count(free: &Resources, request: &Resources, cap: u64) -> u64 {
    request
        .iter()
        .map(|(id, want)| match want {
            i64::MAX => 0,
            w if w < 0 => cap,
            w => (free.get(id).max(0) / w) as u64,
        })
        .fold(cap, u64::min)
}

impl Session<'_> {
    /// Notes that `allocate` serves the job (the first time only: its turn in cycle order).
    pub fn note_served(&mut self, job: JobId) {
        self.notes.note_served(job);
    }

    /// Notes that the job's minimum could not be placed for room or quota: its condition is
    /// worded from its explanation when the plan is written.
    pub fn note_short(&mut self, job: JobId) {
        self.notes.note_short(job);
    }

    /// Whether the plan words the job's resource condition from its explanation.
    pub fn explains(&self) -> bool {
        self.fw.explain_failures
    }

    /// Explains every job with pending members that is not ready, and every one whose
    /// members wait for evictions (see the module docs).
    pub fn explain_waiting(&mut self) {
        let snap = self.snapshot;
        let fw = self.fw;
        let waiting: Vec<JobId> = (self.jobs.with_pending().to_vec().into_iter())
            .filter(|&j| {
                let c = self.counts(j);
                c.pipelined > 0 || (c.pending > 0 && !fw.job_ready(self, j))
            })
            .collect();
        let mut per_queue: BTreeMap<_, Vec<JobId>> = BTreeMap::new();
        for &j in &waiting {
            per_queue.entry(snap.job(j).queue).or_default().push(j);
        }
        let mut kept = Kept::default();
        let mut alike: Map<alike::Signature, Explanation> = Map::default();
        let evicted = self.evictions_per_job();
        for (queue, mut jobs) in per_queue {
            jobs.sort_by(|&a, &b| fw.compare_jobs(snap.job(a), snap.job(b)));
            let length = jobs.len() as u32;
            for (i, job) in jobs.into_iter().enumerate() {
                let position = Position {
                    queue: snap.queue(queue).name.clone(),
                    in_queue: i as u32 + 1,
                    queue_length: length,
                    in_cycle: self.notes.turn(job),
                    cycle_length: self.notes.served_count(),
                };
                let detail = position.in_queue <= fw.explain_detail
                    || fw.explain_jobs.iter().any(|n| *n == *snap.job(job).name);
                let victims = evicted.get(&job);
                let signature = (!detail && victims.is_none())
                    .then(|| self.signature(job))
                    .flatten();
                let shared = signature.and_then(|s| alike.get(&s));
                let explained = match shared {
                    Some(shared) => Some(self.shared(&mut kept, shared, job, position)),
                    None => self.explain_job(&mut kept, job, position, detail, victims),
                };
                if let (Some(s), Some(e)) = (signature, &explained) {
                    if !placed_one_by_one(e, s.plain()) && !alike.contains_key(&s) {
                        alike.insert(s, e.clone());
                    }
                }
                if let Some(e) = explained {
                    self.notes.set_waiting(job, e);
                }
            }
        }
    }

    /// The explanation of an alike job (see `alike.rs`) at `position`; debug builds check it
    /// against the job's own.
    fn shared(
        &mut self,
        kept: &mut Kept,
        shared: &Explanation,
        job: JobId,
        position: Position,
    ) -> Explanation {
        let mut e = shared.clone();
        e.position = position;
        if cfg!(debug_assertions) {
            let own = self.explain_job(kept, job, e.position.clone(), false, None);
            assert_eq!(
                own.as_ref(),
                Some(&e),
                "{}: shared explanation",
                self.snapshot.job(job).name
            );
        }
        e
    }

    /// Per preemptor: the jobs its committed evictions take pods from, and their nodes.
    fn evictions_per_job(&self) -> Map<JobId, (Vec<Arc<str>>, Vec<String>)> {
        let snap = self.snapshot;
        let mut out: Map<JobId, (Vec<Arc<str>>, Vec<String>)> = Map::default();
        for op in &self.committed {
            if let Op::Evict {
                task,
                node,
                for_job,
                ..
            } = op
            {
                let (jobs, nodes) = out.entry(*for_job).or_default();
                let victim = &snap.job(snap.task(*task).job).name;
                if !jobs.contains(victim) {
                    jobs.push(victim.clone());
                }
                let name = &snap.node(*node).name;
                if !nodes.contains(name) {
                    nodes.push(name.clone());
                }
            }
        }
        out
    }

    fn explain_job(
        &mut self,
        kept: &mut Kept,
        job: JobId,
        position: Position,
        detail: bool,
        victims: Option<&(Vec<Arc<str>>, Vec<String>)>,
    ) -> Option<Explanation> {
        let snap = self.snapshot;
        let j = snap.job(job);
        let members = crate::actions::placement_order(self, j);
        let have = (self.holding(job)).saturating_add(self.jobs.start_counts(job).succeeded);
        let need = (j.min_member.saturating_sub(have) as usize).clamp(1, members.len().max(1));
        let needed = &members[..need.min(members.len())];
        let mut e = bare(have, j.min_member, position);
        e.unblock = victims.map(|(jobs, nodes)| Unblock::Preempting {
            victims: jobs.clone(),
            nodes: nodes.clone(),
        });
        let Some(&first) = needed.first() else {
            // Every member left is pipelined or held: only an eviction under way explains it.
            return e.unblock.is_some().then_some(e);
        };
        let mut asked = Resources::zero(snap.resources.len());
        for &t in needed {
            asked.add(&snap.task(t).request);
        }
        e.resources = self.resource_needs(kept, snap.task(first).rules, &asked);
        let access = self.effective(ReservedNodes::Avoid(job));
        let (nodes, fit_now) = self.member_counts(kept, needed, access);
        (e.nodes, e.need) = (nodes, needed.len() as u32);
        e.fit_now = fit_now.min(needed.len() as u64) as u32;
        let need_gpus: i64 = (needed.iter())
            .map(|&t| snap.devices_asked(&snap.task(t).request) as i64)
            .fold(0, i64::saturating_add);
        let required = self.required_tier(job);
        e.never_fits = self.never_fits(kept, job, needed, &asked, required, need_gpus);
        if e.never_fits.is_some() {
            e.verdict = Verdict::NeverFits;
        }
        let best = required.and_then(|tier| self.best_domain(tier, need_gpus));
        e.domain = best.as_ref().map(|(_, d)| d.clone());
        if e.unblock.is_none() && e.never_fits.is_none() {
            e.unblock = self.quota_blocks(first, &asked);
        }
        e.reserved = self.reserved_against(kept, job);
        let plain = j.topology.is_empty() && j.sub_groups.is_empty();
        if placed_one_by_one(&e, plain) {
            e.together = self.place_together(needed, access);
        }
        if detail {
            let within = best.map(|(d, _)| d);
            self.explain_holders(kept, &mut e, job, needed, &asked, within);
        }
        Some(e)
    }

    /// Per resource the members ask for (pod slots aside): how much, and what is free and
    /// allocatable on the nodes the rules let them onto.
    fn resource_needs(
        &mut self,
        kept: &mut Kept,
        rules: RulesId,
        asked: &Resources,
    ) -> Arc<[ResourceNeed]> {
        // Looked up by reference: most jobs find theirs, and a key is a copy of the ask.
        if let Some(needs) = kept.needs.get(&rules).and_then(|n| n.get(asked)) {
            return needs.clone();
        }
        let names = &self.snapshot.resources;
        self.rules_room(kept, rules);
        let room = &kept.rules[&rules];
        let needs: Arc<[ResourceNeed]> = (asked.iter())
            .filter(|&(id, _)| id != PODS)
            .map(|(id, v)| ResourceNeed {
                name: names.name(id).to_string(),
                asked: names.format(id, v),
                free: names.format(id, room.free.get(id).max(0)),
                allocatable: names.format(id, room.allocatable.get(id)),
            })
            .collect();
        (kept.needs.entry(rules).or_default()).insert(asked.clone(), needs.clone());
        needs
    }

    /// The domain of `tier` with the most free GPUs.
    fn best_domain(&self, tier: TierId, need_gpus: i64) -> Option<(DomainId, DomainRoom)> {
        let topo = self.topo.as_ref()?;
        let best = topo.roomiest(tier)?;
        let room = DomainRoom {
            tier: topo.topology.tier(tier).name.clone(),
            name: topo.topology.domain(best).name.clone(),
            free: topo.free(best),
            need: need_gpus,
        };
        Some((best, room))
    }

    /// Places the members one by one (and takes them back): how many found a node, and the
    /// node counts of the first that found none; `None` when all did.
    fn place_together(&mut self, needed: &[TaskId], access: ReservedNodes) -> Option<Together> {
        let mut stmt = self.statement();
        let mut outcome = None;
        for (placed, &task) in needed.iter().enumerate() {
            match self.find_node_with(task, access) {
                Some(node) => self.allocate(&mut stmt, task, node),
                None => {
                    let t = self.snapshot.task(task);
                    let (shape, rules) = (t.shape, t.rules);
                    let request = &self.snapshot.shapes[shape.0 as usize].1;
                    let (refusals, available) =
                        self.count_refusals(task, shape, rules, request, access);
                    let next = Arc::new(node_counts(self, &refusals, available.len()));
                    outcome = Some(Together {
                        placed: placed as u32,
                        next,
                    });
                    break;
                }
            }
        }
        self.discard(stmt);
        outcome
    }

    /// The starving gangs whose reserved nodes the job may not use, and how many each holds.
    fn reserved_against(&self, kept: &mut Kept, job: JobId) -> Vec<Reservation> {
        if !self.reservations.any() {
            return Vec::new();
        }
        let owners = kept.reservations.get_or_insert_with(|| {
            let mut per: BTreeMap<JobId, u32> = BTreeMap::new();
            for owner in self.reservations.owners() {
                *per.entry(owner).or_default() += 1;
            }
            per.into_iter().collect()
        });
        let snap = self.snapshot;
        (owners.iter())
            .filter(|&&(owner, _)| {
                owner != job && !self.fw.compare_jobs(snap.job(job), snap.job(owner)).is_lt()
            })
            .map(|&(owner, nodes)| Reservation {
                gang: snap.job(owner).name.clone(),
                nodes,
            })
            .collect()
    }

    /// The job's required topology tier, when the topology knows it.
    fn required_tier(&self, job: JobId) -> Option<TierId> {
        let name = self.snapshot.job(job).topology.required.as_ref()?;
        self.topo.as_ref()?.topology.tier_id(name)
    }

    /// Nodes per refusal for the most refused shape among the members, and how many of the
    /// members the available nodes take (each shape counted on its own).
    fn member_counts(
        &mut self,
        kept: &mut Kept,
        needed: &[TaskId],
        access: ReservedNodes,
    ) -> (Arc<NodeCounts>, u64) {
        let snap = self.snapshot;
        let mut by_shape: Vec<(TaskId, u64)> = Vec::new();
        for &t in needed {
            let shape = snap.task(t).shape;
            match by_shape
                .iter_mut()
                .find(|(f, _)| snap.task(*f).shape == shape)
            {
                Some((_, n)) => *n += 1,
                None => by_shape.push((t, 1)),
            }
        }
        let mut worst: Option<Arc<NodeCounts>> = None;
        let mut fit = 0u64;
        for (task, count) in by_shape {
            let (counts, fits) = self.shape_counts(kept, task, count, access);
            fit = fit.saturating_add(fits.min(count));
            if worst
                .as_ref()
                .is_none_or(|w| counts.available < w.available)
            {
                worst = Some(counts);
            }
        }
        (worst.unwrap_or_default(), fit)
    }

    fn shape_counts(
        &mut self,
        kept: &mut Kept,
        task: TaskId,
        cap: u64,
        access: ReservedNodes,
    ) -> (Arc<NodeCounts>, u64) {
        let snap = self.snapshot;
        let t = snap.task(task);
        let (shape, rules) = (t.shape, t.rules);
        // A task with inter-pod rules has counts of its own (they depend on its gang).
        let shared = self.pods.guard(snap, task) == Guard::Free;
        if let Some((counts, fits)) = kept.shapes.get(&(shape, access)).filter(|_| shared) {
            return (counts.clone(), *fits);
        }
        self.ensure_statics(rules);
        let request = &snap.shapes[shape.0 as usize].1;
        let (refusals, available) = self.count_refusals(task, shape, rules, request, access);
        // A shared entry serves every job of the shape: count fits up to the most any one
        // gang could ask (its members), kept per shape only when bounded by the nodes.
        let bound = if shared { u64::MAX } else { cap };
        let mut fits = 0u64;
        for &node in &available {
            fits = fits.saturating_add(fit_count(&self.free(node), request, bound));
            if fits >= bound {
                break;
            }
        }
        let counts = Arc::new(node_counts(self, &refusals, available.len()));
        if shared {
            kept.shapes.insert((shape, access), (counts.clone(), fits));
        }
        (counts, fits)
    }

    /// The quota that refuses the members it needs (a queue's capability, guarantees of
    /// other queues), if any.
    fn quota_blocks(&self, first: TaskId, asked: &Resources) -> Option<Unblock> {
        let snap = self.snapshot;
        match self.fw.admit_task(self, first, asked) {
            Err(r @ Refusal::OverCapability { queue, .. }) => Some(Unblock::Quota {
                queue: Some(snap.queue(queue).name.clone()),
                reason: r.describe(snap),
            }),
            Err(r) => Some(Unblock::Quota {
                queue: None,
                reason: r.describe(snap),
            }),
            Ok(()) => None,
        }
    }

    /// Domain `d`'s nodes that pass the rules' static filters, or all that pass them.
    fn nodes_within(&mut self, rules: RulesId, within: Option<DomainId>) -> Vec<NodeId> {
        self.ensure_statics(rules);
        let ok = &self.statics[&rules].ok;
        match (within, &self.topo) {
            (Some(d), Some(topo)) => (topo.topology.domain(d).nodes.iter())
                .map(|&n| NodeId(n))
                .filter(|n| ok[n.index()])
                .collect(),
            _ => (0..ok.len() as u32)
                .map(NodeId)
                .filter(|n| ok[n.index()])
                .collect(),
        }
    }
}

/// Whether the members of a job explained as `e` so far are placed one by one for its
/// explanation (`Together`): only when nothing else explains the wait and each fits alone.
fn placed_one_by_one(e: &Explanation, plain: bool) -> bool {
    e.unblock.is_none() && e.never_fits.is_none() && e.fit_now >= e.need && plain
}

fn node_counts(
    session: &Session,
    refusals: &BTreeMap<Refusal, usize>,
    available: usize,
) -> NodeCounts {
    NodeCounts {
        total: session.snapshot.nodes.len() as u32,
        available: available as u32,
        refused: (worded_counts(session.snapshot, refusals).into_iter())
            .map(|(reason, count)| NodeRefusal {
                count: count as u32,
                reason,
            })
            .collect(),
    }
}

/// An explanation of a job that waits, with nothing found yet.
fn bare(holding: u32, min_member: u32, position: Position) -> Explanation {
    Explanation {
        verdict: Verdict::Waiting,
        never_fits: None,
        holding,
        min_member,
        need: 0,
        fit_now: 0,
        resources: Arc::from([]),
        domain: None,
        nodes: Arc::default(),
        together: None,
        reserved: Vec::new(),
        held_resource: None,
        held_by: Vec::new(),
        held_by_queues: Vec::new(),
        unblock: None,
        position,
    }
}

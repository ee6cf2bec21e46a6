//! Who holds the capacity a waiting job needs, and the fewest running jobs whose end would let
//! it start. Per (placement rules, domain) the holders are gathered once for the pass, and per
//! node the jobs whose end lets it take one more member; the search for jobs to end takes
//! node after node, the one needing the fewest jobs not already ending, until the members fit
//! (by resources and whole GPUs), then drops the ends the others make unnecessary. It names
//! at most [`CANDIDATES`] jobs.

use std::sync::Arc;

use basalt_topology::DomainId;

use super::super::{Op, Session, TaskStatus};
use super::{fit_count, Kept as PassKept};
use crate::hash::Map;
use crate::model::{JobId, NodeId, QueueId, RulesId, ShapeId, TaskId};
use crate::plan::{Explanation, Holding, Unblock};
use crate::resources::{ResourceId, Resources, PODS};

/// Holders listed per explanation, jobs and queues each.
const LISTED: usize = 3;
/// The most jobs the search for jobs to end names.
const CANDIDATES: usize = 64;

type Where = (RulesId, Option<DomainId>);

#[derive(Default)]
pub(in crate::session) struct Kept {
    /// Tasks this cycle placed, per node, and the node of each.
    placed: Option<Placed>,
    places: Map<Where, Arc<Holdings>>,
    /// Per place and resource: its holders, most first, and its queues' totals.
    ranked: Map<(Where, ResourceId), Arc<Ranked>>,
    /// Per place and shape: how many of the shape its nodes take now.
    fits: Map<(Where, ShapeId), u64>,
    /// Per place, shape and resource: the node options of the search for jobs to end, as
    /// far as a search has asked for them.
    options: Map<(Where, ShapeId, ResourceId), Options>,
}

/// The node options of the search for jobs to end: per node of a place, the holders on it
/// whose end lets it take one more member (its largest holders of the resource first), nodes
/// no end of theirs makes take one more left out; fewest jobs first, node order among equals.
///
/// Worked out node by node only as far as the search reads them: an option of one job is in
/// its final place as soon as it is found (every option of one job comes before every longer
/// one), so a search that ends on one-job options (the usual case) never looks at most nodes.
#[derive(Default)]
struct Options {
    /// How many of the place's nodes with holders (`Holdings::on_node`) have been looked at.
    looked: usize,
    /// The one-job options found so far, in node order.
    single: Vec<[usize; 1]>,
    /// The longer options found so far, in node order; once every node has been looked at,
    /// sorted by length (stable) and kept after `single`.
    longer: Vec<Vec<usize>>,
}

impl Options {
    /// The `o`th option, fewest jobs first, looking at further nodes as needed; `None` past
    /// the last.
    fn get(&mut self, session: &Session, search: &Search, o: usize) -> Option<&[usize]> {
        let holdings = search.holdings;
        while o >= self.single.len() && self.looked < holdings.on_node.len() {
            let (node, on) = &holdings.on_node[self.looked];
            self.looked += 1;
            let on = &holdings.on[on.start as usize..on.end as usize];
            match session.node_option(search, *node, on) {
                Some(ending) if ending.len() == 1 => self.single.push([ending[0]]),
                Some(ending) => self.longer.push(ending),
                None => {}
            }
            if self.looked == holdings.on_node.len() {
                // Stable: node order among options of as many jobs.
                self.longer.sort_by_key(Vec::len);
            }
        }
        match o.checked_sub(self.single.len()) {
            None => Some(&self.single[o]),
            Some(k) => self.longer.get(k).map(Vec::as_slice),
        }
    }
}

/// The tasks this cycle placed (committed allocations), per node and per task.
#[derive(Default)]
struct Placed {
    on: Map<NodeId, Vec<TaskId>>,
    at: Map<TaskId, NodeId>,
}

/// Who holds what on a set of nodes.
struct Holdings {
    nodes: Vec<NodeId>,
    /// Per node of the cluster, whether it is one of `nodes`.
    inside: Vec<bool>,
    free: Resources,
    jobs: Vec<Holder>,
    /// Per job (by id), its index in `jobs`; `NONE` when it holds nothing here.
    index: Vec<u32>,
    /// Per node with holders, in node order: the holders on it, a range of `on`.
    on_node: Vec<(NodeId, std::ops::Range<u32>)>,
    /// The holders (indices into `jobs`) of every node of `on_node`, node after node.
    on: Vec<u32>,
    /// The node of each task this cycle placed.
    placed_at: Map<TaskId, NodeId>,
}

/// What the search for jobs to end looks for: room for one more member of `request` on the
/// nodes of `holdings`, its holders ranked by `resource`.
#[derive(Clone, Copy)]
struct Search<'h> {
    holdings: &'h Holdings,
    request: &'h Resources,
    resource: ResourceId,
}

/// No holder index (see `Holdings::index`).
const NONE: u32 = u32::MAX;

impl Holdings {
    /// The job's index in `jobs`, when it holds something here.
    fn of(&self, job: JobId) -> Option<usize> {
        let i = self.index[job.index()];
        (i != NONE).then_some(i as usize)
    }
}

/// A place's largest holders of one resource, most first (indices into `Holdings::jobs`):
/// enough to list [`LISTED`] besides the job explained; and what each leaf queue holds of it
/// there, most first.
struct Ranked {
    jobs: Vec<usize>,
    queues: Vec<(QueueId, i64)>,
}

fn rank(snap: &crate::snapshot::Snapshot, holdings: &Holdings, resource: ResourceId) -> Ranked {
    let order = |a: &usize, b: &usize| {
        let (a, b) = (&holdings.jobs[*a], &holdings.jobs[*b]);
        (b.holds.get(resource).cmp(&a.holds.get(resource)))
            .then_with(|| snap.job(a.job).name.cmp(&snap.job(b.job).name))
    };
    // The first `LISTED + 1` in that order, as a stable sort would have them: one pass, no
    // sort of every holder (a later one equal to a kept one goes after it).
    let mut jobs: Vec<usize> = Vec::with_capacity(LISTED + 2);
    for i in 0..holdings.jobs.len() {
        if jobs.len() > LISTED && order(&i, &jobs[LISTED]).is_ge() {
            continue;
        }
        let at = jobs.partition_point(|j| order(j, &i).is_lt());
        jobs.insert(at, i);
        jobs.truncate(LISTED + 1);
    }
    let mut totals: Map<QueueId, i64> = Map::default();
    for h in &holdings.jobs {
        let held = totals.entry(snap.job(h.job).queue).or_default();
        *held = held.saturating_add(h.holds.get(resource));
    }
    let mut queues: Vec<(QueueId, i64)> = totals.into_iter().filter(|q| q.1 > 0).collect();
    sort_queues(snap, &mut queues);
    Ranked { jobs, queues }
}

/// Most first, then by name.
fn sort_queues(snap: &crate::snapshot::Snapshot, queues: &mut [(QueueId, i64)]) {
    queues.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| snap.queue(a.0).name.cmp(&snap.queue(b.0).name))
    });
}

/// A job holding capacity on a set of nodes: its tasks there are not listed (a table of every
/// running task would cost more than the searches that read a few); see `Session::held_tasks`.
struct Holder {
    job: JobId,
    holds: Resources,
}

impl Session<'_> {
    /// Fills in who holds the resource `e` is shortest of where the job could go, and, when
    /// nothing else explains the wait, the fewest running jobs whose end lets it start.
    pub(super) fn explain_holders(
        &mut self,
        kept: &mut PassKept,
        e: &mut Explanation,
        job: JobId,
        needed: &[TaskId],
        asked: &Resources,
        within: Option<DomainId>,
    ) {
        let snap = self.snapshot;
        let first = snap.task(needed[0]);
        let place = (first.rules, within);
        let holdings = self.holdings(&mut kept.holders, place);
        let Some(resource) = shortest(asked, &holdings.free) else {
            return;
        };
        let ranked = kept
            .holders
            .ranked
            .entry((place, resource))
            .or_insert_with(|| Arc::new(rank(snap, &holdings, resource)))
            .clone();
        let own = holdings.of(job).map(|i| &holdings.jobs[i]);
        let others = || {
            (ranked.jobs.iter().map(|&i| &holdings.jobs[i]))
                .filter(|h| h.job != job && h.holds.get(resource) > 0)
        };
        let names = &snap.resources;
        e.held_resource = Some(names.name(resource).to_string());
        e.held_by = others()
            .take(LISTED)
            .map(|h| Holding {
                name: snap.job(h.job).name.clone(),
                amount: names.format(resource, h.holds.get(resource)),
            })
            .collect();
        // The queues' totals, without what the job itself holds there (copied only then).
        let mut queues = std::borrow::Cow::Borrowed(&ranked.queues[..]);
        if let Some(own) = own {
            let queue = snap.job(job).queue;
            let queues = queues.to_mut();
            if let Some(q) = queues.iter_mut().find(|q| q.0 == queue) {
                q.1 = q.1.saturating_sub(own.holds.get(resource));
            }
            queues.retain(|q| q.1 > 0);
            sort_queues(snap, queues);
        }
        e.held_by_queues = (queues.iter().take(LISTED))
            .map(|&(q, amount)| Holding {
                name: snap.queue(q).name.as_str().into(),
                amount: names.format(resource, amount),
            })
            .collect();
        if e.unblock.is_some() || e.never_fits.is_some() || e.fit_now >= e.need {
            return;
        }
        let request = &first.request;
        let need = needed.len() as u64;
        let fits_now = *kept
            .holders
            .fits
            .entry((place, first.shape))
            .or_insert_with(|| {
                (holdings.nodes.iter())
                    .map(|&n| fit_count(&self.free(n), request, u64::MAX))
                    .fold(0, u64::saturating_add)
            });
        if fits_now >= need {
            // The room is there by resources: something else (devices, rules) decides.
            return;
        }
        let options = (kept.holders.options)
            .entry((place, first.shape, resource))
            .or_default();
        let search = Search {
            holdings: &holdings,
            request,
            resource,
        };
        e.unblock = Some(
            match self.jobs_to_end(&search, options, job, need, fits_now) {
                Some(ending) => Unblock::JobsEnd {
                    jobs: (ending.iter())
                        .map(|&i| snap.job(holdings.jobs[i].job).name.clone())
                        .collect(),
                },
                None => Unblock::NotSoon {
                    considered: CANDIDATES as u32,
                },
            },
        );
    }

    /// The jobs on `node` (holder indices, `on`) whose end lets it take one more member of
    /// `request`, its largest holders of `resource` first; `None` when no end of theirs does.
    fn node_option(&self, search: &Search, node: NodeId, on: &[u32]) -> Option<Vec<usize>> {
        let snap = self.snapshot;
        let Search {
            holdings,
            request,
            resource,
        } = *search;
        let mut free = self.free(node);
        let before = fit_count(&free, request, u64::MAX);
        let mut on: Vec<usize> = on.iter().map(|&i| i as usize).collect();
        on.sort_by_key(|&i| std::cmp::Reverse(holdings.jobs[i].holds.get(resource)));
        let mut ending = Vec::new();
        for i in on {
            for (_, t) in self
                .held_tasks(holdings, &holdings.jobs[i])
                .filter(|&(n, _)| n == node)
            {
                free.add(&snap.task(t).request);
            }
            ending.push(i);
            if fit_count(&free, request, u64::MAX) > before {
                return Some(ending);
            }
        }
        None
    }

    /// The holder indices of the fewest jobs found whose end makes room for `need` of
    /// `request`: node by node, the node whose end needs the fewest jobs not already ending,
    /// until the members fit; then each job dropped whose end the others make unnecessary.
    /// At most [`CANDIDATES`] jobs; `None` when those do not make room.
    fn jobs_to_end(
        &self,
        search: &Search,
        options: &mut Options,
        job: JobId,
        need: u64,
        fits_now: u64,
    ) -> Option<Vec<usize>> {
        let Search {
            holdings, request, ..
        } = *search;
        let mut free: Map<NodeId, Resources> = Map::default();
        let mut total = fits_now;
        let mut end = |session: &Session, h: &Holder, total: &mut u64, back: bool| {
            for (node, task) in session.held_tasks(holdings, h) {
                let f = free.entry(node).or_insert_with(|| session.free(node));
                let before = fit_count(f, request, u64::MAX);
                let r = &session.snapshot.task(task).request;
                if back {
                    f.sub(r);
                } else {
                    f.add(r);
                }
                let after = fit_count(f, request, u64::MAX);
                *total = total.saturating_add(after).saturating_sub(before);
            }
        };
        let own = holdings.of(job);
        let mut ending = vec![false; holdings.jobs.len()];
        let mut chosen: Vec<usize> = Vec::new();
        // Options are fewest jobs first: one needing `len` jobs needs at least `len` less
        // those already ending, so the scan stops once no later one can beat the best. An
        // option whose jobs all end already has made its room; one of the job's own is none.
        // Options are read (and worked out) only as far as the scan goes: `used` grows with it
        // (the scan reads them in order from the first, never skipping one).
        let mut used: Vec<bool> = Vec::new();
        let note = |used: &mut Vec<bool>, o: usize, jobs: &[usize]| {
            if used.len() == o {
                used.push(own.is_some_and(|own| jobs.contains(&own)));
            }
        };
        let mut start = 0;
        while total < need {
            while let Some(jobs) = options.get(self, search, start) {
                note(&mut used, start, jobs);
                if !used[start] {
                    break;
                }
                start += 1;
            }
            let mut best: Option<(usize, usize)> = None;
            let mut o = start;
            while let Some(jobs) = options.get(self, search, o) {
                note(&mut used, o, jobs);
                if best.is_some_and(|(b, _)| jobs.len() >= b + chosen.len()) {
                    break;
                }
                if !used[o] {
                    let new = jobs.iter().filter(|&&i| !ending[i]).count();
                    if new == 0 {
                        used[o] = true;
                    } else if best.is_none_or(|(b, _)| new < b) {
                        best = Some((new, o));
                        if new == 1 {
                            break;
                        }
                    }
                }
                o += 1;
            }
            let (_, o) = best?;
            used[o] = true;
            let jobs = options.get(self, search, o);
            for &i in jobs.expect("a picked option") {
                if !ending[i] {
                    ending[i] = true;
                    chosen.push(i);
                    end(self, &holdings.jobs[i], &mut total, false);
                }
            }
            if chosen.len() > CANDIDATES {
                return None;
            }
        }
        // Drop, latest first, the ends the others make unnecessary.
        for k in (0..chosen.len()).rev() {
            let h = &holdings.jobs[chosen[k]];
            end(self, h, &mut total, true);
            if total >= need {
                chosen.remove(k);
            } else {
                end(self, h, &mut total, false);
            }
        }
        Some(chosen)
    }

    /// The holder's tasks on the nodes of `holdings` (bound, or placed this cycle), with their
    /// nodes.
    fn held_tasks<'s>(
        &'s self,
        holdings: &'s Holdings,
        holder: &Holder,
    ) -> impl Iterator<Item = (NodeId, TaskId)> + 's {
        let placed = &holdings.placed_at;
        (self.snapshot.job(holder.job).tasks.iter()).filter_map(move |&t| {
            let node = match *self.jobs.status(t) {
                TaskStatus::Bound(node) => Some(node),
                _ => placed.get(&t).copied(),
            }?;
            holdings.inside[node.index()].then_some((node, t))
        })
    }

    fn holdings(&mut self, kept: &mut Kept, place: Where) -> Arc<Holdings> {
        if let Some(h) = kept.places.get(&place) {
            return h.clone();
        }
        let placed = kept.placed.get_or_insert_with(|| {
            let mut placed = Placed::default();
            for op in &self.committed {
                if let Op::Allocate { task, node, .. } = op {
                    placed.on.entry(*node).or_default().push(*task);
                    placed.at.insert(*task, *node);
                }
            }
            placed
        });
        let nodes = self.nodes_within(place.0, place.1);
        let snap = self.snapshot;
        let dims = snap.resources.len();
        let mut free = Resources::zero(dims);
        let mut inside = vec![false; snap.nodes.len()];
        let mut index = vec![NONE; snap.jobs.len()];
        let mut jobs: Vec<Holder> = Vec::new();
        // Built in `nodes` order without a map or a list per node or holder (this runs over
        // every running pod of the cluster), then put in node order.
        let mut on_node: Vec<(NodeId, std::ops::Range<u32>)> = Vec::new();
        let mut on: Vec<u32> = Vec::new();
        for &node in &nodes {
            inside[node.index()] = true;
            let raw = self.free(node);
            let mut f = raw.clone();
            for (id, v) in raw.iter() {
                f.set(id, v.max(0));
            }
            free.add(&f);
            // Jobs and shapes from the session's compact list and small tables, not the
            // tasks' records: this loop's cost is reading them.
            let bound = (self.node_tasks(node).iter().zip(self.node_task_kinds(node)))
                .filter(|(t, _)| *self.jobs.status(**t) == TaskStatus::Bound(node))
                .map(|(_, &kind)| kind);
            let here_placed = (placed.on.get(&node).into_iter().flatten())
                .map(|&t| (snap.task(t).job, snap.task(t).shape));
            let start = on.len();
            for (job, shape) in bound.chain(here_placed) {
                if index[job.index()] == NONE {
                    index[job.index()] = jobs.len() as u32;
                    jobs.push(Holder {
                        job,
                        holds: Resources::zero(dims),
                    });
                }
                let i = index[job.index()];
                // The shape's request is the task's.
                jobs[i as usize].holds.add(&snap.shapes[shape.0 as usize].1);
                if !on[start..].contains(&i) {
                    on.push(i);
                }
            }
            if on.len() > start {
                on_node.push((node, start as u32..on.len() as u32));
            }
        }
        if !on_node.is_sorted_by_key(|(n, _)| *n) {
            on_node.sort_by_key(|(n, _)| *n);
        }
        let h = Arc::new(Holdings {
            nodes,
            inside,
            free,
            jobs,
            index,
            on_node,
            on,
            placed_at: placed.at.clone(),
        });
        kept.places.insert(place, h.clone());
        h
    }
}

/// The resource `asked` is shortest of against `free` (the largest asked / free; one with
/// nothing free first), pod slots aside.
fn shortest(asked: &Resources, free: &Resources) -> Option<ResourceId> {
    (asked.iter())
        .filter(|&(id, v)| id != PODS && v > 0)
        .max_by(|&(a, va), &(b, vb)| {
            let (fa, fb) = (free.get(a).max(0) as i128, free.get(b).max(0) as i128);
            // va / fa against vb / fb, without dividing.
            (va as i128 * fb).cmp(&(vb as i128 * fa)).then(b.cmp(&a))
        })
        .map(|(id, _)| id)
}

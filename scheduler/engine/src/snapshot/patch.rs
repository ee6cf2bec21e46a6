//! The last snapshot brought up to date with the jobs that changed since, instead of assembled
//! anew: from one cycle to the next a replay or a watch changes a few jobs of thousands, and
//! assembling every task again costs a cache miss or more per pod.
//!
//! The result is the snapshot [`assemble`] would give, field by field: the jobs that changed
//! are rebuilt from their specs with the same helpers, the others are moved over with their ids
//! renumbered (one pass over tasks and jobs), node usage is patched by what the changed jobs
//! took and gave back (shared devices' usage too, device by device), and rules and shapes are
//! renumbered when the order they first appear in changed. Whatever the patch cannot reproduce
//! exactly — an error to report, a pod of another scheduler that changed, a GPU claim or a
//! shared device that depends on pod order (a bound pod that does not name its devices), MIG
//! slices, new nodes, resource names or queues — makes it decline, and the builder assembles
//! the snapshot anew.

use super::*;

/// Beyond this share of the jobs changed, assembling anew is as quick.
const MAX_CHANGED_SHARE: usize = 4;

/// Node usage being patched, with its total and the nodes it changed on.
struct Usage {
    nodes: NodeUsage,
    total: Resources,
    changed: Vec<NodeId>,
}

impl Usage {
    /// Puts what `h` holds on its node (`add`) or takes it off.
    fn charge(&mut self, h: &Holding, add: bool) {
        self.nodes.charge(h, add);
        match add {
            true => self.total.add(h.request),
            false => self.total.take_back(h.request),
        }
        self.changed.push(h.node);
    }
}

/// Whether `total` with every one of `added` on top stays short of `i64::MAX` in magnitude in
/// every resource: then no node's usage, nor any queue's (each a part of the total), saturates.
fn sums_stay_exact<'r>(total: &'r Resources, added: impl Iterator<Item = &'r Resources>) -> bool {
    let mut sum: Vec<i128> = Vec::new();
    for r in std::iter::once(total).chain(added) {
        for (id, v) in r.iter() {
            let i = id.0 as usize;
            if i >= sum.len() {
                sum.resize(i + 1, 0);
            }
            sum[i] += (v as i128).abs();
        }
    }
    sum.iter().all(|&s| s < i64::MAX as i128)
}

/// The snapshot the builder would assemble, patched from its last one, with the nodes whose
/// usage changed; `None` (with nothing changed) when that would not be exact or not quicker.
pub(super) fn patch(
    b: &mut SnapshotBuilder,
    now_ms: i64,
    queues: &[Queue],
) -> Option<(Snapshot, Vec<NodeId>)> {
    let names = b.facts_names.as_ref()?;
    let last = b.last.as_ref()?;
    let held = &b.held;
    if held.untracked
        || held.slashed
        || !b.claims_as_named
        || !b.dirty.is_empty()
        // MIG slices' usage is not patched (a slice a pod holds depends on every holder of
        // its node's).
        || !last.slice_used.is_empty()
        || last.resources != *names
        || last.queues != queues
        || held.changed_jobs.len() + held.changed_pinned.len()
            > (last.jobs.len() + b.pinned_uses.len()) / MAX_CHANGED_SHARE + 8
    {
        return None;
    }
    // Facts of the pods and groups that changed (the others kept theirs).
    let node_id = |n: &str| b.ids.get(n).copied();
    for (ns, job) in &held.changed_jobs {
        let key = (ns.clone(), job.clone());
        if let Some(c) = b.groups.get_mut(&key) {
            c.convert(names);
        }
        for pod in held.members_of(ns, job) {
            let c = b.pods.get_mut(&(ns.clone(), pod.clone()))?;
            c.convert(names, &node_id, &mut b.metas);
        }
    }
    for key in &held.changed_pinned {
        if let Some(c) = b.pods.get_mut(key) {
            c.convert(names, &node_id, &mut b.metas);
        }
    }
    let specs = Specs {
        held,
        pods: &b.pods,
        groups: &b.groups,
    };
    let changes = Changes::of(&specs, &b.pinned_uses, last, queues)?;

    // From here on nothing fails.
    let mut last = b.last.take()?;
    let old_jobs = std::mem::take(&mut last.jobs);
    let old_tasks = std::mem::take(&mut last.tasks);
    let ids = JobIds::of(&old_jobs, &changes.fresh, &changes.gone);
    let Changes {
        gone,
        pinned,
        fresh,
        shapes,
        shared,
    } = changes;
    let PatchedUsage {
        usage,
        queue_pinned,
        device_use,
        dropped,
    } = patch_usage(
        &mut last,
        (&old_jobs, &old_tasks),
        (&gone, &fresh, pinned, shared),
        &held.changed_pinned,
        &mut b.pinned_uses,
    );
    let mut spare = std::mem::take(&mut b.spare_tasks);
    let merged = merge_tasks(old_tasks, &mut spare, &dropped, &fresh, &ids);
    b.spare_tasks = spare;
    let (mut tasks, jobs) = merge_jobs(old_jobs, merged, &fresh, &gone, &ids);
    let (mut rules, mut shapes) = shapes.into_parts();
    renumber_by_first_use(&mut tasks, &mut rules, &mut shapes);
    // What depends on the nodes alone (and the pods of other schedulers, which did not
    // change) is the last snapshot's, written once by `assemble`.
    let snapshot = Snapshot {
        now_ms,
        tasks,
        jobs,
        queues: queues.to_vec(),
        rules,
        shapes,
        node_used: usage.nodes.used,
        node_gpus_used: usage.nodes.gpus,
        device_use,
        slice_used: Vec::new(),
        queue_pinned,
        used_total: usage.total,
        namespaces: b.namespaces.clone(),
        // The builder says which snapshot this is.
        lineage: Lineage::default(),
        ..last
    };
    Some((snapshot, usage.changed))
}

/// Node and queue usage, patched.
struct PatchedUsage {
    usage: Usage,
    queue_pinned: Vec<Resources>,
    device_use: Vec<DeviceUse>,
    /// Per old task, whether its job is gone.
    dropped: Vec<bool>,
}

/// The usage of `last` (less its tasks and jobs, `old`) patched: what the gone jobs and the
/// changed pinned pods (`changed_pinned`, with what they held in `pinned_uses`) held given
/// back, what the fresh versions take; `pinned_uses` brought up to date.
fn patch_usage(
    last: &mut Snapshot,
    (old_jobs, old_tasks): (&[Job], &[Task]),
    (gone, fresh, pinned, shared): (&[JobId], &[Fresh], PinnedChanges, devices::SharedDelta),
    changed_pinned: &BTreeSet<(String, String)>,
    pinned_uses: &mut HashMap<(String, String), PinnedUse>,
) -> PatchedUsage {
    let mut usage = Usage {
        nodes: NodeUsage {
            used: std::mem::take(&mut last.node_used),
            gpus: std::mem::take(&mut last.node_gpus_used),
        },
        total: std::mem::take(&mut last.used_total),
        changed: Vec::new(),
    };
    // Node usage: what the gone jobs and pinned pods held given back, what the fresh take.
    let mut dropped = vec![false; old_tasks.len()];
    for &j in gone {
        for &t in &old_jobs[j.index()].tasks {
            dropped[t.index()] = true;
            if let Some(h) = old_tasks[t.index()].holding() {
                usage.charge(&h, false);
            }
        }
    }
    for h in fresh
        .iter()
        .flat_map(|f| &f.members)
        .filter_map(Member::holding)
    {
        usage.charge(&h, true);
    }
    let mut queue_pinned = std::mem::take(&mut last.queue_pinned);
    for key in changed_pinned {
        if let Some(old) = pinned_uses.remove(key) {
            usage.charge(&old.holding(), false);
            old.charge_queue(&mut queue_pinned, false);
        }
    }
    for (key, new) in pinned {
        usage.charge(&new.holding(), true);
        new.charge_queue(&mut queue_pinned, true);
        pinned_uses.insert(key.clone(), new);
    }
    let mut device_use = std::mem::take(&mut last.device_use);
    shared.apply(&mut device_use);
    for &n in &usage.changed {
        devices::close_shared(
            &last.nodes[n.index()],
            &device_use,
            &mut usage.nodes.gpus[n.index()],
        );
    }
    PatchedUsage {
        usage,
        queue_pinned,
        device_use,
        dropped,
    }
}

/// The builder's specs a patch reads.
struct Specs<'b> {
    held: &'b HeldCounts,
    pods: &'b ConvertedMap<Arc<PodSpec>, PodFacts>,
    groups: &'b ConvertedMap<GroupSpec, GroupFacts>,
}

/// The changed pinned pods as they are now, by key.
type PinnedChanges<'b> = Vec<(&'b (String, String), PinnedUse)>;

/// What changed since the last snapshot, checked: every changed job and pinned pod as it is
/// now, and the old jobs to drop.
pub(super) struct Changes<'b> {
    /// The old versions of the changed jobs, in id order.
    pub(super) gone: Vec<JobId>,
    pub(super) pinned: PinnedChanges<'b>,
    /// By name.
    pub(super) fresh: Vec<Fresh<'b>>,
    pub(super) shapes: ShapeTable,
    /// Shared devices: what the gone jobs and pinned pods held given back, what the fresh take.
    pub(super) shared: devices::SharedDelta,
}

impl<'b> Changes<'b> {
    /// The changes (`pinned_uses`: what each pinned pod held in `last`), or `None` when
    /// patching them would not be exact.
    fn of(
        specs: &Specs<'b>,
        pinned_uses: &HashMap<(String, String), PinnedUse>,
        last: &Snapshot,
        queues: &[Queue],
    ) -> Option<Self> {
        let held = specs.held;
        // GPUs in use on the nodes the changed jobs touch, without the old versions' claims.
        let mut gpus_used: Map<NodeId, u64> = Map::default();
        let mut shared = devices::SharedDelta::default();
        let mut give_back = |h: Holding| {
            // Charged device by device: the patch does not follow.
            if h.held_differs {
                return None;
            }
            let used = (gpus_used.entry(h.node)).or_insert(last.node_gpus_used[h.node.index()]);
            *used &= !h.gpus;
            shared.charge(&last.nodes[h.node.index()], h.gpus, h.share, false);
            Some(())
        };
        let mut gone = Vec::new();
        for (ns, job) in &held.changed_jobs {
            let name = format!("{ns}/{job}");
            if let Ok(pos) = last.jobs.binary_search_by(|j| (*j.name).cmp(name.as_str())) {
                gone.push(JobId(pos as u32));
                for &t in &last.jobs[pos].tasks {
                    if let Some(h) = last.tasks[t.index()].holding() {
                        give_back(h)?;
                    }
                }
            }
        }
        for key in &held.changed_pinned {
            if let Some(old) = pinned_uses.get(key) {
                give_back(old.holding())?;
            }
        }
        let mut changes = Changes {
            gone,
            pinned: Vec::new(),
            fresh: Vec::new(),
            shapes: ShapeTable::with(last.rules.clone(), last.shapes.clone()),
            shared,
        };
        changes.fresh_versions(specs, last, queues, gpus_used)?;
        changes.gone.sort_unstable();
        changes.stays_exact(last).then_some(changes)
    }

    /// The changed pinned pods and jobs as they are now, checked, their GPUs claimed on
    /// `gpus_used`.
    fn fresh_versions(
        &mut self,
        specs: &Specs<'b>,
        last: &Snapshot,
        queues: &[Queue],
        mut gpus_used: Map<NodeId, u64>,
    ) -> Option<()> {
        let (held, lookup) = (specs.held, QueueLookup::new(queues));
        // A bound pod's GPUs, claimed; `None` unless they are the ones it names (only those
        // claims are the same in any pod order). Shared devices are charged below.
        let mut claim = |node: NodeId, spec: &PodSpec, facts: &PodFacts| {
            let n = &last.nodes[node.index()];
            let used = (gpus_used.entry(node)).or_insert(last.node_gpus_used[node.index()]);
            let shared = devices::node_usage(n, &last.device_use);
            let (mask, as_named) = claim_devices(n, used, shared, spec, facts);
            as_named.then_some(mask)
        };
        for key in &held.changed_pinned {
            let Some(c) = specs.pods.get(key) else {
                continue;
            };
            let (Some(queue), Some(facts)) = (&c.spec.pinned_queue, &c.facts) else {
                continue;
            };
            let node = bound_node(&c.spec, facts).ok()?;
            let gpus = claim(node?, &c.spec, facts)?;
            (self.pinned).push((key, PinnedUse::of(&lookup, queue, facts, node, gpus).ok()?));
        }
        for (ns, job) in &held.changed_jobs {
            let key = (ns.clone(), job.clone());
            let mut pods = Vec::new();
            for pod in held.members_of(ns, job) {
                let c = specs.pods.get(&(ns.clone(), pod.clone()))?;
                pods.push((&c.spec, c.facts.as_ref()?));
            }
            let group = specs.groups.get(&key);
            for (p, facts) in &pods {
                check_member(p, facts, group.is_some()).ok()?;
            }
            let draft = match (group, pods.as_slice()) {
                (Some(g), _) => JobDraft::of_group(&g.spec, g.facts.as_ref()?).ok()?,
                (None, []) => continue,
                // Without a group, its one member is the pod of its name.
                (None, &[(p, facts)]) => JobDraft::of_pod(p, facts),
                (None, _) => return None,
            };
            let mut job = Fresh {
                queue: draft.queue(&lookup).ok()?,
                draft,
                members: Vec::new(),
            };
            for (spec, facts) in pods {
                let node = bound_node(spec, facts).ok()?;
                let gpus = match node {
                    Some(n) => claim(n, spec, facts)?,
                    None => 0,
                };
                // Nodes with MIG slices are never patched: no member holds a slice.
                let member = Member::new((spec, facts), node, (gpus, 0), &mut self.shapes);
                job.members.push(member);
            }
            self.fresh.push(job);
        }
        // Jobs are ordered by `namespace/name`, tasks by (namespace, name).
        (self.fresh).sort_by(|a, c| a.draft.name.cmp(c.draft.name));
        Some(())
    }

    /// Whether the usage the changes patch stays exact: no sum saturates, no device holds
    /// different amounts, and shared devices' usage can be patched.
    fn stays_exact(&mut self, last: &Snapshot) -> bool {
        // Usage is patched by adding and taking back requests, exact only while no sum
        // saturates: past that, the snapshot is assembled anew.
        let members = (self.fresh.iter().flat_map(|f| &f.members)).filter_map(Member::holding);
        let pinned = self.pinned.iter().map(|(_, p)| p.holding());
        let taken: Vec<Holding> = members.chain(pinned).collect();
        if !sums_stay_exact(&last.used_total, taken.iter().map(|h| h.request)) {
            return false;
        }
        for h in &taken {
            if h.held_differs {
                return false;
            }
            (self.shared).charge(&last.nodes[h.node.index()], h.gpus, h.share, true);
        }
        self.shared.exact(&last.device_use)
    }
}

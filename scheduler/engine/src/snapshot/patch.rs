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

/// A pod of a job that changed, checked.
struct Member<'b> {
    spec: &'b PodSpec,
    facts: &'b PodFacts,
    node: Option<NodeId>,
    gpus: u64,
    rules: RulesId,
    shape: ShapeId,
}

/// A job that changed, as it is now, checked.
struct Fresh<'b> {
    draft: JobDraft<'b>,
    queue: QueueId,
    members: Vec<Member<'b>>,
}

/// Node usage being patched, with the nodes it changed on.
struct Usage {
    used: Vec<Resources>,
    total: Resources,
    gpus: Vec<u64>,
    changed: Vec<NodeId>,
}

impl Usage {
    /// Puts `request` and `gpus` on `node` (`add`) or takes them off.
    fn charge(&mut self, node: NodeId, request: &Resources, gpus: u64, add: bool) {
        let i = node.index();
        if add {
            self.used[i].add(request);
            self.total.add(request);
            self.gpus[i] |= gpus;
        } else {
            self.used[i].take_back(request);
            self.total.take_back(request);
            self.gpus[i] &= !gpus;
        }
        self.changed.push(node);
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
        for pod in held.members.get(&key).into_iter().flatten() {
            let c = b.pods.get_mut(&(ns.clone(), pod.clone()))?;
            c.convert(names, &node_id, &mut b.metas);
        }
    }
    for key in &held.changed_pinned {
        if let Some(c) = b.pods.get_mut(key) {
            c.convert(names, &node_id, &mut b.metas);
        }
    }

    // Check every changed job as it is now; find the old versions to drop.
    let lookup = QueueLookup::new(queues);
    let mut shapes = ShapeTable::with(last.rules.clone(), last.shapes.clone());
    // GPUs in use on the nodes the changed jobs touch, without the old versions' claims.
    let mut gpus_used: Map<NodeId, u64> = Map::default();
    let mut gone: Vec<JobId> = Vec::new();
    // Shared devices: what the gone jobs and pinned pods held given back, what the fresh take.
    let mut shared = devices::SharedDelta::default();
    for (ns, job) in &held.changed_jobs {
        let name = format!("{ns}/{job}");
        if let Ok(pos) = last.jobs.binary_search_by(|j| (*j.name).cmp(name.as_str())) {
            gone.push(JobId(pos as u32));
            for &t in &last.jobs[pos].tasks {
                let t = &last.tasks[t.index()];
                if let TaskState::Bound(node) = t.state {
                    // Charged device by device: the patch does not follow.
                    if t.held.is_some() {
                        return None;
                    }
                    let used = gpus_used
                        .entry(node)
                        .or_insert(last.node_gpus_used[node.index()]);
                    *used &= !t.gpus;
                    shared.charge(&last.nodes[node.index()], t.gpus, t.share, false);
                }
            }
        }
    }
    for key in &held.changed_pinned {
        if let Some(old) = b.pinned_uses.get(key) {
            if old.held_differs {
                return None;
            }
            let used = (gpus_used.entry(old.node)).or_insert(last.node_gpus_used[old.node.index()]);
            *used &= !old.gpus;
            shared.charge(&last.nodes[old.node.index()], old.gpus, old.share, false);
        }
    }
    // A bound pod's GPUs, claimed; `None` unless they are the ones it names (only those
    // claims are the same in any pod order). Shared devices are charged below.
    let mut claim = |node: NodeId, spec: &PodSpec, facts: &PodFacts| {
        let n = &last.nodes[node.index()];
        let want = devices_wanted(n, &facts.request);
        if n.sharing.shares() {
            return devices::named_shared(&n.gpus, &spec.held_devices, &spec.gpu_ids, want);
        }
        let used = (gpus_used.entry(node)).or_insert(last.node_gpus_used[node.index()]);
        let count = n.gpus.len();
        let (mask, as_named) = claim_gpus(used, count, &spec.gpu_ids, want);
        as_named.then_some(mask)
    };
    // Pinned pods as they are now, checked.
    let mut pinned: Vec<(&(String, String), PinnedUse)> = Vec::new();
    for key in &held.changed_pinned {
        let Some(c) = b.pods.get(key) else { continue };
        let (Some(queue), Some(facts)) = (&c.spec.pinned_queue, &c.facts) else {
            continue;
        };
        let node = bound_node(&c.spec, facts).ok()?;
        let gpus = claim(node?, &c.spec, facts)?;
        pinned.push((key, PinnedUse::of(&lookup, queue, facts, node, gpus).ok()?));
    }
    let mut fresh: Vec<Fresh> = Vec::new();
    for (ns, job) in &held.changed_jobs {
        let key = (ns.clone(), job.clone());
        let mut pods = Vec::new();
        for pod in held.members.get(&key).into_iter().flatten() {
            let c = b.pods.get(&(ns.clone(), pod.clone()))?;
            pods.push((&c.spec, c.facts.as_ref()?));
        }
        let draft = match (b.groups.get(&key), pods.as_slice()) {
            (Some(g), _) => {
                // A pod without a group named like the group is an error.
                if pods.iter().any(|(p, _)| p.group.is_none()) {
                    return None;
                }
                JobDraft::of_group(&g.spec, g.facts.as_ref()?).ok()?
            }
            (None, []) => continue,
            (None, &[(p, facts)]) if p.group.is_none() => JobDraft::of_pod(p, facts),
            // Pods that name a group that does not exist.
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
            let (rid, shape) = shapes.of(&spec.rules, &facts.request);
            job.members.push(Member {
                spec,
                facts,
                node,
                gpus,
                rules: rid,
                shape,
            });
        }
        fresh.push(job);
    }
    // Jobs are ordered by `namespace/name`, tasks by (namespace, name).
    fresh.sort_by(|a, c| a.draft.name.cmp(c.draft.name));
    gone.sort_unstable();

    // Usage is patched by adding and taking back requests, exact only while no sum saturates:
    // past that, the snapshot is assembled anew.
    let added = (fresh.iter().flat_map(|f| &f.members))
        .filter(|m| m.node.is_some())
        .map(|m| &m.facts.request)
        .chain(pinned.iter().map(|(_, p)| &p.request));
    if !sums_stay_exact(&last.used_total, added) {
        return None;
    }
    for m in fresh.iter().flat_map(|f| &f.members) {
        if let Some(n) = m.node {
            if m.facts.held_differs {
                return None;
            }
            shared.charge(&last.nodes[n.index()], m.gpus, m.facts.share, true);
        }
    }
    for (_, new) in &pinned {
        if new.held_differs {
            return None;
        }
        shared.charge(&last.nodes[new.node.index()], new.gpus, new.share, true);
    }
    if !shared.exact(&last.device_use) {
        return None;
    }

    // From here on nothing fails.
    let mut last = b.last.take()?;
    let old_jobs = std::mem::take(&mut last.jobs);
    let old_tasks = std::mem::take(&mut last.tasks);

    // New job ids: old jobs keep their order, less the gone, with the fresh merged in by name.
    let fresh_at: Vec<usize> = (fresh.iter())
        .map(|f| old_jobs.partition_point(|j| *j.name < **f.draft.name))
        .collect();
    let mut job_map = vec![u32::MAX; old_jobs.len()];
    let mut fresh_ids = Vec::with_capacity(fresh.len());
    {
        let (mut next, mut f, mut g) = (0u32, 0, 0);
        for (old, slot) in job_map.iter_mut().enumerate() {
            while f < fresh.len() && fresh_at[f] <= old {
                fresh_ids.push(JobId(next));
                (next, f) = (next + 1, f + 1);
            }
            if g < gone.len() && gone[g].index() == old {
                g += 1;
            } else {
                *slot = next;
                next += 1;
            }
        }
        for _ in f..fresh.len() {
            fresh_ids.push(JobId(next));
            next += 1;
        }
    }

    // Node usage: what the gone jobs and pinned pods held given back, what the fresh take.
    let mut usage = Usage {
        used: std::mem::take(&mut last.node_used),
        total: std::mem::take(&mut last.used_total),
        gpus: std::mem::take(&mut last.node_gpus_used),
        changed: Vec::new(),
    };
    let mut dropped = vec![false; old_tasks.len()];
    for &j in &gone {
        for &t in &old_jobs[j.index()].tasks {
            dropped[t.index()] = true;
            let t = &old_tasks[t.index()];
            if let TaskState::Bound(n) = t.state {
                usage.charge(n, &t.request, t.gpus, false);
            }
        }
    }
    for m in fresh.iter().flat_map(|f| &f.members) {
        if let Some(n) = m.node {
            usage.charge(n, &m.facts.request, m.gpus, true);
        }
    }
    let mut queue_pinned = std::mem::take(&mut last.queue_pinned);
    for key in &held.changed_pinned {
        if let Some(old) = b.pinned_uses.remove(key) {
            usage.charge(old.node, &old.request, old.gpus, false);
            queue_pinned[old.queue.index()].take_back(&old.request);
        }
    }
    for (key, new) in pinned {
        usage.charge(new.node, &new.request, new.gpus, true);
        queue_pinned[new.queue.index()].add(&new.request);
        b.pinned_uses.insert(key.clone(), new);
    }
    // A shared node's GPU mask is of the devices no pod can join, not of those held.
    let mut device_use = std::mem::take(&mut last.device_use);
    shared.apply(&mut device_use);
    for &n in &usage.changed {
        let node = &last.nodes[n.index()];
        if node.sharing.shares() {
            let base = node.device_base as usize;
            let slice = &device_use[base..base + node.gpus.len()];
            usage.gpus[n.index()] = devices::closed_devices(node, slice);
        }
    }

    // New tasks: the old ones less the gone jobs', with the fresh members merged in by name.
    let mut members: Vec<(usize, &Member<'_>)> = (fresh.iter().enumerate())
        .flat_map(|(f, job)| job.members.iter().map(move |m| (f, m)))
        .collect();
    fn pod_key(p: &PodSpec) -> (&str, &str) {
        (&p.namespace, &p.name)
    }
    members.sort_by(|a, c| pod_key(a.1.spec).cmp(&pod_key(c.1.spec)));
    // A task's name is `namespace/name` and namespaces hold no `/` (checked above).
    fn task_key(t: &Task) -> (&str, &str) {
        t.name.split_once('/').unwrap_or(("", &t.name))
    }
    let members_at: Vec<usize> = (members.iter())
        .map(|(_, m)| old_tasks.partition_point(|t| task_key(t) < pod_key(m.spec)))
        .collect();
    let mut task_map = vec![u32::MAX; old_tasks.len()];
    let mut fresh_tasks: Vec<Vec<TaskId>> = vec![Vec::new(); fresh.len()];
    // Fresh task -> its index in `members`.
    let mut fresh_member: Vec<(TaskId, usize)> = Vec::with_capacity(members.len());
    // Tasks before the first change keep their place and id (a replay's or an experiment's
    // arrivals sort last): only the rest is moved.
    let first_dropped = dropped.iter().position(|&d| d).unwrap_or(dropped.len());
    let kept_tasks = members_at
        .first()
        .map_or(first_dropped, |&at| at.min(first_dropped));
    let mut tasks = old_tasks;
    let mut spare = std::mem::take(&mut b.spare_tasks);
    spare.clear();
    spare.extend(tasks.drain(kept_tasks..));
    tasks.reserve(spare.len() + members.len());
    for (old, t) in tasks.iter_mut().enumerate() {
        task_map[old] = old as u32;
        t.job = JobId(job_map[t.job.index()]);
    }
    let mut add_member = |tasks: &mut Vec<Task>, k: usize| {
        let (f, m) = members[k];
        let id = TaskId(tasks.len() as u32);
        m.facts.slot.set(id.0);
        fresh_tasks[f].push(id);
        fresh_member.push((id, k));
        let refs = TaskRefs {
            id,
            name: m.facts.key.clone(),
            job: fresh_ids[f],
            rules: m.rules,
            shape: m.shape,
            node: m.node,
            gpus: m.gpus,
            // Nodes with MIG slices are never patched.
            slices: 0,
        };
        tasks.push(new_task(m.spec, m.facts, refs));
    };
    let mut next_member = 0;
    for (old, mut t) in (kept_tasks..).zip(spare.drain(..)) {
        while next_member < members.len() && members_at[next_member] <= old {
            add_member(&mut tasks, next_member);
            next_member += 1;
        }
        if dropped[old] {
            continue;
        }
        task_map[old] = tasks.len() as u32;
        t.id = TaskId(tasks.len() as u32);
        t.job = JobId(job_map[t.job.index()]);
        tasks.push(t);
    }
    for k in next_member..members.len() {
        add_member(&mut tasks, k);
    }
    b.spare_tasks = spare;

    // New jobs: the fresh built, the old renumbered.
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let labels_of = |t: TaskId| {
        (fresh_member.binary_search_by_key(&t, |&(id, _)| id))
            .map_or(&NO_LABELS, |i| &members[fresh_member[i].1].1.spec.labels)
    };
    // Jobs before the first change keep their place and id, as tasks do.
    let mut jobs = old_jobs;
    let first_gone = gone.first().map_or(jobs.len(), |g| g.index());
    let kept_jobs = fresh_at
        .first()
        .copied()
        .unwrap_or(jobs.len())
        .min(first_gone);
    let old_jobs: Vec<Job> = jobs.drain(kept_jobs..).collect();
    jobs.reserve(old_jobs.len() + fresh.len());
    let mut add_fresh = |jobs: &mut Vec<Job>, tasks: &mut Vec<Task>, f: usize| {
        let (job, members) = (&fresh[f], std::mem::take(&mut fresh_tasks[f]));
        jobs.push((job.draft).build(fresh_ids[f], job.queue, members, tasks, labels_of));
    };
    let renumber = |list: &mut Vec<TaskId>| {
        for t in list {
            *t = TaskId(task_map[t.index()]);
        }
    };
    for j in &mut jobs {
        renumber(&mut j.tasks);
        for sg in &mut j.sub_groups {
            renumber(&mut sg.tasks);
        }
    }
    let mut next_fresh = 0;
    for (old, mut j) in (kept_jobs..).zip(old_jobs) {
        while next_fresh < fresh.len() && fresh_at[next_fresh] <= old {
            add_fresh(&mut jobs, &mut tasks, next_fresh);
            next_fresh += 1;
        }
        if job_map[old] == u32::MAX {
            continue;
        }
        j.id = JobId(job_map[old]);
        renumber(&mut j.tasks);
        for sg in &mut j.sub_groups {
            renumber(&mut sg.tasks);
        }
        jobs.push(j);
    }
    for f in next_fresh..fresh.len() {
        add_fresh(&mut jobs, &mut tasks, f);
    }

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
        node_used: usage.used,
        node_gpus_used: usage.gpus,
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

/// Rules and shapes are numbered in the order tasks first use them (as [`assemble`] numbers
/// them); after a patch some may be unused or first used in another order: renumber them then.
fn renumber_by_first_use(
    tasks: &mut [Task],
    rules: &mut Vec<PlacementRules>,
    shapes: &mut Vec<(RulesId, Resources)>,
) {
    let mut rules_first = vec![u32::MAX; rules.len()];
    let mut shapes_first = vec![u32::MAX; shapes.len()];
    for (i, t) in tasks.iter().enumerate() {
        let r = &mut rules_first[t.rules.0 as usize];
        *r = (*r).min(i as u32);
        let s = &mut shapes_first[t.shape.0 as usize];
        *s = (*s).min(i as u32);
    }
    let numbered =
        |first: &[u32]| first.windows(2).all(|w| w[0] < w[1]) && !first.contains(&u32::MAX);
    if numbered(&rules_first) && numbered(&shapes_first) {
        return;
    }
    let rules_map = by_first_use(rules, &rules_first);
    let shapes_map = by_first_use(shapes, &shapes_first);
    for (r, _) in shapes.iter_mut() {
        *r = RulesId(rules_map[r.0 as usize]);
    }
    for t in tasks {
        t.rules = RulesId(rules_map[t.rules.0 as usize]);
        t.shape = ShapeId(shapes_map[t.shape.0 as usize]);
    }
}

/// Orders `items` by their first use (`first`; `u32::MAX`: unused, dropped) and returns each
/// old index's new one.
fn by_first_use<T>(items: &mut Vec<T>, first: &[u32]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..first.len()).filter(|&i| first[i] != u32::MAX).collect();
    order.sort_by_key(|&i| first[i]);
    let mut map = vec![u32::MAX; first.len()];
    for (new, &old) in order.iter().enumerate() {
        map[old] = new as u32;
    }
    let mut old: Vec<Option<T>> = std::mem::take(items).into_iter().map(Some).collect();
    *items = order.iter().filter_map(|&i| old[i].take()).collect();
    map
}

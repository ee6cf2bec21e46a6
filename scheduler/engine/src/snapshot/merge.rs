//! The tasks and jobs of a patched snapshot: the last snapshot's, less the changed jobs' old
//! versions and renumbered, with the fresh versions merged in by name (see `patch.rs`).

use super::*;

/// A job that changed, as it is now, checked.
pub(super) struct Fresh<'b> {
    pub(super) draft: JobDraft<'b>,
    pub(super) queue: QueueId,
    pub(super) members: Vec<Member<'b>>,
}

/// New job ids: old jobs keep their order, less the gone, with the fresh merged in by name.
pub(super) struct JobIds {
    /// Per fresh job, the position among the old jobs it comes before.
    fresh_at: Vec<usize>,
    /// Per old job, its new id (`u32::MAX`: gone).
    job_map: Vec<u32>,
    fresh_ids: Vec<JobId>,
}

impl JobIds {
    pub(super) fn of(old_jobs: &[Job], fresh: &[Fresh], gone: &[JobId]) -> Self {
        let fresh_at: Vec<usize> = (fresh.iter())
            .map(|f| old_jobs.partition_point(|j| *j.name < **f.draft.name))
            .collect();
        let mut job_map = vec![u32::MAX; old_jobs.len()];
        let mut fresh_ids = Vec::with_capacity(fresh.len());
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
        JobIds {
            fresh_at,
            job_map,
            fresh_ids,
        }
    }
}

/// The tasks of a patched snapshot, and what its jobs need of them.
pub(super) struct MergedTasks<'f, 'b> {
    tasks: Vec<Task>,
    /// Per old task, its new id (`u32::MAX`: dropped).
    task_map: Vec<u32>,
    /// Per fresh job, its members' new ids.
    fresh_tasks: Vec<Vec<TaskId>>,
    /// The fresh members (fresh job, member) by pod name.
    members: Vec<(usize, &'f Member<'b>)>,
    /// Fresh task -> its index in `members`.
    fresh_member: Vec<(TaskId, usize)>,
}

/// New tasks: the old ones less the `dropped`, with the fresh members merged in by name
/// (`spare` is the vector to move them through).
pub(super) fn merge_tasks<'f, 'b>(
    old_tasks: Vec<Task>,
    spare: &mut Vec<Task>,
    dropped: &[bool],
    fresh: &'f [Fresh<'b>],
    ids: &JobIds,
) -> MergedTasks<'f, 'b> {
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
    let mut fresh_member: Vec<(TaskId, usize)> = Vec::with_capacity(members.len());
    // Tasks before the first change keep their place and id (a replay's or an experiment's
    // arrivals sort last): only the rest is moved.
    let first_dropped = dropped.iter().position(|&d| d).unwrap_or(dropped.len());
    let kept_tasks = members_at
        .first()
        .map_or(first_dropped, |&at| at.min(first_dropped));
    let mut tasks = old_tasks;
    spare.clear();
    spare.extend(tasks.drain(kept_tasks..));
    tasks.reserve(spare.len() + members.len());
    let job_map = &ids.job_map;
    for (old, t) in tasks.iter_mut().enumerate() {
        task_map[old] = old as u32;
        t.job = JobId(job_map[t.job.index()]);
    }
    let mut add_member = |tasks: &mut Vec<Task>, k: usize| {
        let (f, m) = members[k];
        let id = TaskId(tasks.len() as u32);
        fresh_tasks[f].push(id);
        fresh_member.push((id, k));
        tasks.push(m.task(id, ids.fresh_ids[f], m.facts.key.clone()));
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
    MergedTasks {
        tasks,
        task_map,
        fresh_tasks,
        members,
        fresh_member,
    }
}

/// New jobs: the fresh built, the old renumbered; and the tasks, their sub-groups recorded.
pub(super) fn merge_jobs(
    old_jobs: Vec<Job>,
    merged: MergedTasks,
    fresh: &[Fresh],
    gone: &[JobId],
    ids: &JobIds,
) -> (Vec<Task>, Vec<Job>) {
    let MergedTasks {
        mut tasks,
        task_map,
        mut fresh_tasks,
        members,
        fresh_member,
    } = merged;
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let labels_of = |t: TaskId| {
        (fresh_member.binary_search_by_key(&t, |&(id, _)| id))
            .map_or(&NO_LABELS, |i| &members[fresh_member[i].1].1.spec.labels)
    };
    let (fresh_at, job_map) = (&ids.fresh_at, &ids.job_map);
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
        jobs.push((job.draft).build(ids.fresh_ids[f], job.queue, members, tasks, labels_of));
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
    (tasks, jobs)
}

/// Rules and shapes are numbered in the order tasks first use them (as [`assemble`] numbers
/// them); after a patch some may be unused or first used in another order: renumber them then.
pub(super) fn renumber_by_first_use(
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

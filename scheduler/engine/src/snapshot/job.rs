//! One task from its pod, one job from its group and members: what a full build and a patch
//! both write.

use std::borrow::Cow;

use super::*;

/// A job as its specs give it, before its queue and members are resolved: a PodGroup's, or the
/// gang of one of a pod of ours without one. A full build and a patch both draft jobs here.
pub(super) struct JobDraft<'s> {
    pub(super) spec: Cow<'s, GroupSpec>,
    /// `namespace/name`.
    pub(super) name: &'s Arc<str>,
    pub(super) min_resources: Option<&'s Resources>,
    pub(super) implicit: bool,
}

impl<'s> JobDraft<'s> {
    /// A PodGroup's job, its spec checked.
    pub(super) fn of_group(g: &'s GroupSpec, facts: &'s GroupFacts) -> Result<Self, SnapshotError> {
        check_group(g, &facts.key)?;
        Ok(JobDraft {
            spec: Cow::Borrowed(g),
            name: &facts.key,
            min_resources: facts.min_resources.as_ref(),
            implicit: false,
        })
    }

    /// The job of a pod of ours without a PodGroup: a gang of one, in its queue.
    pub(super) fn of_pod(p: &PodSpec, facts: &'s PodFacts) -> Self {
        let spec = GroupSpec {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            queue: p.queue.clone(),
            min_member: 1,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: Some(p.priority),
            created_ms: p.created_ms,
            phase: JobPhase::Pending,
            topology: TopologySpec::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        };
        JobDraft {
            spec: Cow::Owned(spec),
            name: &facts.key,
            min_resources: None,
            implicit: true,
        }
    }

    pub(super) fn key(&self) -> JobKey<'_> {
        JobKey(&self.spec.namespace, &self.spec.name)
    }

    /// The job's queue: it must exist and be a leaf.
    pub(super) fn queue(&self, queues: &QueueLookup) -> Result<QueueId, SnapshotError> {
        job_queue(queues, &self.spec, self.name)
    }

    /// The job, `id` in `queue`, with its members `task_ids` (ordered here, sub-groups formed
    /// and recorded on `tasks`); `labels` gives a member's pod labels.
    pub(super) fn build<'l>(
        &self,
        id: JobId,
        queue: QueueId,
        mut task_ids: Vec<TaskId>,
        tasks: &mut [Task],
        labels: impl Fn(TaskId) -> &'l BTreeMap<String, String>,
    ) -> Job {
        let g = &*self.spec;
        // Rank order (pods without a rank last, by name): consecutive ranks are placed together.
        task_ids.sort_by_key(|t| (tasks[t.index()].rank.is_none(), tasks[t.index()].rank, *t));
        let sub_groups = form_sub_groups(&g.sub_groups, &task_ids, labels, tasks);
        let priority = g.priority.unwrap_or_else(|| {
            task_ids
                .iter()
                .map(|t| tasks[t.index()].priority)
                .max()
                .unwrap_or(0)
        });
        Job {
            id,
            name: Arc::clone(self.name),
            queue,
            // Counts beyond u32 can never be met, as u32::MAX cannot: saturate, never wrap.
            min_member: u32::try_from(g.min_member).unwrap_or(u32::MAX),
            min_task_member: g
                .min_task_member
                .iter()
                .map(|(k, &v)| (k.clone(), u32::try_from(v).unwrap_or(u32::MAX)))
                .collect(),
            min_resources: self.min_resources.cloned(),
            priority,
            created_ms: g.created_ms,
            phase: g.phase,
            tasks: task_ids,
            implicit: self.implicit,
            topology: g.topology.clone(),
            sub_groups,
            sub_group_policies: g
                .sub_groups
                .iter()
                .map(|sg| SubGroupPolicy {
                    name: sg.name.clone(),
                    min_sub_groups: sg.min_sub_groups,
                })
                .collect(),
            schedule_timeout_ms: g.schedule_timeout_ms.filter(|&t| t > 0),
        }
    }
}

/// What a pinned pod holds, on its node and for its queue.
#[derive(Clone, Debug)]
pub(super) struct PinnedUse {
    pub(super) node: NodeId,
    pub(super) queue: QueueId,
    pub(super) request: Resources,
    pub(super) gpus: u64,
    /// What it takes of each of `gpus` on a node that shares them.
    pub(super) share: Option<crate::devices::ShareAsk>,
    /// Its devices hold different amounts (see [`Task::held`]).
    pub(super) held_differs: bool,
}

/// A pod of ours as a member of its job: where it is bound and what it holds there, its rules
/// and shape. A full build and a patch both make its task here ([`Member::task`]).
pub(super) struct Member<'b> {
    pub(super) spec: &'b PodSpec,
    pub(super) facts: &'b PodFacts,
    pub(super) node: Option<NodeId>,
    /// The devices and MIG slices it holds on `node`.
    pub(super) gpus: u64,
    pub(super) slices: u64,
    pub(super) rules: RulesId,
    pub(super) shape: ShapeId,
}

impl<'b> Member<'b> {
    /// Pod `spec` bound to `node` (if any) holding `gpus` and `slices` there, its rules and
    /// shape numbered in `shapes`.
    pub(super) fn new(
        (spec, facts): (&'b PodSpec, &'b PodFacts),
        node: Option<NodeId>,
        (gpus, slices): (u64, u64),
        shapes: &mut ShapeTable,
    ) -> Self {
        let (rules, shape) = shapes.of(&spec.rules, &facts.request);
        Member {
            spec,
            facts,
            node,
            gpus,
            slices,
            rules,
            shape,
        }
    }

    /// Its task, `id` of `job`, named `name` (its pod's key, or the same name taken from the
    /// last snapshot's task); its pod's facts remember the task's place (see [`Buffers`]).
    pub(super) fn task(&self, id: TaskId, job: JobId, name: Arc<str>) -> Task {
        let (p, facts) = (self.spec, self.facts);
        facts.slot.set(id.0);
        let state = match (p.phase, self.node) {
            (PodPhase::Succeeded, _) => TaskState::Succeeded,
            (PodPhase::Failed, _) => TaskState::Failed,
            (_, Some(n)) => TaskState::Bound(n),
            (_, None) => TaskState::Pending,
        };
        // Only a pending pod is held: a bound one cannot have gates (the API server refuses the
        // binding and forbids adding gates later), and one bound with claims counts as usual.
        let hold = match state {
            TaskState::Pending if !p.scheduling_gates.is_empty() => {
                Some(Hold::Gated(p.scheduling_gates.clone()))
            }
            TaskState::Pending if !p.waits.is_empty() => Some(held_for(&p.waits)),
            _ => None,
        };
        Task {
            id,
            name,
            job,
            role: p.role.clone(),
            request: facts.request.clone(),
            rules: self.rules,
            shape: self.shape,
            priority: p.priority,
            state,
            gpus: self.gpus,
            slices: self.slices,
            share: facts.share,
            containers: match state {
                TaskState::Pending => facts.containers.clone(),
                _ => None,
            },
            held: match state {
                TaskState::Bound(_) if devices::held_differs(&p.held_devices) => {
                    Some(p.held_devices.as_slice().into())
                }
                _ => None,
            },
            // A nomination to a node that is gone is simply dropped, and a held pod holds nothing.
            nominated: match self.node {
                None if p.phase == PodPhase::Pending && hold.is_none() => facts.nominated,
                _ => None,
            },
            non_preemptable: p.non_preemptable,
            preemption_never: p.preemption_never,
            created_ms: p.created_ms,
            started_ms: p.started_ms,
            active_deadline_s: p.active_deadline_s,
            rank: p.rank,
            claims: p.claims.iter().map(|c| Arc::from(c.as_str())).collect(),
            sub_group: None,
            hold,
            constraints: p.constraints.clone(),
            meta: facts.meta.clone(),
        }
    }
}

/// The hold for a pod's waits: what it does not understand first (nothing else about it can be
/// trusted), then its volumes.
pub(super) fn held_for(waits: &[Wait]) -> Hold {
    let unsupported: Vec<String> = (waits.iter())
        .filter_map(|w| match w {
            Wait::Unsupported { field, message } => Some(format!("{field}: {message}")),
            _ => None,
        })
        .collect();
    if !unsupported.is_empty() {
        return Hold::Unsupported(unsupported);
    }
    let volumes: Vec<String> = (waits.iter())
        .filter_map(|w| match w {
            Wait::Volume(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    if !volumes.is_empty() {
        return Hold::Volumes(volumes);
    }
    Hold::Claims(
        (waits.iter())
            .filter_map(|w| match w {
                Wait::Claim(m) => Some(m.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// Splits a gang's members into sub-groups: each member goes to the first spec that claims it
/// (its selector, if any, must match; then one with label keys claims the members carrying all
/// of them, grouped by their values; one without claims the rest, cut into blocks of `size` in
/// rank order). Records each member's sub-group on its task.
pub(super) fn form_sub_groups<'l>(
    specs: &[SubGroupSpec],
    members: &[TaskId],
    labels: impl Fn(TaskId) -> &'l BTreeMap<String, String>,
    tasks: &mut [Task],
) -> Vec<SubGroup> {
    let mut groups: Vec<SubGroup> = Vec::new();
    let mut free: Vec<TaskId> = members.to_vec();
    for (policy, spec) in specs.iter().enumerate() {
        let policy = policy as u32;
        let mut claimed: BTreeMap<Vec<&str>, Vec<TaskId>> = BTreeMap::new();
        let mut rest = Vec::new();
        for &t in &free {
            let l = labels(t);
            let selected = spec
                .selector
                .iter()
                .all(|r| r.matches(l.get(&r.key).map(String::as_str)));
            // Volcano skips a key whose value is empty, as if the pod lacked it.
            let values: Option<Vec<&str>> = selected
                .then(|| {
                    spec.match_label_keys
                        .iter()
                        .map(|k| l.get(k).map(String::as_str).filter(|v| !v.is_empty()))
                        .collect()
                })
                .flatten();
            match values {
                Some(v) if !spec.match_label_keys.is_empty() => {
                    claimed.entry(v).or_default().push(t)
                }
                Some(_) => claimed.entry(Vec::new()).or_default().push(t),
                None => rest.push(t),
            }
        }
        for (values, ts) in claimed {
            if values.is_empty() {
                for (i, block) in ts.chunks(spec.size as usize).enumerate() {
                    groups.push(SubGroup {
                        name: format!("{}-{i}", spec.name),
                        topology: spec.topology.clone(),
                        tasks: block.to_vec(),
                        policy,
                        min_member: block.len() as u32,
                    });
                }
            } else {
                groups.push(SubGroup {
                    name: format!("{}-{}", spec.name, values.join(",")),
                    topology: spec.topology.clone(),
                    tasks: ts,
                    policy,
                    // As Volcano: a sub-group with fewer pods than its size is never complete.
                    min_member: spec.size,
                });
            }
        }
        free = rest;
    }
    for (i, g) in groups.iter().enumerate() {
        for &t in &g.tasks {
            tasks[t.index()].sub_group = Some(i as u32);
        }
    }
    groups
}

/// Placement rules and shapes, numbered in the order tasks first use them: what a full build
/// fills and a patch extends.
#[derive(Default)]
pub(super) struct ShapeTable {
    rules: Vec<PlacementRules>,
    rules_ids: Map<PlacementRules, RulesId>,
    shapes: Vec<(RulesId, Resources)>,
    shape_ids: Map<(RulesId, Resources), ShapeId>,
    /// The last rules and shape given: most pods share them with the pod before (a gang's
    /// members come one after another), so only new ones are hashed and cloned.
    last: Option<(RulesId, ShapeId)>,
}

impl ShapeTable {
    /// The table of an earlier snapshot's rules and shapes, to extend.
    pub(super) fn with(rules: Vec<PlacementRules>, shapes: Vec<(RulesId, Resources)>) -> Self {
        ShapeTable {
            rules_ids: (rules.iter().cloned()).zip((0..).map(RulesId)).collect(),
            shape_ids: (shapes.iter().cloned()).zip((0..).map(ShapeId)).collect(),
            rules,
            shapes,
            last: None,
        }
    }

    /// The ids of `rules` and of the shape (`rules`, `request`), numbered anew when first seen.
    pub(super) fn of(&mut self, rules: &PlacementRules, request: &Resources) -> (RulesId, ShapeId) {
        let rid = match self.last {
            Some((id, _)) if self.rules[id.0 as usize] == *rules => id,
            _ => match self.rules_ids.get(rules) {
                Some(&id) => id,
                None => {
                    let id = RulesId(self.rules.len() as u32);
                    self.rules.push(rules.clone());
                    self.rules_ids.insert(rules.clone(), id);
                    id
                }
            },
        };
        let shape = match self.last {
            Some((_, id))
                if (self.shapes[id.0 as usize].0, &self.shapes[id.0 as usize].1)
                    == (rid, request) =>
            {
                id
            }
            _ => {
                let key = (rid, request.clone());
                match self.shape_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = ShapeId(self.shapes.len() as u32);
                        self.shapes.push(key.clone());
                        self.shape_ids.insert(key, id);
                        id
                    }
                }
            }
        };
        self.last = Some((rid, shape));
        (rid, shape)
    }

    pub(super) fn into_parts(self) -> (Vec<PlacementRules>, Vec<(RulesId, Resources)>) {
        (self.rules, self.shapes)
    }
}

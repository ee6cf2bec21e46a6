//! PodGroups and Queues to the engine's group and queue specs: a group's queue (its own, its
//! namespace's, or `default`), phase, topology requirement and sub-groups; a queue's weight,
//! guarantee, capability and state.

use super::*;

pub(super) fn group(
    cx: &Cx,
    g: &PodGroup,
    context: &Context,
    warnings: &mut Vec<String>,
) -> Result<GroupSpec, ConvertError> {
    let priorities = &context.priorities;
    let name = cx.name(&g.metadata)?.to_string();
    let s = &g.spec;
    let min_resources = match s.min_resources.is_empty() {
        true => None,
        false => Some(cx.resources("spec.minResources", &s.min_resources)?),
    };
    // No class means no group priority: the engine then takes the highest of its pods. A class
    // that does not exist gets the default priority, as in Volcano (a warning, not an error:
    // the group is legal and its pods carry their own priorities).
    let priority = match s.priority_class_name.as_deref() {
        Some(class) if !class.is_empty() => Some(
            priorities
                .lookup(cx, "spec.priorityClassName", class)
                .unwrap_or_else(|e| {
                    let default = priorities.global_default.unwrap_or(0);
                    warnings.push(cx.warning(
                        &e.field,
                        format!("{}; the default priority {default} is used", e.message),
                    ));
                    default
                }),
        ),
        _ => None,
    };
    Ok(GroupSpec {
        namespace: namespace(&g.metadata),
        name,
        queue: (s.queue.clone().filter(|q| !q.is_empty())).or_else(|| {
            context
                .namespace_queue(&namespace(&g.metadata))
                .map(str::to_string)
        }),
        // Widened as is: the engine rejects a negative minMember with its own message.
        min_member: i64::from(s.min_member),
        min_task_member: s
            .min_task_member
            .iter()
            .map(|(k, &v)| (k.clone(), i64::from(v)))
            .collect(),
        min_resources,
        priority,
        created_ms: created_ms(&g.metadata),
        phase: g
            .status
            .as_ref()
            .map_or(JobPhase::Pending, |st| job_phase(st.phase)),
        topology: topology(cx, "spec.topology", &s.topology)?,
        sub_groups: sub_groups(cx, &s.sub_groups)?,
        schedule_timeout_ms: match s.schedule_timeout_seconds {
            Some(t) if t < 1 => {
                let message = format!("must be at least 1, got {t}");
                return Err(cx.err("spec.scheduleTimeoutSeconds", message));
            }
            t => t.map(|t| i64::from(t) * 1000),
        },
    })
}

fn topology(
    cx: &Cx,
    field: &str,
    t: &TopologyConstraint,
) -> Result<basalt_engine::TopologySpec, ConvertError> {
    for (name, tier) in [("required", &t.required), ("preferred", &t.preferred)] {
        if tier.as_deref() == Some("") {
            return Err(cx.err(format!("{field}.{name}"), "must name a tier, not be empty"));
        }
    }
    Ok(basalt_engine::TopologySpec {
        required: t.required.clone(),
        preferred: t.preferred.clone(),
    })
}

fn sub_groups(
    cx: &Cx,
    groups: &[crate::types::SubGroup],
) -> Result<Vec<basalt_engine::SubGroupSpec>, ConvertError> {
    let mut out: Vec<basalt_engine::SubGroupSpec> = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let at = format!("spec.subGroups[{i}]");
        if g.name.is_empty() {
            return Err(cx.err(format!("{at}.name"), "must not be empty"));
        }
        if let Some(first) = out.iter().position(|o| o.name == g.name) {
            return Err(cx.err(
                format!("{at}.name"),
                format!(
                    "duplicate sub-group name {:?} (also spec.subGroups[{first}])",
                    g.name
                ),
            ));
        }
        let size = u32::try_from(g.size)
            .ok()
            .filter(|&s| s >= 1)
            .ok_or_else(|| {
                cx.err(
                    format!("{at}.size"),
                    format!("must be at least 1, got {}", g.size),
                )
            })?;
        if let Some(j) = g.match_label_keys.iter().position(String::is_empty) {
            return Err(cx.err(format!("{at}.matchLabelKeys[{j}]"), "must not be empty"));
        }
        let min_sub_groups = u32::try_from(g.min_sub_groups).map_err(|_| {
            cx.err(
                format!("{at}.minSubGroups"),
                format!("must not be negative, got {}", g.min_sub_groups),
            )
        })?;
        let selector = match &g.label_selector {
            Some(s) => selector_requirements(cx, &format!("{at}.labelSelector"), s)?,
            None => Vec::new(),
        };
        out.push(basalt_engine::SubGroupSpec {
            name: g.name.clone(),
            size,
            match_label_keys: g.match_label_keys.clone(),
            selector,
            min_sub_groups,
            topology: topology(cx, &format!("{at}.topology"), &g.topology)?,
        });
    }
    Ok(out)
}

pub(super) fn queue(cx: &Cx, q: &Queue) -> Result<QueueSpec, ConvertError> {
    let name = cx.name(&q.metadata)?.to_string();
    // A parent of `root` means the top of the tree, so a queue of that name could never be
    // anyone's parent, and naming it would make a cycle the engine cannot see.
    if name == ROOT_QUEUE {
        return Err(cx.err(
            "metadata.name",
            "root is reserved: it names the implicit top of the queue tree",
        ));
    }
    let s = &q.spec;
    // Checked here rather than left to the engine, so that children learn why it is invalid.
    if s.weight == 0 {
        return Err(cx.err("spec.weight", "must be at least 1"));
    }
    let list = |field: &str,
                l: &BTreeMap<String, Quantity>|
     -> Result<Option<ResourceList>, ConvertError> {
        if l.is_empty() {
            Ok(None)
        } else {
            cx.resources(field, l).map(Some)
        }
    };
    Ok(QueueSpec {
        name,
        parent: s.parent.clone(),
        weight: s.weight,
        capability: list("spec.capability", &s.capability)?,
        guarantee: list("spec.guarantee", &s.guarantee)?,
        deserved: list("spec.deserved", &s.deserved)?,
        reclaimable: s.reclaimable,
        priority: s.priority,
        // The administrator's spec.state wins over the state the scheduler last reported.
        state: queue_state(
            (s.state)
                .or_else(|| q.status.as_ref().map(|st| st.state))
                .unwrap_or_default(),
        ),
    })
}

fn job_phase(p: PodGroupPhase) -> JobPhase {
    match p {
        PodGroupPhase::Pending => JobPhase::Pending,
        PodGroupPhase::Inqueue => JobPhase::Inqueue,
        PodGroupPhase::Running => JobPhase::Running,
        PodGroupPhase::Unknown => JobPhase::Unknown,
        PodGroupPhase::Completed => JobPhase::Completed,
    }
}

fn queue_state(s: crate::types::QueueState) -> basalt_engine::QueueState {
    use crate::types::QueueState as Q;
    match s {
        Q::Open => basalt_engine::QueueState::Open,
        Q::Closing => basalt_engine::QueueState::Closing,
        Q::Closed => basalt_engine::QueueState::Closed,
    }
}

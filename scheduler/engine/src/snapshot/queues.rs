//! Queues resolved from their specs, and the resource names the workload states.

use super::*;

/// Resource names the pods, groups and queues use (the nodes' are added by the caller).
pub(super) fn workload_resource_names<'a>(
    pods: &[&'a PodSpec],
    groups: &[&'a GroupSpec],
    queues: &'a [QueueSpec],
) -> Vec<&'a str> {
    // Few distinct names over many lists: a linear check beats a set.
    let mut all: Vec<&str> = Vec::new();
    let mut add = |list: &'a ResourceList| {
        for k in list.keys() {
            if !all.contains(&k.as_str()) {
                all.push(k);
            }
        }
    };
    for p in pods {
        add(&p.request);
    }
    for g in groups {
        if let Some(r) = &g.min_resources {
            add(r);
        }
    }
    for q in queues {
        for list in [&q.capability, &q.guarantee, &q.deserved]
            .into_iter()
            .flatten()
        {
            add(list);
        }
    }
    all
}

/// Whether a job lands in the `default` queue (a group naming no queue, or a pod of ours
/// without a group).
pub(super) fn needs_default_queue<'a>(
    mut groups: impl Iterator<Item = &'a GroupSpec>,
    mut pods: impl Iterator<Item = &'a PodSpec>,
) -> bool {
    groups.any(Held::uses_default_queue) || pods.any(Held::uses_default_queue)
}

/// Resolves queues: adds `default` when a job needs it and none is declared, checks parents and
/// rejects cycles.
pub(super) fn build_queues(
    names: &ResourceNames,
    specs: &mut Vec<QueueSpec>,
    needs_default: bool,
) -> Result<Vec<Queue>, SnapshotError> {
    if needs_default && !specs.iter().any(|q| q.name == DEFAULT_QUEUE) {
        specs.push(QueueSpec::new(DEFAULT_QUEUE));
        specs.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut ids: HashMap<&str, QueueId> = HashMap::new();
    for (i, q) in specs.iter().enumerate() {
        if ids.insert(q.name.as_str(), QueueId(i as u32)).is_some() {
            return Err(err(
                "Queue",
                &q.name,
                "metadata.name",
                "duplicate queue".into(),
            ));
        }
    }
    let mut out = Vec::with_capacity(specs.len());
    for (i, q) in specs.iter().enumerate() {
        let parent = match q.parent.as_deref() {
            None | Some("root") | Some("") => None,
            Some(p) => Some(*ids.get(p).ok_or_else(|| {
                err(
                    "Queue",
                    &q.name,
                    "spec.parent",
                    format!("names queue {p}, which does not exist"),
                )
            })?),
        };
        if q.weight == 0 {
            return Err(err(
                "Queue",
                &q.name,
                "spec.weight",
                "must be at least 1".into(),
            ));
        }
        out.push(Queue {
            id: QueueId(i as u32),
            name: q.name.clone(),
            parent,
            weight: q.weight,
            capability: q
                .capability
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            guarantee: q
                .guarantee
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            deserved: q
                .deserved
                .as_ref()
                .map(|r| names.limits(r))
                .unwrap_or_default(),
            reclaimable: q.reclaimable,
            priority: q.priority,
            state: q.state,
        });
    }
    for q in &out {
        let mut seen = 0;
        let mut cur = q.parent;
        while let Some(p) = cur {
            seen += 1;
            if p == q.id || seen > out.len() {
                return Err(err(
                    "Queue",
                    &q.name,
                    "spec.parent",
                    "parent chain forms a cycle".into(),
                ));
            }
            cur = out[p.index()].parent;
        }
    }
    Ok(out)
}

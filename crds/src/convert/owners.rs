//! PodGroups for workloads, as the daemon makes them (`scheduler/daemon/src/owners.rs`): a
//! groupless pod whose owner (see [`workloads::gang_owner`]) is a workload of the manifests
//! whose spec states a gang joins the PodGroup `<owner>-pg`, with the spec's size, per-role
//! minimums, queue and priority class. A spec that makes no sense gives a gang of the pods
//! the workload has, and a warning naming the field. A LeaderWorkerSet's pods form one gang
//! per group, from what LWS labels and annotates on each pod.

use super::*;
use crate::read::WorkloadObject;
use crate::workloads::{self, WorkloadGang};

/// The workloads of the manifests, by (namespace, kind, name), and how many groupless pods
/// each owns.
#[derive(Default)]
pub(crate) struct WorkloadGroups {
    by_owner: HashMap<(String, String, String), Owned>,
}

struct Owned {
    gang: Result<Option<WorkloadGang>, String>,
    members: u32,
}

fn owner_key(namespace: &str, kind: &str, name: &str) -> (String, String, String) {
    (namespace.to_string(), kind.to_string(), name.to_string())
}

impl WorkloadGroups {
    pub(crate) fn collect(objects: &[(String, Object)]) -> Self {
        let mut by_owner = HashMap::new();
        for (_, object) in objects {
            if let Object::Workload(w) = object {
                let name = w.metadata.name.clone().unwrap_or_default();
                let annotations = w.metadata.annotations.clone().unwrap_or_default();
                let gang = workloads::gang(&w.api_version, &w.kind, &annotations, &w.spec);
                let key = owner_key(&namespace(&w.metadata), &w.kind, &name);
                by_owner.insert(key, Owned { gang, members: 0 });
            }
        }
        let mut groups = WorkloadGroups { by_owner };
        for (_, object) in objects {
            if let Object::Pod(p) = object {
                if pod::explicit_group(&p.metadata).is_none() {
                    if let Some(key) = groups.owner_of(&p.metadata) {
                        if let Some(owned) = groups.by_owner.get_mut(&key) {
                            owned.members += 1;
                        }
                    }
                }
            }
        }
        groups
    }

    /// The workload whose gang a pod joins: its JobSet's, or its child Job's when its
    /// replicated job runs before the rest of the JobSet.
    fn owner_of(&self, meta: &ObjectMeta) -> Option<(String, String, String)> {
        let r = workloads::gang_owner(meta)?;
        let key = owner_key(&namespace(meta), &r.kind, &r.name);
        let jobset = self
            .by_owner
            .get(&key)
            .and_then(|o| o.gang.as_ref().ok()?.as_ref());
        if jobset.is_some_and(|g| workloads::runs_before_its_jobset(meta, g)) {
            let r = workloads::controller(meta)?;
            return Some(owner_key(&namespace(meta), &r.kind, &r.name));
        }
        Some(key)
    }

    /// The PodGroup a groupless pod joins, when its owner is a workload that states a gang.
    pub(crate) fn group_of(&self, meta: &ObjectMeta) -> Option<String> {
        let key = self.owner_of(meta)?;
        let owned = self.by_owner.get(&key)?;
        matches!(owned.gang, Ok(Some(_)) | Err(_)).then(|| format!("{}-pg", key.2))
    }
}

impl Context {
    /// The PodGroup made for the workload owning a groupless pod, if any.
    pub(crate) fn workload_group(&self, meta: &ObjectMeta) -> Option<String> {
        self.workload_groups.group_of(meta)
    }

    /// The PodGroup of a workload that owns pods and states a gang (converted as a PodGroup
    /// object would be), or `None`.
    pub(super) fn workload_pod_group(
        &self,
        cx: &Cx,
        w: &WorkloadObject,
        options: &ConvertOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Option<GroupSpec>, ConvertError> {
        let name = cx.name(&w.metadata)?;
        let key = owner_key(&namespace(&w.metadata), &w.kind, name);
        let Some(owned) = self.workload_groups.by_owner.get(&key) else {
            return Ok(None);
        };
        if owned.members == 0 {
            return Ok(None);
        }
        let gang = match &owned.gang {
            Ok(Some(g)) => g.clone(),
            Ok(None) => return Ok(None),
            Err(e) => {
                let (field, message) = e.split_once(": ").unwrap_or(("spec", e));
                warnings.push(cx.warning(
                    field,
                    format!(
                        "{message}; its pods are a gang of the {} it has",
                        owned.members
                    ),
                ));
                WorkloadGang {
                    min_member: owned.members,
                    ..WorkloadGang::default()
                }
            }
        };
        let namespace = w.metadata.namespace.clone();
        let pod_group = gang_pod_group(
            cx,
            &gang,
            &format!("{name}-pg"),
            namespace,
            options,
            warnings,
        );
        group(cx, &pod_group, self, warnings).map(Some)
    }
}

/// The PodGroup the daemon makes for a workload's gang, its placement's warnings kept.
fn gang_pod_group(
    cx: &Cx,
    gang: &WorkloadGang,
    name: &str,
    namespace: Option<String>,
    options: &ConvertOptions,
    warnings: &mut Vec<String>,
) -> PodGroup {
    let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let placement = gang.placement(&options.tiers);
    for (field, message) in placement.warnings {
        warnings.push(cx.warning(field, message));
    }
    PodGroup {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace,
            ..ObjectMeta::default()
        },
        spec: crate::types::PodGroupSpec {
            min_member: clamp(gang.min_member),
            min_task_member: (gang.roles.iter())
                .map(|(r, &n)| (r.clone(), clamp(n)))
                .collect(),
            queue: gang.queue.clone(),
            priority_class_name: gang.priority_class.clone(),
            topology: placement.topology,
            sub_groups: placement.sub_groups,
            ..Default::default()
        },
        status: None,
    }
}

/// The PodGroups of LeaderWorkerSet groups (see [`workloads::lws_gang`]), made from their
/// pods as they are converted: a groupless pod of a group joins `<lws>-<index>-pg`.
#[derive(Default)]
pub(super) struct LwsGroups {
    /// By (namespace, group).
    groups: BTreeMap<(String, String), LwsGroup>,
}

struct LwsGroup {
    /// The first member's gang (its queue the first member's that names one).
    gang: WorkloadGang,
    /// The earliest member's creation.
    created_ms: i64,
    /// The first member, whose name the group's warnings carry.
    origin: String,
    pod: String,
}

impl LwsGroups {
    pub(super) fn join(
        &mut self,
        origin: &str,
        object: &Object,
        converted: &mut Converted,
        warnings: &mut Vec<String>,
    ) {
        let (Object::Pod(raw), Converted::Pod(p)) = (object, converted) else {
            return;
        };
        if p.group.is_some() {
            return;
        }
        match workloads::lws_gang(&raw.metadata) {
            None => {}
            Some(Err(e)) => {
                let cx = Cx {
                    origin,
                    kind: "Pod",
                    object: Named::Of(object),
                };
                let (field, message) = e.split_once(": ").unwrap_or(("metadata", &e));
                warnings.push(cx.warning(field, format!("{message}; a group of one instead")));
            }
            Some(Ok((group, gang))) => {
                // Unshared: the conversion was just made.
                let p = Arc::make_mut(p);
                let key = (p.namespace.clone(), group.clone());
                let entry = self.groups.entry(key).or_insert_with(|| LwsGroup {
                    gang,
                    created_ms: p.created_ms,
                    origin: origin.to_string(),
                    pod: object.key(),
                });
                entry.created_ms = entry.created_ms.min(p.created_ms);
                if entry.gang.queue.is_none() {
                    entry.gang.queue = p.queue.take();
                }
                p.queue = None;
                p.group = Some(group);
            }
        }
    }

    pub(super) fn groups(
        self,
        context: &Context,
        options: &ConvertOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<GroupSpec>, ConvertError> {
        let mut out = Vec::with_capacity(self.groups.len());
        for ((namespace, name), g) in self.groups {
            let cx = Cx {
                origin: &g.origin,
                kind: "Pod",
                object: (g.pod.clone()).into(),
            };
            let pod_group = gang_pod_group(&cx, &g.gang, &name, Some(namespace), options, warnings);
            let mut spec = group(&cx, &pod_group, context, warnings)?;
            spec.created_ms = g.created_ms;
            out.push(spec);
        }
        Ok(out)
    }
}

/// Basalt's pending groupless pods whose gang owner is a workload kind Basalt reads but is
/// not among `objects` (a dump made without the owner's kind): each such pod is planned as a
/// gang of one, so `basalt-sim plan` says so, one warning per owner, with the fix.
pub(crate) fn missing_owners(
    objects: &[(String, Object)],
    scheduler_names: &[String],
) -> Vec<String> {
    let present: HashSet<(String, String, String)> = (objects.iter())
        .filter_map(|(_, o)| match o {
            Object::Workload(w) => {
                let name = w.metadata.name.clone().unwrap_or_default();
                Some(owner_key(&namespace(&w.metadata), &w.kind, &name))
            }
            _ => None,
        })
        .collect();
    let mut missing: BTreeMap<(String, String, String), (String, String, u32)> = BTreeMap::new();
    for (_, object) in objects {
        let Object::Pod(p) = object else { continue };
        let spec = p.spec.as_ref();
        let ours = (spec.and_then(|s| s.scheduler_name.as_deref()))
            .is_some_and(|n| scheduler_names.iter().any(|s| s == n));
        let pending = spec.and_then(|s| s.node_name.as_deref()).is_none();
        if !ours || !pending || pod::explicit_group(&p.metadata).is_some() {
            continue;
        }
        let Some(r) = workloads::gang_owner(&p.metadata) else {
            continue;
        };
        let key = owner_key(&namespace(&p.metadata), &r.kind, &r.name);
        if !workloads::is_workload(&r.api_version, &r.kind) || present.contains(&key) {
            continue;
        }
        let pod = p.metadata.name.clone().unwrap_or_default();
        missing
            .entry(key)
            .or_insert((r.api_version.clone(), pod, 0))
            .2 += 1;
    }
    (missing.into_iter())
        .map(|((ns, kind, name), (api_version, pod, pods))| {
            let group = api_version.split_once('/').map_or("", |(g, _)| g);
            let resource = match group {
                "" => kind.to_lowercase(),
                g => format!("{}.{g}", kind.to_lowercase()),
            };
            format!(
                "Pod {ns}/{pod}{}: its owner {kind} {ns}/{name} ({api_version}) is not among the objects read, so its gang is not known and each pod is planned alone; add it to the dump: kubectl get {resource} -A -o yaml",
                match pods {
                    1 => String::new(),
                    n => format!(" and {} more pod(s)", n - 1),
                }
            )
        })
        .collect()
}

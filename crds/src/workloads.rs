//! Gangs from the training workloads' own specs, with no annotation needed: the gang size and
//! per-role minimums a batch Job, a Kubeflow job, a JobSet or a Volcano Job states, and the
//! queue and priority class their operators take. Pure: the daemon reads the owner through
//! discovery and `basalt-sim plan` from the manifests, and both ask this module.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

mod placement;
pub use placement::Placement;

/// Pod label: a Kubeflow training-operator pod's replica type, lowercased (`master`, `worker`).
pub const KUBEFLOW_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
/// Pod label: an MPIJob pod's role (`launcher`, `worker`), as mpi-operator v2 writes it.
pub const MPI_JOB_ROLE: &str = "training.kubeflow.org/job-role";
/// Pod label: the Kubeflow operator that made a pod.
pub const KUBEFLOW_OPERATOR: &str = "training.kubeflow.org/operator-name";
/// [`KUBEFLOW_OPERATOR`] of mpi-operator v2, whose MPIJobs are `kubeflow.org/v2beta1`.
pub const MPI_OPERATOR: &str = "mpi-operator";
/// mpi-operator v2's MPIJob API version.
pub const MPI_JOB_API_VERSION: &str = "kubeflow.org/v2beta1";
/// Pod label: the Kubeflow job a pod belongs to.
pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Pod label: the JobSet a pod's Job belongs to.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Pod label: the replicated job of a JobSet a pod's Job belongs to.
pub const JOBSET_REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// JobSet's API version.
pub const JOBSET_API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";
/// Pod label: a Ray pod's group (`headgroup`, or its worker group's name), as KubeRay writes it.
pub const RAY_GROUP: &str = "ray.io/group";
/// KubeRay's head group name in [`RAY_GROUP`].
pub const RAY_HEAD_GROUP: &str = "headgroup";

/// Pod label: the LeaderWorkerSet a pod belongs to.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// Pod label: the pod's group (a leader and its workers) in its LeaderWorkerSet.
pub const LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// Pod annotation: the size of the pod's LeaderWorkerSet group (leader included).
pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";

/// LeaderWorkerSet's annotation (on the set and each pod): the node label one domain of which
/// holds each group, exclusively.
pub const LWS_EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";
/// Pod annotation: the pods per subgroup of an LWS group (`subGroupPolicy.subGroupSize`).
pub const LWS_SUBGROUP_SIZE: &str = "leaderworkerset.sigs.k8s.io/subgroup-size";
/// Pod label: the pod's subgroup in its LWS group (none on a `LeaderExcluded` leader).
pub const LWS_SUBGROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/subgroup-index";
/// LeaderWorkerSet's annotation: the node label one domain of which holds each subgroup.
pub const LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY: &str =
    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology";
/// JobSet's annotation (on the JobSet, a replicated job's template, and their pods): the node
/// label one domain of which holds each child Job, exclusively.
pub const JOBSET_EXCLUSIVE_TOPOLOGY: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";
/// Pod label: the child Job of a JobSet a pod belongs to (a hash of the Job's name).
pub const JOBSET_JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";

/// A LeaderWorkerSet pod's gang, its group (the leader and `size − 1` workers), from what LWS
/// labels and annotates on each pod: `(PodGroup name, gang)`, the group in one domain of its
/// exclusive topology and each subgroup in one of the subgroups' (when LWS states them).
/// `None` for other pods; `Err` names the annotation that makes no sense.
pub fn lws_gang(meta: &ObjectMeta) -> Option<Result<(String, WorkloadGang), String>> {
    let labels = meta.labels.as_ref()?;
    let (name, index) = (labels.get(LWS_NAME)?, labels.get(LWS_GROUP_INDEX)?);
    let annotations = meta.annotations.clone().unwrap_or_default();
    let positive = |key: &str| {
        let raw = annotations.get(key);
        match raw.map(|s| s.trim().parse::<u32>()) {
            Some(Ok(n)) if n >= 1 => Ok(n),
            _ => Err(format!(
                "metadata.annotations[{key}]: {raw:?} is not a group size"
            )),
        }
    };
    let size = match positive(LWS_SIZE) {
        Ok(n) => n,
        Err(e) => return Some(Err(e)),
    };
    let key = |a: &str| annotations.get(a).filter(|k| !k.is_empty()).cloned();
    let mut sub_groups = Vec::new();
    if let Some(topology_key) = key(LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY) {
        match positive(LWS_SUBGROUP_SIZE) {
            Ok(size) => sub_groups.push(WorkloadSubGroup {
                name: "subgroup".into(),
                size,
                match_label_key: LWS_SUBGROUP_INDEX,
                selector: None,
                topology_key,
                annotation: LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY,
            }),
            Err(e) => return Some(Err(e)),
        }
    }
    let gang = WorkloadGang {
        min_member: size,
        topology_key: key(LWS_EXCLUSIVE_TOPOLOGY).map(|k| (k, LWS_EXCLUSIVE_TOPOLOGY)),
        sub_groups,
        ..WorkloadGang::default()
    };
    Some(Ok((format!("{name}-{index}-pg"), gang)))
}

/// The pod labels that name a pod's role in its workload's gang, in order.
pub const ROLE_LABELS: [&str; 4] = [
    KUBEFLOW_REPLICA_TYPE,
    MPI_JOB_ROLE,
    JOBSET_REPLICATED_JOB,
    RAY_GROUP,
];

/// Whether a pod's replicated job is one the rest of its JobSet waits for (see
/// [`WorkloadGang::prerequisites`]): the pod then joins its own child Job's gang, its
/// [`controller`].
pub fn runs_before_its_jobset(meta: &ObjectMeta, jobset: &WorkloadGang) -> bool {
    let replicated_job = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(JOBSET_REPLICATED_JOB));
    replicated_job.is_some_and(|r| jobset.prerequisites.contains(r))
}

/// The owner whose gang a pod joins: the JobSet (or mpi-operator's MPIJob) its labels name
/// (its pods' controllers are child Jobs; the uid is left empty), else its controller
/// ownerReference, else its first.
pub fn gang_owner(meta: &ObjectMeta) -> Option<OwnerReference> {
    let by_name = |api_version: &str, kind: &str, name: &String| OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.clone(),
        uid: String::new(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let labels = meta.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty());
    if let Some(name) = label(JOBSET_NAME) {
        return Some(by_name(JOBSET_API_VERSION, "JobSet", name));
    }
    // mpi-operator v2 runs the launcher in a batch Job of its own: its pod's controller is
    // that Job, not the MPIJob, whose name the pods' label gives.
    if label(KUBEFLOW_OPERATOR).is_some_and(|o| o == MPI_OPERATOR) {
        if let Some(name) = label(KUBEFLOW_JOB_NAME) {
            return Some(by_name(MPI_JOB_API_VERSION, "MPIJob", name));
        }
    }
    controller(meta)
}

/// The object's controller ownerReference, else its first.
pub fn controller(meta: &ObjectMeta) -> Option<OwnerReference> {
    let refs = meta.owner_references.as_ref()?;
    refs.iter()
        .find(|r| r.controller == Some(true))
        .or_else(|| refs.first())
        .cloned()
}

/// For a workload kind that runs its pods through another workload Basalt reads, what that
/// is: Kubeflow Trainer's TrainJob makes a JobSet, KubeRay's RayJob a RayCluster.
pub fn runs_through(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version.split('/').next()?, kind) {
        ("trainer.kubeflow.org", "TrainJob") => Some("the JobSet Kubeflow Trainer makes for it"),
        ("ray.io", "RayJob") => Some("the RayCluster KubeRay makes for it"),
        _ => None,
    }
}

/// The kind's name, for messages, when Basalt derives gangs from it.
pub fn workload_kind(api_version: &str, kind: &str) -> Option<&'static str> {
    const KINDS: [&str; 9] = [
        "Job",
        "PyTorchJob",
        "TFJob",
        "XGBoostJob",
        "PaddleJob",
        "MXJob",
        "MPIJob",
        "JobSet",
        "RayCluster",
    ];
    let k = KINDS.iter().find(|&&k| k == kind)?;
    is_workload(api_version, kind).then_some(*k)
}

/// What a workload's spec says of its gang.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadGang {
    pub min_member: u32,
    /// Per role (the pods' role label value): members that must run together.
    pub roles: BTreeMap<String, u32>,
    pub queue: Option<String>,
    pub priority_class: Option<String>,
    /// The node label one domain of which must hold the whole gang, and the annotation that
    /// named it.
    pub topology_key: Option<(String, &'static str)>,
    /// Members that must share one domain of a node label each.
    pub sub_groups: Vec<WorkloadSubGroup>,
    /// A JobSet's replicated jobs that others wait for: their pods are not of this gang but
    /// of their own child Job's ([`gang_owner`] with the gang).
    pub prerequisites: BTreeSet<String>,
}

/// Members of a gang that a workload places in one domain: a JobSet's child Job, an LWS
/// group's subgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadSubGroup {
    pub name: String,
    pub size: u32,
    /// Pods with equal values of this label form one sub-group.
    pub match_label_key: &'static str,
    /// Only pods with this label value belong (a JobSet's replicated job).
    pub selector: Option<(&'static str, String)>,
    /// The node label one domain of which holds each sub-group.
    pub topology_key: String,
    /// The annotation that named it, for messages.
    pub annotation: &'static str,
}

/// Kubeflow's replica-spec field per kind (`kubeflow.org/v1`; MPIJob also `v2beta1`).
fn kubeflow_replica_specs(api_version: &str, kind: &str) -> Option<&'static str> {
    let field = match kind {
        "PyTorchJob" => "pytorchReplicaSpecs",
        "TFJob" => "tfReplicaSpecs",
        "XGBoostJob" => "xgbReplicaSpecs",
        "PaddleJob" => "paddleReplicaSpecs",
        "MXJob" => "mxReplicaSpecs",
        "MPIJob" => "mpiReplicaSpecs",
        _ => return None,
    };
    matches!(api_version, "kubeflow.org/v1" | "kubeflow.org/v2beta1").then_some(field)
}

/// Whether Basalt derives gangs from this kind.
pub fn is_workload(api_version: &str, kind: &str) -> bool {
    kubeflow_replica_specs(api_version, kind).is_some()
        || matches!(
            (api_version, kind),
            ("batch/v1", "Job")
                | (JOBSET_API_VERSION, "JobSet")
                | ("batch.volcano.sh/v1alpha1", "Job")
                | ("ray.io/v1", "RayCluster")
        )
}

/// The gang a workload's `spec` (and its annotations) state: `Ok(None)` for a kind Basalt
/// derives nothing from, or one that runs a single pod at a time; `Err` names the field that
/// makes no sense.
pub fn gang(
    api_version: &str,
    kind: &str,
    annotations: &BTreeMap<String, String>,
    spec: &Value,
) -> Result<Option<WorkloadGang>, String> {
    let gang = if let Some(field) = kubeflow_replica_specs(api_version, kind) {
        kubeflow(spec, field)?
    } else {
        match (api_version, kind) {
            ("batch/v1", "Job") => job(spec)?,
            (JOBSET_API_VERSION, "JobSet") => jobset(annotations, spec)?,
            ("batch.volcano.sh/v1alpha1", "Job") => volcano_job(spec)?,
            ("ray.io/v1", "RayCluster") => ray_cluster(spec)?,
            _ => return Ok(None),
        }
    };
    // A JobSet whose earlier stages are gangs of their own says so even when its last is one.
    Ok(gang.filter(|g| g.min_member > 1 || !g.prerequisites.is_empty()))
}

/// A count field: absent is `default`; present, a non-negative integer.
fn count(v: &Value, field: &str, path: &str, default: u32) -> Result<u32, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => (x.as_u64())
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("{path}.{field}: {x} is not a count")),
    }
}

fn text(v: &Value, field: &str) -> Option<String> {
    v.get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// batch/v1 Job: its pods run `parallelism` at a time (never more than `completions`).
fn job(spec: &Value) -> Result<Option<WorkloadGang>, String> {
    let parallelism = count(spec, "parallelism", "spec", 1)?;
    let completions = count(spec, "completions", "spec", u32::MAX)?;
    Ok(Some(WorkloadGang {
        min_member: parallelism.min(completions),
        ..WorkloadGang::default()
    }))
}

/// A Kubeflow job: each replica type a role with its replica count, the gang their sum, or
/// the operator's own `runPolicy.schedulingPolicy.minAvailable`; its queue and priority class
/// there too. MPIJob's launcher joins only when it is made at once (not
/// `launcherCreationPolicy: WaitForWorkersReady`, which starts it after the workers).
fn kubeflow(spec: &Value, field: &str) -> Result<Option<WorkloadGang>, String> {
    let Some(specs) = spec.get(field).and_then(Value::as_object) else {
        return Err(format!("spec.{field}: missing: no replica types"));
    };
    let late_launcher =
        spec.get("launcherCreationPolicy").and_then(Value::as_str) == Some("WaitForWorkersReady");
    let mut roles = BTreeMap::new();
    for (replica_type, replica) in specs {
        if late_launcher && replica_type == "Launcher" {
            continue;
        }
        let n = count(
            replica,
            "replicas",
            &format!("spec.{field}.{replica_type}"),
            1,
        )?;
        roles.insert(replica_type.to_ascii_lowercase(), n);
    }
    let sum: u32 = roles.values().fold(0u32, |a, &n| a.saturating_add(n));
    let policy = spec
        .get("runPolicy")
        .and_then(|r| r.get("schedulingPolicy"));
    let path = "spec.runPolicy.schedulingPolicy";
    let min = match policy {
        Some(p) => count(p, "minAvailable", path, sum)?,
        None => sum,
    };
    Ok(Some(WorkloadGang {
        min_member: min,
        // Per-role minimums only when the whole job must start together.
        roles: if min >= sum { roles } else { BTreeMap::new() },
        queue: policy.and_then(|p| text(p, "queue")),
        priority_class: policy.and_then(|p| text(p, "priorityClass")),
        ..WorkloadGang::default()
    }))
}

/// JobSet: one gang across every child Job (replicas × parallelism per replicated job, each
/// replicated job a role). With an exclusive topology (the JobSet's annotation, or a
/// replicated job template's), each child Job is a sub-group in one domain of it.
///
/// Replicated jobs that others wait for (`dependsOn`, or all but the last under
/// `startupPolicy: InOrder`) run before those exist, so they stay out of the gang: their
/// pods are gangs of their own child Job ([`WorkloadGang::prerequisites`]). Kubeflow
/// Trainer's initializers and an MPI runtime's workers are such jobs.
fn jobset(
    annotations: &BTreeMap<String, String>,
    spec: &Value,
) -> Result<Option<WorkloadGang>, String> {
    let Some(jobs) = spec.get("replicatedJobs").and_then(Value::as_array) else {
        return Err("spec.replicatedJobs: missing".into());
    };
    let exclusive = annotations.get(JOBSET_EXCLUSIVE_TOPOLOGY);
    let mut prerequisites = BTreeSet::new();
    for (i, r) in jobs.iter().enumerate() {
        let deps = r.get("dependsOn").and_then(Value::as_array);
        for (d, dep) in deps.into_iter().flatten().enumerate() {
            let Some(name) = text(dep, "name") else {
                return Err(format!(
                    "spec.replicatedJobs[{i}].dependsOn[{d}].name: missing"
                ));
            };
            prerequisites.insert(name);
        }
    }
    let in_order = spec
        .pointer("/startupPolicy/startupPolicyOrder")
        .and_then(Value::as_str)
        == Some("InOrder");
    if in_order {
        let all_but_last = jobs.iter().rev().skip(1);
        prerequisites.extend(all_but_last.filter_map(|r| text(r, "name")));
    }
    let mut roles = BTreeMap::new();
    let mut sub_groups = Vec::new();
    for (i, r) in jobs.iter().enumerate() {
        let path = format!("spec.replicatedJobs[{i}]");
        let Some(name) = text(r, "name") else {
            return Err(format!("{path}.name: missing"));
        };
        if prerequisites.contains(&name) {
            continue;
        }
        let replicas = count(r, "replicas", &path, 1)?;
        let job_spec = r.get("template").and_then(|t| t.get("spec"));
        let per_job = match job_spec {
            Some(s) => {
                let path = format!("{path}.template.spec");
                let parallelism = count(s, "parallelism", &path, 1)?;
                parallelism.min(count(s, "completions", &path, u32::MAX)?)
            }
            None => 1,
        };
        let own = (r.pointer("/template/metadata/annotations"))
            .and_then(|a| a.get(JOBSET_EXCLUSIVE_TOPOLOGY))
            .and_then(Value::as_str);
        if let Some(key) = own
            .or(exclusive.map(String::as_str))
            .filter(|k| !k.is_empty())
        {
            sub_groups.push(WorkloadSubGroup {
                name: name.clone(),
                size: per_job,
                match_label_key: JOBSET_JOB_KEY,
                selector: Some((JOBSET_REPLICATED_JOB, name.clone())),
                topology_key: key.to_string(),
                annotation: JOBSET_EXCLUSIVE_TOPOLOGY,
            });
        }
        roles.insert(name, replicas.saturating_mul(per_job));
    }
    let min_member = roles.values().fold(0u32, |a, &n| a.saturating_add(n));
    Ok(Some(WorkloadGang {
        min_member,
        roles,
        sub_groups,
        prerequisites,
        ..WorkloadGang::default()
    }))
}

/// KubeRay's RayCluster (a RayJob's too: it makes one): the head and each worker group's
/// `minReplicas` (times `numOfHosts`, multi-host workers) must start together; replicas above
/// the minimum are elastic extras, placed when there is room. Each group a role.
fn ray_cluster(spec: &Value) -> Result<Option<WorkloadGang>, String> {
    if spec.get("headGroupSpec").is_none() {
        return Err("spec.headGroupSpec: missing".into());
    }
    let mut roles = BTreeMap::from([(RAY_HEAD_GROUP.to_string(), 1u32)]);
    let groups = spec.get("workerGroupSpecs").and_then(Value::as_array);
    for (i, g) in groups.into_iter().flatten().enumerate() {
        let path = format!("spec.workerGroupSpecs[{i}]");
        let Some(name) = text(g, "groupName") else {
            return Err(format!("{path}.groupName: missing"));
        };
        let hosts = count(g, "numOfHosts", &path, 1)?;
        let min = count(g, "minReplicas", &path, 0)?.saturating_mul(hosts);
        if min > 0 {
            roles.insert(name, min);
        }
    }
    let min_member = roles.values().fold(0u32, |a, &n| a.saturating_add(n));
    Ok(Some(WorkloadGang {
        min_member,
        roles,
        ..WorkloadGang::default()
    }))
}

/// Volcano's Job: tasks with replicas, the job's `minAvailable` (default: every replica),
/// per-task `minAvailable`, queue and priority class, as Volcano's job controller writes them
/// into the PodGroup it makes.
fn volcano_job(spec: &Value) -> Result<Option<WorkloadGang>, String> {
    let tasks = spec.get("tasks").and_then(Value::as_array);
    let Some(tasks) = tasks.filter(|t| !t.is_empty()) else {
        return Err("spec.tasks: missing: no tasks".into());
    };
    let mut sum = 0u32;
    let mut roles = BTreeMap::new();
    for (i, t) in tasks.iter().enumerate() {
        let path = format!("spec.tasks[{i}]");
        let replicas = count(t, "replicas", &path, 1)?;
        sum = sum.saturating_add(replicas);
        if let (Some(name), Some(_)) = (text(t, "name"), t.get("minAvailable")) {
            roles.insert(name, count(t, "minAvailable", &path, replicas)?);
        }
    }
    Ok(Some(WorkloadGang {
        min_member: count(spec, "minAvailable", "spec", sum)?,
        roles,
        queue: text(spec, "queue"),
        priority_class: text(spec, "priorityClassName"),
        ..WorkloadGang::default()
    }))
}

#[cfg(test)]
mod tests;

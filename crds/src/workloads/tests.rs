use super::*;
use serde_json::json;

fn gang_of(api_version: &str, kind: &str, spec: &Value) -> Result<Option<WorkloadGang>, String> {
    gang(api_version, kind, &BTreeMap::new(), spec)
}

#[test]
fn a_pytorchjob_is_a_gang_of_its_replicas_with_roles() {
    let spec = json!({"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {}},
        "Worker": {"replicas": 3, "template": {}}}});
    let g = gang_of("kubeflow.org/v1", "PyTorchJob", &spec)
        .unwrap()
        .unwrap();
    assert_eq!(g.min_member, 4);
    assert_eq!(
        g.roles,
        BTreeMap::from([("master".into(), 1), ("worker".into(), 3)])
    );
    // The operator's own scheduling policy wins; an elastic minimum keeps no role minimums.
    let spec = json!({"pytorchReplicaSpecs": {"Worker": {"replicas": 8}},
        "runPolicy": {"schedulingPolicy": {"minAvailable": 4, "queue": "research",
                                           "priorityClass": "high"}}});
    let g = gang_of("kubeflow.org/v1", "PyTorchJob", &spec)
        .unwrap()
        .unwrap();
    assert_eq!((g.min_member, g.roles.len()), (4, 0));
    assert_eq!(
        (g.queue.as_deref(), g.priority_class.as_deref()),
        (Some("research"), Some("high"))
    );
}

#[test]
fn an_mpijob_counts_its_launcher_unless_it_starts_after_the_workers() {
    let spec = json!({"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}});
    let g = gang_of("kubeflow.org/v2beta1", "MPIJob", &spec)
        .unwrap()
        .unwrap();
    assert_eq!(g.min_member, 3);
    let mut late = spec.clone();
    late["launcherCreationPolicy"] = json!("WaitForWorkersReady");
    let g = gang_of("kubeflow.org/v2beta1", "MPIJob", &late)
        .unwrap()
        .unwrap();
    assert_eq!(g.min_member, 2);
}

#[test]
fn a_jobset_is_one_gang_across_its_child_jobs() {
    let spec = json!({"replicatedJobs": [
        {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}}]});
    let g = gang_of(JOBSET_API_VERSION, "JobSet", &spec)
        .unwrap()
        .unwrap();
    assert_eq!(g.min_member, 9);
    assert_eq!(g.roles["workers"], 8);
}

#[test]
fn a_jobsets_earlier_stages_are_not_of_its_gang() {
    // Kubeflow Trainer's runtime: the initializer runs to completion before the nodes.
    let spec = json!({"replicatedJobs": [
        {"name": "initializer", "replicas": 1},
        {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 4}},
         "dependsOn": [{"name": "initializer", "status": "Complete"}]}]});
    let g = gang_of(JOBSET_API_VERSION, "JobSet", &spec)
        .unwrap()
        .unwrap();
    assert_eq!((g.min_member, g.roles.len()), (4, 1));
    assert_eq!(g.prerequisites, BTreeSet::from(["initializer".to_string()]));
    let pod = |rj: &str| ObjectMeta {
        labels: Some(BTreeMap::from([(
            JOBSET_REPLICATED_JOB.to_string(),
            rj.to_string(),
        )])),
        ..ObjectMeta::default()
    };
    assert!(runs_before_its_jobset(&pod("initializer"), &g));
    assert!(!runs_before_its_jobset(&pod("node"), &g));
    // InOrder: each replicated job starts once the one before runs.
    let spec = json!({"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [
        {"name": "a", "replicas": 2}, {"name": "b", "replicas": 3}]});
    let g = gang_of(JOBSET_API_VERSION, "JobSet", &spec)
        .unwrap()
        .unwrap();
    assert_eq!(g.min_member, 3);
    let spec = json!({"replicatedJobs": [{"name": "a", "dependsOn": [{"status": "Ready"}]}]});
    let e = gang_of(JOBSET_API_VERSION, "JobSet", &spec).unwrap_err();
    assert_eq!(e, "spec.replicatedJobs[0].dependsOn[0].name: missing");
}

#[test]
fn jobs_and_volcano_jobs() {
    let g = gang_of(
        "batch/v1",
        "Job",
        &json!({"parallelism": 4, "completions": 8}),
    )
    .unwrap();
    assert_eq!(g.unwrap().min_member, 4);
    // One pod at a time: no gang.
    assert_eq!(gang_of("batch/v1", "Job", &json!({})).unwrap(), None);
    assert_eq!(
        gang_of(
            "batch/v1",
            "Job",
            &json!({"parallelism": 4, "completions": 1})
        )
        .unwrap(),
        None
    );
    let spec = json!({"minAvailable": 3, "queue": "q", "priorityClassName": "p", "tasks": [
        {"name": "ps", "replicas": 1, "minAvailable": 1}, {"name": "worker", "replicas": 4}]});
    let g = gang_of("batch.volcano.sh/v1alpha1", "Job", &spec)
        .unwrap()
        .unwrap();
    assert_eq!((g.min_member, g.queue.as_deref()), (3, Some("q")));
    assert_eq!(g.roles, BTreeMap::from([("ps".into(), 1)]));
}

#[test]
fn a_leaderworkerset_group_is_a_gang_of_its_size() {
    let meta = |size: &str| ObjectMeta {
        labels: Some(BTreeMap::from([
            (LWS_NAME.to_string(), "vllm".to_string()),
            (LWS_GROUP_INDEX.to_string(), "2".to_string()),
        ])),
        annotations: Some(BTreeMap::from([(LWS_SIZE.to_string(), size.to_string())])),
        ..ObjectMeta::default()
    };
    let (group, g) = lws_gang(&meta("4")).unwrap().unwrap();
    assert_eq!((group.as_str(), g.min_member), ("vllm-2-pg", 4));
    assert!(g.topology_key.is_none() && g.sub_groups.is_empty());
    assert!(lws_gang(&meta("none"))
        .unwrap()
        .unwrap_err()
        .contains(LWS_SIZE));
    assert_eq!(lws_gang(&ObjectMeta::default()), None);
}

#[test]
fn a_raycluster_is_its_head_and_the_workers_minimums() {
    let spec = json!({"headGroupSpec": {"rayStartParams": {}}, "workerGroupSpecs": [
        {"groupName": "gpu", "replicas": 4, "minReplicas": 2, "numOfHosts": 2},
        {"groupName": "cpu", "replicas": 3, "minReplicas": 0}]});
    let g = gang_of("ray.io/v1", "RayCluster", &spec).unwrap().unwrap();
    assert_eq!(g.min_member, 5);
    assert_eq!(
        g.roles,
        BTreeMap::from([("gpu".into(), 4), ("headgroup".into(), 1)])
    );
    // Workers all elastic: the head alone, no gang.
    let spec =
        json!({"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "w", "replicas": 2}]});
    assert_eq!(gang_of("ray.io/v1", "RayCluster", &spec).unwrap(), None);
}

#[test]
fn nonsense_names_its_field() {
    let spec = json!({"pytorchReplicaSpecs": {"Worker": {"replicas": -2}}});
    let e = gang_of("kubeflow.org/v1", "PyTorchJob", &spec).unwrap_err();
    assert_eq!(
        e,
        "spec.pytorchReplicaSpecs.Worker.replicas: -2 is not a count"
    );
    let e = gang_of("batch/v1", "Job", &json!({"parallelism": "lots"})).unwrap_err();
    assert!(e.starts_with("spec.parallelism"), "{e}");
    assert!(gang_of("jobset.x-k8s.io/v1alpha2", "JobSet", &json!({})).is_err());
    assert_eq!(
        gang_of("apps/v1", "Deployment", &json!({"replicas": 3})).unwrap(),
        None
    );
}

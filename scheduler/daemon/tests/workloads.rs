//! Training workloads become gangs from their own specs, with no annotation: a Kubeflow
//! PyTorchJob and a JobSet against the in-memory API server with their CRDs registered, and a
//! stub in the test creating the pods their operators would create, labelled and owned as
//! they label and own them. All or nothing; a spec that makes no sense gets an Event.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::{json, Value};

/// The training-operator's pods of a PyTorchJob replica.
fn pytorch_pod(job: &str, uid: &str, replica_type: &str, index: u32) -> Value {
    let labels = json!({
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": replica_type,
        "training.kubeflow.org/replica-index": index.to_string(),
    });
    let name = format!("{job}-{replica_type}-{index}");
    operator_pod(
        &name,
        labels,
        ("kubeflow.org/v1", "PyTorchJob", job, uid),
        8,
    )
}

/// Kubeflow's PyTorchJob example (`pytorch-simple`), with three workers.
fn pytorchjob(name: &str, workers: Value) -> Value {
    let template = json!({"spec": {"schedulerName": "basalt", "containers": [{
        "name": "pytorch", "image": "kubeflow/pytorch-dist-mnist:latest",
        "resources": {"limits": {"nvidia.com/gpu": 8}}}]}});
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template}}},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pytorchjob_is_one_gang_of_its_master_and_workers() {
    let c = cluster(Config::default()).await;
    c.create(crd("kubeflow.org", "PyTorchJob", "pytorchjobs", "v1"));
    for n in 0..4 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(pytorchjob("mnist", json!(3)));
    let job_uid = uid(&c, "kubeflow.org/v1", "PyTorchJob", "mnist");
    // The operator has made the master and two workers so far: the gang of four waits.
    c.create(pytorch_pod("mnist", &job_uid, "master", 0));
    for i in 0..2 {
        c.create(pytorch_pod("mnist", &job_uid, "worker", i));
    }
    let _s = c.start_scheduler();
    eventually(
        "the job's PodGroup exists with the job's size and roles",
        || {
            (c.server.get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                "mnist-pg",
            ))
            .is_some_and(|g| {
                g["spec"]["minMember"] == 4
                    && g["spec"]["minTaskMember"] == json!({"master": 1, "worker": 3})
            })
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let names = ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"];
    assert!(
        names.iter().all(|p| c.node_of(p).is_none()),
        "part of the gang was bound"
    );
    c.create(pytorch_pod("mnist", &job_uid, "worker", 2));
    eventually("all four bound", || {
        names
            .iter()
            .chain(&["mnist-worker-2"])
            .all(|p| c.node_of(p).is_some())
    })
    .await;
    let g = c.group("mnist-pg");
    assert_eq!(g["metadata"]["ownerReferences"][0]["uid"], job_uid.as_str());
    c.assert_no_node_over_capacity();
}

/// JobSet's pods: owned by their child Job, labelled with the JobSet and replicated job.
fn jobset_pod(jobset: &str, rjob: &str, job_index: u32, pod_index: u32) -> Value {
    let job = format!("{jobset}-{rjob}-{job_index}");
    let labels = json!({
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/job-index": job_index.to_string(),
        "batch.kubernetes.io/job-completion-index": pod_index.to_string(),
    });
    let name = format!("{job}-{pod_index}");
    let uid = format!("uid-{job}");
    operator_pod(&name, labels, ("batch/v1", "Job", &job, &uid), 8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_is_one_gang_across_its_child_jobs_and_binds_nothing_when_part_fits() {
    let c = cluster(Config::default()).await;
    c.create(crd("jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"));
    for n in 0..3 {
        c.create(node(&format!("n{n}"), 8));
    }
    // JobSet's example shape: two child Jobs of two pods each (replicas 2, parallelism 2).
    c.create(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pretrain", "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 2, "completions": 2, "backoffLimit": 0,
            "template": {"spec": {"schedulerName": "basalt", "containers": [{
                "name": "w", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]},
    }));
    let pods: Vec<String> = (0..2)
        .flat_map(|j| (0..2).map(move |i| (j, i)))
        .map(|(j, i)| {
            c.create(jobset_pod("pretrain", "workers", j, i));
            format!("pretrain-workers-{j}-{i}")
        })
        .collect();
    let _s = c.start_scheduler();
    eventually("one PodGroup for the JobSet, of all four pods", || {
        (c.server.get(
            "scheduling.basalt.dev/v1alpha1",
            "PodGroup",
            "default",
            "pretrain-pg",
        ))
        .is_some_and(|g| g["spec"]["minMember"] == 4)
            && pods.iter().all(|p| {
                c.pod(p)["metadata"]["annotations"]["scheduling.basalt.dev/pod-group"]
                    == "pretrain-pg"
            })
    })
    .await;
    // Three nodes for four 8-GPU pods: nothing binds (one gang per child Job would bind two).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        pods.iter().all(|p| c.node_of(p).is_none()),
        "half a JobSet was bound"
    );
    c.create(node("n3", 8));
    eventually("all four bound", || {
        pods.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonsense_replica_count_is_an_event_and_a_gang_of_the_pods_that_exist() {
    let c = cluster(Config::default()).await;
    c.create(crd("kubeflow.org", "PyTorchJob", "pytorchjobs", "v1"));
    for n in 0..2 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(pytorchjob("broken", json!(-3)));
    let job_uid = uid(&c, "kubeflow.org/v1", "PyTorchJob", "broken");
    c.create(pytorch_pod("broken", &job_uid, "master", 0));
    c.create(pytorch_pod("broken", &job_uid, "worker", 0));
    let _s = c.start_scheduler();
    eventually("both pods bound, as a gang of the two that exist", || {
        c.node_of("broken-master-0").is_some() && c.node_of("broken-worker-0").is_some()
    })
    .await;
    let events = c.events("OwnerSpecInvalid", "broken-master-0");
    let message = events
        .first()
        .and_then(|e| e["message"].as_str())
        .unwrap_or("");
    assert!(
        message.contains("spec.pytorchReplicaSpecs.Worker.replicas"),
        "{events:?}"
    );
    assert_eq!(c.group("broken-pg")["spec"]["minMember"], 2);
}

/// A LeaderWorkerSet pod of group `group`, as LWS makes it: the leader owned by the set's
/// StatefulSet, workers by their group's.
fn lws_pod(group: u32, worker: u32) -> Value {
    let labels = json!({
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
        "leaderworkerset.sigs.k8s.io/worker-index": worker.to_string(),
    });
    let (name, owner) = match worker {
        0 => (format!("vllm-{group}"), "vllm".to_string()),
        w => (format!("vllm-{group}-{w}"), format!("vllm-{group}")),
    };
    let uid = format!("uid-{owner}");
    let mut p = operator_pod(&name, labels, ("apps/v1", "StatefulSet", &owner, &uid), 8);
    p["metadata"]["annotations"] = json!({"leaderworkerset.sigs.k8s.io/size": "3"});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderworkerset_group_is_one_gang_and_binds_nothing_when_part_fits() {
    let c = cluster(Config::default()).await;
    for n in 0..2 {
        c.create(node(&format!("n{n}"), 8));
    }
    for w in 0..3 {
        c.create(lws_pod(0, w));
    }
    let _s = c.start_scheduler();
    let pods = ["vllm-0", "vllm-0-1", "vllm-0-2"];
    eventually(
        "one PodGroup of 3 for the group, named by all its pods",
        || {
            (c.server.get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                "vllm-0-pg",
            ))
            .is_some_and(|g| g["spec"]["minMember"] == 3)
                && pods.iter().all(|p| {
                    c.pod(p)["metadata"]["annotations"]["scheduling.basalt.dev/pod-group"]
                        == "vllm-0-pg"
                })
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        pods.iter().all(|p| c.node_of(p).is_none()),
        "part of a group was bound"
    );
    c.create(node("n2", 8));
    eventually("the group bound whole", || {
        pods.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_past_its_schedule_timeout_is_told_so_and_starts_when_room_appears() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    // Someone else's pod holds the node: the gang of two cannot start.
    c.create(busy_pod("other", "n1", 8, None));
    c.create(queue("research"));
    let mut g = group("pair", 2, "research");
    g["spec"]["scheduleTimeoutSeconds"] = json!(1);
    c.create(g);
    c.create(pod("pair-0", "pair", 4));
    c.create(pod("pair-1", "pair", 4));
    let config = c.dir.path().join("config.yaml");
    std::fs::write(&config, "gang: {timeoutBackoffSeconds: 1}\n").unwrap();
    let _s = c.start_with(&["--config", config.to_str().unwrap()]);
    eventually("the gang's pods are told of its schedule timeout", || {
        (c.events("FailedScheduling", "pair-0").iter()).any(|e| {
            e["message"]
                .as_str()
                .unwrap_or("")
                .contains("schedule timeout")
        })
    })
    .await;
    assert!(c.node_of("pair-0").is_none() && c.node_of("pair-1").is_none());
    // Room appears: between backoffs the gang is tried again, and starts.
    c.server.delete("v1", "Pod", "default", "other").unwrap();
    eventually("the gang bound", || {
        c.node_of("pair-0").is_some() && c.node_of("pair-1").is_some()
    })
    .await;
}

fn rack_node(name: &str, rack: &str) -> Value {
    let mut n = node(name, 8);
    n["metadata"]["labels"] = json!({"topology.basalt.dev/rack": rack});
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobsets_exclusive_topology_puts_each_child_job_in_one_rack() {
    let c = cluster(Config::default()).await;
    c.create(crd("jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"));
    // r1 has one free node: a child Job of two 8-GPU pods fits only in r2 or r3.
    for (n, rack) in [("n0", "r1"), ("n1", "r1"), ("n2", "r2"), ("n3", "r2")] {
        c.create(rack_node(n, rack));
    }
    for (n, rack) in [("n4", "r3"), ("n5", "r3")] {
        c.create(rack_node(n, rack));
    }
    c.create(busy_pod("other", "n1", 8, None));
    let exclusive = "alpha.jobset.sigs.k8s.io/exclusive-topology";
    c.create(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pretrain", "namespace": "default",
                     "annotations": {exclusive: "topology.basalt.dev/rack"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 2, "completions": 2,
            "template": {"spec": {"schedulerName": "basalt", "containers": [{
                "name": "w", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]},
    }));
    let mut pods = Vec::new();
    for j in 0..2 {
        for i in 0..2 {
            let mut p = jobset_pod("pretrain", "workers", j, i);
            p["metadata"]["labels"]["jobset.sigs.k8s.io/job-key"] = json!(format!("key-{j}"));
            p["metadata"]["annotations"] = json!({exclusive: "topology.basalt.dev/rack"});
            c.create(p);
            pods.push(format!("pretrain-workers-{j}-{i}"));
        }
    }
    let _s = c.start_scheduler();
    eventually("all four bound", || {
        pods.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    let sub_groups = &c.group("pretrain-pg")["spec"]["subGroups"];
    assert_eq!(
        sub_groups[0]["topology"]["required"], "rack",
        "{sub_groups}"
    );
    assert_eq!(
        sub_groups[0]["matchLabelKeys"],
        json!(["jobset.sigs.k8s.io/job-key"])
    );
    let rack = |p: &str| match c.node_of(p).as_deref() {
        Some("n2" | "n3") => "r2",
        Some("n4" | "n5") => "r3",
        other => panic!("{p} on {other:?}, outside r2 and r3"),
    };
    for j in 0..2 {
        let (a, b) = (
            format!("pretrain-workers-{j}-0"),
            format!("pretrain-workers-{j}-1"),
        );
        assert_eq!(rack(&a), rack(&b), "child Job {j} straddles racks");
    }
    assert_ne!(rack("pretrain-workers-0-0"), rack("pretrain-workers-1-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjobs_initializer_runs_first_and_its_nodes_start_as_one_gang() {
    let c = cluster(Config::default()).await;
    c.create(crd(
        "trainer.kubeflow.org",
        "TrainJob",
        "trainjobs",
        "v1alpha1",
    ));
    c.create(crd("jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"));
    // The in-memory server does not serve batch/v1 Jobs by itself.
    c.create(crd("batch", "Job", "jobs", "v1"));
    for n in 0..3 {
        c.create(node(&format!("n{n}"), 8));
    }
    c.create(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}},
    }));
    let train_uid = uid(&c, "trainer.kubeflow.org/v1alpha1", "TrainJob", "llm");
    // What Trainer makes of it: a JobSet of its name whose nodes wait for the initializer.
    let template = |gpus: u32| {
        json!({"spec": {"schedulerName": "basalt", "containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
    };
    c.create(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "default", "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llm",
            "uid": train_uid, "controller": true}]},
        "spec": {"replicatedJobs": [
            {"name": "initializer", "replicas": 1, "template": {"spec": {"template": template(0)}}},
            {"name": "node", "replicas": 1,
             "dependsOn": [{"name": "initializer", "status": "Complete"}],
             "template": {"spec": {"parallelism": 4, "completions": 4, "template": template(8)}}}]},
    }));
    // A child Job, and its pod as the Job controller makes it (owned by the Job's uid).
    let child_pod = |job: &str, rjob: &str, i: u32| {
        if i == 0 {
            c.create(json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": job, "namespace": "default"},
                "spec": {"template": template(0)}}));
        }
        let mut p = jobset_pod("llm", rjob, 0, i);
        p["metadata"]["ownerReferences"][0]["uid"] = json!(uid(&c, "batch/v1", "Job", job));
        p
    };
    let mut init = child_pod("llm-initializer-0", "initializer", 0);
    init["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    c.create(init);
    let _s = c.start_scheduler();
    eventually("the initializer bound alone", || {
        c.node_of("llm-initializer-0-0").is_some()
    })
    .await;
    let init_group = c.pod("llm-initializer-0-0")["metadata"]["annotations"]
        ["scheduling.basalt.dev/pod-group"]
        .clone();
    assert_ne!(
        init_group, "llm-pg",
        "the initializer joined the nodes' gang"
    );
    // The initializer is done; Trainer's JobSet makes the node Job and its four pods.
    let nodes: Vec<String> = (0..4)
        .map(|i| {
            c.create(child_pod("llm-node-0", "node", i));
            format!("llm-node-0-{i}")
        })
        .collect();
    eventually("the nodes' PodGroup: the JobSet's, of four", || {
        (c.server.get(
            "scheduling.basalt.dev/v1alpha1",
            "PodGroup",
            "default",
            "llm-pg",
        ))
        .is_some_and(|g| g["spec"]["minMember"] == 4)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        nodes.iter().all(|p| c.node_of(p).is_none()),
        "part of the nodes' gang was bound"
    );
    c.create(node("n3", 8));
    eventually("the four nodes bound", || {
        nodes.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    let invalid = c.events("OwnerGroupInvalid", "llm-initializer-0-0");
    assert!(invalid.is_empty(), "{invalid:?}");
}

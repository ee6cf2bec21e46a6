//! Every other workload kind Basalt reads, through the daemon: each kind's object as its
//! documentation shows it (CRD registered), the pods its operator makes (labelled and owned
//! as that operator labels and owns them), and the PodGroup Basalt makes from its spec, with
//! no annotation: size, per-role minimums, queue and priority class. The all-or-nothing rule
//! itself is the same for all (`workloads.rs` proves it for PyTorchJob, JobSet and LWS).

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::{json, Value};

/// One workload: its CRD (group, kind, plural, version; none for built-in kinds), object,
/// and pods as `(name, labels, owner (apiVersion, kind, name))`.
struct Kind {
    crd: Option<(&'static str, &'static str, &'static str, &'static str)>,
    object: Value,
    pods: Vec<(String, Value, (&'static str, &'static str, String))>,
    /// What the PodGroup `<name>-pg` must say.
    min_member: u32,
    roles: Value,
    queue: Option<&'static str>,
}

fn kubeflow_pods(
    job: &str,
    kind: &'static str,
    replicas: &[(&str, u32)],
) -> Vec<(String, Value, (&'static str, &'static str, String))> {
    let mut pods = Vec::new();
    for &(replica_type, n) in replicas {
        for i in 0..n {
            let labels = json!({
                "training.kubeflow.org/operator-name": "training-operator",
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": i.to_string(),
            });
            let owner = ("kubeflow.org/v1", kind, job.to_string());
            pods.push((format!("{job}-{replica_type}-{i}"), labels, owner));
        }
    }
    pods
}

fn replica(n: u32) -> Value {
    json!({"replicas": n, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})
}

fn kinds() -> Vec<Kind> {
    let mut kinds = vec![
        // Kubeflow's `tf_job_mnist` example shape: a parameter server and two workers.
        Kind {
            crd: Some(("kubeflow.org", "TFJob", "tfjobs", "v1")),
            object: json!({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                "metadata": {"name": "mnist-tf", "namespace": "default"},
                "spec": {"tfReplicaSpecs": {"PS": replica(1), "Worker": replica(2)}}}),
            pods: kubeflow_pods("mnist-tf", "TFJob", &[("ps", 1), ("worker", 2)]),
            min_member: 3,
            roles: json!({"ps": 1, "worker": 2}),
            queue: None,
        },
        Kind {
            crd: Some(("kubeflow.org", "XGBoostJob", "xgboostjobs", "v1")),
            object: json!({"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob",
                "metadata": {"name": "xgb", "namespace": "default"},
                "spec": {"xgbReplicaSpecs": {"Master": replica(1), "Worker": replica(2)},
                         "runPolicy": {"schedulingPolicy": {"queue": "research"}}}}),
            pods: kubeflow_pods("xgb", "XGBoostJob", &[("master", 1), ("worker", 2)]),
            min_member: 3,
            roles: json!({"master": 1, "worker": 2}),
            queue: Some("research"),
        },
        Kind {
            crd: Some(("kubeflow.org", "PaddleJob", "paddlejobs", "v1")),
            object: json!({"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob",
                "metadata": {"name": "paddle", "namespace": "default"},
                "spec": {"paddleReplicaSpecs": {"Worker": replica(2)}}}),
            pods: kubeflow_pods("paddle", "PaddleJob", &[("worker", 2)]),
            min_member: 2,
            roles: json!({"worker": 2}),
            queue: None,
        },
        // Volcano's `tensorflow-benchmark` shape, with no Volcano controller running.
        Kind {
            crd: Some(("batch.volcano.sh", "Job", "jobs", "v1alpha1")),
            object: json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "tf-bench", "namespace": "default"},
                "spec": {"minAvailable": 3, "schedulerName": "basalt", "queue": "research",
                         "tasks": [{"name": "ps", "replicas": 1, "minAvailable": 1,
                                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
                                   {"name": "worker", "replicas": 2,
                                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]}}),
            pods: ["ps-0", "worker-0", "worker-1"]
                .iter()
                .map(|p| {
                    let task = p.split('-').next().unwrap();
                    let labels =
                        json!({"volcano.sh/job-name": "tf-bench", "volcano.sh/task-spec": task});
                    (
                        format!("tf-bench-{p}"),
                        labels,
                        ("batch.volcano.sh/v1alpha1", "Job", "tf-bench".to_string()),
                    )
                })
                .collect(),
            min_member: 3,
            roles: json!({"ps": 1}),
            queue: Some("research"),
        },
        // KubeRay's `ray-cluster.sample` shape: a head and a worker group of minReplicas 2.
        Kind {
            crd: Some(("ray.io", "RayCluster", "rayclusters", "v1")),
            object: json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": "raycluster-kuberay", "namespace": "default"},
                "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {}},
                         "workerGroupSpecs": [{"groupName": "workergroup", "replicas": 3,
                                               "minReplicas": 2, "maxReplicas": 5,
                                               "rayStartParams": {}, "template": {}}]}}),
            pods: [
                ("head-abcde", "headgroup"),
                ("worker-0", "workergroup"),
                ("worker-1", "workergroup"),
            ]
            .iter()
            .map(|&(p, group)| {
                let labels = json!({"ray.io/cluster": "raycluster-kuberay", "ray.io/group": group,
                        "ray.io/node-type": if group == "headgroup" { "head" } else { "worker" }});
                (
                    format!("raycluster-kuberay-{p}"),
                    labels,
                    ("ray.io/v1", "RayCluster", "raycluster-kuberay".to_string()),
                )
            })
            .collect(),
            min_member: 3,
            roles: json!({"headgroup": 1, "workergroup": 2}),
            queue: None,
        },
        // An indexed batch Job: parallelism 3.
        Kind {
            crd: Some(("batch", "Job", "jobs", "v1")),
            object: json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "indexed", "namespace": "default"},
                "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                         "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            pods: (0..3)
                .map(|i| {
                    let labels = json!({"batch.kubernetes.io/job-name": "indexed",
                        "batch.kubernetes.io/job-completion-index": i.to_string()});
                    (
                        format!("indexed-{i}"),
                        labels,
                        ("batch/v1", "Job", "indexed".to_string()),
                    )
                })
                .collect(),
            min_member: 3,
            roles: Value::Null,
            queue: None,
        },
    ];
    // mpi-operator v2's `pi` example: the launcher runs in a batch Job of its own.
    let mpi_labels = |role: &str| {
        json!({"training.kubeflow.org/operator-name": "mpi-operator",
               "training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": role})
    };
    let mut mpi_pods = vec![(
        "pi-launcher-x7k2p".to_string(),
        mpi_labels("launcher"),
        ("batch/v1", "Job", "pi-launcher".to_string()),
    )];
    for i in 0..2 {
        mpi_pods.push((
            format!("pi-worker-{i}"),
            mpi_labels("worker"),
            ("kubeflow.org/v2beta1", "MPIJob", "pi".to_string()),
        ));
    }
    kinds.push(Kind {
        crd: Some(("kubeflow.org", "MPIJob", "mpijobs", "v2beta1")),
        object: json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": "default"},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Launcher": replica(1), "Worker": replica(2)}}}),
        pods: mpi_pods,
        min_member: 3,
        roles: json!({"launcher": 1, "worker": 2}),
        queue: None,
    });
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_forms_its_gang_from_its_own_spec_and_starts_whole() {
    let c = cluster(Config::default()).await;
    c.create(queue("research"));
    for n in 0..2 {
        c.create(node(&format!("n{n}"), 8));
    }
    let kinds = kinds();
    let mut registered = Vec::new();
    for k in &kinds {
        if let Some((group, kind, plural, version)) = k.crd {
            if !registered.contains(&(group, kind)) {
                c.create(crd(group, kind, plural, version));
                registered.push((group, kind));
            }
        }
        c.create(k.object.clone());
    }
    // The launcher's own batch Job, as mpi-operator makes it (owned by the MPIJob).
    let mpi_uid = uid(&c, "kubeflow.org/v2beta1", "MPIJob", "pi");
    c.create(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi-launcher", "namespace": "default", "ownerReferences": [{
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
            "uid": mpi_uid, "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}));
    let mut all = Vec::new();
    for k in &kinds {
        for (name, labels, (api_version, kind, owner)) in &k.pods {
            let owner_uid = uid(&c, api_version, kind, owner);
            let mut p = operator_pod(
                name,
                labels.clone(),
                (api_version, kind, owner, &owner_uid),
                0,
            );
            p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
            c.create(p);
            all.push(name.clone());
        }
    }
    let _s = c.start_scheduler();
    eventually("every workload's pods bound", || {
        all.iter().all(|p| c.node_of(p).is_some())
    })
    .await;
    for k in &kinds {
        let name = k.object["metadata"]["name"].as_str().unwrap();
        let g = c.group(&format!("{name}-pg"));
        let what = format!("{} {name}: {}", k.object["kind"], g["spec"]);
        assert_eq!(g["spec"]["minMember"], k.min_member, "{what}");
        assert_eq!(g["spec"]["minTaskMember"], k.roles, "{what}");
        assert_eq!(g["spec"]["queue"].as_str(), k.queue, "{what}");
        for (pod, _, _) in &k.pods {
            let named = &c.pod(pod)["metadata"]["annotations"]["scheduling.basalt.dev/pod-group"];
            assert_eq!(named, &json!(format!("{name}-pg")), "{pod} of {what}");
        }
    }
}

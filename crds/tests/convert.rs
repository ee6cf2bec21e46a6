//! Conversion of Kubernetes objects into the engine's specs and snapshot.

mod common;

use std::collections::BTreeMap;

use basalt_crds::{build_snapshot, cluster_spec, ConvertOptions};
use basalt_engine::{
    JobPhase, PodPhase, QueueState, SelectorOperator, TaintEffect, TaskState, TolerationOperator,
};
use common::{data, objects};

fn list(entries: &[(&str, i64)]) -> BTreeMap<String, i64> {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

const GI: i64 = 1 << 30;

#[test]
fn nodes_with_taints_capacity_fallback_and_topology() {
    let spec = cluster_spec(&data("cluster.yaml").objects, &ConvertOptions::default()).unwrap();
    let gpu = spec.nodes.iter().find(|n| n.name == "gpu-a").unwrap();
    assert_eq!(
        gpu.allocatable,
        list(&[
            ("cpu", 63_500),
            ("memory", 500 * GI),
            ("nvidia.com/gpu", 8),
            ("pods", 110)
        ])
    );
    assert_eq!(gpu.labels["nvidia.com/gpu.clique"], "rack-1");
    assert_eq!(gpu.taints.len(), 1);
    assert_eq!(gpu.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(gpu.taints[0].value, "present");
    assert!(!gpu.unschedulable);

    // Islands [0..3] and [4..6]; GPU 7 is in none and gets a domain of its own.
    let gpus = gpu.gpus.as_ref().unwrap();
    let domains: Vec<u32> = gpus.iter().map(|g| g.nvlink_domain).collect();
    assert_eq!(domains, [0, 0, 0, 0, 1, 1, 1, 2]);
    assert_eq!(gpus[5].uuid.as_deref(), Some("GPU-5"));
    assert_eq!(gpus[5].model.as_deref(), Some("H100"));
    assert_eq!(gpus[5].memory_mib, Some(81559));

    let cpu = spec.nodes.iter().find(|n| n.name == "cpu-b").unwrap();
    assert_eq!(
        cpu.allocatable,
        list(&[("cpu", 16_000), ("memory", 64 * GI)])
    );
    assert!(cpu.unschedulable);
    assert!(cpu.gpus.is_none());
}

#[test]
fn pods_requests_rules_and_metadata() {
    let spec = cluster_spec(&data("cluster.yaml").objects, &ConvertOptions::default()).unwrap();
    let w0 = spec.pods.iter().find(|p| p.name == "llm-worker-0").unwrap();
    assert!(w0.ours);
    assert_eq!(w0.namespace, "ml");
    assert_eq!(w0.group.as_deref(), Some("llm"));
    assert_eq!(w0.role.as_deref(), Some("worker"));
    // Two containers summed; the GPU limit stands in for the missing GPU request.
    assert_eq!(
        w0.request,
        list(&[("cpu", 8_100), ("memory", 64 * GI), ("nvidia.com/gpu", 4)])
    );
    assert_eq!(w0.priority, 1000);
    assert_eq!(w0.created_ms, 1_735_689_602_500);
    assert_eq!(w0.phase, PodPhase::Running);
    assert_eq!(w0.node.as_deref(), Some("gpu-a"));
    assert_eq!(w0.gpu_ids, [0, 1, 2, 3]);
    assert!(!w0.non_preemptable);

    let rules = &w0.rules;
    assert_eq!(rules.node_selector["nvidia.com/gpu.product"], "H100");
    assert_eq!(rules.tolerations.len(), 2);
    assert_eq!(rules.tolerations[0].operator, TolerationOperator::Exists);
    assert_eq!(rules.tolerations[0].effect, Some(TaintEffect::NoSchedule));
    assert_eq!(
        rules.tolerations[1].operator,
        TolerationOperator::Equal,
        "default operator"
    );
    assert_eq!(rules.tolerations[1].effect, None);
    assert_eq!(rules.tolerations[1].value, "ml");
    let terms = &rules.affinity.as_ref().unwrap().terms;
    assert_eq!(terms.len(), 2);
    let ops: Vec<SelectorOperator> = terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().chain(&t.match_fields))
        .map(|r| r.operator)
        .collect();
    use SelectorOperator::*;
    assert_eq!(ops, [In, DoesNotExist, NotIn, Gt, Lt, Exists]);
    assert_eq!(terms[0].match_fields[0].key, "metadata.name");
    assert_eq!(terms[0].match_expressions[0].values, ["rack-1", "rack-2"]);

    // Group from the annotation; limits only: requests equal limits.
    let w1 = spec.pods.iter().find(|p| p.name == "llm-worker-1").unwrap();
    assert_eq!(w1.group.as_deref(), Some("llm"));
    assert_eq!(
        w1.request,
        list(&[("cpu", 8_000), ("memory", 64 * GI), ("nvidia.com/gpu", 4)])
    );
    assert!(w1.non_preemptable);
    assert_eq!(w1.phase, PodPhase::Pending);
    assert_eq!(w1.created_ms, 0);
    assert_eq!(w1.priority, 10, "the globalDefault class");

    let dns = spec.pods.iter().find(|p| p.name == "coredns").unwrap();
    assert!(!dns.ours, "default-scheduler");
    assert_eq!(dns.request, list(&[("cpu", 100), ("memory", 70 << 20)]));
}

#[test]
fn groups_and_queues() {
    let spec = cluster_spec(&data("cluster.yaml").objects, &ConvertOptions::default()).unwrap();
    let g = &spec.groups[0];
    assert_eq!((g.namespace.as_str(), g.name.as_str()), ("ml", "llm"));
    assert_eq!(g.queue.as_deref(), Some("research"));
    assert_eq!(g.min_member, 2);
    assert_eq!(g.min_task_member["worker"], 2);
    assert_eq!(g.min_resources, Some(list(&[("nvidia.com/gpu", 8)])));
    assert_eq!(g.priority, Some(1000));
    assert_eq!(g.created_ms, 1_735_689_601_000);
    assert_eq!(g.phase, JobPhase::Inqueue);

    let q = &spec.queues[0];
    assert_eq!(q.name, "research");
    assert_eq!(q.weight, 3);
    assert_eq!(q.capability, Some(list(&[("nvidia.com/gpu", 16)])));
    assert_eq!(q.guarantee, Some(list(&[("cpu", 8_000)])));
    assert_eq!(q.deserved, Some(list(&[("nvidia.com/gpu", 8)])));
    assert!(!q.reclaimable);
    assert_eq!(q.priority, 5);
    assert_eq!(q.state, QueueState::Closing);
    assert_eq!(q.parent, None);
}

#[test]
fn snapshot_of_the_sample_cluster() {
    let snap = build_snapshot(&data("cluster.yaml").objects, &ConvertOptions::default()).unwrap();
    assert_eq!(snap.nodes.len(), 2);
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(snap.tasks.len(), 2);
    assert_eq!(snap.foreign_pods, 1);
    let w0 = snap
        .tasks
        .iter()
        .find(|t| &*t.name == "ml/llm-worker-0")
        .unwrap();
    assert!(matches!(w0.state, TaskState::Bound(_)));
    assert_eq!(w0.gpus, 0b1111);
    let gpu_a = snap.nodes.iter().find(|n| n.name == "gpu-a").unwrap();
    assert_eq!(gpu_a.gpus[7].nvlink_domain, 2);
}

#[test]
fn volcano_manifests_convert() {
    let options = ConvertOptions {
        scheduler_names: vec!["volcano".into(), "basalt".into()],
        ..ConvertOptions::default()
    };
    let spec = cluster_spec(&data("volcano.yaml").objects, &options).unwrap();
    let q = &spec.queues[0];
    assert_eq!(q.name, "team-a");
    assert_eq!(q.weight, 2);
    assert_eq!(
        q.guarantee,
        Some(list(&[("cpu", 10_000), ("memory", 20 * GI)]))
    );
    assert_eq!(
        q.capability,
        Some(list(&[("cpu", 100_000), ("nvidia.com/gpu", 32)]))
    );
    assert_eq!(q.deserved, Some(list(&[("nvidia.com/gpu", 16)])));
    assert_eq!(q.parent.as_deref(), Some("root"));
    assert_eq!(q.state, QueueState::Closed);
    assert!(!q.reclaimable);

    let g = &spec.groups[0];
    assert_eq!(g.min_member, 3);
    assert_eq!(g.min_task_member, list(&[("ps", 1), ("worker", 2)]));
    assert_eq!(
        g.min_resources,
        Some(list(&[("cpu", 3_000), ("nvidia.com/gpu", 6)]))
    );
    assert_eq!(
        g.priority, None,
        "no class: the engine takes the pods' highest"
    );
    assert_eq!(g.phase, JobPhase::Running);

    let p = &spec.pods[0];
    assert!(p.ours);
    assert_eq!(p.group.as_deref(), Some("job-1"));
    assert_eq!(p.role.as_deref(), Some("worker"));
    assert!(p.non_preemptable);

    // With the default options the Volcano pod is not ours.
    let spec = cluster_spec(&data("volcano.yaml").objects, &ConvertOptions::default()).unwrap();
    assert!(!spec.pods[0].ours);
}

const POD_HEAD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n";

fn one_pod(spec_yaml: &str) -> basalt_engine::PodSpec {
    let text = format!("{POD_HEAD}{spec_yaml}");
    let spec = cluster_spec(&objects("pod.yaml", &text), &ConvertOptions::default()).unwrap();
    spec.pods.into_iter().next().unwrap()
}

#[test]
fn init_containers_count_at_their_peak() {
    let p = one_pod(
        "spec:
  initContainers:
  - name: big-init
    resources: {requests: {cpu: '4', memory: 1Gi}}
  containers:
  - name: a
    resources: {requests: {cpu: '1', memory: 2Gi}}
  - name: b
    resources: {requests: {cpu: '1'}}
  overhead: {cpu: 250m}
",
    );
    // max(sum(1+1, 2Gi), init(4, 1Gi)) + overhead
    assert_eq!(p.request, list(&[("cpu", 4_250), ("memory", 2 * GI)]));
}

#[test]
fn scheduling_gates_and_resource_claims_are_read() {
    let p = one_pod(
        "spec:
  schedulerName: basalt
  schedulingGates: [{name: example.com/quota}, {name: example.com/image}]
  resourceClaims: [{name: gpu, resourceClaimName: gpu-claim}]
  containers: [{name: a}]
",
    );
    assert_eq!(
        p.scheduling_gates,
        ["example.com/quota", "example.com/image"]
    );
    // The claim is not among the objects: the pod waits for it.
    assert!(
        (p.waits.iter()).any(
            |w| matches!(w, basalt_engine::Wait::Claim(m) if m.contains("gpu-claim does not exist"))
        ),
        "{:?}",
        p.waits
    );

    let p =
        one_pod("spec:\n  schedulingGates: []\n  resourceClaims: []\n  containers: [{name: a}]\n");
    assert!(p.scheduling_gates.is_empty() && p.waits.is_empty() && p.rules.claims.is_none());
}

#[test]
fn sidecar_init_containers_add_to_the_sum() {
    let p = one_pod(
        "spec:
  initContainers:
  - name: proxy
    restartPolicy: Always
    resources: {requests: {cpu: 500m}}
  - name: migrate
    resources: {requests: {cpu: '3'}}
  containers:
  - name: app
    resources: {requests: {cpu: '1'}}
",
    );
    // containers 1 + sidecar 0.5 = 1.5; migrate runs beside the sidecar: 3.5 — the peak.
    assert_eq!(p.request, list(&[("cpu", 3_500)]));
}

#[test]
fn explicit_priority_wins_and_builtin_classes_exist() {
    let p = one_pod("spec:\n  priority: 42\n  priorityClassName: nowhere\n  containers: []\n");
    assert_eq!(p.priority, 42);
    let p = one_pod("spec:\n  priorityClassName: system-node-critical\n  containers: []\n");
    assert_eq!(p.priority, 2_000_001_000);
    let p = one_pod("spec:\n  priorityClassName: system-cluster-critical\n  containers: []\n");
    assert_eq!(p.priority, 2_000_000_000);
    let p = one_pod("spec:\n  containers: []\n");
    assert_eq!(p.priority, 0, "no class, no default");
}

#[test]
fn lowest_global_default_wins() {
    let text = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 50\nglobalDefault: true\n---\n\
                apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: b}\nvalue: 20\nglobalDefault: true\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n";
    let spec = cluster_spec(&objects("pc.yaml", text), &ConvertOptions::default()).unwrap();
    assert_eq!(spec.pods[0].priority, 20);
}

#[test]
fn unknown_phase_of_a_bound_pod_counts_as_running() {
    let p = one_pod("spec:\n  nodeName: n\n  containers: []\nstatus: {phase: Unknown}\n");
    assert_eq!(p.phase, PodPhase::Running);
    let p = one_pod("spec:\n  containers: []\nstatus: {phase: Unknown}\n");
    assert_eq!(p.phase, PodPhase::Pending);
    let p = one_pod("spec:\n  containers: []\nstatus: {phase: Succeeded}\n");
    assert_eq!(p.phase, PodPhase::Succeeded);
}

#[test]
fn scheduler_plugins_label_names_the_group() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {scheduling.x-k8s.io/pod-group: g}\nspec: {containers: []}\n";
    let spec = cluster_spec(&objects("p.yaml", text), &ConvertOptions::default()).unwrap();
    assert_eq!(spec.pods[0].group.as_deref(), Some("g"));
    assert_eq!(spec.pods[0].namespace, "default");
}

#[test]
fn queue_spec_state_wins_over_status() {
    let text = "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec: {state: Closed}\nstatus: {state: Open}\n";
    let spec = cluster_spec(&objects("q.yaml", text), &ConvertOptions::default()).unwrap();
    assert_eq!(spec.queues[0].state, QueueState::Closed);
}

#[test]
fn topology_without_islands_is_one_domain() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {nvidia.com/gpu: 2}}\n---\n\
                apiVersion: scheduling.basalt.dev/v1alpha1\nkind: NodeTopology\nmetadata: {name: n}\n\
                spec: {gpus: [{index: 1, model: A100}, {index: 0, model: A100}]}\n";
    let spec = cluster_spec(&objects("t.yaml", text), &ConvertOptions::default()).unwrap();
    let gpus = spec.nodes[0].gpus.as_ref().unwrap();
    assert_eq!(
        gpus.iter()
            .map(|g| (g.index, g.nvlink_domain))
            .collect::<Vec<_>>(),
        [(0, 0), (1, 0)]
    );
}

/// A pod (uid `u-1`) whose template's claim `p-gpu-x` exists, controlled by `owner`.
fn pod_with_template_claim(owner: &str) -> basalt_engine::PodSpec {
    let text = format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: ns, uid: u-1}}
spec:
  schedulerName: basalt
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
  containers: [{{name: a}}]
status:
  resourceClaimStatuses: [{{name: gpu, resourceClaimName: p-gpu-x}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: p-gpu-x
  namespace: ns
  ownerReferences: [{{apiVersion: v1, kind: Pod, name: p, uid: {owner}, controller: true}}]
spec:
  devices:
    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.example.com}}}}]
"
    );
    let spec = cluster_spec(&objects("pod.yaml", &text), &ConvertOptions::default()).unwrap();
    spec.pods.into_iter().next().unwrap()
}

#[test]
fn a_templates_claim_must_be_the_pods_own() {
    let p = pod_with_template_claim("u-1");
    assert!(p.waits.is_empty(), "{:?}", p.waits);
    assert_eq!(p.claims, ["ns/p-gpu-x"]);
    let need = p.rules.claims.expect("its claim is asked");
    // The class does not exist: refused with a reason, never allocated.
    assert!(
        matches!(&need.claims[0].state, basalt_engine::dra::ClaimState::Refused(m) if m.contains("device class gpu.example.com does not exist")),
        "{need:?}"
    );

    let p = pod_with_template_claim("someone-else");
    assert!(
        (p.waits.iter()).any(|w| matches!(w, basalt_engine::Wait::Claim(m) if m.contains("was not made for this pod"))),
        "{:?}",
        p.waits
    );
}

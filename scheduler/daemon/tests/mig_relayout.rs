//! End to end, the MIG re-layout handoff (issue 37): the real `basalt-scheduler` binary (config
//! `mig: {relayout: true}`), the node agent's round against a fake NVML, and the in-memory API
//! server, all over loopback.
//!
//! The agent runs in the test's process: `reconcile_once` every 100 ms, the function the
//! `basalt-nodeagent run` loop calls each tick, with its own kube client on the same kubeconfig.
//! Cargo gives a test the path of its own package's binaries only, and running the agent
//! in-process lets the test start and end a process on a MIG instance (the fake backend's
//! `set_processes`) while both run.
//!
//! The fake GPU is an H100 already in MIG mode: the agent never switches MIG mode (that needs a
//! GPU reset), so a GPU not in MIG mode cannot be re-laid; it reports `failed` for one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use basalt_apiserver::PatchKind;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::publish::{reconcile_once, AgentConfig};
use common::*;
use serde_json::{json, Value};

const NODE: &str = "mig-1";

/// One H100 80GB in MIG mode; `instances` is the YAML list of its GPU instances.
fn h100(instances: &str) -> FakeBackend {
    let yaml = format!(
        r#"driverVersion: "550.54.15"
gpus:
- index: 0
  uuid: "GPU-5e1c1a5c-9f4b-2f7e-8d3a-61b0c0de0000"
  name: "NVIDIA H100 80GB HBM3"
  memoryMiB: 81559
  pciBusId: "00000000:18:00.0"
  pciDeviceId: "0x233010DE"
  mig:
    enabled: true
    instances: {instances}
pcieTopology:
- - self
"#
    );
    FakeBackend::from_yaml("h100-mig", &yaml).expect("fixture parses")
}

fn agent_config() -> AgentConfig {
    AgentConfig {
        node_name: NODE.into(),
        dry_run: false,
        no_mig: false,
        mig_config_map: "gpu-operator/default-mig-parted-config".parse().unwrap(),
        mig_config_key: "config.yaml".into(),
        device_plugin_config_map: "gpu-operator/basalt-device-plugin-config".parse().unwrap(),
        mig_min_interval: Duration::from_secs(600),
        restart_device_plugin: None,
        pod_resources: None,
    }
}

/// The agent's rounds, every 100 ms, as a task of the test's runtime until the test ends.
fn start_agent(c: &Cluster, backend: Arc<FakeBackend>) {
    let kubeconfig = c.dir.path().join("kubeconfig");
    let cfg = agent_config();
    tokio::spawn(async move {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kube config");
        let client = kube::Client::try_from(config).expect("client");
        loop {
            // A failed round (a conflict, the server gone at the end) is retried next tick,
            // as the binary's loop does.
            let _ = reconcile_once(&client, backend.as_ref(), &cfg).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// A node whose device plugin runs NVIDIA's mixed strategy, advertising `mig` (resource, count).
fn mig_node(mig: &[(&str, u32)]) -> Value {
    let mut n = node(NODE, 0);
    n["metadata"]["labels"] = json!({"nvidia.com/mig.strategy": "mixed"});
    for (resource, count) in mig {
        n["status"]["allocatable"][resource] = json!(count.to_string());
    }
    n
}

fn mig_pod(name: &str, group: &str, profile: &str) -> Value {
    let resource = format!("nvidia.com/mig-{profile}");
    let mut p = pod(name, group, 0);
    p["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "1", resource.clone(): "1"},
        "limits": {resource: "1"},
    });
    p
}

/// The cluster, the scheduler with `mig: {relayout: true}`, a queue.
async fn start(c: &Cluster) -> Scheduler {
    let config = c.dir.path().join("config.yaml");
    std::fs::write(&config, "mig:\n  relayout: true\n").unwrap();
    c.create(queue("q"));
    c.start_with(&["--config", config.to_str().unwrap()])
}

fn topology(c: &Cluster) -> Value {
    (c.server
        .get("scheduling.basalt.dev/v1alpha1", "NodeTopology", "", NODE))
    .unwrap_or_default()
}

/// GPU 0's entry in the NodeTopology's `status.migLayouts`.
fn relayout_status(c: &Cluster) -> Value {
    let t = topology(c);
    (t["status"]["migLayouts"].as_array().into_iter().flatten())
        .find(|s| s["gpu"] == 0)
        .cloned()
        .unwrap_or_default()
}

/// The PodGroup's conditions with `reason`.
fn group_reason(c: &Cluster, group: &str, reason: &str) -> Option<Value> {
    let g = c.group(group);
    (g["status"]["conditions"].as_array().into_iter().flatten())
        .find(|x| x["reason"] == reason)
        .cloned()
}

/// (profile, start) of GPU 0's instances, as the fake driver has them.
fn instances(b: &FakeBackend) -> Vec<(String, u32)> {
    use basalt_nodeagent::backend::GpuBackend;
    let raw = b.report().unwrap();
    let mut v: Vec<(String, u32)> = (raw.gpus[0].mig.iter().flat_map(|m| &m.instances))
        .map(|i| (i.profile.clone(), i.start))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_asking_a_missing_profile_gets_its_gpu_relaid_and_binds() {
    let c = cluster(Default::default()).await;
    c.create(mig_node(&[]));
    let gpu = Arc::new(h100("[]"));
    start_agent(&c, gpu.clone());
    eventually("the agent publishes the NodeTopology", || {
        topology(&c)["spec"]["gpus"]
            .as_array()
            .is_some_and(|g| g.len() == 1)
    })
    .await;
    let _s = start(&c).await;
    c.create(group("g", 1, "q"));
    c.create(mig_pod("p", "g", "3g.40gb"));

    // The scheduler asks for a layout holding a 3g.40gb on GPU 0; the agent applies it.
    eventually("the daemon writes spec.migLayouts for GPU 0", || {
        let t = topology(&c);
        (t["spec"]["migLayouts"].as_array().into_iter().flatten()).any(|w| {
            w["gpu"] == 0
                && (w["layout"].as_array().into_iter().flatten()).any(|p| p["profile"] == "3g.40gb")
        })
    })
    .await;
    eventually("the agent reports the layout applied", || {
        relayout_status(&c)["phase"] == "applied"
    })
    .await;
    let laid = instances(&gpu);
    assert!(
        laid.iter().any(|(p, _)| p == "3g.40gb"),
        "instances on the GPU: {laid:?}"
    );
    let s = relayout_status(&c);
    assert_eq!(s["appliedGeneration"], s["observedGeneration"], "{s}");
    // Until the device plugin advertises the new instances the pod cannot bind.
    assert_eq!(c.node_of("p"), None);

    // In a real cluster NVIDIA's device plugin now advertises the instances (after its restart,
    // docs/nodeagent.md); here the test patches the Node's allocatable as the plugin would.
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for (profile, _) in &laid {
        *counts
            .entry(format!("nvidia.com/mig-{profile}"))
            .or_default() += 1;
    }
    let advertised: serde_json::Map<String, Value> = (counts.iter())
        .map(|(resource, count)| (resource.clone(), json!(count.to_string())))
        .collect();
    c.server
        .patch_status(
            "v1",
            "Node",
            "",
            NODE,
            PatchKind::Merge,
            &json!({"status": {"allocatable": advertised, "capacity": advertised}}),
        )
        .expect("node allocatable patched");

    eventually("the pod binds to the re-laid node", || {
        c.node_of("p").as_deref() == Some(NODE)
    })
    .await;
    // Bound: nothing more is asked of the GPU.
    assert_eq!(relayout_status(&c)["phase"], "applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_gpu_is_refused_the_pod_waits_and_its_deletion_withdraws_the_layout() {
    let c = cluster(Default::default()).await;
    // A 1g.10gb instance, running a process nobody's pod accounts for (a pod of another
    // scheduler, a process outside Kubernetes): the scheduler sees an idle GPU, NVML does not.
    let busy = r#"
    - id: 1
      profile: "1g.10gb"
      start: 0
      size: 1
      computeInstances:
      - id: 0
        slices: 1
        processes: 1"#;
    c.create(mig_node(&[("nvidia.com/mig-1g.10gb", 1)]));
    let gpu = Arc::new(h100(busy));
    start_agent(&c, gpu.clone());
    eventually("the agent publishes the NodeTopology", || {
        topology(&c)["spec"]["gpus"]
            .as_array()
            .is_some_and(|g| g.len() == 1)
    })
    .await;
    let _s = start(&c).await;
    c.create(group("g", 1, "q"));
    c.create(mig_pod("p", "g", "3g.40gb"));

    eventually("the agent refuses the re-layout: busy", || {
        let s = relayout_status(&c);
        s["phase"] == "refused" && s["reason"].as_str().is_some_and(|r| r.starts_with("busy:"))
    })
    .await;
    eventually("the PodGroup waits with reason MigRelayout", || {
        group_reason(&c, "g", "MigRelayout").is_some()
    })
    .await;
    // Nothing was destroyed, and the pod stays pending.
    assert_eq!(instances(&gpu), vec![("1g.10gb".to_string(), 0)]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(c.node_of("p"), None);
    assert_eq!(relayout_status(&c)["phase"], "refused");
    assert!(group_reason(&c, "g", "MigRelayout").is_some());

    // The pod is deleted: nobody waits for the layout any more, so it is withdrawn (else the
    // agent would re-lay the GPU for nobody once its process ends), and the agent's status of
    // it goes with it. The GPU keeps its instance.
    c.server.delete("v1", "Pod", "default", "p").unwrap();
    eventually("the daemon withdraws GPU 0's wanted layout", || {
        let t = topology(&c);
        !(t["spec"]["migLayouts"].as_array().into_iter().flatten()).any(|w| w["gpu"] == 0)
    })
    .await;
    eventually("the agent drops its status", || {
        relayout_status(&c).is_null()
    })
    .await;
    assert_eq!(instances(&gpu), vec![("1g.10gb".to_string(), 0)]);
}

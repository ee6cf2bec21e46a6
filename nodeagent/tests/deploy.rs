//! The DaemonSet manifest parses as Kubernetes objects and grants what the agent uses.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use serde::Deserialize;

fn docs() -> Vec<serde_json::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/nodeagent/nodeagent.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .collect()
}

fn kind(kind: &str) -> serde_json::Value {
    docs().into_iter().find(|d| d["kind"] == kind).unwrap()
}

#[test]
fn daemonset_is_wired_for_gpu_nodes() {
    let ds: DaemonSet = serde_json::from_value(kind("DaemonSet")).unwrap();
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.node_selector
            .unwrap()
            .get("nvidia.com/gpu.present")
            .map(String::as_str),
        Some("true")
    );
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap();
    assert_eq!(args[0], "run");
    let env = c.env.clone().unwrap();
    let node = env.iter().find(|e| e.name == "NODE_NAME").unwrap();
    assert_eq!(
        node.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName"
    );
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 9400);
    assert_eq!(
        c.liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/healthz")
    );
    // It must not take a GPU from the workloads.
    assert!(c
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()
        .get("nvidia.com/gpu")
        .is_none());
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("basalt-nodeagent")
    );
}

#[test]
fn rbac_grants_exactly_what_the_agent_calls() {
    let cr: ClusterRole = serde_json::from_value(kind("ClusterRole")).unwrap();
    let rules = cr.rules.unwrap();
    let verbs = |res: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.resources.as_ref().unwrap().iter().any(|x| x == res))
            .flat_map(|r| r.verbs.clone())
            .collect()
    };
    assert_eq!(verbs("nodes"), ["get", "patch"]);
    assert_eq!(verbs("nodetopologies"), ["get", "create", "update"]);
    assert_eq!(verbs("nodetopologies/status"), ["patch"]);
    // Events about its Node, in `default` only.
    let events = docs()
        .into_iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "basalt-nodeagent-events")
        .unwrap();
    let events: Role = serde_json::from_value(events).unwrap();
    assert_eq!(events.metadata.namespace.as_deref(), Some("default"));
    let rules = events.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["events".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["create"]);
    let role: Role = serde_json::from_value(kind("Role")).unwrap();
    assert!(role.rules.unwrap().iter().all(|r| !r
        .verbs
        .iter()
        .any(|v| v == "delete" || v == "list" || v == "watch")));
    // Pods: listed and deleted in the GPU operator's namespace only, to restart the device
    // plugin after a MIG change (the admission policy holds it to that pod on its node).
    let plugin = docs()
        .into_iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "basalt-nodeagent-device-plugin")
        .unwrap();
    let plugin: Role = serde_json::from_value(plugin).unwrap();
    assert_eq!(plugin.metadata.namespace.as_deref(), Some("gpu-operator"));
    let rules = plugin.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["pods".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["list", "delete"]);
    let ds: DaemonSet = serde_json::from_value(kind("DaemonSet")).unwrap();
    let args = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    let restart = "--restart-device-plugin=gpu-operator/app=nvidia-device-plugin-daemonset";
    assert!(args.iter().any(|a| a == restart), "{args:?}");
}

//! The manifests in deploy/ render with `kubectl kustomize` and say what the daemon needs: typed
//! objects parse, the config parses as the scheduler's config, the RBAC grants every verb the
//! daemon uses, and the examples read as Basalt objects.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use serde::Deserialize;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn kustomize() -> Option<Vec<serde_json::Value>> {
    let out = match Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping: kubectl is not available ({e})");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| serde_json::Value::deserialize(doc).expect("rendered YAML"))
            .collect(),
    )
}

fn find<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} not rendered"))
}

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|g| g == group)
            && r.resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
            && r.resource_names.is_none()
    })
}

#[test]
fn kustomize_renders_a_working_scheduler_install() {
    let Some(docs) = kustomize() else { return };
    let deployment: Deployment =
        serde_json::from_value(find(&docs, "Deployment", "basalt-scheduler").clone()).unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.spec.unwrap().containers[0];
    let args = container.args.clone().unwrap();
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert!(
        args.iter().any(|a| a == "--config=/etc/basalt/config.yaml"),
        "{args:?}"
    );
    // Liveness on cycle progress, readiness on leading: a follower is never Ready, so a rolling
    // update could not replace the leader; the Deployment recreates instead.
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    assert_eq!(
        spec.strategy.and_then(|s| s.type_).as_deref(),
        Some("Recreate")
    );

    let config: ConfigMap =
        serde_json::from_value(find(&docs, "ConfigMap", "basalt-scheduler").clone()).unwrap();
    let text = &config.data.unwrap()["config.yaml"];
    let parsed: basalt_plugins::Config = serde_yaml::from_str(text).expect("scheduler config");
    parsed.validate().unwrap();

    let role: ClusterRole =
        serde_json::from_value(find(&docs, "ClusterRole", "basalt-scheduler").clone()).unwrap();
    let rules = role.rules.unwrap();
    for (group, resource, verb) in [
        ("", "pods", "watch"),
        ("", "nodes", "list"),
        ("", "pods", "patch"),
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("scheduling.basalt.dev", "podgroups", "watch"),
        ("scheduling.basalt.dev", "podgroups", "create"),
        ("scheduling.basalt.dev", "podgroups", "patch"),
        ("scheduling.basalt.dev", "podgroups", "delete"),
        ("scheduling.basalt.dev", "podgroups/status", "patch"),
        ("scheduling.basalt.dev", "queues/status", "patch"),
        ("scheduling.basalt.dev", "nodetopologies", "list"),
        ("scheduling.volcano.sh", "podgroups", "watch"),
        ("scheduling.volcano.sh", "queues", "list"),
        ("scheduling.volcano.sh", "podgroups/status", "patch"),
        ("scheduling.volcano.sh", "queues/status", "patch"),
        ("topology.volcano.sh", "hypernodes", "get"),
        ("topology.volcano.sh", "hypernodes", "list"),
        ("topology.volcano.sh", "hypernodes", "watch"),
        ("batch", "jobs", "get"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("kubeflow.org", "pytorchjobs", "get"),
    ] {
        assert!(
            allows(&rules, group, resource, verb),
            "{verb} {group}/{resource} not granted"
        );
    }
    // Least privilege: nothing may delete pods or nodes except through the eviction API.
    assert!(!allows(&rules, "", "pods", "delete"));
    assert!(!allows(&rules, "", "nodes", "patch"));
    // Volcano's objects are read and their status written, never created or changed.
    assert!(!allows(
        &rules,
        "scheduling.volcano.sh",
        "podgroups",
        "create"
    ));
    assert!(!allows(
        &rules,
        "scheduling.volcano.sh",
        "podgroups",
        "patch"
    ));
    assert!(!allows(
        &rules,
        "topology.volcano.sh",
        "hypernodes",
        "patch"
    ));
    // The Lease: created, then read and patched (with its resourceVersion) by name only.
    let lease_role: k8s_openapi::api::rbac::v1::Role =
        serde_json::from_value(find(&docs, "Role", "basalt-scheduler-leader").clone()).unwrap();
    let lease_rules = lease_role.rules.unwrap();
    assert!(allows(
        &lease_rules,
        "coordination.k8s.io",
        "leases",
        "create"
    ));
    for verb in ["get", "patch"] {
        assert!(
            lease_rules.iter().any(|r| {
                r.resources.as_deref().unwrap_or_default() == ["leases"]
                    && r.resource_names.as_deref().unwrap_or_default() == ["basalt-scheduler"]
                    && r.verbs.iter().any(|v| v == verb)
            }),
            "{verb} on its own lease not granted"
        );
    }
    for crd in ["podgroups", "queues", "nodetopologies"] {
        find(
            &docs,
            "CustomResourceDefinition",
            &format!("{crd}.scheduling.basalt.dev"),
        );
    }
}

#[test]
fn examples_read_as_basalt_objects() {
    let path = deploy().join("examples/training.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let loaded = basalt_crds::read_objects(&path.display().to_string(), &text).unwrap();
    let kinds: Vec<&str> = loaded.objects.iter().map(|(_, o)| o.kind()).collect();
    assert_eq!(kinds, ["Queue", "PriorityClass", "PodGroup"]);
    // The Job itself is not something the planner reads; it is skipped with a warning.
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
}

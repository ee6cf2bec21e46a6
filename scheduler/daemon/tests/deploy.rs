//! The manifests in deploy/ render with `kubectl kustomize` and say what the daemon needs: typed
//! objects parse, the config parses as the scheduler's config, the RBAC grants every verb the
//! daemon uses, and the examples read as Basalt objects.

mod render;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use render::{deploy, find, kustomize, with_component};

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
        ("", "nodes", "patch"),
        ("", "pods", "patch"),
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        ("", "persistentvolumeclaims", "list"),
        ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumes", "list"),
        ("", "persistentvolumes", "watch"),
        ("", "persistentvolumes", "patch"),
        ("storage.k8s.io", "storageclasses", "list"),
        ("storage.k8s.io", "storageclasses", "watch"),
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
        ("scheduling.x-k8s.io", "podgroups", "list"),
        ("scheduling.x-k8s.io", "podgroups", "watch"),
        ("topology.volcano.sh", "hypernodes", "list"),
        ("topology.volcano.sh", "hypernodes", "watch"),
        // DRA: what `dra.rs` watches and `apply/resource_claims.rs` writes.
        ("resource.k8s.io", "deviceclasses", "list"),
        ("resource.k8s.io", "deviceclasses", "watch"),
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims", "list"),
        ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceclaims", "patch"),
        ("resource.k8s.io", "resourceclaims/status", "update"),
        ("resource.k8s.io", "resourceclaims/binding", "update"),
        ("batch", "jobs", "get"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("kubeflow.org", "pytorchjobs", "get"),
    ] {
        assert!(
            allows(&rules, group, resource, verb),
            "{verb} {group}/{resource} not granted"
        );
    }
    // Least privilege: nothing may delete pods or nodes except through the eviction API; nodes
    // are patched only for HAMi's lock annotation, never updated.
    assert!(!allows(&rules, "", "pods", "delete"));
    assert!(!allows(&rules, "", "nodes", "delete"));
    assert!(!allows(&rules, "", "nodes", "update"));
    // Claims are only annotated (selected-node) and volumes reserved (claimRef); classes and
    // namespaces only read.
    for (group, resource, verb) in [
        ("", "persistentvolumeclaims", "update"),
        ("", "persistentvolumeclaims", "delete"),
        ("", "persistentvolumes", "update"),
        ("", "persistentvolumes", "delete"),
        ("storage.k8s.io", "storageclasses", "patch"),
        ("", "namespaces", "patch"),
    ] {
        assert!(
            !allows(&rules, group, resource, verb),
            "{verb} {group}/{resource} granted"
        );
    }
    // DRA: classes and slices are the drivers'; claims are the resourceclaim controller's to
    // make and delete, and status.devices (resourceclaims/driver) the drivers'.
    for (resource, verb) in [
        ("deviceclasses", "patch"),
        ("resourceslices", "patch"),
        ("resourceslices", "update"),
        ("resourceclaims", "create"),
        ("resourceclaims", "delete"),
        ("resourceclaims/driver", "update"),
        ("resourceclaims/driver", "arbitrary-node:update"),
    ] {
        assert!(
            !allows(&rules, "resource.k8s.io", resource, verb),
            "{verb} resource.k8s.io/{resource} granted"
        );
    }
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
    // scheduler-plugins' groups are only read: their status is its controller's.
    for verb in ["create", "patch", "update"] {
        assert!(!allows(&rules, "scheduling.x-k8s.io", "podgroups", verb));
        assert!(!allows(
            &rules,
            "scheduling.x-k8s.io",
            "podgroups/status",
            verb
        ));
    }
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
    // The Job is read as a workload (its pods name the PodGroup, which wins).
    assert_eq!(kinds, ["Queue", "PriorityClass", "PodGroup", "Job"]);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    // The DRA variant: a claim template, the PodGroup and a Job whose pods use the template.
    let path = deploy().join("examples/dra/training.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let loaded = basalt_crds::read_objects(&path.display().to_string(), &text).unwrap();
    let kinds: Vec<&str> = loaded.objects.iter().map(|(_, o)| o.kind()).collect();
    assert_eq!(kinds, ["ResourceClaimTemplate", "PodGroup", "Job"]);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let selector = &text[text.find("expression: ").unwrap() + "expression: ".len()..];
    let selector = selector.lines().next().unwrap();
    basalt_cel::Selector::compile(selector).expect("the example's selector compiles");
}

// ---------------------------------------------------------------------------------------------
// The node agent
// ---------------------------------------------------------------------------------------------

const NODEAGENT_SA: &str = "system:serviceaccount:basalt-system:basalt-nodeagent";

#[test]
fn the_node_agent_may_write_only_its_own_node() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let Some(docs) = kustomize() else { return };
    find(&docs, "ServiceAccount", "basalt-nodeagent");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(
        find(
            &docs,
            "ValidatingAdmissionPolicy",
            "basalt-nodeagent-own-node",
        )
        .clone(),
    )
    .expect("the policy parses as admissionregistration.k8s.io/v1");
    let spec = policy.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    // It applies to the agent's ServiceAccount, and only to it.
    let conditions = spec.match_conditions.unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(
        conditions[0].expression,
        format!("request.userInfo.username == '{NODEAGENT_SA}'")
    );
    // It covers every write the agent makes that names a node.
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    let covers = |resource: &str, op: &str| {
        rules.iter().any(|r| {
            r.resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|x| x == resource)
                && r.operations
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|o| o == op)
        })
    };
    for (resource, op) in [
        ("nodes", "UPDATE"),
        ("nodetopologies", "CREATE"),
        ("nodetopologies", "UPDATE"),
        ("nodetopologies/status", "UPDATE"),
        ("events", "CREATE"),
        ("configmaps", "CREATE"),
        ("configmaps", "UPDATE"),
    ] {
        assert!(covers(resource, op), "{op} {resource} not covered");
    }
    // The node comes from the token's node-name claim, and every name is checked against it.
    let variables = spec.variables.unwrap();
    let node_name = variables.iter().find(|v| v.name == "nodeName").unwrap();
    assert!(node_name
        .expression
        .contains("request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"));
    let validations = spec.validations.unwrap();
    let checks = |fragment: &str| validations.iter().any(|v| v.expression.contains(fragment));
    assert!(checks("object.metadata.name == variables.nodeName"));
    assert!(checks("object.involvedObject.name == variables.nodeName"));
    assert!(checks("object.spec == oldObject.spec"));
    assert!(checks("variables.ownedLabels"));
    assert!(checks("variables.ownedAnnotations"));
    // In the device plugin's ConfigMap, and as the device-plugin label, only its own key: the
    // one `nodeagent/src/timeslice.rs` writes.
    let device_key = variables.iter().find(|v| v.name == "deviceKey").unwrap();
    assert_eq!(device_key.expression, "'basalt-ts-' + variables.nodeName");
    assert!(checks("k == variables.deviceKey"));
    assert!(checks("== variables.deviceKey"));
    assert!(checks(
        "object.metadata.name == 'basalt-device-plugin-config'"
    ));
    // The labels and annotation it may change are exactly the agent's own.
    let owned = |name: &str| {
        &variables
            .iter()
            .find(|v| v.name == name)
            .unwrap()
            .expression
    };
    assert_eq!(
        owned("ownedLabels"),
        "['nvidia.com/gpu.clique', 'nvidia.com/device-plugin.config']"
    );
    assert_eq!(
        owned("ownedAnnotations"),
        "['scheduling.basalt.dev/clique-label-owner']"
    );
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(
        find(
            &docs,
            "ValidatingAdmissionPolicyBinding",
            "basalt-nodeagent-own-node",
        )
        .clone(),
    )
    .unwrap();
    let binding = binding.spec.unwrap();
    assert_eq!(
        binding.policy_name.as_deref(),
        Some("basalt-nodeagent-own-node")
    );
    assert_eq!(binding.validation_actions, Some(vec!["Deny".to_string()]));
}

#[test]
fn the_node_agent_is_unprivileged_unless_it_applies_mig_layouts() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::PodSpec;
    let pod_of = |docs: &[serde_json::Value]| -> PodSpec {
        let ds: DaemonSet =
            serde_json::from_value(find(docs, "DaemonSet", "basalt-nodeagent").clone()).unwrap();
        ds.spec.unwrap().template.spec.unwrap()
    };
    let Some(docs) = kustomize() else { return };
    let pod = pod_of(&docs);
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("basalt-nodeagent")
    );
    assert!(pod.host_pid != Some(true) && pod.host_network != Some(true));
    assert!(
        (pod.volumes.iter().flatten()).all(|v| v.host_path.is_none()),
        "no host paths"
    );
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let sc = c.security_context.clone().unwrap_or_default();
        assert_eq!(sc.privileged, Some(false), "{} is privileged", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        let caps = sc.capabilities.unwrap_or_default();
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]), "{}", c.name);
        assert_eq!(caps.add, None, "{}", c.name);
    }
    let args = pod.containers[0].args.clone().unwrap();
    assert!(args.iter().any(|a| a == "--no-mig"), "{args:?}");

    // The MIG component: privileged (creating GPU instances needs root and /dev/nvidia-caps),
    // MIG changes on; the policy and the rest of the install unchanged.
    let docs = with_component("nodeagent/mig").unwrap();
    let c = &pod_of(&docs).containers[0];
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(true));
    // The API server refuses allowPrivilegeEscalation: false beside privileged: true.
    assert_eq!(sc.allow_privilege_escalation, None);
    // Root, said here: the image's own user is not (deploy/images), and the MIG capability
    // files are root's alone.
    assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(0), Some(false)));
    // The NVIDIA runtime mounts the MIG configuration capability only when asked.
    let env = c.env.clone().unwrap();
    let mig_config = env.iter().find(|e| e.name == "NVIDIA_MIG_CONFIG_DEVICES");
    assert_eq!(mig_config.and_then(|e| e.value.as_deref()), Some("all"));
    let args = c.args.clone().unwrap();
    assert!(!args.iter().any(|a| a == "--no-mig"), "{args:?}");
    // It asks the kubelet which pods hold MIG devices before a re-layout: the socket's
    // directory, read-only, and the flag naming the socket in it.
    let socket = "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock";
    assert!(args.iter().any(|a| a == socket), "{args:?}");
    let mounts = c.volume_mounts.clone().unwrap();
    assert!(mounts
        .iter()
        .any(|m| m.mount_path == "/var/lib/kubelet/pod-resources" && m.read_only == Some(true)));
    let volumes = pod_of(&docs).volumes.clone().unwrap();
    let host = volumes[0].host_path.as_ref().unwrap();
    assert_eq!(host.path, "/var/lib/kubelet/pod-resources");
    assert!(args
        .iter()
        .any(|a| a.starts_with("--metrics-bind-address=127.0.0.1:")));
    find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-nodeagent-own-node",
    );
    find(&docs, "Deployment", "basalt-scheduler");
}

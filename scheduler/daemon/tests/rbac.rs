//! Least privilege, checked on the rendered install (`kubectl kustomize deploy/`): every verb
//! granted is a row of the table in deploy/README.md that says why (and every row is granted),
//! the writes RBAC cannot narrow are held by a bound admission policy, no container may
//! escalate privileges but the documented MIG variant, and /metrics stays on loopback.

mod render;

use std::collections::BTreeSet;

use serde_json::Value;

use render::{all, deploy, find, kustomize, with_component};

/// (role, API group, resource, verb, names): one granted verb. The role is `ClusterRole NAME`
/// or `Role NAMESPACE/NAME`, the group `core` for the core group, names the rule's
/// `resourceNames` joined by `, ` or `any`.
type Grant = (String, String, String, String, String);

fn role_of(doc: &Value) -> String {
    let m = &doc["metadata"];
    match doc["kind"].as_str() {
        Some("Role") => format!("Role {}/{}", str(&m["namespace"]), str(&m["name"])),
        _ => format!("ClusterRole {}", str(&m["name"])),
    }
}

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// `s`, or `empty` when it is empty.
fn or(s: String, empty: &str) -> String {
    if s.is_empty() {
        empty.into()
    } else {
        s
    }
}

fn strings(v: &Value) -> Vec<String> {
    (v.as_array().into_iter().flatten())
        .map(|s| str(s).to_string())
        .collect()
}

/// Every verb every Role and ClusterRole of `docs` grants.
fn granted(docs: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for doc in all(docs, "ClusterRole").chain(all(docs, "Role")) {
        let role = role_of(doc);
        for rule in doc["rules"].as_array().expect("rules") {
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "{role}: non-resource URLs"
            );
            let names = or(strings(&rule["resourceNames"]).join(", "), "any");
            for group in strings(&rule["apiGroups"]) {
                let group = or(group, "core");
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        assert!(
                            group != "*" && resource != "*" && verb != "*",
                            "{role}: wildcard"
                        );
                        let (r, g, n) = (role.clone(), group.clone(), names.clone());
                        out.insert((r, g, resource.clone(), verb, n));
                    }
                }
            }
        }
    }
    out
}

/// The rows of the table under `## Permissions` in deploy/README.md, each expanded to its
/// verbs; a row without a justification fails.
fn justified() -> BTreeSet<Grant> {
    let text = std::fs::read_to_string(deploy().join("README.md")).unwrap();
    let section = text
        .split("\n## Permissions\n")
        .nth(1)
        .expect("deploy/README.md has a Permissions section");
    let section = section.split("\n## ").next().unwrap();
    let list = |cell: &str| -> Vec<String> { cell.split(',').map(|s| s.trim().into()).collect() };
    let mut out = BTreeSet::new();
    let rows = section.lines().filter(|l| l.starts_with('|')).skip(2);
    for row in rows {
        let cells: Vec<String> = row
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().replace('`', ""))
            .collect();
        let [role, group, resources, verbs, names, why] = &cells[..] else {
            panic!("a row of six cells: {row}");
        };
        assert!(why.len() > 10, "no justification: {row}");
        for resource in list(resources) {
            for verb in list(verbs) {
                let (r, g, n) = (role.clone(), group.clone(), names.clone());
                assert!(
                    out.insert((r, g, resource.clone(), verb, n)),
                    "twice in the table: {row}"
                );
            }
        }
    }
    out
}

#[test]
fn every_granted_verb_is_justified_in_the_readme_and_every_row_is_granted() {
    let Some(docs) = kustomize() else { return };
    let (grants, justified) = (granted(&docs), justified());
    let unjustified: Vec<_> = grants.difference(&justified).collect();
    assert!(
        unjustified.is_empty(),
        "granted but not in deploy/README.md's table: {unjustified:#?}"
    );
    let ungranted: Vec<_> = justified.difference(&grants).collect();
    assert!(
        ungranted.is_empty(),
        "in deploy/README.md's table but not granted: {ungranted:#?}"
    );
    // The MIG variant changes privileges, not permissions.
    let mig = with_component("nodeagent/mig").unwrap();
    assert_eq!(granted(&mig), grants);
}

/// Writes RBAC cannot narrow to the objects or fields a component owns, and the admission
/// operation each arrives as.
const GUARDED: &[(&str, &str, &str, &str)] = &[
    ("core", "pods", "patch", "UPDATE"),
    ("core", "nodes", "patch", "UPDATE"),
    ("core", "configmaps", "patch", "UPDATE"),
    ("core", "configmaps", "create", "CREATE"),
    ("scheduling.basalt.dev", "podgroups", "delete", "DELETE"),
    ("scheduling.basalt.dev", "queues", "create", "CREATE"),
    ("core", "pods", "delete", "DELETE"),
];

/// The ServiceAccount usernames a role is bound to.
fn subjects(docs: &[Value], role: &str) -> Vec<String> {
    let bindings = all(docs, "ClusterRoleBinding").chain(all(docs, "RoleBinding"));
    bindings
        .filter(|b| {
            let (kind, name) = (str(&b["roleRef"]["kind"]), str(&b["roleRef"]["name"]));
            match kind {
                "Role" => role == format!("Role {}/{name}", str(&b["metadata"]["namespace"])),
                _ => role == format!("ClusterRole {name}"),
            }
        })
        .flat_map(|b| b["subjects"].as_array().unwrap().clone())
        .map(|s| {
            assert_eq!(s["kind"], "ServiceAccount", "{role}: {s}");
            let (ns, name) = (str(&s["namespace"]), str(&s["name"]));
            format!("system:serviceaccount:{ns}:{name}")
        })
        .collect()
}

/// The policy holding `user`'s `op` on `group/resource`, bound with Deny, failing closed.
fn policy_for(docs: &[Value], user: &str, group: &str, resource: &str, op: &str) -> Option<String> {
    let group = if group == "core" { "" } else { group };
    let has = |v: &Value, x: &str| strings(v).iter().any(|s| s == x || s == "*");
    let policy = all(docs, "ValidatingAdmissionPolicy").find(|p| {
        let spec = &p["spec"];
        let only_user = format!("request.userInfo.username == '{user}'");
        spec["failurePolicy"] == "Fail"
            && (spec["matchConditions"].as_array().into_iter().flatten())
                .any(|c| c["expression"] == only_user.as_str())
            && (spec["matchConstraints"]["resourceRules"]
                .as_array()
                .into_iter()
                .flatten())
            .any(|r| {
                has(&r["apiGroups"], group)
                    && strings(&r["resources"]).iter().any(|x| x == resource)
                    && has(&r["operations"], op)
            })
            && !spec["validations"].as_array().is_none_or(Vec::is_empty)
    })?;
    let name = str(&policy["metadata"]["name"]);
    all(docs, "ValidatingAdmissionPolicyBinding")
        .any(|b| {
            b["spec"]["policyName"] == name && strings(&b["spec"]["validationActions"]) == ["Deny"]
        })
        .then(|| name.to_string())
}

#[test]
fn writes_rbac_cannot_narrow_are_held_by_a_bound_policy() {
    let Some(docs) = kustomize() else { return };
    let mut held = BTreeSet::new();
    for (role, group, resource, verb, _) in granted(&docs) {
        let Some(&(.., op)) = GUARDED
            .iter()
            .find(|g| (g.0, g.1, g.2) == (group.as_str(), resource.as_str(), verb.as_str()))
        else {
            continue;
        };
        let users = subjects(&docs, &role);
        assert!(!users.is_empty(), "{role} is bound to no one");
        for user in users {
            let policy = policy_for(&docs, &user, &group, &resource, op);
            let policy = policy.unwrap_or_else(|| {
                panic!("{verb} {resource} ({role}, {user}): no bound policy with failurePolicy Fail matches {op}")
            });
            held.insert((policy, resource.clone(), verb.clone()));
        }
    }
    // What the issue named: the scheduler's pod and node patches and PodGroup deletes, the
    // agent's device-plugin ConfigMap.
    for (policy, resource, verb) in [
        ("basalt-scheduler-owned-metadata", "pods", "patch"),
        ("basalt-scheduler-owned-metadata", "nodes", "patch"),
        ("basalt-scheduler-auto-podgroups", "podgroups", "delete"),
        ("basalt-scheduler-default-queue", "queues", "create"),
        ("basalt-nodeagent-own-node", "configmaps", "patch"),
        ("basalt-nodeagent-own-node", "configmaps", "create"),
        ("basalt-nodeagent-own-node", "pods", "delete"),
    ] {
        let key = (policy.to_string(), resource.to_string(), verb.to_string());
        assert!(held.contains(&key), "{key:?} not held: {held:?}");
    }
}

#[test]
fn the_scheduler_policies_name_exactly_what_it_writes() {
    let Some(docs) = kustomize() else { return };
    let owned = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-scheduler-owned-metadata",
    );
    let variable = |name: &str| {
        let vars = owned["spec"]["variables"].as_array().unwrap();
        let v = vars.iter().find(|v| v["name"] == name).unwrap();
        str(&v["expression"]).to_string()
    };
    // The keys the daemon writes on pods and nodes, each named in its source.
    let source = ["src/apply/devices.rs", "../../crds/src/convert.rs"]
        .map(|p| std::fs::read_to_string(format!("{}/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap())
        .join("\n");
    let pod_annotations = [
        "scheduling.basalt.dev/pod-group",
        "hami.io/vgpu-node",
        "hami.io/vgpu-time",
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
        "hami.io/bind-phase",
        "hami.io/bind-time",
    ];
    let annotations = variable("ownedAnnotations");
    let quoted = |k: &str| format!("'{k}'");
    for key in pod_annotations.iter().chain(&["hami.io/mutex.lock"]) {
        assert!(
            source.contains(&format!("\"{key}\"")),
            "{key} not in the daemon"
        );
        assert!(
            annotations.contains(&quoted(key)),
            "{key} not owned: {annotations}"
        );
    }
    assert_eq!(
        annotations.matches("'").count(),
        2 * (pod_annotations.len() + 1)
    );
    assert_eq!(
        variable("ownedLabels"),
        "variables.isPod ? ['hami.io/vgpu-node'] : []"
    );
    let checks = |policy: &Value, fragment: &str| {
        (policy["spec"]["validations"].as_array().unwrap())
            .iter()
            .any(|v| str(&v["expression"]).contains(fragment))
    };
    assert!(checks(owned, "object.spec == oldObject.spec"));
    assert!(checks(owned, "variables.ownedLabels"));
    assert!(checks(owned, "variables.ownedAnnotations"));
    assert!(checks(owned, "ownerReferences"));
    // Deletes: only groups carrying the label the daemon puts on the groups it makes.
    let auto = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-scheduler-auto-podgroups",
    );
    let owners =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/owners.rs")).unwrap();
    assert!(owners.contains("AUTO_LABEL: &str = \"scheduling.basalt.dev/auto\""));
    assert!(checks(
        auto,
        "oldObject.metadata.labels['scheduling.basalt.dev/auto'] == 'true'"
    ));
}

#[test]
fn no_container_may_escalate_but_the_mig_variant() {
    let Some(docs) = kustomize() else { return };
    let containers = |docs: &[Value]| -> Vec<(String, Value)> {
        let workloads = ["Deployment", "DaemonSet", "StatefulSet", "Job"];
        let mut out = Vec::new();
        for w in docs
            .iter()
            .filter(|d| workloads.iter().any(|k| d["kind"] == *k))
        {
            let pod = &w["spec"]["template"]["spec"];
            for c in ["containers", "initContainers"]
                .iter()
                .flat_map(|k| pod[k].as_array().cloned().unwrap_or_default())
            {
                let name = format!(
                    "{} {}/{}",
                    str(&w["kind"]),
                    str(&w["metadata"]["name"]),
                    str(&c["name"])
                );
                out.push((name, c["securityContext"].clone()));
            }
        }
        out
    };
    let found = containers(&docs);
    assert!(found.len() >= 2, "{found:?}");
    for (name, sc) in &found {
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_ne!(sc["privileged"], true, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(
            sc["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{name}"
        );
    }
    // The MIG component (deploy/README.md, Privileges) is the one privileged container.
    let mig = containers(&with_component("nodeagent/mig").unwrap());
    let privileged: Vec<_> = mig
        .iter()
        .filter(|(_, sc)| sc["privileged"] == true)
        .collect();
    assert_eq!(privileged.len(), 1, "{mig:?}");
    assert_eq!(privileged[0].0, "DaemonSet basalt-nodeagent/nodeagent");
    let readme = std::fs::read_to_string(deploy().join("README.md")).unwrap();
    assert!(readme.contains("## Privileges") && readme.contains("`nodeagent/mig`"));
}

#[test]
fn metrics_stay_on_loopback() {
    // The scheduler's default; the node agent's is checked in its own tests (nodeagent/tests).
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_basalt-scheduler"))
        .arg("--help")
        .output()
        .unwrap();
    // Wrapped to the terminal's width: compared with the whitespace collapsed.
    let help = String::from_utf8_lossy(&help.stdout);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("--metrics-bind-address") && help.contains("[default: 127.0.0.1:8081]"),
        "{help}"
    );
    let Some(docs) = kustomize() else { return };
    for (kind, name) in [
        ("Deployment", "basalt-scheduler"),
        ("DaemonSet", "basalt-nodeagent"),
    ] {
        let c = &find(&docs, kind, name)["spec"]["template"]["spec"]["containers"][0];
        let args = strings(&c["args"]);
        let metrics = args
            .iter()
            .find_map(|a| a.strip_prefix("--metrics-bind-address="));
        assert!(
            metrics.is_none_or(|m| m.starts_with("127.0.0.1:")),
            "{name}: {args:?}"
        );
        // The probes stay on --listen, where the kubelet reaches them.
        assert!(
            args.iter().any(|a| a.starts_with("--listen=0.0.0.0:")),
            "{name}"
        );
    }
    // Nothing serves the old metrics port to the cluster.
    assert!(all(&docs, "Service").all(|s| !str(&s["metadata"]["name"]).contains("metrics")));
}

//! deploy/'s ValidatingAdmissionPolicies, evaluated on the writes Basalt makes and on the ones
//! they exist to refuse: a policy that refused the scheduler's own patch would stop every HAMi
//! bind (they fail closed), one that let an image swap through would be no policy.
//!
//! The `cel` crate stands in for the API server's CEL: same syntax and macros, no type check
//! (the API server's compile-time check is not run here).

mod policy;
mod render;

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Env, Value};
use serde_json::{json, Value as Json};

use policy::run;
use render::{find, kustomize};

const SCHEDULER: &str = "system:serviceaccount:basalt-system:basalt-scheduler";
const AGENT: &str = "system:serviceaccount:basalt-system:basalt-nodeagent";

struct Request<'a> {
    user: &'a str,
    node: Option<&'a str>,
    resource: &'a str,
    object: Json,
    old: Json,
}

/// `None` when the policy does not match the request's user; else the messages of the
/// validations that fail (empty: admitted).
fn admit(policy: &Json, r: &Request) -> Option<Vec<String>> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings).unwrap();
    let env = Arc::new(env);
    let extra = match r.node {
        Some(n) => json!({"authentication.kubernetes.io/node-name": [n]}),
        None => json!({}),
    };
    let request = json!({
        "userInfo": {"username": r.user, "extra": extra},
        "resource": {"resource": r.resource},
    });
    let mut vars = HashMap::from([
        ("request", cel::to_value(&request).unwrap()),
        ("object", cel::to_value(&r.object).unwrap()),
        ("oldObject", cel::to_value(&r.old).unwrap()),
    ]);
    let spec = &policy["spec"];
    for c in spec["matchConditions"].as_array().into_iter().flatten() {
        if run(&env, c["expression"].as_str().unwrap(), &vars) != Value::Bool(true) {
            return None;
        }
    }
    let mut variables: HashMap<String, Value> = HashMap::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        vars.insert("variables", Value::Map(variables.clone().into()));
        let value = run(&env, v["expression"].as_str().unwrap(), &vars);
        variables.insert(v["name"].as_str().unwrap().to_string(), value);
    }
    vars.insert("variables", Value::Map(variables.into()));
    let mut refused = Vec::new();
    for v in spec["validations"].as_array().unwrap() {
        let expr = v["expression"].as_str().unwrap();
        match run(&env, expr, &vars) {
            Value::Bool(true) => {}
            Value::Bool(false) => refused.push(match v["messageExpression"].as_str() {
                Some(m) => format!("{:?}", run(&env, m, &vars)),
                None => v["message"].as_str().unwrap_or(expr).to_string(),
            }),
            other => panic!("{expr}: not a bool: {other:?}"),
        }
    }
    Some(refused)
}

fn admitted(policy: &Json, r: Request) -> bool {
    admit(policy, &r).expect("the policy matches").is_empty()
}

fn merge(base: &Json, patch: Json) -> Json {
    let mut out = base.clone();
    json_merge(&mut out, patch);
    out
}

/// A JSON merge patch (RFC 7386), as the API server applies the daemon's.
fn json_merge(target: &mut Json, patch: Json) {
    let Json::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in patch {
        match v {
            Json::Null => {
                t.remove(&k);
            }
            v => json_merge(t.entry(k).or_insert(Json::Null), v),
        }
    }
}

fn pod() -> Json {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "labels": {"app": "train"},
            "annotations": {"team": "vision"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"}]},
        "spec": {"schedulerName": "basalt", "containers": [{"name": "c", "image": "trainer:1"}]},
    })
}

fn node() -> Json {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/hostname": "gpu-1"},
            "annotations": {"hami.io/node-nvidia-register": "GPU-1,10,81920,100,NVIDIA-H100,0,true:"}},
        "spec": {"podCIDR": "10.0.0.0/24"},
    })
}

#[test]
fn the_scheduler_may_write_only_the_pod_and_node_keys_it_owns() {
    let Some(docs) = kustomize() else { return };
    let policy = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-scheduler-owned-metadata",
    );
    let update = |resource, old: &Json, object: Json| Request {
        user: SCHEDULER,
        node: None,
        resource,
        object,
        old: old.clone(),
    };
    let (p, n) = (pod(), node());
    // What `apply/auto_groups.rs` and `apply/devices.rs` patch.
    let named = merge(
        &p,
        json!({"metadata": {"annotations": {"scheduling.basalt.dev/pod-group": "train-pg"}}}),
    );
    assert!(admitted(policy, update("pods", &p, named.clone())));
    let hami = merge(
        &named,
        json!({"metadata": {
            "labels": {"hami.io/vgpu-node": "gpu-1"},
            "annotations": {"hami.io/vgpu-node": "gpu-1", "hami.io/vgpu-time": "1765000000",
                "hami.io/vgpu-devices-to-allocate": "GPU-1,NVIDIA,20000,30:;",
                "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,20000,30:;",
                "hami.io/bind-phase": "allocating", "hami.io/bind-time": "1765000000"}}}),
    );
    assert!(admitted(policy, update("pods", &named, hami.clone())));
    let failed = merge(
        &hami,
        json!({"metadata": {"annotations": {"hami.io/bind-phase": "failed"}}}),
    );
    assert!(admitted(policy, update("pods", &hami, failed)));
    let locked = merge(
        &n,
        json!({"metadata": {"annotations": {"hami.io/mutex.lock": "2026-12-06T02:00:00Z,ml,train-0"}}}),
    );
    assert!(admitted(policy, update("nodes", &n, locked.clone())));
    let released = merge(
        &locked,
        json!({"metadata": {"annotations": {"hami.io/mutex.lock": null}}}),
    );
    assert!(admitted(policy, update("nodes", &locked, released)));

    // What it must never do.
    let refused = |resource, old: &Json, patch: Json| {
        let r = update(resource, old, merge(old, patch));
        let why = admit(policy, &r).unwrap();
        assert!(!why.is_empty(), "admitted: {resource} {}", r.object);
    };
    let image = json!({"spec": {"containers": [{"name": "c", "image": "evil:1"}]}});
    refused("pods", &p, image);
    refused(
        "pods",
        &p,
        json!({"metadata": {"annotations": {"team": "other"}}}),
    );
    refused(
        "pods",
        &p,
        json!({"metadata": {"annotations": {"team": null}}}),
    );
    refused(
        "pods",
        &p,
        json!({"metadata": {"labels": {"app": "other"}}}),
    );
    refused("pods", &p, json!({"metadata": {"labels": {"extra": "x"}}}));
    refused("pods", &p, json!({"metadata": {"ownerReferences": null}}));
    refused("pods", &p, json!({"metadata": {"finalizers": ["x/keep"]}}));
    // HAMi's pod keys are not the node's, nor the node's lock a pod's.
    refused(
        "pods",
        &p,
        json!({"metadata": {"annotations": {"hami.io/mutex.lock": "x"}}}),
    );
    refused(
        "nodes",
        &n,
        json!({"metadata": {"annotations": {"hami.io/bind-phase": "x"}}}),
    );
    refused(
        "nodes",
        &n,
        json!({"metadata": {"labels": {"hami.io/vgpu-node": "x"}}}),
    );
    refused("nodes", &n, json!({"spec": {"unschedulable": true}}));
    refused(
        "nodes",
        &n,
        json!({"metadata": {"annotations": {"hami.io/node-nvidia-register": "x"}}}),
    );

    // Anyone else's writes are not the policy's business.
    let mut other = update("pods", &p, merge(&p, image_patch()));
    other.user = "system:serviceaccount:ml:trainer";
    assert!(admit(policy, &other).is_none());
}

fn image_patch() -> Json {
    json!({"spec": {"containers": [{"name": "c", "image": "trainer:2"}]}})
}

#[test]
fn the_scheduler_deletes_only_its_auto_podgroups() {
    let Some(docs) = kustomize() else { return };
    let policy = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-scheduler-auto-podgroups",
    );
    let delete = |old: Json| Request {
        user: SCHEDULER,
        node: None,
        resource: "podgroups",
        object: Json::Null,
        old,
    };
    let group = |labels: Json| {
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train-pg", "namespace": "ml", "labels": labels}, "spec": {"minMember": 4}})
    };
    assert!(admitted(
        policy,
        delete(group(json!({"scheduling.basalt.dev/auto": "true"})))
    ));
    assert!(!admitted(policy, delete(group(json!({})))));
    assert!(!admitted(
        policy,
        delete(group(json!({"scheduling.basalt.dev/auto": "false"})))
    ));
    let mut bare = group(json!({}));
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    assert!(!admitted(policy, delete(bare)));
}

#[test]
fn the_scheduler_makes_only_the_default_queue() {
    let Some(docs) = kustomize() else { return };
    let policy = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-scheduler-default-queue",
    );
    let create = |object: Json| Request {
        user: SCHEDULER,
        node: None,
        resource: "queues",
        object,
        old: Json::Null,
    };
    // The label the daemon puts on the queue it makes, as its source names it.
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/apply/queues.rs"))
            .unwrap();
    assert!(source.contains(
        "MADE_BY: (&str, &str) = (\"app.kubernetes.io/managed-by\", \"basalt-scheduler\")"
    ));
    let queue = |name: &str, labels: Json| {
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": name, "labels": labels}, "spec": {"weight": 1}})
    };
    let ours = json!({"app.kubernetes.io/managed-by": "basalt-scheduler"});
    assert!(admitted(policy, create(queue("default", ours.clone()))));
    assert!(!admitted(policy, create(queue("research", ours))));
    assert!(!admitted(policy, create(queue("default", json!({})))));
    let mut bare = queue("default", json!({}));
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    assert!(!admitted(policy, create(bare)));
    // Anyone else's queues are not its business.
    let mut other = create(queue("research", json!({})));
    other.user = "system:serviceaccount:ml:admin";
    assert!(admit(policy, &other).is_none());
}

#[test]
fn the_node_agent_writes_only_its_own_device_plugin_key() {
    let Some(docs) = kustomize() else { return };
    let policy = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-nodeagent-own-node",
    );
    let write = |object: Json, old: Json| Request {
        user: AGENT,
        node: Some("gpu-1"),
        resource: "configmaps",
        object,
        old,
    };
    let cm = |data: Json| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "basalt-device-plugin-config", "namespace": "gpu-operator"}, "data": data})
    };
    let own = json!({"basalt-ts-gpu-1": "version: v1\n"});
    // Create with its key; add, change and remove its key beside another node's.
    assert!(admitted(policy, write(cm(own.clone()), Json::Null)));
    let theirs = cm(json!({"basalt-ts-gpu-2": "version: v1\n"}));
    let both = cm(json!({"basalt-ts-gpu-2": "version: v1\n", "basalt-ts-gpu-1": "version: v1\n"}));
    assert!(admitted(policy, write(both.clone(), theirs.clone())));
    assert!(admitted(policy, write(theirs.clone(), both.clone())));
    // Another node's key, another ConfigMap, binaryData: refused.
    assert!(!admitted(
        policy,
        write(cm(json!({"basalt-ts-gpu-2": "x"})), Json::Null)
    ));
    let changed = cm(json!({"basalt-ts-gpu-2": "evil", "basalt-ts-gpu-1": "version: v1\n"}));
    assert!(!admitted(policy, write(changed, both.clone())));
    assert!(!admitted(policy, write(cm(own.clone()), both.clone())));
    let mut other = cm(own.clone());
    other["metadata"]["name"] = json!("default-mig-parted-config");
    assert!(!admitted(policy, write(other, Json::Null)));
    let mut binary = cm(own);
    binary["binaryData"] = json!({"x": "AA=="});
    assert!(!admitted(policy, write(binary, Json::Null)));

    // Its Node's device-plugin label: its own key, or away; never another node's key.
    let n = node();
    let label = |v: Json| {
        merge(
            &n,
            json!({"metadata": {"labels": {"nvidia.com/device-plugin.config": v}}}),
        )
    };
    let on_node = |object: Json, old: Json| Request {
        user: AGENT,
        node: Some("gpu-1"),
        resource: "nodes",
        object,
        old,
    };
    let ours = label(json!("basalt-ts-gpu-1"));
    assert!(admitted(policy, on_node(ours.clone(), n.clone())));
    assert!(admitted(policy, on_node(n.clone(), ours)));
    assert!(!admitted(
        policy,
        on_node(label(json!("basalt-ts-gpu-2")), n.clone())
    ));
    // An operator's own value is left alone: unchanged passes.
    let custom = label(json!("a100-mixed"));
    let with_clique = merge(
        &custom,
        json!({"metadata": {"labels": {"nvidia.com/gpu.clique": "c.1"}}}),
    );
    assert!(admitted(policy, on_node(with_clique, custom)));
    // Not its node.
    let mut elsewhere = on_node(label(json!("basalt-ts-gpu-1")), n);
    elsewhere.node = Some("gpu-2");
    assert!(!admit(policy, &elsewhere).unwrap().is_empty());
}

#[test]
fn the_node_agent_deletes_only_the_device_plugin_pod_of_its_node() {
    let Some(docs) = kustomize() else { return };
    let policy = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "basalt-nodeagent-own-node",
    );
    let delete = |node: &str, app: &str| Request {
        user: AGENT,
        node: Some("gpu-1"),
        resource: "pods",
        object: Json::Null,
        old: json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nvidia-device-plugin-daemonset-x", "namespace": "gpu-operator",
                "labels": {"app": app}},
            "spec": {"nodeName": node}}),
    };
    assert!(admitted(
        policy,
        delete("gpu-1", "nvidia-device-plugin-daemonset")
    ));
    // Another node's plugin, or another pod of its node: refused, with the reason.
    let refused = admit(policy, &delete("gpu-2", "nvidia-device-plugin-daemonset")).unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("may delete only the device plugin pod"),
        "{refused:?}"
    );
    assert!(!admitted(policy, delete("gpu-1", "dcgm-exporter")));
    let mut unlabelled = delete("gpu-1", "x");
    unlabelled.old["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    assert!(!admitted(policy, unlabelled));
    // Its other writes still pass beside the new rule.
    let topology = Request {
        user: AGENT,
        node: Some("gpu-1"),
        resource: "nodetopologies",
        object: json!({"metadata": {"name": "gpu-1"}}),
        old: Json::Null,
    };
    assert!(admitted(policy, topology));
}

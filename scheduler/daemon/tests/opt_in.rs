//! `deploy/components/namespace-opt-in`: the MutatingAdmissionPolicy that sets
//! `schedulerName: basalt` on pods of opted-in namespaces. Rendered onto the install, its CEL
//! run on the pods it must change and those it must leave alone, and its mutation built and read
//! back. The `cel` crate stands in for the API server's CEL (as in `admission.rs`); the
//! apply configuration's types (`Object`, `Object.spec`) are declared with only the fields the
//! patch may set, so a patch touching anything else fails to build.

mod policy;
mod render;

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{Type, STRING_TYPE};
use cel::{Context, Env, StructDef, Value};
use serde_json::{json, Value as Json};

use policy::run;
use render::{find, with_component};

const COMPONENT: &str = "components/namespace-opt-in";
const LABEL: &str = "scheduling.basalt.dev/enabled";

fn env() -> Arc<Env> {
    let mut env = Env::stdlib();
    env.add_type(
        StructDef::new("Object.spec".into()).add_field("schedulerName".into(), STRING_TYPE),
    )
    .unwrap();
    let spec = Type::new_struct("Object.spec".into());
    env.add_type(StructDef::new("Object".into()).add_field("spec".into(), spec))
        .unwrap();
    Arc::new(env)
}

/// Whether the policy's match conditions select `pod` (a CREATE in an opted-in namespace).
fn selects(policy: &Json, pod: &Json) -> bool {
    let env = env();
    let vars = HashMap::from([
        ("object", cel::to_value(pod).unwrap()),
        ("oldObject", Value::Null),
    ]);
    (policy["spec"]["matchConditions"].as_array().unwrap().iter())
        .all(|c| run(&env, c["expression"].as_str().unwrap(), &vars) == Value::Bool(true))
}

/// A pod as the API server hands it to admission: defaults applied.
fn pod(scheduler: &str) -> Json {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "x"}]}})
}

#[test]
fn opted_in_pods_get_basalt_and_others_keep_their_scheduler() {
    let Some(docs) = with_component(COMPONENT) else {
        return;
    };
    let policy = find(&docs, "MutatingAdmissionPolicy", "basalt-scheduler-name");
    let binding = find(
        &docs,
        "MutatingAdmissionPolicyBinding",
        "basalt-scheduler-name",
    );
    for o in [policy, binding] {
        assert_eq!(o["apiVersion"], "admissionregistration.k8s.io/v1", "{o}");
    }
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["resources"], json!(["pods"]));
    assert_eq!(rule["operations"], json!(["CREATE"]));
    let selector = &spec["matchConstraints"]["namespaceSelector"]["matchLabels"];
    assert_eq!(selector, &json!({LABEL: "true"}));

    // Selected: a pod naming no scheduler (defaulted), also a Job's.
    assert!(selects(policy, &pod("default-scheduler")));
    let mut no_name = pod("");
    no_name["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulerName");
    assert!(selects(policy, &no_name));
    let mut jobs = pod("default-scheduler");
    jobs["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}]);
    assert!(selects(policy, &jobs));
    // Left alone: another scheduler's, Basalt's own, a bound pod, a DaemonSet's.
    assert!(!selects(policy, &pod("volcano")));
    assert!(!selects(policy, &pod("basalt")));
    let mut bound = pod("default-scheduler");
    bound["spec"]["nodeName"] = json!("n1");
    assert!(!selects(policy, &bound));
    let mut daemon = pod("default-scheduler");
    daemon["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
    assert!(!selects(policy, &daemon));

    // The patch sets spec.schedulerName and nothing else, to a name the scheduler answers to.
    let mutations = spec["mutations"].as_array().unwrap();
    assert_eq!(mutations.len(), 1);
    assert_eq!(mutations[0]["patchType"], "ApplyConfiguration");
    let env = env();
    let expr = mutations[0]["applyConfiguration"]["expression"]
        .as_str()
        .unwrap();
    let patch = run(&env, expr, &HashMap::new());
    let vars = HashMap::from([("patch", patch)]);
    let name = match run(&env, "patch.spec.schedulerName", &vars) {
        Value::String(s) => s.to_string(),
        other => panic!("{other:?}"),
    };
    let config = find(&docs, "ConfigMap", "basalt-scheduler")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let config: Json = serde_yaml::from_str(config).unwrap();
    let names = config["schedulerNames"].as_array().unwrap();
    assert!(names.contains(&json!(name)), "{name} not in {names:?}");
}

#[test]
fn a_patch_that_sets_another_field_does_not_build() {
    let env = env();
    let program = env
        .compile(r#"Object{spec: Object.spec{schedulerName: "basalt", nodeName: "n1"}}"#)
        .unwrap();
    assert!(program.execute(&Context::with_env(env)).is_err());
}

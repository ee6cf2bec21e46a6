//! Pods' subresources and rules: `pods/binding` (refused for gated pods, as the real one does),
//! `pods/eviction` with PodDisruptionBudgets, the conditions a bound pod gets, and the checks
//! on a pod's create and update.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

impl Store {
    /// `pods/binding`: sets spec.nodeName (409 when already bound or gated) and copies the binding's
    /// annotations onto the pod, as the real binding REST does.
    pub fn bind(
        &mut self,
        namespace: &str,
        name: &str,
        binding: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let pods = self.find("", "pods").expect("built in");
        let old = self.get(pods, namespace, name)?;
        let conflict = |why: String| ApiError::conflict("", "pods/binding", name, &why);
        let target = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if target.is_empty() {
            return Err(ApiError::invalid(
                "Binding",
                name,
                "target.name: Required value",
            ));
        }
        let tkind = binding
            .pointer("/target/kind")
            .and_then(Value::as_str)
            .unwrap_or("Node");
        if !(tkind.is_empty() || tkind == "Node") {
            return Err(ApiError::invalid(
                "Binding",
                name,
                &format!("target.kind: Unsupported value: {tkind:?}: supported values: \"Node\""),
            ));
        }
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str) {
            if uid != meta(&old, "uid") {
                return Err(conflict(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old, "uid")
                )));
            }
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(node) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} is already assigned to node {node:?}"
            )));
        }
        // A pod is not ready for scheduling while it has gates.
        if old
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} has non-empty .spec.schedulingGates"
            )));
        }
        let mut pod = (*old).clone();
        pod["spec"]["nodeName"] = json!(target);
        if let Some(a) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let m = meta_mut(&mut pod);
            let pa = m.entry("annotations").or_insert_with(|| json!({}));
            for (k, v) in a {
                pa[k] = v.clone();
            }
        }
        let now = now_rfc3339();
        set_condition(&mut pod, "PodScheduled", "True", &now);
        if self.options.run_bound_pods {
            pod["status"]["phase"] = json!("Running");
            pod["status"]["startTime"] = json!(now);
            set_condition(&mut pod, "Initialized", "True", &now);
            set_condition(&mut pod, "ContainersReady", "True", &now);
            set_condition(&mut pod, "Ready", "True", &now);
        }
        let rv = self.next_rv();
        meta_mut(&mut pod).insert("resourceVersion".into(), json!(rv.to_string()));
        let pod = Arc::new(pod);
        let key = self.key(pods, namespace, name);
        self.resources[pods].objects.insert(key, pod.clone());
        self.commit(pods, namespace, EventType::Modified, Some(old), pod.clone());
        Ok(pod)
    }

    /// `pods/eviction`: deletes the pod unless a PodDisruptionBudget (or the test annotation)
    /// forbids it, in which case the answer is 429 TooManyRequests.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        eviction: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let pods = self.find("", "pods").expect("built in");
        let pod = self.get(pods, namespace, name)?;
        let refuse = |cause: String| {
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}));
            e
        };
        if pod
            .pointer(&format!(
                "/metadata/annotations/{}",
                REFUSE_EVICTION_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true")
        {
            return Err(refuse(format!(
                "pod {name} carries {REFUSE_EVICTION_ANNOTATION}=true"
            )));
        }
        // As in Kubernetes, budgets guard only running pods: pending or finished ones go freely.
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        if phase == "Running" && pod.pointer("/metadata/deletionTimestamp").is_none() {
            if let Some(pdbs) = self.find("policy", "poddisruptionbudgets") {
                let budgets: Vec<Arc<Value>> = self.resources[pdbs]
                    .objects
                    .iter()
                    .filter(|((ns, _), _)| ns == namespace)
                    .map(|(_, v)| v.clone())
                    .collect();
                for pdb in budgets {
                    if let Some(why) = self.budget_forbids(&pdb, namespace, &pod)? {
                        return Err(refuse(why));
                    }
                }
            }
        }
        let options = eviction.get("deleteOptions").cloned().unwrap_or_default();
        self.delete(pods, namespace, name, &options)
    }

    /// Whether evicting `pod` would take `pdb`'s selected pods below what it allows.
    fn budget_forbids(
        &self,
        pdb: &Value,
        namespace: &str,
        pod: &Value,
    ) -> Result<Option<String>, ApiError> {
        let pdb_name = meta(pdb, "name");
        let Some(sel) = pdb.pointer("/spec/selector") else {
            return Ok(None);
        };
        let selector = LabelSelector::from_object(sel).map_err(|e| {
            ApiError::invalid("PodDisruptionBudget", &pdb_name, &format!("spec.{e}"))
        })?;
        if !selector.matches(pod) {
            return Ok(None);
        }
        let pods = self.find("", "pods").expect("built in");
        let selected: Vec<&Arc<Value>> = self.resources[pods]
            .objects
            .iter()
            .filter(|((ns, _), p)| ns == namespace && selector.matches(p))
            .map(|(_, p)| p)
            .collect();
        let expected = selected.len() as i64;
        let healthy = selected.iter().filter(|p| is_ready(p)).count() as i64;
        let resolve = |v: &Value| -> Option<i64> {
            match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<i64>().ok())
                    .map(|p| (p * expected + 99) / 100),
                _ => None,
            }
        };
        let desired_healthy = if let Some(min) = pdb.pointer("/spec/minAvailable").and_then(resolve)
        {
            min
        } else if let Some(max) = pdb.pointer("/spec/maxUnavailable").and_then(resolve) {
            expected - max
        } else {
            return Ok(None);
        };
        let allowed = healthy - desired_healthy;
        // Evicting a pod that is not healthy costs the budget nothing.
        if allowed <= 0 && is_ready(pod) {
            return Ok(Some(format!(
                "The disruption budget {pdb_name} needs {desired_healthy} healthy pods and has {healthy} currently"
            )));
        }
        Ok(None)
    }
}

pub(super) fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

pub(super) fn set_condition(pod: &mut Value, kind: &str, status: &str, now: &str) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds = pod["status"]
        .as_object_mut()
        .expect("made an object above")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let list = conds.as_array_mut().expect("made a list above");
    let c =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    match list.iter_mut().find(|x| x["type"] == kind) {
        Some(x) => *x = c,
        None => list.push(c),
    }
}

pub(super) fn validate_pod(name: &str, pod: &Value) -> Result<(), ApiError> {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        return Err(ApiError::invalid(
            "Pod",
            name,
            "spec.containers: Required value",
        ));
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        if c.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::invalid(
                "Pod",
                name,
                &format!("spec.containers[{i}].name: Required value"),
            ));
        }
    }
    Ok(())
}

/// The names of a pod's `spec.schedulingGates`.
pub(super) fn gate_names(pod: &Value) -> Vec<&str> {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("name").and_then(Value::as_str))
        .collect()
}

/// As kube-apiserver: scheduling gates may only be removed from an existing pod, never added.
pub(super) fn validate_gates_update(name: &str, old: &Value, new: &Value) -> Result<(), ApiError> {
    let before = gate_names(old);
    match gate_names(new).into_iter().find(|g| !before.contains(g)) {
        Some(added) => Err(ApiError::invalid(
            "Pod",
            name,
            &format!(
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate '{added}'"
            ),
        )),
        None => Ok(()),
    }
}

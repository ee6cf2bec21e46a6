//! The real API server's table columns for the built-in kinds `kubectl get` is used on most
//! (kubernetes/pkg/printers/internalversion), reduced to the fields this server keeps.
//! Priority 1 columns show with `-o wide` only.

use serde_json::{json, Value};

use crate::tables::{age, age_column, name_column, str_at, Column};

/// NAME READY STATUS RESTARTS AGE, wide: IP NODE NOMINATED NODE READINESS GATES.
pub fn pod_columns() -> Vec<Column> {
    vec![
        Column::rule("Ready", 0, pod_ready),
        Column::rule("Status", 0, pod_status),
        Column::rule("Restarts", 0, pod_restarts),
        age_column(),
        Column::rule("IP", 1, |o| or_none(str_at(o, "/status/podIP"))),
        Column::rule("Node", 1, |o| or_none(str_at(o, "/spec/nodeName"))),
        Column::rule("Nominated Node", 1, |o| {
            or_none(str_at(o, "/status/nominatedNodeName"))
        }),
        Column::rule("Readiness Gates", 1, readiness_gates),
    ]
}

/// LAST SEEN TYPE REASON OBJECT MESSAGE, wide: SUBOBJECT SOURCE FIRST SEEN COUNT NAME.
pub fn event_columns() -> Vec<Column> {
    vec![
        Column::rule("Last Seen", 0, |o| {
            let last = [
                "/lastTimestamp",
                "/eventTime",
                "/firstTimestamp",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .map(|p| str_at(o, p))
            .find(|t| !t.is_empty())
            .unwrap_or("");
            json!(age(last))
        }),
        Column::rule("Type", 0, |o| json!(str_at(o, "/type"))),
        Column::rule("Reason", 0, |o| json!(str_at(o, "/reason"))),
        Column::rule("Object", 0, |o| {
            let kind = str_at(o, "/involvedObject/kind").to_ascii_lowercase();
            json!(format!("{kind}/{}", str_at(o, "/involvedObject/name")))
        }),
        Column::rule("Subobject", 1, |o| {
            json!(str_at(o, "/involvedObject/fieldPath"))
        }),
        Column::rule("Source", 1, event_source),
        Column::rule("Message", 0, |o| json!(str_at(o, "/message"))),
        Column::rule("First Seen", 1, |o| {
            json!(age(str_at(o, "/firstTimestamp")))
        }),
        Column::rule("Count", 1, |o| o.get("count").cloned().unwrap_or(json!(1))),
        name_column().wide(),
    ]
}

/// (NAME) STATUS ROLES AGE VERSION, wide: INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION
/// CONTAINER-RUNTIME.
pub fn node_columns() -> Vec<Column> {
    vec![
        Column::rule("Status", 0, node_status),
        Column::rule("Roles", 0, node_roles),
        age_column(),
        Column::rule("Version", 0, |o| {
            json!(str_at(o, "/status/nodeInfo/kubeletVersion"))
        }),
        Column::rule("Internal-IP", 1, |o| node_address(o, "InternalIP")),
        Column::rule("External-IP", 1, |o| node_address(o, "ExternalIP")),
        Column::rule("OS-Image", 1, |o| {
            or_unknown(str_at(o, "/status/nodeInfo/osImage"))
        }),
        Column::rule("Kernel-Version", 1, |o| {
            or_unknown(str_at(o, "/status/nodeInfo/kernelVersion"))
        }),
        Column::rule("Container-Runtime", 1, |o| {
            or_unknown(str_at(o, "/status/nodeInfo/containerRuntimeVersion"))
        }),
    ]
}

pub fn namespace_status(o: &Value) -> Value {
    match str_at(o, "/status/phase") {
        "" => json!("Active"),
        p => json!(p),
    }
}

pub fn config_map_data(o: &Value) -> Value {
    let n = |k: &str| o.get(k).and_then(Value::as_object).map_or(0, |m| m.len());
    json!(n("data") + n("binaryData"))
}

fn or_none(s: &str) -> Value {
    json!(if s.is_empty() { "<none>" } else { s })
}

fn or_unknown(s: &str) -> Value {
    json!(if s.is_empty() { "<unknown>" } else { s })
}

fn container_statuses(o: &Value) -> &[Value] {
    o.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn pod_ready(o: &Value) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = container_statuses(o)
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

/// The phase, or what explains it better: a status reason, a gated or waiting container,
/// Terminating.
fn pod_status(o: &Value) -> Value {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        return json!("Terminating");
    }
    let mut reason = match str_at(o, "/status/reason") {
        "" => str_at(o, "/status/phase").to_string(),
        r => r.to_string(),
    };
    let gated = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                str_at(c, "/type") == "PodScheduled" && str_at(c, "/reason") == "SchedulingGated"
            })
        });
    if gated {
        reason = "SchedulingGated".into();
    }
    for c in container_statuses(o) {
        let waiting = str_at(c, "/state/waiting/reason");
        let terminated = str_at(c, "/state/terminated/reason");
        if !waiting.is_empty() {
            reason = waiting.into();
        } else if !terminated.is_empty() {
            reason = terminated.into();
        }
    }
    json!(if reason.is_empty() {
        "Unknown".into()
    } else {
        reason
    })
}

fn pod_restarts(o: &Value) -> Value {
    let n: i64 = container_statuses(o)
        .iter()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum();
    json!(n.to_string())
}

fn readiness_gates(o: &Value) -> Value {
    let gates = o
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if gates == 0 {
        return json!("<none>");
    }
    let conditions = o.pointer("/status/conditions").and_then(Value::as_array);
    let ready = o
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, |g| {
            g.iter()
                .filter(|g| {
                    let t = str_at(g, "/conditionType");
                    conditions.is_some_and(|cs| {
                        cs.iter()
                            .any(|c| str_at(c, "/type") == t && str_at(c, "/status") == "True")
                    })
                })
                .count()
        });
    json!(format!("{ready}/{gates}"))
}

fn event_source(o: &Value) -> Value {
    let component = str_at(o, "/source/component");
    let host = str_at(o, "/source/host");
    json!(match (component, host) {
        ("", _) => "".to_string(),
        (c, "") => c.to_string(),
        (c, h) => format!("{c}, {h}"),
    })
}

/// Ready / NotReady / Unknown from the Ready condition, `,SchedulingDisabled` when cordoned.
fn node_status(o: &Value) -> Value {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| str_at(c, "/type") == "Ready"))
        .map(|c| str_at(c, "/status"));
    let mut status = match ready {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }
    .to_string();
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

/// The `node-role.kubernetes.io/ROLE` labels (and `kubernetes.io/role`), `<none>` without.
fn node_roles(o: &Value) -> Value {
    let labels = o.pointer("/metadata/labels").and_then(Value::as_object);
    let mut roles: Vec<&str> = labels
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            _ if k == "kubernetes.io/role" => v.as_str(),
            _ => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    match roles.is_empty() {
        true => json!("<none>"),
        false => json!(roles.join(",")),
    }
}

fn node_address(o: &Value, kind: &str) -> Value {
    let found = o
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|a| str_at(a, "/type") == kind))
        .map(|a| str_at(a, "/address"))
        .unwrap_or("");
    or_none(found)
}

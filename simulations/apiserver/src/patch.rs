//! Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the part of
//! Kubernetes' strategic merge patch that built-in objects need (lists merged by key).

use serde_json::{Map, Value};

/// The patch kinds, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Server-side apply, simplified: like a merge patch, but `null` in the applied config is a
/// value to keep out rather than a deletion order, and lists of keyed items merge by key.
pub fn apply_merge(target: &mut Value, applied: &Value) {
    strategic_merge(target, applied);
}

/// Merge keys of the lists Kubernetes' built-in types merge by key (strategic merge patch).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "readinessGates" => {
            if field == "readinessGates" {
                "conditionType"
            } else {
                "name"
            }
        }
        "volumeMounts" => "mountPath",
        "ports" => "containerPort",
        "conditions" => "type",
        "taints" => "key",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "addresses" => "type",
        _ => return None,
    })
}

/// Lists of strings that merge as sets.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch: a merge patch in which keyed lists merge item by item and the
/// `$patch`, `$setElementOrder`, `$retainKeys` and `$deleteFromPrimitiveList` directives are honoured
/// (element order directives only filter, they do not reorder).
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = patch.clone();
        strip_directives(&mut clean);
        *target = clean;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()) || p.contains_key(k));
    }
    for (k, v) in p {
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(del)) = (t.get_mut(list), v) {
                items.retain(|i| !del.contains(i));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(old)), Value::Array(new)) if merge_key(k).is_some() => {
                merge_keyed_list(old, new, merge_key(k).expect("checked"));
            }
            (Some(Value::Array(old)), Value::Array(new)) if is_set_list(k) => {
                for item in new {
                    if !old.contains(item) {
                        old.push(item.clone());
                    }
                }
            }
            (Some(old), _) if v.is_object() => strategic_merge(old, v),
            _ => {
                let mut clean = v.clone();
                strip_directives(&mut clean);
                t.insert(k.clone(), clean);
            }
        }
    }
}

fn merge_keyed_list(old: &mut Vec<Value>, new: &[Value], key: &str) {
    for item in new {
        let id = item.get(key).cloned();
        let pos = id
            .as_ref()
            .and_then(|id| old.iter().position(|o| o.get(key) == Some(id)));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                old.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut old[i], item),
            (None, false) => {
                let mut clean = item.clone();
                strip_directives(&mut clean);
                old.push(clean);
            }
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// RFC 6902 JSON patch. Errors name the failing operation.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    for (i, op) in ops.iter().enumerate() {
        let name = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation {i}: missing path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {i} ({name} {path}): missing value"))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {i} ({name} {path}): missing from"))
        };
        let res = match name {
            "add" => add(target, path, value()?),
            "remove" => remove(target, path).map(|_| ()),
            "replace" => remove(target, path).and_then(|_| add(target, path, value()?)),
            "move" => {
                let v = remove(target, from()?)?;
                add(target, path, v)
            }
            "copy" => {
                let v = target
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| format!("no value at {}", from().unwrap_or("")))?;
                add(target, path, v)
            }
            "test" => {
                if target.pointer(path) == Some(&value()?) {
                    Ok(())
                } else {
                    Err("test failed".to_string())
                }
            }
            other => Err(format!("unknown operation {other:?}")),
        };
        res.map_err(|e| format!("operation {i} ({name} {path}): {e}"))?;
    }
    Ok(())
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    let idx = path.rfind('/').ok_or("path must start with /")?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn add(target: &mut Value, path: &str, v: Value) -> Result<(), String> {
    if path.is_empty() {
        *target = v;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("bad index {last:?}"))?
            };
            if i > a.len() {
                return Err(format!("index {i} out of range"));
            }
            a.insert(i, v);
            Ok(())
        }
        _ => Err(format!("no object or list at {parent:?}")),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(|| format!("no field {last:?}")),
        Some(Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| format!("bad index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("index {i} out of range"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("no object or list at {parent:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let mut t = json!({"metadata": {"labels": {"a": "1"}}, "l": [1, 2]});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "replace", "path": "/l/0", "value": 0},
                {"op": "test", "path": "/l/2", "value": 3},
                {"op": "copy", "from": "/l", "path": "/m"},
            ]),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"b": "2"}}, "l": [0, 2, 3], "m": [0, 2, 3]})
        );
        let err = json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).unwrap_err();
        assert!(err.contains("operation 0"), "{err}");
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        strategic_merge(
            &mut t,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                             "containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}]}}),
        );
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "b", "image": "z"}]}})
        );
    }
}

//! Field errors as `k8s.io/apimachinery`'s `field.Error` prints them, the 422 `Status` that
//! carries them, and the JSON helpers the checks share.

use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::resources::ResourceInfo;

/// One field error, as `k8s.io/apimachinery`'s `field.Error` prints it.
pub(super) struct FieldError {
    field: String,
    reason: &'static str,
    body: String,
}

fn err(field: &str, reason: &'static str, body: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        reason,
        body,
    }
}

fn with_detail(kind: &str, detail: &str) -> String {
    if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    }
}

pub(super) fn required(field: &str, detail: &str) -> FieldError {
    err(
        field,
        "FieldValueRequired",
        with_detail("Required value", detail),
    )
}

pub(super) fn forbidden(field: &str, detail: &str) -> FieldError {
    err(
        field,
        "FieldValueForbidden",
        with_detail("Forbidden", detail),
    )
}

/// The value as Go prints it in `field.Invalid`: strings quoted, scalars plain, the rest as JSON.
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

pub(super) fn invalid(field: &str, value: &Value, detail: &str) -> FieldError {
    err(
        field,
        "FieldValueInvalid",
        format!("Invalid value: {}: {detail}", render(value)),
    )
}

pub(super) fn too_many(field: &str, actual: usize, max: usize) -> FieldError {
    err(
        field,
        "FieldValueTooMany",
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

pub(super) fn duplicate(field: &str, value: &str) -> FieldError {
    err(
        field,
        "FieldValueDuplicate",
        format!("Duplicate value: {value:?}"),
    )
}

pub(super) fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    err(
        field,
        "FieldValueNotSupported",
        format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    )
}

/// 422 Invalid naming every field error, or Ok when there is none.
pub(super) fn finish(
    info: &ResourceInfo,
    name: &str,
    errs: Vec<FieldError>,
) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = errs
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let joined = match msgs.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field}))
        .collect();
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("{}.{} {name:?} is invalid: {joined}", info.kind, info.group),
    );
    e.details =
        Some(json!({"name": name, "group": info.group, "kind": info.kind, "causes": causes}));
    Err(e)
}

pub(super) fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn array_at(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The value with nulls, empty lists and empty objects left out: Kubernetes compares decoded
/// objects, where an absent field, `null` and an empty list are the same.
pub(super) fn normalized(v: Option<&Value>) -> Value {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .filter(|(_, v)| !is_empty(v))
                    .collect::<Map<String, Value>>(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    fn is_empty(v: &Value) -> bool {
        v.is_null()
            || v.as_array().is_some_and(Vec::is_empty)
            || v.as_object().is_some_and(Map::is_empty)
    }
    let s = v.map(strip).unwrap_or(Value::Null);
    if is_empty(&s) {
        Value::Null
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_ignore_empty_fields() {
        assert_eq!(
            normalized(Some(&json!({"a": [], "b": null, "c": {"d": {}}, "e": 1}))),
            json!({"e": 1})
        );
        assert_eq!(normalized(Some(&json!({}))), Value::Null);
        assert_eq!(normalized(None), Value::Null);
    }
}

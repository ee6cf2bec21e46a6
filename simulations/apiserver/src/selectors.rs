//! Label and field selectors, parsed from the query string as Kubernetes writes them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
}

/// `app=web,tier!=db,env in (a,b),!canary,gpu` — every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let bad = |why: &str| {
            ApiError::bad_request(format!(
                "unable to parse requirement: labelSelector {text:?}: {why}"
            ))
        };
        let mut reqs = Vec::new();
        for term in split_top_level(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            if let Some(key) = term.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(
                    valid_key(key.trim()).map_err(|e| bad(&e))?,
                ));
                continue;
            }
            // Set-based: `key in (a,b)` / `key notin (a,b)`.
            let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
            let set_op = words.get(1).and_then(|rest| {
                let rest = rest.trim_start();
                let op = |kw: &str| {
                    rest.strip_prefix(kw)
                        .filter(|l| l.trim_start().starts_with('('))
                };
                op("notin")
                    .map(|l| (true, l))
                    .or_else(|| op("in").map(|l| (false, l)))
            });
            if let Some((negate, list)) = set_op {
                let inner = list
                    .trim()
                    .strip_prefix('(')
                    .and_then(|l| l.strip_suffix(')'))
                    .ok_or_else(|| bad("found a set without a closing parenthesis"))?;
                let values: BTreeSet<String> = inner
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                let key = valid_key(words[0]).map_err(|e| bad(&e))?;
                reqs.push(if negate {
                    LabelReq::NotIn(key, values)
                } else {
                    LabelReq::In(key, values)
                });
                continue;
            }
            if let Some((k, v)) = term.split_once("!=") {
                reqs.push(LabelReq::NotEq(
                    valid_key(k.trim()).map_err(|e| bad(&e))?,
                    v.trim().to_string(),
                ));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(LabelReq::Eq(
                    valid_key(k.trim()).map_err(|e| bad(&e))?,
                    v.trim().to_string(),
                ));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(LabelReq::Eq(
                    valid_key(k.trim()).map_err(|e| bad(&e))?,
                    v.trim().to_string(),
                ));
            } else {
                reqs.push(LabelReq::Exists(valid_key(term).map_err(|e| bad(&e))?));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.contains(x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A selector from a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`),
    /// as PodDisruptionBudgets carry it.
    pub fn from_object(sel: &Value) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::Eq(
                    k.clone(),
                    v.as_str().unwrap_or("").to_string(),
                ));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let values: BTreeSet<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => LabelReq::In(key, values),
                Some("NotIn") => LabelReq::NotIn(key, values),
                Some("Exists") => LabelReq::Exists(key),
                Some("DoesNotExist") => LabelReq::NotExists(key),
                other => {
                    return Err(format!(
                        "selector.matchExpressions: unknown operator {other:?}"
                    ))
                }
            });
        }
        Ok(LabelSelector(reqs))
    }
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn valid_key(key: &str) -> Result<String, String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_string())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct FieldReq {
    path: Vec<String>,
    value: String,
    negate: bool,
}

/// `metadata.name=x,spec.nodeName=,status.phase!=Succeeded`. Any dotted path is accepted
/// (Kubernetes allows a fixed set per kind); a missing field reads as the empty string, so
/// `spec.nodeName=` selects unbound pods, as it does in Kubernetes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<FieldReq>);

impl FieldSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in text.split(',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, value, negate) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {text:?}: {term:?} is not of the form field=value or field!=value"
                )));
            };
            let field = field.trim();
            if field.is_empty() || !field.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {text:?}: field label {field:?} not supported"
                )));
            }
            reqs.push(FieldReq {
                path: field.split('.').map(str::to_string).collect(),
                value: value.trim().to_string(),
                negate,
            });
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut cur = Some(obj);
            for p in &r.path {
                cur = cur.and_then(|v| v.get(p));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == r.value) != r.negate
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front", "gpu": "true"}));
        let yes = [
            "app=web",
            "app==web",
            "tier!=db",
            "app in (web, api)",
            "tier notin (db)",
            "gpu",
            "!canary",
            "app=web,gpu,env notin (prod)",
            "",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(&o),
                "{s} should match"
            );
        }
        let no = [
            "app=api",
            "app!=web",
            "app in (api)",
            "tier notin (front,db)",
            "canary",
            "!gpu",
            "app=web,canary",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&o),
                "{s} should not match"
            );
        }
    }

    #[test]
    fn label_parse_errors_name_the_selector() {
        let e = LabelSelector::parse("app in web").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("app in web"), "{}", e.message);
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        for s in [
            "metadata.name=a",
            "spec.nodeName==n1",
            "status.phase!=Pending",
            "spec.schedulerName=",
        ] {
            assert!(FieldSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        for s in ["metadata.name=b", "spec.nodeName=", "status.phase!=Running"] {
            assert!(!FieldSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        assert_eq!(FieldSelector::parse("metadata.name").unwrap_err().code, 400);
    }

    #[test]
    fn selector_objects() {
        let o = obj(json!({"app": "web"}));
        let s = LabelSelector::from_object(&json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})).unwrap();
        assert!(s.matches(&o));
        assert!(LabelSelector::from_object(
            &json!({"matchExpressions": [{"key": "x", "operator": "Bogus"}]})
        )
        .is_err());
    }
}

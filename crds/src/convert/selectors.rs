//! Kubernetes selectors as the engine's requirements: label selectors (`matchLabels`,
//! `matchExpressions`) and node selector requirements (node affinity, DRA node selectors).

use std::collections::BTreeMap;

use basalt_engine::{SelectorOperator, SelectorRequirement};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{ConvertError, Cx};

/// A Kubernetes label selector as a predicate over a label map; an empty selector matches
/// everything, as in Kubernetes.
#[allow(clippy::type_complexity)]
pub(super) fn label_selector(
    cx: &Cx,
    field: &str,
    selector: &LabelSelector,
) -> Result<Box<dyn Fn(&BTreeMap<String, String>) -> bool>, ConvertError> {
    let requirements = selector_requirements(cx, field, selector)?;
    Ok(Box::new(move |labels: &BTreeMap<String, String>| {
        requirements
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }))
}

/// A Kubernetes label selector as requirements that must all hold (`matchLabels` entries
/// become `In` with one value); fails at the first operator or value list Kubernetes refuses.
pub(super) fn selector_requirements(
    cx: &Cx,
    field: &str,
    selector: &LabelSelector,
) -> Result<Vec<SelectorRequirement>, ConvertError> {
    let mut out: Vec<SelectorRequirement> = (selector.match_labels.iter().flatten())
        .map(|(k, v)| SelectorRequirement {
            key: k.clone(),
            operator: SelectorOperator::In,
            values: vec![v.clone()],
        })
        .collect();
    let exprs = selector.match_expressions.as_deref().unwrap_or_default();
    for (j, e) in exprs.iter().enumerate() {
        let at = format!("{field}.matchExpressions[{j}]");
        let values = e.values.clone().unwrap_or_default();
        let operator = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(cx.err(
                    format!("{at}.values"),
                    format!("operator {} needs at least one value", e.operator),
                ))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(cx.err(
                    format!("{at}.values"),
                    format!("must be empty for operator {}", e.operator),
                ))
            }
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err(cx.err(
                    format!("{at}.operator"),
                    format!(
                        "unknown operator {other:?}: expected In, NotIn, Exists or DoesNotExist"
                    ),
                ))
            }
        };
        out.push(SelectorRequirement {
            key: e.key.clone(),
            operator,
            values,
        });
    }
    Ok(out)
}

/// A node selector requirement's operator.
pub(super) fn node_operator(op: &str) -> Option<SelectorOperator> {
    Some(match op {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        _ => return None,
    })
}

pub(super) fn requirements(
    cx: &Cx,
    field: &str,
    reqs: Option<&[NodeSelectorRequirement]>,
) -> Result<Vec<SelectorRequirement>, ConvertError> {
    let mut out = Vec::new();
    for (i, r) in reqs.unwrap_or_default().iter().enumerate() {
        let operator = node_operator(&r.operator).ok_or_else(|| {
            cx.err(
                format!("{field}[{i}].operator"),
                format!("unknown operator {:?}", r.operator),
            )
        })?;
        out.push(SelectorRequirement {
            key: r.key.clone(),
            operator,
            values: r.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

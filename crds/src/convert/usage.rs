//! Queue usage between the engine's [`QueueUsage`] and Queue `status.usage`: the scheduler
//! writes what a plan returns, and conversion reads it back into [`ClusterSpec::usage`]
//! (`basalt_engine::ClusterSpec`), so a restart, a failover or `basalt-sim plan` on a dump goes
//! on from the usage last written.
//!
//! Values are written in the resource's own units (cores for `cpu`, whose engine unit is the
//! milli-CPU) to four significant digits: precise enough for an order, and a usage that only
//! decays in its fifth digit is no news worth a write.

use std::collections::BTreeMap;

use basalt_engine::{QueueUsage, UsageEffect, UsageOrder, CPU_NAME};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

use super::Cx;
use crate::types::{Queue, QueueUsageStatus};

/// Significant digits written.
const DIGITS: i32 = 4;

/// How a usage is written into Queue status.
pub fn usage_status(usage: &QueueUsage) -> QueueUsageStatus {
    let taken_at = Timestamp::from_millisecond(usage.at_ms).unwrap_or(Timestamp::UNIX_EPOCH);
    QueueUsageStatus {
        taken_at: taken_at.to_string(),
        resources: (usage.used.iter())
            .map(|(name, &v)| (name.clone(), Quantity(significant(v / unit(name)))))
            .collect(),
        held: (usage.held.as_ref()).map(|held| {
            (held.iter())
                .map(|(name, &v)| (name.clone(), Quantity(exact(v, name))))
                .collect()
        }),
    }
}

/// The usage a Queue's status records, for the queue `queue`; `Err((field, message))` names
/// what cannot be read (the caller warns and takes the queue as having no usage).
pub fn read_usage(queue: &str, status: &QueueUsageStatus) -> Result<QueueUsage, (String, String)> {
    let at: Timestamp = (status.taken_at.parse()).map_err(|e| {
        (
            "status.usage.takenAt".to_string(),
            format!("not an RFC 3339 instant ({:?}): {e}", status.taken_at),
        )
    })?;
    let mut used = BTreeMap::new();
    for (name, text) in &status.resources {
        used.insert(name.clone(), decimal("resources", name, text)?);
    }
    let held = match &status.held {
        None => None,
        Some(list) => {
            let mut held = BTreeMap::new();
            for (name, text) in list {
                held.insert(name.clone(), decimal("held", name, text)?.round() as i64);
            }
            Some(held)
        }
    };
    Ok(QueueUsage {
        queue: queue.to_string(),
        at_ms: at.as_millisecond(),
        used,
        held,
    })
}

/// A written amount of `name` (`status.usage.<field>`) in engine units.
fn decimal(field: &str, name: &str, Quantity(text): &Quantity) -> Result<f64, (String, String)> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && !text.contains(char::is_alphabetic) => {
            Ok(v * unit(name))
        }
        _ => Err((
            format!("status.usage.{field}[{name}]"),
            format!("{text:?} is not a non-negative decimal number"),
        )),
    }
}

/// A holding in the resource's units, every digit kept (cores to the milli-CPU).
fn exact(v: i64, resource: &str) -> String {
    match unit(resource) == 1.0 {
        true => v.to_string(),
        false => {
            let text = format!("{}.{:03}", v / 1000, (v % 1000).abs());
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// Usage's effect on a queue's order, as Queue status and `plan` word it: "ordered before `b`:
/// used 0.25 of the cluster over the half-life against 0.5".
pub fn usage_effect_message(effect: &UsageEffect) -> String {
    let order = match effect.order {
        UsageOrder::Before => "before",
        UsageOrder::After => "after",
    };
    format!(
        "ordered {order} `{}`: used {} of the cluster over the half-life against {}",
        effect.queue,
        part(effect.used),
        part(effect.against)
    )
}

/// A part of the cluster to two decimals, trailing zeros dropped (`0.25`, `0.5`, `0`).
fn part(v: f64) -> String {
    let text = format!("{:.2}", v.max(0.0));
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Engine units in one written unit: a thousand milli-CPU in a core, else one.
fn unit(resource: &str) -> f64 {
    if resource == CPU_NAME {
        1000.0
    } else {
        1.0
    }
}

/// `v` to [`DIGITS`] significant digits, as a plain decimal (`7.5`, `0.0125`, `34360000000`).
fn significant(v: f64) -> String {
    if !(v.is_finite() && v >= 1e-9) {
        return "0".into();
    }
    let magnitude = v.log10().floor() as i32;
    let decimals = (DIGITS - 1 - magnitude).max(0) as usize;
    // Past the decimal point `format!` rounds; before it, the digits beyond are zeroed.
    let v = match decimals {
        0 => {
            let scale = 10f64.powi(magnitude - DIGITS + 1);
            (v / scale).round() * scale
        }
        _ => v,
    };
    let text = format!("{v:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

/// The usage the queue's status records; a malformed one is warned of and taken as none.
pub(super) fn queue_usage(
    cx: &Cx,
    name: &str,
    q: &Queue,
    warnings: &mut Vec<String>,
) -> Option<QueueUsage> {
    let status = q.status.as_ref()?.usage.as_ref()?;
    read_usage(name, status)
        .map_err(|(field, message)| {
            warnings.push(cx.warning(field, format!("{message}; taken as no usage")))
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(used: &[(&str, f64)]) -> QueueUsage {
        QueueUsage {
            queue: "a".into(),
            at_ms: 1_700_000_000_250,
            used: used.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            held: None,
        }
    }

    #[test]
    fn written_to_four_digits_in_the_resources_units() {
        let s = usage_status(&usage(&[
            ("nvidia.com/gpu", 7.5),
            ("cpu", 1234.5678),
            ("memory", 34_359_738_368.0),
            ("x", 0.012_345_6),
            ("y", 0.0),
        ]));
        assert_eq!(s.taken_at, "2023-11-14T22:13:20.25Z");
        let text = |k: &str| s.resources[k].0.clone();
        assert_eq!(text("nvidia.com/gpu"), "7.5");
        assert_eq!(text("cpu"), "1.235");
        assert_eq!(text("memory"), "34360000000");
        assert_eq!(text("x"), "0.01235");
        assert_eq!(text("y"), "0");
    }

    #[test]
    fn read_back_as_written() {
        let before = usage(&[("nvidia.com/gpu", 7.5), ("cpu", 1500.0)]);
        assert_eq!(read_usage("a", &usage_status(&before)), Ok(before.clone()));
        // What it held, every digit: 8 GPUs, 2.25 cores; none held is no map at all.
        let held = QueueUsage {
            held: Some([("nvidia.com/gpu".into(), 8), ("cpu".into(), 2250)].into()),
            ..before
        };
        let status = usage_status(&held);
        let written = status.held.as_ref().unwrap();
        assert_eq!(written["cpu"].0, "2.25");
        assert_eq!(written["nvidia.com/gpu"].0, "8");
        assert_eq!(read_usage("a", &status), Ok(held));
        assert_eq!(exact(1000, "cpu"), "1");
        assert_eq!(exact(5, "cpu"), "0.005");
    }

    #[test]
    fn the_effect_in_words() {
        let effect = UsageEffect {
            order: UsageOrder::Before,
            queue: "b".into(),
            used: 0.25,
            against: 0.5,
        };
        assert_eq!(
            usage_effect_message(&effect),
            "ordered before `b`: used 0.25 of the cluster over the half-life against 0.5"
        );
        let after = UsageEffect {
            order: UsageOrder::After,
            used: 2.0 / 3.0,
            against: 0.0,
            ..effect
        };
        assert_eq!(
            usage_effect_message(&after),
            "ordered after `b`: used 0.67 of the cluster over the half-life against 0"
        );
    }

    #[test]
    fn malformed_names_the_field() {
        let mut s = usage_status(&usage(&[("nvidia.com/gpu", 7.5)]));
        s.resources.insert("cpu".into(), Quantity("1500m".into()));
        let e = read_usage("a", &s).unwrap_err();
        assert_eq!(e.0, "status.usage.resources[cpu]");
        s.resources.clear();
        s.held = Some([("nvidia.com/gpu".into(), Quantity("-1".into()))].into());
        assert_eq!(
            read_usage("a", &s).unwrap_err().0,
            "status.usage.held[nvidia.com/gpu]"
        );
        s.held = None;
        s.resources.clear();
        s.taken_at = "yesterday".into();
        assert_eq!(read_usage("a", &s).unwrap_err().0, "status.usage.takenAt");
        s.taken_at = String::new();
        assert!(read_usage("a", &s).is_err());
    }
}

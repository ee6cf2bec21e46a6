//! The `fairness` section of the configuration: fair share over time (queue usage decayed by a
//! half-life, see `basalt_queue::usage` and `basalt_engine::usage`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct FairnessArgs {
    pub usage: UsageArgs,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct UsageArgs {
    /// How long until what a queue used counts half (`168h`, `10m`, `1h30m`, `90s`); `0` or
    /// absent: off, shares as if nothing had been used.
    pub half_life: String,
    /// How strongly usage moves a queue's weight (KAI's `kValue`): `max(0, w + k·(w − u))`.
    pub k: f64,
    /// What each resource weighs in a queue's usage (Kueue's `resourceWeights`).
    pub resource_weights: BTreeMap<String, f64>,
}

impl Default for UsageArgs {
    fn default() -> Self {
        UsageArgs {
            half_life: "0".into(),
            k: 1.0,
            resource_weights: BTreeMap::from([("nvidia.com/gpu".to_string(), 1.0)]),
        }
    }
}

impl UsageArgs {
    /// The half-life in milliseconds (0: off), or why `halfLife` is not a duration.
    pub fn half_life_ms(&self) -> Result<i64, String> {
        duration_ms(&self.half_life)
    }

    /// The weighting the fair share applies, when usage is on.
    pub fn weighting(&self) -> Option<basalt_queue::UsageWeighting> {
        (self.half_life_ms().unwrap_or(0) > 0).then(|| basalt_queue::UsageWeighting {
            k: self.k,
            resource_weights: (self.resource_weights.iter())
                .map(|(name, w)| (name.clone(), *w))
                .collect(),
        })
    }

    /// Checks what the types alone cannot; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.half_life_ms()
            .map_err(|e| format!("fairness.usage.halfLife: {e}"))?;
        if !self.k.is_finite() || self.k < 0.0 {
            return Err(format!(
                "fairness.usage.k: must be a finite number of at least 0, got {}",
                self.k
            ));
        }
        for (name, w) in &self.resource_weights {
            if !w.is_finite() || *w < 0.0 {
                return Err(format!(
                    "fairness.usage.resourceWeights.{name}: must be a finite number of at least 0, got {w}"
                ));
            }
        }
        Ok(())
    }
}

/// A Go-style duration (`168h`, `1h30m`, `90s`, `500ms`, `0`) in milliseconds.
pub(crate) fn duration_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if text == "0" || text.is_empty() {
        return Ok(0);
    }
    let mut total: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?} is not a duration such as 168h, 1h30m or 90s"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            unit => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(per)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("{text:?} is too long"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_go() {
        assert_eq!(duration_ms("0"), Ok(0));
        assert_eq!(duration_ms("168h"), Ok(168 * 3_600_000));
        assert_eq!(duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(duration_ms("90s"), Ok(90_000));
        assert_eq!(duration_ms("500ms"), Ok(500));
        assert!(duration_ms("10 minutes").is_err());
        assert!(duration_ms("h").is_err());
        assert!(duration_ms("99999999999999999d").is_err());
    }

    #[test]
    fn bad_fields_are_named() {
        let bad = |yaml: &str| crate::Config::from_yaml("c.yaml", yaml).unwrap_err();
        assert!(bad("fairness: {usage: {halfLife: 7days}}").contains("fairness.usage.halfLife"));
        assert!(bad("fairness: {usage: {k: -1}}").contains("fairness.usage.k"));
        let w = bad("fairness: {usage: {resourceWeights: {cpu: -2}}}");
        assert!(w.contains("fairness.usage.resourceWeights.cpu"), "{w}");
        let on = crate::Config::from_yaml("c.yaml", "fairness: {usage: {halfLife: 10m}}").unwrap();
        assert_eq!(on.fairness.usage.half_life_ms(), Ok(600_000));
        assert!(crate::Config::default()
            .fairness
            .usage
            .weighting()
            .is_none());
    }
}

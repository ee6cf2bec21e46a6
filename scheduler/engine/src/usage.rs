//! Fairness over time: what each queue used, decayed by a half-life. The engine keeps no such
//! state: the snapshot carries each queue's usage and the instant it was taken
//! ([`Snapshot::usage`](crate::Snapshot)), the session brings it to the snapshot's instant, and
//! the plan returns the update ([`crate::Plan::usage`]), so a cycle stays a pure function of
//! its arguments and a replay or `plan --now` gives the same answer twice.
//!
//! Usage is a decayed average of what the queue held: after holding `held` over `[then, now]`,
//! `u' = u·d + held·(1 − d)` with `d = 2^(−(now − then)/halfLife)`. That is the decayed
//! resource-seconds `∫ held(t)·2^(−(now − t)/h) dt` divided by their total weight `h/ln 2`, so
//! it reads in the resource's own units ("averaged 8 GPUs").
//!
//! What a queue held over `[then, now]` is what its record says it held at `then` (`held`: what
//! it held once that plan was carried out), not what the snapshot at `now` holds: a job that
//! ran from the last record until just before this cycle is charged for its run. The sum is
//! exact when a record is taken at every change of holdings: the daemon cycles on every watch
//! event (a pod ending is one), the replay advances the records at each completion
//! ([`QueueUsage::advance`]). A record without `held` (written before it was kept) falls back
//! to the snapshot's holding.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One queue's usage as persisted (Queue status) and as the plan returns it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueUsage {
    pub queue: String,
    /// The instant the usage is of, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The decayed average held, per resource name, in the resource's units (milli-CPU, bytes,
    /// devices), as the engine counts them.
    pub used: BTreeMap<String, f64>,
    /// What the queue held from `at_ms` on, per resource name, in engine units (zeros left
    /// out): what the next record charges over the span. `None` in a record from before it was
    /// kept: then the snapshot's holding is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<BTreeMap<String, i64>>,
}

impl QueueUsage {
    /// The usage of `resource` after a span that keeps `keep` of the past, over which the
    /// queue held `held`: `u·d + held·(1 − d)`; a usage that is not a finite positive number
    /// counts as none.
    pub fn used_after(&self, resource: &str, held: i64, keep: f64) -> f64 {
        let before = (self.used.get(resource).copied())
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(0.0);
        decayed(before, held.max(0) as f64, keep)
    }

    /// Brings the record to `now_ms`, charging what it says the queue held since (for the
    /// replay, at a change of holdings that is no cycle; the caller then says what is held
    /// from now on). A record without `held` is left as it is: the next cycle charges the
    /// snapshot's holding. An instant before the record changes nothing.
    pub fn advance(&mut self, now_ms: i64, half_life_ms: i64) {
        let Some(held) = &self.held else { return };
        if now_ms <= self.at_ms {
            return;
        }
        let keep = kept(now_ms - self.at_ms, half_life_ms);
        let names: std::collections::BTreeSet<&String> =
            self.used.keys().chain(held.keys()).collect();
        let used = (names.into_iter())
            .map(|r| {
                (
                    r,
                    self.used_after(r, held.get(r).copied().unwrap_or(0), keep),
                )
            })
            .filter(|(_, v)| *v > 0.0)
            .map(|(r, v)| (r.clone(), v))
            .collect();
        self.used = used;
        self.at_ms = now_ms;
    }
}

/// Weights adjusted by usage, as a fair-share policy returns them (each indexed by `QueueId`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageWeights {
    /// What capacity beyond guarantees and entitlements is divided by.
    pub weights: Vec<i64>,
    /// The part of the cluster each queue used over the half-life, as the policy weighs
    /// resources (0.25: a quarter of it on average): what the plan's effect reports.
    pub used: Vec<f64>,
}

/// How much of usage `age_ms` old is kept under `half_life_ms`: `2^(−age/halfLife)`, 1 for no
/// age (or an instant ahead of the usage), 0 when there is no half-life.
///
/// Computed from square roots and products only (both correctly rounded by IEEE 754), never a
/// platform's `exp2`, so every machine gets the same bits: `2^(−n − f)` for the whole part `n`
/// and the binary digits of the fraction `f`, each digit `i` a factor `2^(−2^−i)`.
pub fn kept(age_ms: i64, half_life_ms: i64) -> f64 {
    if half_life_ms <= 0 {
        return 0.0;
    }
    if age_ms <= 0 {
        return 1.0;
    }
    let (h, whole, mut rest) = (
        half_life_ms as i128,
        age_ms as i128 / half_life_ms as i128,
        age_ms as i128 % half_life_ms as i128,
    );
    if whole > 1100 {
        return 0.0;
    }
    let mut out = 0.5f64.powi(whole as i32);
    let mut factor = 0.5f64;
    for _ in 0..52 {
        factor = factor.sqrt();
        rest *= 2;
        if rest >= h {
            rest -= h;
            out *= factor;
        }
        if rest == 0 {
            break;
        }
    }
    out
}

/// Usage `before`, then `held` over a span that keeps `kept` of the past.
pub fn decayed(before: f64, held: f64, kept: f64) -> f64 {
    before * kept + held * (1.0 - kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_halves_each_half_life() {
        assert_eq!(kept(0, 600_000), 1.0);
        assert_eq!(kept(-5, 600_000), 1.0);
        assert_eq!(kept(600_000, 600_000), 0.5);
        assert_eq!(kept(3_600_000, 600_000), 1.0 / 64.0);
        // Half a half-life: 1/√2, to the last bit of the square root.
        assert_eq!(kept(300_000, 600_000), 0.5f64.sqrt());
        assert_eq!(kept(900_000, 600_000), 0.5 * 0.5f64.sqrt());
        assert_eq!(kept(1, 0), 0.0);
        assert_eq!(kept(i64::MAX, 1), 0.0);
        // Close to the platform's exp2 everywhere, and monotone.
        let mut last = 1.0;
        for age in (0..2_000_000).step_by(7_919) {
            let k = kept(age, 600_000);
            assert!(
                (k - (-(age as f64) / 600_000.0).exp2()).abs() < 1e-12,
                "{age}"
            );
            assert!(k <= last);
            last = k;
        }
    }

    #[test]
    fn usage_moves_toward_what_is_held() {
        // Held 8 for one half-life from nothing: half of it.
        assert_eq!(decayed(0.0, 8.0, kept(600_000, 600_000)), 4.0);
        // Nothing held: the past halves.
        assert_eq!(decayed(8.0, 0.0, 0.5), 4.0);
        // Two half-lives in two steps equal one step of both.
        let two = decayed(decayed(0.0, 8.0, 0.5), 8.0, 0.5);
        assert_eq!(two, decayed(0.0, 8.0, kept(1_200_000, 600_000)));
    }

    #[test]
    fn advance_charges_what_the_record_held() {
        let gpu = "example.com/gpu".to_string();
        let mut record = QueueUsage {
            queue: "a".into(),
            at_ms: 0,
            used: BTreeMap::from([("cpu".to_string(), 2.0)]),
            held: Some(BTreeMap::from([(gpu.clone(), 8)])),
        };
        // One half-life holding 8 GPUs and no CPU: GPUs 4, CPU halved.
        record.advance(600_000, 600_000);
        assert_eq!(record.at_ms, 600_000);
        assert_eq!(record.used[&gpu], 4.0);
        assert_eq!(record.used["cpu"], 1.0);
        // Going back in time changes nothing; nor does a record without `held`.
        let before = record.clone();
        record.advance(1, 600_000);
        assert_eq!(record, before);
        record.held = None;
        record.advance(1_200_000, 600_000);
        assert_eq!(record.used, before.used);
    }
}

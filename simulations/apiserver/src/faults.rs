//! Fault injection: latency, stalls, errors by verb, resource and client, dropped watch streams.
//! Randomness comes from a seed, so a single-threaded test sees the same faults every run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, Error};

/// The verbs requests are classified into (as in Kubernetes audit logs and RBAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// One fault: requests matching `verb`, `resource` and `user_agent` (each optional) fail with
/// `code` with `probability`, and/or are delayed by `delay_ms`, and/or stalled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<Verb>,
    /// Plural, optionally with a subresource: `pods`, `pods/binding`, `podgroups/status`.
    /// A rule without a subresource matches only the main resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Chance that a matching request is hit (0..=1); default 1.
    #[serde(default = "one")]
    pub probability: f64,
    /// HTTP code of the injected error (answered as a Status); none for a delay-only rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    #[serde(default)]
    pub delay_ms: u64,
    /// Hold the request unanswered until the client goes away (the request is then dropped,
    /// never committed), the fault settings are replaced or the server stops; then it goes on
    /// (delay, error or the normal answer), as a request stuck in the network would.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stall: bool,
    /// Only requests whose `User-Agent` header contains this text (one client among several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Hit at most this many requests, then stay inert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
}

/// Every request, always (probability 1): set what the rule does and narrows it to.
impl Default for FaultRule {
    fn default() -> Self {
        FaultRule {
            verb: None,
            resource: None,
            probability: 1.0,
            code: None,
            delay_ms: 0,
            stall: false,
            user_agent: None,
            remaining: None,
        }
    }
}

fn one() -> f64 {
    1.0
}

impl FaultRule {
    /// Fails `probability` of requests of `verb` on `resource` with `code`.
    pub fn error(verb: Verb, resource: &str, probability: f64, code: u16) -> Self {
        FaultRule {
            verb: Some(verb),
            resource: Some(resource.to_string()),
            probability,
            code: Some(code),
            ..Default::default()
        }
    }

    /// Holds every request of `verb` (any when None) on `resource` unanswered (see `stall`).
    pub fn stall(verb: Option<Verb>, resource: &str) -> Self {
        FaultRule {
            verb,
            resource: Some(resource.to_string()),
            stall: true,
            ..Default::default()
        }
    }

    /// Narrows the rule to one client: requests whose `User-Agent` contains `text`.
    pub fn from_client(mut self, text: &str) -> Self {
        self.user_agent = Some(text.to_string());
        self
    }

    /// Stops after `n` hits.
    pub fn times(mut self, n: u64) -> Self {
        self.remaining = Some(n);
        self
    }

    fn matches(&self, verb: Verb, resource: &str, user_agent: &str) -> bool {
        self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
            && self
                .user_agent
                .as_deref()
                .is_none_or(|a| user_agent.contains(a))
            && self.remaining != Some(0)
    }
}

/// The fault settings; the admin endpoint reads and writes this as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Faults {
    /// Added to every API request (not discovery).
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub rules: Vec<FaultRule>,
    /// Close each watch stream after it has sent this many events (the client must re-watch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_watches_after: Option<u64>,
}

impl Faults {
    pub fn validate(&self) -> Result<(), Error> {
        for (index, r) in self.rules.iter().enumerate() {
            let fail = |message: String| Err(Error::FaultRule { index, message });
            if !(0.0..=1.0).contains(&r.probability) {
                return fail(format!("probability {} is not within 0..=1", r.probability));
            }
            if let Some(c) = r.code {
                if !(400..=599).contains(&c) {
                    return fail(format!("code {c} is not an HTTP error code (400..=599)"));
                }
            }
            if r.code.is_none() && r.delay_ms == 0 && !r.stall {
                return fail(
                    "has neither a code, a delayMs nor a stall: it would do nothing".into(),
                );
            }
        }
        Ok(())
    }
}

/// The live fault state: settings plus the seeded random source.
#[derive(Debug)]
pub struct FaultState {
    pub faults: Faults,
    rng: SplitMix64,
    /// Requests hit so far, by rule index (reported by the admin endpoint).
    pub injected: u64,
}

/// What to do with a request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Held until released (see `FaultRule::stall`), before the delay.
    pub stall: bool,
    pub delay: Duration,
    pub error: Option<ApiError>,
}

impl FaultState {
    pub fn new(faults: Faults, seed: u64) -> Self {
        FaultState {
            faults,
            rng: SplitMix64(seed),
            injected: 0,
        }
    }

    /// Decides the fate of one request of `verb` on `resource` (`pods` or `pods/binding`) from
    /// the client that says `user_agent`.
    pub fn decide(&mut self, verb: Verb, resource: &str, user_agent: &str) -> Decision {
        let mut d = Decision {
            stall: false,
            delay: Duration::from_millis(self.faults.latency_ms),
            error: None,
        };
        for rule in self.faults.rules.iter_mut() {
            if !rule.matches(verb, resource, user_agent) {
                continue;
            }
            // Draw for every matching rule, so one rule's outcome does not shift another's sequence.
            let draw = self.rng.next_f64();
            if draw >= rule.probability {
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            d.delay += Duration::from_millis(rule.delay_ms);
            d.stall |= rule.stall;
            if let (Some(code), None) = (rule.code, &d.error) {
                self.injected += 1;
                d.error = Some(ApiError::from_code(
                    code,
                    format!(
                        "injected fault: {} {resource} failed with {code}",
                        verb.as_str()
                    ),
                ));
            }
        }
        d
    }
}

/// SplitMix64: small, fast, and good enough for fault draws and generated names.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_and_determinism() {
        let faults = Faults {
            rules: vec![FaultRule::error(Verb::Create, "pods/binding", 0.3, 500)],
            ..Default::default()
        };
        let run = |seed| {
            let mut s = FaultState::new(faults.clone(), seed);
            (0..1000)
                .map(|_| s.decide(Verb::Create, "pods/binding", "").error.is_some())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        let hits = a.iter().filter(|x| **x).count();
        assert!((200..400).contains(&hits), "{hits}");
        let mut s = FaultState::new(faults, 7);
        assert!(s.decide(Verb::Create, "pods", "").error.is_none());
        assert!(s.decide(Verb::Get, "pods/binding", "").error.is_none());
    }

    #[test]
    fn remaining_counts_down() {
        let faults = Faults {
            rules: vec![FaultRule::error(Verb::Create, "pods/binding", 1.0, 409).times(2)],
            ..Default::default()
        };
        let mut s = FaultState::new(faults, 1);
        let codes: Vec<_> = (0..4)
            .map(|_| {
                s.decide(Verb::Create, "pods/binding", "")
                    .error
                    .map(|e| e.code)
            })
            .collect();
        assert_eq!(codes, vec![Some(409), Some(409), None, None]);
    }

    #[test]
    fn stalls_match_one_client_and_count_as_a_fault_that_does_something() {
        let faults = Faults {
            rules: vec![FaultRule::stall(None, "leases").from_client("replica-a")],
            ..Default::default()
        };
        assert!(faults.validate().is_ok());
        let mut s = FaultState::new(faults, 1);
        let ua = "basalt-scheduler/0.1.0 (replica-a)";
        assert!(s.decide(Verb::Patch, "leases", ua).stall);
        assert!(s.decide(Verb::Get, "leases", ua).stall);
        assert!(
            !s.decide(Verb::Patch, "leases", "basalt-scheduler/0.1.0 (replica-b)")
                .stall
        );
        assert!(!s.decide(Verb::Patch, "pods", ua).stall);
        // Nothing injected as an error: a stall alone answers normally once released.
        assert!(s.decide(Verb::Patch, "leases", ua).error.is_none());
        let json = serde_json::to_value(FaultRule::stall(Some(Verb::Update), "leases")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"verb": "update", "resource": "leases", "probability": 1.0,
                               "delayMs": 0, "stall": true})
        );
        let inert: Faults = serde_json::from_str(r#"{"rules": [{"resource": "leases"}]}"#).unwrap();
        assert!(inert.validate().unwrap_err().to_string().contains("stall"));
    }

    #[test]
    fn validation_names_the_rule() {
        let f = Faults {
            rules: vec![FaultRule::error(Verb::Get, "pods", 1.5, 500)],
            ..Default::default()
        };
        assert!(f
            .validate()
            .unwrap_err()
            .to_string()
            .contains("fault rule 0"));
    }
}

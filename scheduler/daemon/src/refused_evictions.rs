//! Pods whose eviction a disruption budget refused (a 429 from the Eviction API): not asked
//! again for a while, so that a budget that holds is not hammered each cycle.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an eviction refused by a disruption budget is not asked for again.
const REFUSED_EVICTION_HOLD: Duration = Duration::from_secs(30);

/// Pods whose eviction a disruption budget refused, and when: not asked again for
/// [`REFUSED_EVICTION_HOLD`].
#[derive(Default)]
pub struct RefusedEvictions(HashMap<String, Instant>);

impl RefusedEvictions {
    /// Forgets the refusals older than the hold (before a cycle's evictions).
    pub fn expire(&mut self) {
        self.0.retain(|_, at| at.elapsed() < REFUSED_EVICTION_HOLD);
    }

    pub fn refused(&mut self, key: String) {
        self.0.insert(key, Instant::now());
    }

    pub fn is_refused(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

//! Run times learned from finished jobs, for pods nobody states an end of.
//!
//! The rule: per key (the caller's: e.g. queue and owner), the median of the last
//! [`History::KEPT`] run times recorded; no estimate before the first. Bounded: at most
//! [`History::KEYS`] keys, the least recently recorded one forgotten first.

use std::collections::{BTreeMap, VecDeque};

#[derive(Clone, Debug, Default)]
pub struct History {
    /// Per key: its run times, oldest first, and when it was last recorded (a counter).
    runs: BTreeMap<String, (VecDeque<i64>, u64)>,
    recorded: u64,
}

impl History {
    /// Run times kept per key.
    pub const KEPT: usize = 20;
    /// Keys kept.
    pub const KEYS: usize = 10_000;

    /// Records that a job of `key` ran for `ms` (negative run times are ignored).
    pub fn record(&mut self, key: &str, ms: i64) {
        if ms < 0 {
            return;
        }
        self.recorded += 1;
        if !self.runs.contains_key(key) && self.runs.len() >= Self::KEYS {
            let oldest = (self.runs.iter())
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.runs.remove(&k);
            }
        }
        let (runs, at) = self.runs.entry(key.to_string()).or_default();
        if runs.len() == Self::KEPT {
            runs.pop_front();
        }
        runs.push_back(ms);
        *at = self.recorded;
    }

    /// The median of the key's last run times (the lower middle of an even count).
    pub fn estimate(&self, key: &str) -> Option<i64> {
        let (runs, _) = self.runs.get(key)?;
        let mut sorted: Vec<i64> = runs.iter().copied().collect();
        sorted.sort_unstable();
        sorted.get(sorted.len().checked_sub(1)? / 2).copied()
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_the_last_runs_per_key() {
        let mut h = History::default();
        assert_eq!(h.estimate("q/a"), None);
        for ms in [10, 30, 20] {
            h.record("q/a", ms);
        }
        h.record("q/b", 1000);
        assert_eq!(h.estimate("q/a"), Some(20));
        h.record("q/a", 40);
        assert_eq!(h.estimate("q/a"), Some(20), "lower middle of 10 20 30 40");
        for _ in 0..History::KEPT {
            h.record("q/a", 5);
        }
        assert_eq!(h.estimate("q/a"), Some(5), "only the last KEPT count");
        assert_eq!(h.estimate("q/b"), Some(1000));
    }
}

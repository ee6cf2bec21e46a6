//! When the next cycle must run though no watch event came: the deadline queue. A cycle
//! starts when a watch event came or the earliest deadline is due; otherwise the daemon
//! sleeps, looking once a period only at what no watch tells it (the config file, the lease),
//! which runs no cycle.
//!
//! What changes with time alone, and who sets its deadline:
//! - While any of Basalt's pods is pending, the engine's decisions may change with the clock
//!   (gang and schedule timeouts, backfill reservations, queue shares), and so may the
//!   daemon's (partial-gang rollback after `--partial-gang-timeout`, owners of waiting groups
//!   read again after `--owner-cache-ttl`, refused evictions and failed binds tried again):
//!   the next period ([`Deadlines::every_period`]). The engine does not report its next
//!   instant yet, so this is the conservative bound.
//! - A PodGroup waiting for its queue, a pod waiting for its group: the end of its grace, when
//!   it is reported (`cycle.rs`).
//! - Binds that failed with a retryable error: the backoff (`cycle::Outcome::backoff`).
//! - The config file and the lease: looked at every period by the waiting loop (`main.rs`).

use std::time::{Duration, Instant};

/// The instants, with what each is for, at which the last cycle's outcome changes with time
/// alone. Rebuilt by every cycle.
#[derive(Debug, Default)]
pub struct Deadlines {
    earliest: Option<(Instant, &'static str)>,
    /// Something pending may change with the clock at any time: the next period.
    every_period: Option<&'static str>,
}

impl Deadlines {
    /// Something changes at `when`.
    pub fn at(&mut self, when: Instant, why: &'static str) {
        if self.earliest.is_none_or(|(t, _)| when < t) {
            self.earliest = Some((when, why));
        }
    }

    /// Something may change at any time: look again after a period.
    pub fn every_period(&mut self, why: &'static str) {
        self.every_period.get_or_insert(why);
    }

    /// When the next cycle is due (given the period, from `now`), and why; `None` when nothing
    /// changes without an event.
    pub fn next(&self, now: Instant, period: Duration) -> Option<(Instant, &'static str)> {
        let periodic = self.every_period.map(|why| (now + period, why));
        match (self.earliest, periodic) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// The instant, on this process's monotonic clock, at which `grace` after `created` (wall
/// clock) ends.
pub fn grace_end(created: jiff::Timestamp, grace: Duration, now: jiff::Timestamp) -> Instant {
    let elapsed = Duration::try_from(now.duration_since(created)).unwrap_or(Duration::ZERO);
    // A little after, so the cycle it wakes sees the grace over.
    Instant::now() + grace.saturating_sub(elapsed) + Duration::from_millis(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_deadline_or_the_period_wakes_the_next_cycle() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut d = Deadlines::default();
        assert_eq!(
            d.next(t0, s(1)),
            None,
            "nothing timed: sleep until an event"
        );
        d.at(t0 + s(5), "queue grace");
        d.at(t0 + s(3), "group grace");
        d.at(t0 + s(4), "later");
        assert_eq!(d.next(t0, s(1)).unwrap().1, "group grace");
        d.every_period("pending");
        assert_eq!(d.next(t0, s(1)), Some((t0 + s(1), "pending")));
        assert_eq!(d.next(t0, s(10)), Some((t0 + s(3), "group grace")));
    }

    #[test]
    fn a_grace_ends_its_length_after_creation() {
        let now = jiff::Timestamp::now();
        let created = now - jiff::SignedDuration::from_secs(2);
        let end = grace_end(created, Duration::from_secs(5), now);
        let left = end.saturating_duration_since(Instant::now());
        assert!(left > Duration::from_secs(2) && left <= Duration::from_millis(3010));
        // Long over: due at once.
        let old = now - jiff::SignedDuration::from_secs(60);
        let end = grace_end(old, Duration::from_secs(5), now);
        assert!(end <= Instant::now() + Duration::from_millis(10));
    }
}

//! Gangs found partly bound: some members hold nodes but the gang's minimum cannot be met. A
//! bind failed, or the scheduler stopped in the middle of a gang and the capacity went to
//! someone else. Left alone, the bound members hold their GPUs forever and the rest pend
//! forever. Once a gang has stayed so for `--partial-gang-timeout`, its bound members are
//! evicted, so that it can start whole later and nothing half-placed holds GPUs hostage.
//!
//! What is partly bound comes from the plan alone (members bound or running after the plan,
//! its own bindings included, below the minimum), so a gang the plan completes is never touched.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_engine::Plan;

/// The gangs seen partly bound, and since when.
pub struct PartialGangs {
    timeout: Duration,
    since: HashMap<Arc<str>, Seen>,
}

struct Seen {
    at: Instant,
    /// When the bound members are evicted, for people (RFC 3339).
    deadline: String,
}

/// One gang the plan leaves below its minimum with members bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialGang {
    /// `namespace/name`.
    pub group: Arc<str>,
    pub bound: u32,
    pub min_member: u32,
    /// When its bound members are evicted (RFC 3339).
    pub deadline: String,
    /// The timeout has passed: evict its bound members now.
    pub expired: bool,
}

impl PartialGang {
    /// The PodGroup condition's message while the gang waits (unchanged from cycle to cycle, so
    /// the status is not rewritten every cycle).
    pub fn message(&self) -> String {
        format!(
            "{} of the minimum {} members are bound and the others cannot be placed; the bound \
             members are evicted at {} unless the gang is completed first",
            self.bound, self.min_member, self.deadline
        )
    }
}

impl PartialGangs {
    pub fn new(timeout: Duration) -> Self {
        PartialGangs {
            timeout,
            since: HashMap::new(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The gangs `plan` leaves partly bound. A gang seen for the first time starts its clock at
    /// `now` (its deadline written from `wall_now`); gangs no longer partly bound are forgotten.
    pub fn observe(
        &mut self,
        plan: &Plan,
        now: Instant,
        wall_now: jiff::Timestamp,
    ) -> Vec<PartialGang> {
        let mut out = Vec::new();
        let mut still = HashMap::with_capacity(self.since.len());
        for g in plan.pod_groups.iter().filter(|g| partly_bound(g)) {
            let seen = self.since.remove(&g.name).unwrap_or_else(|| Seen {
                at: now,
                deadline: deadline(wall_now, self.timeout),
            });
            out.push(PartialGang {
                group: g.name.clone(),
                bound: g.running,
                min_member: g.min_member,
                deadline: seen.deadline.clone(),
                expired: now.saturating_duration_since(seen.at) >= self.timeout,
            });
            still.insert(g.name.clone(), seen);
        }
        self.since = still;
        out
    }

    /// Forgets everything (another replica led in between: its gangs' clocks are not ours).
    pub fn clear(&mut self) {
        self.since.clear();
    }
}

/// Members bound or running, but fewer (with those that succeeded) than the minimum.
pub fn partly_bound(g: &basalt_engine::PodGroupStatus) -> bool {
    g.running > 0 && g.running.saturating_add(g.succeeded) < g.min_member
}

fn deadline(now: jiff::Timestamp, timeout: Duration) -> String {
    let timeout = jiff::SignedDuration::try_from(timeout).unwrap_or(jiff::SignedDuration::MAX);
    now.checked_add(timeout)
        .unwrap_or(jiff::Timestamp::MAX)
        .round(jiff::Unit::Second)
        .unwrap_or(now)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_engine::{JobPhase, PodGroupStatus};

    fn plan(groups: &[(&str, u32, u32, u32)]) -> Plan {
        Plan {
            pod_groups: groups
                .iter()
                .map(|&(name, running, succeeded, min_member)| PodGroupStatus {
                    name: name.into(),
                    phase: JobPhase::Unknown,
                    conditions: Vec::new(),
                    running,
                    succeeded,
                    failed: 0,
                    pending: min_member.saturating_sub(running + succeeded),
                    min_member,
                    explanation: None,
                })
                .collect(),
            ..Plan::default()
        }
    }

    #[test]
    fn only_gangs_bound_below_their_minimum_count_and_expire_after_the_timeout() {
        let mut gangs = PartialGangs::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let wall = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let p = plan(&[
            ("ns/partial", 1, 0, 4),
            ("ns/whole", 4, 0, 4),
            ("ns/waiting", 0, 0, 4),
            ("ns/done-and-running", 1, 3, 4),
        ]);
        let seen = gangs.observe(&p, t0, wall);
        assert_eq!(seen.len(), 1);
        assert_eq!(&*seen[0].group, "ns/partial");
        assert!(!seen[0].expired);
        assert_eq!(seen[0].deadline, "2027-01-15T08:01:00Z");
        assert!(seen[0].message().contains("1 of the minimum 4"));

        // Still partly bound later: the clock is the first sighting's, the message unchanged.
        let later = gangs.observe(&p, t0 + Duration::from_secs(59), wall);
        assert!(!later[0].expired);
        assert_eq!(later[0].message(), seen[0].message());
        let expired = gangs.observe(&p, t0 + Duration::from_secs(60), wall);
        assert!(expired[0].expired);

        // Completed (or wholly unbound) once: forgotten, and a new sighting starts afresh.
        assert!(gangs
            .observe(&plan(&[("ns/partial", 4, 0, 4)]), t0, wall)
            .is_empty());
        let again = gangs.observe(&p, t0 + Duration::from_secs(120), wall);
        assert!(!again[0].expired);
    }
}

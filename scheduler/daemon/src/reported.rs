//! What the daemon has already said, so that no Event or log line is repeated cycle after
//! cycle: the last reason given per object (FailedScheduling and the held pods' Events), the
//! objects left out of the snapshot, the conversion warnings and the names two APIs share.
//! Each of the last three is said once while it lasts; one that goes away and comes back is
//! said again.

use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct Reported {
    /// Last Event reason and message per object (`Pod/ns/name`, `PodGroup/ns/name`,
    /// `PodClaims/ns/name`), so an unchanged reason is not repeated.
    last_said: HashMap<String, String>,
    /// Objects left out of the last snapshot (their errors), already reported.
    convert_errors: Lasting,
    /// Conversion warnings of the last snapshot, already logged.
    warnings: Lasting,
    /// Basalt and Volcano objects sharing a name, already warned about.
    collisions: Lasting,
    /// Nodes over capacity, already warned about.
    overfull: Lasting,
    /// Expected-runtime annotations that do not read, already reported.
    bad_runtimes: Lasting,
}

/// Things said once while they last.
#[derive(Default)]
struct Lasting(HashSet<String>);

impl Lasting {
    /// Those of `now` not said before; `now` is what has been said from here on.
    fn fresh(&mut self, now: HashSet<String>) -> HashSet<String> {
        let fresh = now
            .iter()
            .filter(|t| !self.0.contains(*t))
            .cloned()
            .collect();
        self.0 = now;
        fresh
    }
}

impl Reported {
    /// Whether `said` is news about `key` (not what was last said about it); it is what was
    /// last said from here on.
    pub fn is_news(&mut self, key: String, said: String) -> bool {
        if self.last_said.get(&key) == Some(&said) {
            return false;
        }
        self.last_said.insert(key, said);
        true
    }

    /// Forgets what was said about `key` (the pod is bound, the group no longer unschedulable),
    /// so the reason is given again should it come back.
    pub fn forget(&mut self, key: &str) {
        self.last_said.remove(key);
    }

    /// The conversion errors (their text) among `now` not reported while they lasted.
    pub fn new_convert_errors(&mut self, now: HashSet<String>) -> HashSet<String> {
        self.convert_errors.fresh(now)
    }

    /// The conversion warnings among `now` not logged while they lasted.
    pub fn new_warnings(&mut self, now: HashSet<String>) -> HashSet<String> {
        self.warnings.fresh(now)
    }

    /// The name collisions among `now` not warned about while they lasted.
    pub fn new_collisions(&mut self, now: HashSet<String>) -> HashSet<String> {
        self.collisions.fresh(now)
    }

    /// The nodes over capacity among `now` not warned about while they lasted.
    pub fn new_overfull(&mut self, now: HashSet<String>) -> HashSet<String> {
        self.overfull.fresh(now)
    }

    /// The unreadable expected-runtime annotations among `now` not reported while they lasted.
    pub fn new_bad_runtimes(&mut self, now: HashSet<String>) -> HashSet<String> {
        self.bad_runtimes.fresh(now)
    }

    /// Another replica led in between: the reasons and invalid objects are given again (the
    /// Events it wrote are its own).
    pub fn forget_events(&mut self) {
        self.last_said.clear();
        self.convert_errors.0.clear();
        self.overfull.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_news_once_and_again_after_it_changed_or_was_forgotten() {
        let mut r = Reported::default();
        assert!(r.is_news("Pod/ml/p".into(), "a".into()));
        assert!(!r.is_news("Pod/ml/p".into(), "a".into()));
        assert!(r.is_news("Pod/ml/p".into(), "b".into()));
        assert!(r.is_news("Pod/ml/p".into(), "a".into()));
        r.forget("Pod/ml/p");
        assert!(r.is_news("Pod/ml/p".into(), "a".into()));
    }

    #[test]
    fn a_warning_is_said_once_while_it_lasts() {
        let set = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
        let mut r = Reported::default();
        assert_eq!(r.new_warnings(set(&["a", "b"])), set(&["a", "b"]));
        assert_eq!(r.new_warnings(set(&["a", "c"])), set(&["c"]));
        // Gone for a cycle, then back: said again.
        assert_eq!(r.new_warnings(set(&["c"])), set(&[]));
        assert_eq!(r.new_warnings(set(&["a", "c"])), set(&["a"]));
        // Another replica led: errors are said again, warnings are not.
        assert_eq!(r.new_convert_errors(set(&["e"])), set(&["e"]));
        r.forget_events();
        assert_eq!(r.new_convert_errors(set(&["e"])), set(&["e"]));
        assert_eq!(r.new_warnings(set(&["a", "c"])), set(&[]));
    }
}

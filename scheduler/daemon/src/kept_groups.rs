//! Basalt's PodGroups as the cycle collects them (`cycle.rs`): every key the store holds (an
//! undecodable group still owns its name) and the errors of those that do not decode. Kept from
//! cycle to cycle and brought up to date from the PodGroups the change log names, while nothing
//! they are read against changed (the cycle checks the queues, the namespaces and the peers'
//! groups; none may wait for its queue's grace, which time alone ends); else read from every
//! PodGroup again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use basalt_crds::{ConvertError, PodGroup};

use crate::lenient::Lenient;
use crate::stores::SOURCE;

#[derive(Default)]
pub struct KeptGroups {
    keys: HashSet<String>,
    unreadable: HashMap<String, ConvertError>,
    /// Read since the last restart with none waiting for its queue: the next cycle may bring
    /// it up to date from the changes alone.
    current: bool,
}

/// What one PodGroup gives the cycle.
pub enum Read {
    /// It goes into the snapshot and the view.
    Goes(Arc<PodGroup>),
    /// Gone, undecodable or waiting for its queue: not in the snapshot.
    Out,
}

impl KeptGroups {
    /// Every PodGroup key the store holds.
    pub fn keys(&self) -> &HashSet<String> {
        &self.keys
    }

    /// Whether it may be brought up to date from the changes alone.
    pub fn current(&self) -> bool {
        self.current
    }

    /// Starts reading every PodGroup afresh; `current` false when the cycle's groups depend on
    /// more than Basalt's (a peer's groups or queues are served).
    pub fn restart(&mut self, current: bool) {
        self.keys.clear();
        self.unreadable.clear();
        self.current = current;
    }

    /// Reads the PodGroup at `key` as the store has it now (`None`: gone); `waits` tells
    /// whether a decoded one waits for its queue.
    pub fn read(
        &mut self,
        key: String,
        group: Option<&Lenient<PodGroup>>,
        mut waits: impl FnMut(&PodGroup) -> bool,
    ) -> Read {
        self.unreadable.remove(&key);
        let Some(group) = group else {
            self.keys.remove(&key);
            return Read::Out;
        };
        let read = match group.typed(SOURCE) {
            Ok(typed) if waits(typed) => {
                self.current = false;
                Read::Out
            }
            Ok(typed) => Read::Goes(typed.clone()),
            Err(e) => {
                self.unreadable.insert(key.clone(), e);
                Read::Out
            }
        };
        self.keys.insert(key);
        read
    }

    /// The errors of the PodGroups that do not decode.
    pub fn unreadable(&self) -> impl Iterator<Item = &ConvertError> {
        self.unreadable.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn group(name: &str, v: u8) -> Arc<Lenient<PodGroup>> {
        let spec = match v % 3 {
            0 => json!({"minMember": 1}),
            1 => json!({"minMember": 2, "queue": "q"}),
            _ => json!({"minMember": "many"}),
        };
        let value = json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml"}, "spec": spec});
        Arc::new(Lenient::decode(value).unwrap())
    }

    fn read_all(store: &HashMap<String, Arc<Lenient<PodGroup>>>) -> KeptGroups {
        let mut kept = KeptGroups::default();
        kept.restart(true);
        for (key, g) in store {
            kept.read(key.clone(), Some(g), |_| false);
        }
        kept
    }

    fn errors(kept: &KeptGroups) -> Vec<String> {
        let mut e: Vec<String> = kept.unreadable().map(|e| e.to_string()).collect();
        e.sort();
        e
    }

    #[test]
    fn brought_up_to_date_by_the_changes_it_equals_reading_every_group() {
        let mut store = HashMap::new();
        let mut kept = read_all(&store);
        // A fixed walk over adds, changes (decodable or not) and deletes of five groups.
        let mut seed: u64 = 7;
        for _ in 0..200 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let name = format!("g{}", (seed >> 33) % 5);
            let key = format!("ml/{name}");
            match (seed >> 40) % 4 {
                0 => store.remove(&key),
                v => store.insert(key.clone(), group(&name, v as u8)),
            };
            let read = kept.read(key.clone(), store.get(&key).map(|g| &**g), |_| false);
            let goes = matches!(read, Read::Goes(_));
            let decodes = store.get(&key).is_some_and(|g| g.typed(SOURCE).is_ok());
            assert_eq!(goes, decodes, "{key}");
            let all = read_all(&store);
            assert_eq!(kept.keys(), all.keys());
            assert_eq!(errors(&kept), errors(&all));
            assert!(kept.current());
        }
        // A group waiting for its queue: the next cycle reads every group.
        kept.read("ml/g0".into(), Some(&group("g0", 1)), |_| true);
        assert!(!kept.current());
    }
}

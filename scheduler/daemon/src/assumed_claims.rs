//! The assume cache of ResourceClaims: every claim this scheduler wrote (its allocation, its
//! `reservedFor`, or both cleared again after a failed bind), as the API server answered, until
//! the watch shows that version or a newer one, or the claim is gone or replaced (another uid).
//! Until then each cycle converts the claim as written, not as the watch last said: its
//! devices are never handed out twice between the write and its watch event, and a pod whose
//! bind failed after its claim was allocated is retried on the node the allocation names.
//!
//! As kube-scheduler's assume cache, versions are compared as integers (the etcd revision
//! every Kubernetes API server gives); a version that is not one only matches itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

#[derive(Default)]
pub struct AssumedClaims {
    /// By `ns/name`: the newest answer to a write of the claim.
    written: HashMap<String, Arc<ResourceClaim>>,
}

pub fn claim_key(c: &ResourceClaim) -> String {
    crate::keys::key_of(&c.metadata)
}

/// Whether `seen` is the version `written` or a later one of the same object.
fn caught_up(seen: &ResourceClaim, written: &ResourceClaim) -> bool {
    let (a, b) = (
        seen.metadata.resource_version.as_deref(),
        written.metadata.resource_version.as_deref(),
    );
    match (
        a.and_then(|v| v.parse::<u64>().ok()),
        b.and_then(|v| v.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a >= b,
        _ => a == b,
    }
}

impl AssumedClaims {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    /// Records an answer to a write of a claim (the newest of two answers wins).
    pub fn wrote(&mut self, claim: Arc<ResourceClaim>) {
        let key = claim_key(&claim);
        let newer_kept = self.written.get(&key).is_some_and(|old| {
            old.metadata.uid == claim.metadata.uid
                && old.metadata.resource_version != claim.metadata.resource_version
                && caught_up(old, &claim)
        });
        if !newer_kept {
            self.written.insert(key, claim);
        }
    }

    /// The claim as this scheduler last wrote it, while the watch has not shown that yet.
    pub fn get(&self, key: &str) -> Option<&Arc<ResourceClaim>> {
        self.written.get(key)
    }

    /// The watched claims with the ones written since in their place. Entries the watch caught
    /// up with, and those of claims gone or replaced, are dropped.
    pub fn overlay(&mut self, watched: Vec<Arc<ResourceClaim>>) -> Vec<Arc<ResourceClaim>> {
        if self.written.is_empty() {
            return watched;
        }
        let mut seen = HashSet::new();
        let out = watched
            .into_iter()
            .map(|c| {
                let key = claim_key(&c);
                match self.written.get(&key) {
                    Some(w) if w.metadata.uid == c.metadata.uid && !caught_up(&c, w) => {
                        seen.insert(key);
                        w.clone()
                    }
                    Some(_) => {
                        self.written.remove(&key);
                        c
                    }
                    None => c,
                }
            })
            .collect();
        self.written.retain(|k, _| seen.contains(k));
        out
    }

    pub fn clear(&mut self) {
        self.written.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(uid: &str, rv: &str, allocated: bool) -> Arc<ResourceClaim> {
        let mut v = json!({
            "metadata": {"name": "c", "namespace": "ml", "uid": uid, "resourceVersion": rv},
            "spec": {},
        });
        if allocated {
            v["status"] = json!({"allocation": {"devices": {"results": [
                {"request": "r", "driver": "d", "pool": "p", "device": "gpu-0"}]}}});
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn allocated(c: &ResourceClaim) -> bool {
        c.status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_some()
    }

    #[test]
    fn a_written_claim_stands_until_the_watch_shows_its_version_or_a_later_one() {
        let mut a = AssumedClaims::default();
        a.wrote(claim("u1", "10", true));
        // The watch still has the version before the write.
        let out = a.overlay(vec![claim("u1", "7", false)]);
        assert!(allocated(&out[0]));
        assert_eq!(out[0].metadata.resource_version.as_deref(), Some("10"));
        // The same Arc every cycle, so an unchanged cycle is recognised.
        let again = a.overlay(vec![claim("u1", "7", false)]);
        assert!(Arc::ptr_eq(&out[0], &again[0]));
        // The watch caught up (here: a later version, deallocated by someone else).
        let out = a.overlay(vec![claim("u1", "12", false)]);
        assert!(!allocated(&out[0]));
        assert!(a.is_empty());
    }

    #[test]
    fn a_claim_replaced_or_gone_is_forgotten_and_an_older_answer_never_wins() {
        let mut a = AssumedClaims::default();
        a.wrote(claim("u1", "10", true));
        let out = a.overlay(vec![claim("u2", "3", false)]);
        assert!(!allocated(&out[0]), "another claim of the same name");
        assert!(a.is_empty());
        a.wrote(claim("u1", "10", true));
        assert!(a.overlay(Vec::new()).is_empty());
        assert!(a.is_empty(), "deleted");
        // Two answers: the newer one stays, whatever order they are recorded in.
        a.wrote(claim("u1", "12", false));
        a.wrote(claim("u1", "10", true));
        assert!(!allocated(a.get("ml/c").unwrap()));
    }
}

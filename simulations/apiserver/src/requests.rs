//! The request log: the writes the server answered, by client, for telling replicas apart.

use std::collections::VecDeque;

use serde::Serialize;

use crate::faults::Verb;

/// Writes kept in the request log; older ones are dropped first.
pub const REQUEST_LOG_CAPACITY: usize = 100_000;

/// One write (create, update, patch, delete) as answered, for telling clients apart in tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// Order in which the server answered (counts from 0, also over dropped entries).
    pub seq: u64,
    pub verb: Verb,
    /// Plural, with the subresource if any: `pods/binding`, `leases`.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The client's `User-Agent` header (empty when none).
    pub user_agent: String,
    /// HTTP status of the answer.
    pub code: u16,
}

#[derive(Debug, Default)]
pub struct RequestLog {
    entries: VecDeque<RequestRecord>,
    next_seq: u64,
}

impl RequestLog {
    pub fn push(&mut self, mut r: RequestRecord) {
        r.seq = self.next_seq;
        self.next_seq += 1;
        if self.entries.len() == REQUEST_LOG_CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back(r);
    }

    pub fn entries(&self) -> Vec<RequestRecord> {
        self.entries.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_newest_writes_and_numbers_them_in_order() {
        let mut log = RequestLog::default();
        let write = |name: usize| RequestRecord {
            seq: 0,
            verb: Verb::Create,
            resource: "pods/binding".into(),
            namespace: Some("default".into()),
            name: Some(name.to_string()),
            user_agent: "replica-a".into(),
            code: 201,
        };
        for i in 0..REQUEST_LOG_CAPACITY + 2 {
            log.push(write(i));
        }
        let entries = log.entries();
        assert_eq!(entries.len(), REQUEST_LOG_CAPACITY);
        assert_eq!(entries[0].seq, 2);
        assert_eq!(entries[0].name.as_deref(), Some("2"));
        assert!(entries.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    }
}

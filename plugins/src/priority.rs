//! Job order by PriorityClass value (higher first), then creation time (older first); the
//! framework breaks remaining ties by name.

use std::cmp::Ordering;

use basalt_engine::{Job, JobOrder};

pub struct Priority;

impl JobOrder for Priority {
    fn compare(&self, a: &Job, b: &Job) -> Ordering {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.created_ms.cmp(&b.created_ms))
    }
}

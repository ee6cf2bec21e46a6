//! Which sibling queue is served first: [`PriorityThenShare`], the higher queue priority, then
//! the lower dominant share (what the queue holds over what it deserves, in the resource where
//! that is largest), so queues of one priority take turns towards their fair shares; with usage
//! on, equal shares go to the queue whose weight its usage left larger (it used less), so
//! queues that both hold nothing start in the order of what they used.

use std::cmp::Ordering;

use basalt_engine::{QueueId, QueueOrder, SessionView};

pub struct PriorityThenShare;

impl QueueOrder for PriorityThenShare {
    fn name(&self) -> &str {
        "priority-then-share"
    }

    fn compare(&self, session: &SessionView, a: QueueId, b: QueueId) -> Ordering {
        let priority = |q| session.snapshot.queue(q).priority;
        (priority(b).cmp(&priority(a)))
            .then_with(|| session.share(a).cmp(&session.share(b)))
            .then_with(|| session.usage_weight(b).cmp(&session.usage_weight(a)))
    }
}

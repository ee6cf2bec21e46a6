//! The order in which queues are served: down the tree, at each level the child with the highest
//! queue priority, then the lowest dominant share, then the first name. One priority queue per
//! inner node keeps this at O(depth · log children) per pick.

use std::cmp::Reverse;
use std::collections::HashMap;

use priority_queue::PriorityQueue;

use crate::model::QueueId;
use crate::session::Session;
use crate::share::Share;
use crate::snapshot::ancestors;

type Key = (i32, Reverse<Share>, Reverse<QueueId>);

/// Leaf queues with work, in service order. `None` stands for the implicit root.
pub struct QueueOrder {
    heaps: HashMap<Option<QueueId>, PriorityQueue<QueueId, Key>>,
}

fn key(session: &Session, q: QueueId) -> Key {
    (
        session.snapshot.queue(q).priority,
        Reverse(session.share(q)),
        Reverse(q),
    )
}

impl QueueOrder {
    pub fn new(session: &Session, leaves: impl IntoIterator<Item = QueueId>) -> Self {
        let mut heaps: HashMap<Option<QueueId>, PriorityQueue<QueueId, Key>> = HashMap::new();
        for leaf in leaves {
            for q in ancestors(session.snapshot, leaf) {
                let parent = session.snapshot.queue(q).parent;
                heaps.entry(parent).or_default().push(q, key(session, q));
            }
        }
        QueueOrder { heaps }
    }

    /// The leaf to serve next.
    pub fn next(&self) -> Option<QueueId> {
        let mut at = None;
        loop {
            let (&q, _) = self.heaps.get(&at)?.peek()?;
            if self.heaps.contains_key(&Some(q)) {
                at = Some(q);
            } else {
                return Some(q);
            }
        }
    }

    /// Re-ranks the leaf and its ancestors after their shares changed.
    pub fn refresh(&mut self, session: &Session, leaf: QueueId) {
        for q in ancestors(session.snapshot, leaf) {
            let parent = session.snapshot.queue(q).parent;
            if let Some(heap) = self.heaps.get_mut(&parent) {
                heap.change_priority(&q, key(session, q));
            }
        }
    }

    /// Drops a leaf that has no more work, and every ancestor left without any.
    pub fn remove(&mut self, session: &Session, leaf: QueueId) {
        for q in ancestors(session.snapshot, leaf) {
            let parent = session.snapshot.queue(q).parent;
            let Some(heap) = self.heaps.get_mut(&parent) else {
                return;
            };
            heap.remove(&q);
            if !heap.is_empty() {
                return;
            }
            self.heaps.remove(&parent);
        }
    }
}

//! The order in which leaf queues are served: down the tree, at each level the first child by
//! the framework's [`QueueOrder`], ties by name. Each inner node keeps its children with work
//! sorted, so a pick is O(depth) and a change of shares re-sorts only the queues it touched.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::framework::QueueOrder;
use crate::model::QueueId;
use crate::session::Session;
use crate::snapshot::ancestors;

/// Leaf queues with work, in service order.
pub struct ServiceOrder<'f> {
    policy: &'f dyn QueueOrder,
    /// Each inner node's children with work, first served first. `None` stands for the
    /// implicit root.
    children: HashMap<Option<QueueId>, Vec<QueueId>>,
}

impl<'f> ServiceOrder<'f> {
    pub fn new(
        session: &Session,
        policy: &'f dyn QueueOrder,
        leaves: impl IntoIterator<Item = QueueId>,
    ) -> Self {
        let mut children: HashMap<Option<QueueId>, Vec<QueueId>> = HashMap::new();
        for leaf in leaves {
            for q in ancestors(session.snapshot, leaf) {
                let parent = session.snapshot.queue(q).parent;
                children.entry(parent).or_default().push(q);
            }
        }
        for siblings in children.values_mut() {
            siblings.sort_unstable();
            siblings.dedup();
            siblings.sort_by(|&a, &b| first(policy, session, a, b));
        }
        ServiceOrder { policy, children }
    }

    /// The leaf to serve next.
    pub fn next(&self) -> Option<QueueId> {
        let mut at = None;
        loop {
            let &q = self.children.get(&at)?.first()?;
            if self.children.contains_key(&Some(q)) {
                at = Some(q);
            } else {
                return Some(q);
            }
        }
    }

    /// Re-sorts the leaf and its ancestors after their shares changed.
    pub fn refresh(&mut self, session: &Session, leaf: QueueId) {
        let policy = self.policy;
        for q in ancestors(session.snapshot, leaf) {
            let parent = session.snapshot.queue(q).parent;
            let Some(siblings) = self.children.get_mut(&parent) else {
                continue;
            };
            let Some(i) = siblings.iter().position(|&s| s == q) else {
                continue;
            };
            siblings.remove(i);
            let at = siblings.partition_point(|&s| first(policy, session, s, q).is_lt());
            siblings.insert(at, q);
        }
    }

    /// Drops a leaf that has no more work, and every ancestor left without any.
    pub fn remove(&mut self, session: &Session, leaf: QueueId) {
        for q in ancestors(session.snapshot, leaf) {
            let parent = session.snapshot.queue(q).parent;
            let Some(siblings) = self.children.get_mut(&parent) else {
                return;
            };
            siblings.retain(|&s| s != q);
            if !siblings.is_empty() {
                return;
            }
            self.children.remove(&parent);
        }
    }
}

/// The policy's order, ties by name (queue ids are in name order): a total order.
fn first(policy: &dyn QueueOrder, session: &Session, a: QueueId, b: QueueId) -> Ordering {
    policy.compare(&session.view(), a, b).then(a.cmp(&b))
}

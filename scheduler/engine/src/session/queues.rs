//! What the queues hold, ask for and deserve, and the admissions reserved in them. Placements,
//! evictions and their undoing (`charge`), admissions (`holds.rs`) and the shares set once
//! while opening (`open.rs`) change it, through the methods here.

use crate::model::QueueId;
use crate::resources::Resources;
use crate::share::Share;
use crate::snapshot::{ancestors, Snapshot};
use crate::UsageWeights;

/// The session's queue accounts, each per queue subtree.
pub(super) struct Queues {
    /// Per queue: what its subtree holds (bound before the cycle, placed or pipelined by it).
    allocated: Vec<Resources>,
    /// Per queue: what its subtree's pending pods asked for when the session opened.
    pending: Vec<Resources>,
    /// Per queue: its fair share (see [`crate::FairShare`]).
    deserved: Vec<Resources>,
    /// Per queue and resource (`queue × dims`): its usage brought to the snapshot's instant
    /// (see [`crate::usage`]); empty without a usage half-life.
    usage: Vec<f64>,
    /// Per queue: the weight the fair share divides by, when the policy adjusted it by usage.
    usage_weights: Option<UsageWeights>,
    /// minResources of admitted jobs that hold nothing yet, in all and per queue subtree.
    inqueue_reserved: Resources,
    queue_reserved: Vec<Resources>,
    cluster_allocatable: Resources,
    /// What the queues share: the cluster's allocatable less what pods of other schedulers
    /// use.
    queue_capacity: Resources,
    /// Whether some queue states a guarantee (else a guarantee check has nothing to do).
    guaranteed: bool,
}

impl Queues {
    /// The queues as the snapshot has them: what each subtree holds and its pending pods ask
    /// for, and `ours_bound`, what all of them hold (the rest of the nodes' usage is other
    /// schedulers'). Shares come with [`Self::set_usage`],
    /// [`Self::set_weights`] and [`Self::set_deserved`], in that order.
    pub(super) fn new(
        snapshot: &Snapshot,
        allocated: Vec<Resources>,
        pending: Vec<Resources>,
        ours_bound: &Resources,
    ) -> Queues {
        let zero = Resources::zero(snapshot.resources.len());
        let cluster_allocatable = snapshot.allocatable_total.clone();
        let mut foreign = snapshot.used_total.clone();
        foreign.take_back(ours_bound);
        let mut queue_capacity = cluster_allocatable.clone();
        queue_capacity.sub(&foreign);
        Queues {
            allocated,
            pending,
            deserved: Vec::new(),
            usage: Vec::new(),
            usage_weights: None,
            inqueue_reserved: zero.clone(),
            queue_reserved: vec![zero; snapshot.queues.len()],
            cluster_allocatable,
            queue_capacity,
            guaranteed: snapshot.queues.iter().any(|q| !q.guarantee.is_empty()),
        }
    }

    /// Sets each queue's usage now (the fair-share policy reads it for its weights).
    pub(super) fn set_usage(&mut self, usage: Vec<f64>) {
        self.usage = usage;
    }

    /// Sets the weights the fair-share policy adjusted by usage (its share reads them).
    pub(super) fn set_weights(&mut self, weights: Option<UsageWeights>) {
        self.usage_weights = weights;
    }

    /// Sets each queue's deserved share, as the fair-share policy gave it.
    pub(super) fn set_deserved(&mut self, deserved: Vec<Resources>) {
        self.deserved = deserved;
    }

    pub(super) fn allocated(&self, queue: QueueId) -> &Resources {
        &self.allocated[queue.index()]
    }

    /// What the queue's subtree's pending pods asked for when the session opened.
    pub(super) fn pending(&self, queue: QueueId) -> &Resources {
        &self.pending[queue.index()]
    }

    pub(super) fn deserved(&self, queue: QueueId) -> &Resources {
        &self.deserved[queue.index()]
    }

    /// Dominant share: the largest allocated / deserved over the resources the queue holds.
    pub(super) fn share(&self, queue: QueueId) -> Share {
        Share::dominant(
            &self.allocated[queue.index()],
            &self.deserved[queue.index()],
        )
    }

    /// The queue's usage at the snapshot's instant, by resource id; empty without a half-life.
    pub(super) fn usage(&self, queue: QueueId, dims: usize) -> &[f64] {
        (self.usage)
            .get(queue.index() * dims..(queue.index() + 1) * dims)
            .unwrap_or(&[])
    }

    /// Whether usage is kept (a usage half-life is configured).
    pub(super) fn has_usage(&self) -> bool {
        !self.usage.is_empty()
    }

    pub(super) fn usage_weights(&self) -> Option<&UsageWeights> {
        self.usage_weights.as_ref()
    }

    pub(super) fn inqueue_reserved(&self) -> &Resources {
        &self.inqueue_reserved
    }

    pub(super) fn queue_reserved(&self, queue: QueueId) -> &Resources {
        &self.queue_reserved[queue.index()]
    }

    pub(super) fn cluster_allocatable(&self) -> &Resources {
        &self.cluster_allocatable
    }

    pub(super) fn queue_capacity(&self) -> &Resources {
        &self.queue_capacity
    }

    pub(super) fn guaranteed(&self) -> bool {
        self.guaranteed
    }

    /// Puts a request on (or takes it off) `queue` and its ancestors.
    pub(super) fn charge(
        &mut self,
        snap: &Snapshot,
        queue: QueueId,
        request: &Resources,
        add: bool,
    ) {
        for q in ancestors(snap, queue) {
            if add {
                self.allocated[q.index()].add(request);
            } else {
                self.allocated[q.index()].take_back(request);
            }
        }
    }

    /// Reserves (or gives back) an admitted job's minResources in `queue` and its ancestors.
    pub(super) fn reserve(&mut self, snap: &Snapshot, queue: QueueId, min: &Resources, add: bool) {
        for q in ancestors(snap, queue) {
            if add {
                self.queue_reserved[q.index()].add(min);
            } else {
                self.queue_reserved[q.index()].take_back(min);
            }
        }
        if add {
            self.inqueue_reserved.add(min);
        } else {
            self.inqueue_reserved.take_back(min);
        }
    }
}

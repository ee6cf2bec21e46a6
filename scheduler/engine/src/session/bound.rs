//! What was bound when the session opened: the candidates for eviction, by node and by queue.
//! Fixed once the session is open: evictions and placements change task status (`jobs.rs`),
//! never these lists.

use super::TaskStatus;
use crate::model::{JobId, NodeId, QueueId, ShapeId, TaskId};
use crate::snapshot::Snapshot;

/// The tasks bound when the session opened, by node and by queue.
pub(super) struct Bound {
    /// Bound tasks per node, in name order, as one list: the candidates for eviction.
    node_tasks: Vec<TaskId>,
    /// Beside `node_tasks`, each one's job and shape: what the loops over every running task
    /// (the explanations' holder tables) read, 8 bytes a task instead of its record.
    node_task_kinds: Vec<(JobId, ShapeId)>,
    /// Where each node's part of `node_tasks` starts (and, one further, ends).
    node_task_start: Vec<u32>,
    /// Per leaf queue: the nodes its bound tasks were on.
    queue_nodes: Vec<Vec<NodeId>>,
    /// Per queue: the lowest priority of its jobs with members bound (the only possible
    /// preempt victims), `None` when none is bound.
    lowest_bound_priority: Vec<Option<i32>>,
}

impl Bound {
    /// From each task's status and (leaf) queue when the session opened, and each job's
    /// count of bound members.
    pub(super) fn new(
        snapshot: &Snapshot,
        status: &[TaskStatus],
        task_queue: &[QueueId],
        bound: impl Fn(JobId) -> u32,
    ) -> Bound {
        let n = snapshot.nodes.len();
        // One list cut at `node_task_start`: counted, then placed.
        let mut node_task_start = vec![0u32; n + 1];
        for s in status {
            if let TaskStatus::Bound(node) = s {
                node_task_start[node.index() + 1] += 1;
            }
        }
        for i in 0..n {
            node_task_start[i + 1] += node_task_start[i];
        }
        let mut node_tasks = vec![TaskId(0); node_task_start[n] as usize];
        let mut node_task_kinds = vec![(JobId(0), ShapeId(0)); node_tasks.len()];
        let mut next = node_task_start.clone();
        for (t, status) in snapshot.tasks.iter().zip(status) {
            if let TaskStatus::Bound(node) = status {
                let at = next[node.index()] as usize;
                (node_tasks[at], node_task_kinds[at]) = (t.id, (t.job, t.shape));
                next[node.index()] += 1;
            }
        }
        let mut queue_nodes: Vec<Vec<NodeId>> = vec![Vec::new(); snapshot.queues.len()];
        for node in 0..n {
            let (from, to) = (node_task_start[node], node_task_start[node + 1]);
            for &t in &node_tasks[from as usize..to as usize] {
                let list = &mut queue_nodes[task_queue[t.index()].index()];
                if list.last() != Some(&NodeId(node as u32)) {
                    list.push(NodeId(node as u32));
                }
            }
        }
        let mut lowest_bound_priority: Vec<Option<i32>> = vec![None; snapshot.queues.len()];
        for job in snapshot.jobs.iter().filter(|j| bound(j.id) > 0) {
            let lowest = &mut lowest_bound_priority[job.queue.index()];
            *lowest = Some(lowest.map_or(job.priority, |p| p.min(job.priority)));
        }
        Bound {
            node_tasks,
            node_task_kinds,
            node_task_start,
            queue_nodes,
            lowest_bound_priority,
        }
    }

    /// Bound tasks on a node, in name order.
    pub(super) fn node_tasks(&self, node: NodeId) -> &[TaskId] {
        let (i, start) = (node.index(), &self.node_task_start);
        &self.node_tasks[start[i] as usize..start[i + 1] as usize]
    }

    /// The job and shape of each of [`Self::node_tasks`], in the same order.
    pub(super) fn node_task_kinds(&self, node: NodeId) -> &[(JobId, ShapeId)] {
        let (i, start) = (node.index(), &self.node_task_start);
        &self.node_task_kinds[start[i] as usize..start[i + 1] as usize]
    }

    /// Nodes where the queue's jobs had bound pods, in name order.
    pub(super) fn queue_nodes(&self, queue: QueueId) -> &[NodeId] {
        &self.queue_nodes[queue.index()]
    }

    pub(super) fn lowest_bound_priority(&self, queue: QueueId) -> Option<i32> {
        self.lowest_bound_priority[queue.index()]
    }
}

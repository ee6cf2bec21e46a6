//! Transactions: a [`Statement`] is a private log of the operations a gang's placement applied;
//! committed into the plan when the gang is ready, or undone newest first.

use super::*;

#[derive(Clone, Debug)]
pub(super) enum Op {
    Allocate {
        task: TaskId,
        node: NodeId,
        gpus: u64,
        pipelined: bool,
    },
    Evict {
        task: TaskId,
        node: NodeId,
        gpus: u64,
        reason: String,
        for_job: JobId,
    },
}

/// A transaction: operations apply to the session at once and are undone by `discard`.
#[must_use = "a statement must be committed or discarded"]
#[derive(Debug, Default)]
pub struct Statement {
    pub(super) ops: Vec<Op>,
}

impl Statement {
    /// Takes over `other`'s operations (a nested attempt that succeeded).
    pub fn append(&mut self, other: Statement) {
        self.ops.extend(other.ops);
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The tasks the statement evicts, in order.
    pub fn evictions(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.ops.iter().filter_map(|op| match op {
            Op::Evict { task, .. } => Some(*task),
            Op::Allocate { .. } => None,
        })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

impl<'a> Session<'a> {
    pub fn statement(&self) -> Statement {
        Statement::default()
    }

    /// Moves a task's request on or off a node and its queues.
    pub(super) fn charge(&mut self, task: TaskId, node: NodeId, gpus: u64, add: bool) {
        let snap = self.snapshot;
        let t = snap.task(task);
        self.charges += 1;
        self.index_remove(node);
        self.changes.note(node);
        let free_before = self.free_gpus(node) as i64;
        if add {
            self.capacity.take(node, &t.request);
        } else {
            self.capacity.give_back(node, &t.request);
        }
        let holding = self.jobs.count_holding(t.job, add);
        self.capacity.charge_devices(snap, task, node, gpus, add);
        let freed = self.free_gpus(node) as i64 - free_before;
        if let Some(topo) = &mut self.topo {
            topo.change(node, freed);
        }
        self.pods.charge(snap, task, node, add);
        self.index_insert(node);
        (self.queues).charge(snap, snap.job(t.job).queue, &t.request, add);
        // An admitted job's minResources stay reserved until it holds its first member.
        if add && holding == 1 {
            self.reserve_admission(t.job, false);
        } else if !add && holding == 0 {
            self.reserve_admission(t.job, true);
        }
    }

    /// Places a pending task on a node inside the statement.
    pub fn allocate(&mut self, stmt: &mut Statement, task: TaskId, node: NodeId) {
        self.place(stmt, task, node, false, None);
    }

    /// Places a pending task with its GPUs inside one NVLink island of the node.
    pub fn allocate_in_island(
        &mut self,
        stmt: &mut Statement,
        task: TaskId,
        node: NodeId,
        island: u32,
    ) {
        self.place(stmt, task, node, false, Some(island));
    }

    /// Places a pending task on capacity that the statement's evictions free: it is nominated
    /// to the node and bound in a later cycle.
    pub fn pipeline(&mut self, stmt: &mut Statement, task: TaskId, node: NodeId) {
        self.place(stmt, task, node, true, None);
    }

    pub(super) fn place(
        &mut self,
        stmt: &mut Statement,
        task: TaskId,
        node: NodeId,
        pipelined: bool,
        island: Option<u32>,
    ) {
        debug_assert!(
            self.snapshot.task(task).hold.is_none(),
            "a held task is placed"
        );
        let gpus = self.pick_devices(task, node, island);
        self.capacity.take_slices(self.snapshot, task, node);
        self.take_claims(task, node);
        self.charge(task, node, gpus, true);
        let status = if pipelined {
            TaskStatus::Pipelined { node, gpus }
        } else {
            TaskStatus::Allocated { node, gpus }
        };
        self.jobs.place(task, self.snapshot.task(task).job, status);
        stmt.ops.push(Op::Allocate {
            task,
            node,
            gpus,
            pipelined,
        });
    }

    /// Evicts a bound task inside the statement; its capacity is free for the rest of the cycle.
    pub fn evict(&mut self, stmt: &mut Statement, task: TaskId, reason: &str, for_job: JobId) {
        let TaskStatus::Bound(node) = *self.jobs.status(task) else {
            return;
        };
        let gpus = self.snapshot.task(task).gpus;
        self.charge(task, node, gpus, false);
        self.jobs.evict(task, node);
        self.refusals.note_released();
        stmt.ops.push(Op::Evict {
            task,
            node,
            gpus,
            reason: reason.to_string(),
            for_job,
        });
    }

    pub fn commit(&mut self, stmt: Statement) {
        self.committed.extend(stmt.ops);
    }

    /// Undoes every operation of the statement, newest first.
    pub fn discard(&mut self, stmt: Statement) {
        for op in stmt.ops.into_iter().rev() {
            match op {
                Op::Allocate {
                    task, node, gpus, ..
                } => {
                    self.charge(task, node, gpus, false);
                    self.capacity.forget_takes(task);
                    self.give_back_claims(task);
                    self.jobs.unplace(task, self.snapshot.task(task).job);
                    self.refusals.note_released();
                }
                Op::Evict {
                    task, node, gpus, ..
                } => {
                    self.charge(task, node, gpus, true);
                    self.jobs.unevict(task, node);
                }
            }
        }
    }
}

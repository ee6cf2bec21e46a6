//! Where each job and task stands in the session: task status, job phase, members holding
//! capacity, conditions. Changed only by placements, evictions and their undoing
//! (`transact.rs`), admissions and conditions (`holds.rs`), through the methods here.

use super::{JobCondition, MemberCounts, TaskStatus};
use crate::model::{JobId, JobPhase, NodeId, TaskId};
use crate::snapshot::Snapshot;

/// A job's members by their state in the snapshot.
#[derive(Clone, Copy, Default)]
pub(super) struct StartCounts {
    pub(super) pending: u32,
    pub(super) bound: u32,
    pub(super) succeeded: u32,
    pub(super) failed: u32,
}

/// The session's job and task state.
pub(super) struct Jobs {
    /// Per task.
    status: Vec<TaskStatus>,
    /// Per job.
    phase: Vec<JobPhase>,
    /// Per job: members holding capacity (bound, placed or pipelined).
    holding: Vec<u32>,
    /// Per job: members placed or pipelined by this cycle (and not undone).
    placed: Vec<u32>,
    /// Per job: how its members stood when the session opened (what [`Jobs::counts`] gives
    /// for a job no committed operation touched).
    start_counts: Vec<StartCounts>,
    /// Jobs in phase Pending in the snapshot (the candidates for admission), by id.
    unadmitted: Vec<JobId>,
    /// Jobs with pending members when the session opened, by id: no other job gets one (a
    /// placement undone gives back a member that was pending; an eviction makes it Evicted).
    with_pending: Vec<JobId>,
    /// Per job: its conditions, worded when the plan is written.
    conditions: Vec<Vec<JobCondition>>,
}

impl Jobs {
    /// The jobs as the snapshot has them: `status` per task, `start_counts` and `phase` per
    /// job; the members holding capacity are the bound ones.
    pub(super) fn new(
        status: Vec<TaskStatus>,
        start_counts: Vec<StartCounts>,
        phase: Vec<JobPhase>,
        unadmitted: Vec<JobId>,
    ) -> Jobs {
        let holding = start_counts.iter().map(|c| c.bound).collect();
        let with_pending = (start_counts.iter().enumerate())
            .filter(|(_, c)| c.pending > 0)
            .map(|(j, _)| JobId(j as u32))
            .collect();
        Jobs {
            status,
            placed: vec![0; phase.len()],
            conditions: vec![Vec::new(); phase.len()],
            phase,
            holding,
            start_counts,
            unadmitted,
            with_pending,
        }
    }

    pub(super) fn status(&self, task: TaskId) -> &TaskStatus {
        &self.status[task.index()]
    }

    /// Whether the task is one of the session's and pending.
    pub(super) fn is_pending(&self, task: TaskId) -> bool {
        self.status.get(task.index()) == Some(&TaskStatus::Pending)
    }

    pub(super) fn phase(&self, job: JobId) -> JobPhase {
        self.phase[job.index()]
    }

    pub(super) fn holding(&self, job: JobId) -> u32 {
        self.holding[job.index()]
    }

    pub(super) fn placed_now(&self, job: JobId) -> bool {
        self.placed[job.index()] > 0
    }

    pub(super) fn start_counts(&self, job: JobId) -> StartCounts {
        self.start_counts[job.index()]
    }

    pub(super) fn unadmitted(&self) -> &[JobId] {
        &self.unadmitted
    }

    pub(super) fn with_pending(&self) -> &[JobId] {
        &self.with_pending
    }

    pub(super) fn conditions(&self, job: JobId) -> &[JobCondition] {
        &self.conditions[job.index()]
    }

    /// Moves a Pending job to Inqueue; false when it was not Pending.
    pub(super) fn admit(&mut self, job: JobId) -> bool {
        let phase = &mut self.phase[job.index()];
        if *phase != JobPhase::Pending {
            return false;
        }
        *phase = JobPhase::Inqueue;
        true
    }

    /// Notes `condition` for `job` (once).
    pub(super) fn add_condition(&mut self, job: JobId, condition: JobCondition) {
        let list = &mut self.conditions[job.index()];
        if !list.contains(&condition) {
            list.push(condition);
        }
    }

    /// One more (or one fewer) member of the job holds capacity; returns how many do now.
    pub(super) fn count_holding(&mut self, job: JobId, add: bool) -> u32 {
        let holding = &mut self.holding[job.index()];
        match add {
            true => *holding += 1,
            false => *holding -= 1,
        }
        *holding
    }

    /// A pending member of `job` is placed (allocated or pipelined, as `status` says).
    pub(super) fn place(&mut self, task: TaskId, job: JobId, status: TaskStatus) {
        debug_assert_eq!(self.status[task.index()], TaskStatus::Pending);
        self.placed[job.index()] += 1;
        self.status[task.index()] = status;
    }

    /// Undoes [`Self::place`]: the member is pending again.
    pub(super) fn unplace(&mut self, task: TaskId, job: JobId) {
        self.placed[job.index()] -= 1;
        self.status[task.index()] = TaskStatus::Pending;
    }

    /// A member bound on `node` is evicted.
    pub(super) fn evict(&mut self, task: TaskId, node: NodeId) {
        self.status[task.index()] = TaskStatus::Evicted(node);
    }

    /// Undoes [`Self::evict`]: the member is bound on `node` again.
    pub(super) fn unevict(&mut self, task: TaskId, node: NodeId) {
        self.status[task.index()] = TaskStatus::Bound(node);
    }

    pub(super) fn counts(&self, snap: &Snapshot, job: JobId) -> MemberCounts {
        let mut c = MemberCounts::default();
        let minimums = &snap.job(job).min_task_member;
        for &t in &snap.job(job).tasks {
            let holds = match self.status[t.index()] {
                TaskStatus::Pending | TaskStatus::Evicted(_) => {
                    c.pending += 1;
                    false
                }
                TaskStatus::Bound(_) | TaskStatus::Allocated { .. } => {
                    c.running += 1;
                    true
                }
                TaskStatus::Pipelined { .. } => {
                    c.pipelined += 1;
                    true
                }
                TaskStatus::Succeeded => {
                    c.succeeded += 1;
                    true
                }
                TaskStatus::Failed => {
                    c.failed += 1;
                    false
                }
            };
            // Only roles with a minimum are counted: nothing else reads them.
            if holds && !minimums.is_empty() {
                let role = snap.task(t).role();
                if !minimums.contains_key(role) {
                    continue;
                }
                match c.by_role.get_mut(role) {
                    Some(n) => *n += 1,
                    None => {
                        c.by_role.insert(role.to_string(), 1);
                    }
                }
            }
        }
        c
    }

    /// Whether the job still meets every gang minimum ([`Job::meets_minimums`]) without the
    /// members in `gone` (each holding a node now), counting members that hold a node (bound,
    /// placed or pipelined) or succeeded. Without role minimums this is a count, not a scan.
    pub(super) fn meets_minimums(&self, snap: &Snapshot, job: JobId, gone: &[TaskId]) -> bool {
        let j = snap.job(job);
        let succeeded = self.start_counts[job.index()].succeeded;
        let members = (self.holding[job.index()] + succeeded).saturating_sub(gone.len() as u32);
        if j.min_task_member.is_empty() {
            return members >= j.min_member;
        }
        let counts = |t: &TaskId| {
            !gone.contains(t)
                && matches!(
                    self.status[t.index()],
                    TaskStatus::Bound(_)
                        | TaskStatus::Allocated { .. }
                        | TaskStatus::Pipelined { .. }
                        | TaskStatus::Succeeded
                )
        };
        j.meets_minimums(members, |role| {
            (j.tasks.iter())
                .filter(|t| counts(t) && snap.task(**t).role() == role)
                .count() as u32
        })
    }
}

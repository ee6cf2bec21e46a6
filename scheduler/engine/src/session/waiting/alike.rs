//! Waiting jobs that are alike share one explanation: a backlog of thousands of gangs of one
//! kind is explained once per kind, each job keeping its own position.
//!
//! Without the dear part (holders and jobs to end, see the parent module), an explanation
//! depends on the job only through its queue, what its members ask, how many it still needs,
//! its minimum and what it holds, and its topology: the [`Signature`]. Jobs whose members are
//! not all alike (shapes, inter-pod rules, reservation holds, some already placed), whose roles
//! order them, that preempt, or that meet reservations are explained on their own, and so is a
//! job whose members are placed one by one (`Together`, which depends on the tasks). Task
//! admission is taken to judge a member by its queue and ask (as the capability and guarantee
//! plugins do). Debug builds compute every shared explanation alone too and check that the two
//! are equal.

use basalt_topology::TierId;

use super::super::{Session, TaskStatus};
use crate::interpod::Guard;
use crate::model::{JobId, QueueId, ShapeId};

/// What a shareable job's explanation (less its position) depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Signature {
    queue: QueueId,
    /// Every member's shape (rules and request).
    shape: ShapeId,
    /// Members it still needs, and what it has (see `explain_job`).
    need: u32,
    have: u32,
    min_member: u32,
    required: Option<TierId>,
    /// No topology and no sub-groups: the members may be placed one by one.
    plain: bool,
}

impl Session<'_> {
    /// The job's signature, when its explanation may be shared (see the module docs).
    pub(super) fn signature(&self, job: JobId) -> Option<Signature> {
        let snap = self.snapshot;
        let j = snap.job(job);
        if self.reservations.any() || !j.min_task_member.is_empty() {
            return None;
        }
        let mut shape = None;
        for &t in &j.tasks {
            let task = snap.task(t);
            let alike = *self.jobs.status(t) == TaskStatus::Pending
                && task.hold.is_none()
                && *shape.get_or_insert(task.shape) == task.shape
                && self.pods.guard(snap, t) == Guard::Free;
            if !alike {
                return None;
            }
        }
        let have = (self.holding(job)).saturating_add(self.jobs.start_counts(job).succeeded);
        let members = j.tasks.len() as u32;
        Some(Signature {
            queue: j.queue,
            shape: shape?,
            need: j.min_member.saturating_sub(have).clamp(1, members),
            have,
            min_member: j.min_member,
            required: self.required_tier(job),
            plain: j.topology.is_empty() && j.sub_groups.is_empty(),
        })
    }
}

impl Signature {
    pub(super) fn plain(&self) -> bool {
        self.plain
    }
}

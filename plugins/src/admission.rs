//! Admission: `overcommit` (enqueue a job while its minResources fit what the cluster can still
//! take) and `capability` (a queue, and each of its ancestors, never holds more than its
//! capability).

use basalt_engine::{
    Admit, GivenBack, JobId, JobRefusal, Refusal, ResourceId, Resources, SessionView, TaskAdmit,
    TaskId,
};

/// Factor as a fraction over 1000, so admission arithmetic stays in integers.
pub struct Overcommit {
    pub factor_milli: i64,
}

impl Admit for Overcommit {
    fn name(&self) -> &str {
        "overcommit"
    }
    fn admit(&self, session: &SessionView, job: JobId) -> Result<(), JobRefusal> {
        let snap = session.snapshot;
        let Some(min) = &snap.job(job).min_resources else {
            return Ok(());
        };
        // allocatable × factor − used − reserved by admitted jobs that hold nothing yet.
        let mut room = session
            .cluster_allocatable()
            .scaled(self.factor_milli, 1000);
        room.sub(session.cluster_used());
        room.sub(session.inqueue_reserved());
        let short: Vec<(ResourceId, i64, i64)> = (min.shortfall(&room))
            .map(|id| (id, min.get(id), room.get(id).max(0)))
            .collect();
        if short.is_empty() {
            return Ok(());
        }
        Err(JobRefusal::OverRoom {
            short,
            factor_milli: self.factor_milli,
        })
    }
}

/// Unused guarantees of other queues are never lent out.
pub struct Guarantee;

impl TaskAdmit for Guarantee {
    fn name(&self) -> &str {
        "guarantee"
    }
    fn admit(
        &self,
        session: &SessionView,
        task: TaskId,
        request: &Resources,
        given_back: GivenBack,
    ) -> Result<(), Refusal> {
        let snap = session.snapshot;
        let queue = snap.job(snap.task(task).job).queue;
        basalt_queue::check_guarantees(session, queue, request, given_back)
    }
}

pub struct Capability;

impl Admit for Capability {
    fn name(&self) -> &str {
        "capability"
    }
    fn admit(&self, session: &SessionView, job: JobId) -> Result<(), JobRefusal> {
        let snap = session.snapshot;
        let j = snap.job(job);
        let Some(min) = &j.min_resources else {
            return Ok(());
        };
        basalt_queue::check_capability(session, j.queue, min, true, GivenBack::NONE)
            .map_err(|e| JobRefusal::OverCapability(e.into()))
    }
}

/// Per task: `request` is what the task adds to its queue and every ancestor; for a member placed
/// over victims, each queue is credited what they give back to it (victims of the same queue
/// credit every level, a sibling's the ancestors the two share), so a queue, or a parent, at
/// its capability can still make room inside itself.
impl TaskAdmit for Capability {
    fn name(&self) -> &str {
        "capability"
    }
    fn admit(
        &self,
        session: &SessionView,
        task: TaskId,
        request: &Resources,
        given_back: GivenBack,
    ) -> Result<(), Refusal> {
        let snap = session.snapshot;
        let queue = snap.job(snap.task(task).job).queue;
        basalt_queue::check_capability(session, queue, request, false, given_back)
            .map_err(Refusal::from)
    }
}

//! What `allocate` notes about each job for its explanation, and why each waiting job waits
//! once the actions are done (`waiting.rs` writes them, the plan takes them).

use crate::model::JobId;
use crate::plan::Explanation;

/// The notes the explanations of waiting jobs are written from, and the explanations.
pub(super) struct WaitNotes {
    /// Per job: its 1-based turn in the order `allocate` served jobs (0: not served).
    served: Vec<u32>,
    served_count: u32,
    /// Per job: `allocate` could not place its minimum for room or quota; its condition is
    /// worded from its explanation (see `waiting.rs`).
    short: Vec<bool>,
    /// Per job: why it waits, once the actions are done.
    waiting: Vec<Option<Box<Explanation>>>,
}

impl WaitNotes {
    pub(super) fn new(jobs: usize) -> WaitNotes {
        WaitNotes {
            served: vec![0; jobs],
            served_count: 0,
            short: vec![false; jobs],
            waiting: vec![None; jobs],
        }
    }

    /// Notes that `allocate` serves the job (the first time only: its turn in cycle order).
    pub(super) fn note_served(&mut self, job: JobId) {
        if self.served[job.index()] == 0 {
            self.served_count += 1;
            self.served[job.index()] = self.served_count;
        }
    }

    /// The job's turn in the order `allocate` served jobs, if served.
    pub(super) fn turn(&self, job: JobId) -> Option<u32> {
        Some(self.served[job.index()]).filter(|&s| s > 0)
    }

    /// How many jobs `allocate` served.
    pub(super) fn served_count(&self) -> u32 {
        self.served_count
    }

    pub(super) fn note_short(&mut self, job: JobId) {
        self.short[job.index()] = true;
    }

    pub(super) fn is_short(&self, job: JobId) -> bool {
        self.short[job.index()]
    }

    pub(super) fn set_waiting(&mut self, job: JobId, why: Explanation) {
        self.waiting[job.index()] = Some(Box::new(why));
    }

    pub(super) fn take_waiting(&mut self, job: JobId) -> Option<Box<Explanation>> {
        self.waiting[job.index()].take()
    }
}

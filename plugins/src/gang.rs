//! Gang admission: a job starts only when at least `minMember` of its members (and
//! `minTaskMember` per role) hold a node together, counting members already bound or succeeded
//! and those placed in the open statement.

use std::collections::BTreeMap;

use basalt_engine::{Condition, JobId, JobReady, JobValid, Session, TaskStatus};

pub const NOT_ENOUGH_PODS: &str = "NotEnoughPods";

pub struct Gang;

impl JobValid for Gang {
    /// A gang with fewer live pods than its minimum can never start: report it, place nothing.
    fn validate(&self, session: &Session, job: JobId) -> Result<(), Condition> {
        let snap = session.snapshot;
        let j = snap.job(job);
        let mut live = 0u32;
        let mut by_role: BTreeMap<&str, u32> = BTreeMap::new();
        for &t in &j.tasks {
            if *session.task_status(t) == TaskStatus::Failed {
                continue;
            }
            live += 1;
            if let Some(role) = &snap.task(t).role {
                *by_role.entry(role).or_default() += 1;
            }
        }
        let fail = |message: String| Condition {
            kind: basalt_engine::actions::UNSCHEDULABLE.to_string(),
            reason: NOT_ENOUGH_PODS.to_string(),
            message,
        };
        if live < j.min_member {
            return Err(fail(format!(
                "{live}/{} pods of the gang exist; waiting for minMember",
                j.min_member
            )));
        }
        for (role, &min) in &j.min_task_member {
            let have = by_role.get(role.as_str()).copied().unwrap_or(0);
            if have < min {
                return Err(fail(format!(
                    "role {role}: {have}/{min} pods exist; waiting for minTaskMember"
                )));
            }
        }
        Ok(())
    }
}

impl JobReady for Gang {
    fn ready(&self, session: &Session, job: JobId) -> bool {
        let j = session.snapshot.job(job);
        let c = session.counts(job);
        c.running + c.pipelined + c.succeeded >= j.min_member
            && j.min_task_member
                .iter()
                .all(|(role, &min)| c.by_role.get(role).copied().unwrap_or(0) >= min)
    }
}

//! The session's result: the plan it hands to the binder and the status writers.

use super::{MemberCounts, Op, Session, TaskStatus};
use crate::model::*;
use crate::plan::{
    Binding, Condition, Eviction, Explanation, Nomination, NominationReason, Plan, PodGroupStatus,
    QueueStatus, Summaries, Verdict,
};
use crate::share::Share;

impl Session<'_> {
    /// The plan: committed bindings, nominations and evictions in the order they were decided,
    /// every job's status after the cycle and every queue's share, sorted by name. A session
    /// opened [`Session::with_warm`] leaves its node state in that [`crate::Warm`].
    pub fn into_plan(mut self) -> Plan {
        let snap = self.snapshot;
        let mut plan = Plan::default();
        let relayouts = self.relayouts();
        let gpu_indices = |node: NodeId, gpus: u64| -> Vec<u32> {
            let n = snap.node(node);
            (0..n.gpus.len())
                .filter(|p| gpus & (1u64 << p) != 0)
                .map(|p| n.gpus[p].index)
                .collect()
        };
        for op in &self.committed {
            match op {
                Op::Allocate {
                    task,
                    node,
                    gpus,
                    pipelined: false,
                } => plan.bindings.push(Binding {
                    pod: snap.task(*task).name.to_string(),
                    node: snap.node(*node).name.clone(),
                    gpus: gpu_indices(*node, *gpus),
                    devices: self.bound_devices(*task, *node, *gpus),
                }),
                Op::Allocate {
                    task,
                    node,
                    pipelined: true,
                    ..
                } => plan.nominations.push(Nomination {
                    pod: snap.task(*task).name.to_string(),
                    node: snap.node(*node).name.clone(),
                    reason: NominationReason::Evictions,
                }),
                Op::Evict {
                    task,
                    node,
                    reason,
                    for_job,
                    ..
                } => plan.evictions.push(Eviction {
                    pod: snap.task(*task).name.to_string(),
                    node: snap.node(*node).name.clone(),
                    reason: reason.clone(),
                    for_group: snap.job(*for_job).name.to_string(),
                }),
            }
        }
        plan.claim_allocations = self.claim_allocations();
        for &(task, node) in self.reservations.nominations() {
            if self.jobs.is_pending(task) && !relayouts.tasks.contains(&task) {
                plan.nominations.push(Nomination {
                    pod: snap.task(task).name.to_string(),
                    node: snap.node(node).name.clone(),
                    reason: NominationReason::Reservation,
                });
            }
        }
        // Jobs no committed operation touched stand as they did (discarded ones were undone).
        let mut touched = vec![false; snap.jobs.len()];
        for op in &self.committed {
            let (Op::Allocate { task, .. } | Op::Evict { task, .. }) = op;
            touched[snap.task(*task).job.index()] = true;
        }
        let mut summaries = Summaries::default();
        for job in &snap.jobs {
            let c = if touched[job.id.index()] {
                self.counts(job.id)
            } else {
                let s = self.jobs.start_counts(job.id);
                MemberCounts {
                    running: s.bound,
                    succeeded: s.succeeded,
                    failed: s.failed,
                    pending: s.pending,
                    ..MemberCounts::default()
                }
            };
            // Running only while every minimum holds (pipelined members are not running yet).
            let meets = if job.min_task_member.is_empty() {
                c.running + c.succeeded >= job.min_member
            } else {
                let pipelined: Vec<TaskId> = (job.tasks.iter().copied())
                    .filter(|t| matches!(self.jobs.status(*t), TaskStatus::Pipelined { .. }))
                    .collect();
                self.meets_minimums(job.id, &pipelined)
            };
            let phase = if meets {
                if c.running == 0 && c.pending == 0 && c.pipelined == 0 {
                    JobPhase::Completed
                } else {
                    JobPhase::Running
                }
            } else if c.running > 0 {
                JobPhase::Unknown
            } else if self.jobs.phase(job.id) == JobPhase::Pending {
                JobPhase::Pending
            } else {
                JobPhase::Inqueue
            };
            let settled = !touched[job.id.index()] && c.pending == 0 && phase == job.phase;
            if settled && !self.fw.report_settled_groups {
                continue;
            }
            // Why members wait matters only while some do; warnings hold as long as the spec.
            let waiting = c.pending + c.pipelined > 0;
            let mut conditions: Vec<Condition> = Vec::new();
            for c in self.jobs.conditions(job.id) {
                // Worded now; two reasons that word alike are one condition.
                let c = c.condition(snap, job.id);
                let kept = waiting || c.kind != crate::actions::UNSCHEDULABLE;
                if kept && !conditions.contains(&c) {
                    conditions.push(c);
                }
            }
            let explanation = self.notes.take_waiting(job.id).filter(|_| waiting);
            let relayout = relayouts.jobs.get(&job.id).filter(|_| waiting);
            if let Some(message) = relayout {
                // It waits for a GPU to be re-laid, not for capacity to free up.
                conditions.retain(|c| c.kind != crate::actions::UNSCHEDULABLE);
                conditions.push(Condition {
                    kind: crate::actions::UNSCHEDULABLE.to_string(),
                    reason: crate::framework::MIG_RELAYOUT.to_string(),
                    message: message.clone(),
                });
            } else if self.notes.is_short(job.id) && waiting {
                let e = explanation.as_deref();
                conditions.push(short_condition(job, &c, e, &mut summaries));
            }
            plan.pod_groups.push(PodGroupStatus {
                name: job.name.clone(),
                phase,
                conditions,
                running: c.running,
                succeeded: c.succeeded,
                failed: c.failed,
                pending: c.pending + c.pipelined,
                min_member: job.min_member,
                explanation,
            });
        }
        let names = &snap.resources;
        for q in snap.queues.iter().filter(|_| self.fw.report_queues) {
            let (held, deserved) = (self.queue_allocated(q.id), self.deserved(q.id));
            plan.queues.push(QueueStatus {
                name: q.name.clone(),
                parent: q.parent.map(|p| snap.queue(p).name.clone()),
                deserved: names.quantities(deserved),
                allocated: names.quantities(held),
                demand: names.quantities(self.queues.pending(q.id)),
                share: Share::of_deserved(held, deserved).as_f64(),
                undeserved: (Share::undeserved(held, deserved))
                    .map(|r| names.name(r).to_string())
                    .collect(),
                state: q.state,
                usage: self.usage_named(q.id),
                usage_weight: self.usage_weight_part(q.id),
                usage_effect: self.usage_effect(q.id),
            });
        }
        plan.usage = self.usage_update();
        plan.mig_layouts = relayouts.layouts;
        self.hand_on();
        plan
    }
}

/// The condition of a gang whose minimum `allocate` could not place, worded from its
/// explanation: `NeverFits` when nothing that ends would make room, else Volcano's
/// `NotEnoughResources`.
fn short_condition(
    job: &Job,
    c: &MemberCounts,
    e: Option<&Explanation>,
    summaries: &mut Summaries,
) -> Condition {
    let (reason, message) = match e {
        Some(e) if e.verdict == Verdict::NeverFits => (crate::actions::NEVER_FITS, e.summary()),
        Some(e) => (crate::actions::NOT_ENOUGH_RESOURCES, summaries.summary(e)),
        None => (
            crate::actions::NOT_ENOUGH_RESOURCES,
            format!(
                "{}/{} members of the gang could be placed",
                c.running + c.pipelined + c.succeeded,
                job.min_member
            ),
        ),
    };
    Condition {
        kind: crate::actions::UNSCHEDULABLE.to_string(),
        reason: reason.to_string(),
        message,
    }
}

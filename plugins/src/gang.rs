//! Gang admission, with Volcano's rules: a job starts only when at least `minMember` of its
//! members hold a node together (bound, succeeded, or placed in the open statement), each role
//! holds its `minTaskMember` (a pod without a role label is role `""`), and each sub-group spec
//! has `minSubGroups` complete sub-groups.
//!
//! - `minMember: 0` means no gang minimum: the job is always valid and ready.
//! - When `minMember` is below the sum of `minTaskMember`, the per-role minimums gate nothing
//!   (Volcano's job controller fills `minTaskMember` with every task's replicas, so an elastic
//!   job with `minAvailable` below its replicas must still start partially).
//! - A sub-group is complete when it holds its size (all of a short last rank block).
//! - Members Basalt may not place (a `Hold`: scheduling gates, DRA claims) do not count toward
//!   the minimums: a gang that needs them waits whole, its condition naming them.

use std::collections::BTreeMap;

pub use basalt_engine::actions::NOT_ENOUGH_PODS;
use basalt_engine::{Job, JobId, JobReady, JobRefusal, JobValid, SessionView, TaskId, TaskStatus};

pub struct Gang;

/// Sub-groups of each spec with at least their size of members passing `counts`, by spec
/// index, for the specs that set `minSubGroups`; the first spec short of it, as
/// `(spec name, have, min)`.
fn short_sub_groups(job: &Job, counts: impl Fn(TaskId) -> bool) -> Option<(&str, u32, u32)> {
    if job.sub_group_policies.iter().all(|p| p.min_sub_groups == 0) {
        return None;
    }
    let mut complete = vec![0u32; job.sub_group_policies.len()];
    for g in &job.sub_groups {
        let have = g.tasks.iter().filter(|&&t| counts(t)).count() as u32;
        if have >= g.min_member {
            complete[g.policy as usize] += 1;
        }
    }
    job.sub_group_policies
        .iter()
        .zip(complete)
        .find(|(p, have)| *have < p.min_sub_groups)
        .map(|(p, have)| (p.name.as_str(), have, p.min_sub_groups))
}

/// Holds a node (or has finished on one): counts toward the gang's minimums.
fn holds(status: &TaskStatus) -> bool {
    matches!(
        status,
        TaskStatus::Bound(_)
            | TaskStatus::Allocated { .. }
            | TaskStatus::Pipelined { .. }
            | TaskStatus::Succeeded
    )
}

impl JobValid for Gang {
    fn name(&self) -> &str {
        "gang"
    }
    /// A gang with fewer live pods than its minimums can never start: report it, place nothing.
    /// Nor can one whose minimums need members Basalt may not place (gated, or claiming DRA
    /// resources): it waits whole, naming them, rather than start short.
    fn validate(&self, session: &SessionView, job: JobId) -> Result<(), JobRefusal> {
        let live = |t: TaskId| *session.task_status(t) != TaskStatus::Failed;
        if let Some(short) = shortfall(session, job, live) {
            return Err(short);
        }
        if !basalt_engine::actions::has_held(session.snapshot, job) {
            return Ok(());
        }
        let placeable = |t: TaskId| live(t) && session.snapshot.task(t).hold.is_none();
        match shortfall(session, job, placeable) {
            Some(_) => Err(JobRefusal::Held),
            None => Ok(()),
        }
    }
}

/// What the job's members passing `counts` leave short of its minimums (`minMember`, each
/// role's `minTaskMember`, `minSubGroups`), or `None` when they meet them all.
fn shortfall(
    session: &SessionView,
    job: JobId,
    counts: impl Fn(TaskId) -> bool,
) -> Option<JobRefusal> {
    let snap = session.snapshot;
    let j = snap.job(job);
    let roles = j.roles_gate() && !j.min_task_member.is_empty();
    let mut have = 0u32;
    let mut by_role: BTreeMap<&str, u32> = BTreeMap::new();
    for &t in j.tasks.iter().filter(|&&t| counts(t)) {
        have += 1;
        if roles {
            *by_role.entry(snap.task(t).role()).or_default() += 1;
        }
    }
    if have < j.min_member {
        let min = j.min_member;
        return Some(JobRefusal::TooFewPods { have, min });
    }
    if roles {
        for (role, &min) in &j.min_task_member {
            let have = by_role.get(role.as_str()).copied().unwrap_or(0);
            if have < min {
                let role = role.clone();
                return Some(JobRefusal::TooFewRolePods { role, have, min });
            }
        }
    }
    short_sub_groups(j, counts).map(|(spec, have, min)| JobRefusal::TooFewSubGroups {
        spec: spec.to_string(),
        have,
        min,
    })
}

impl JobReady for Gang {
    fn name(&self) -> &str {
        "gang"
    }
    fn ready(&self, session: &SessionView, job: JobId) -> bool {
        let j = session.snapshot.job(job);
        let c = session.counts(job);
        j.meets_minimums(c.running + c.pipelined + c.succeeded, |role| {
            c.by_role.get(role).copied().unwrap_or(0)
        }) && short_sub_groups(j, |t| holds(session.task_status(t))).is_none()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use basalt_engine::{
        ClusterSpec, GroupSpec, JobId, JobPhase, JobRefusal, JobValid, NodeSpec, PodSpec, Session,
        Snapshot,
    };

    use super::Gang;

    /// Gang `g` (minimum `min`) of pods `g-0..`, each made by `pod(i)` from a plain member:
    /// whether it is valid, its refusal worded as `reason: message`.
    fn validate(min: i64, pods: usize, pod: impl Fn(usize, &mut PodSpec)) -> Result<(), String> {
        let snapshot = gang(min, pods, pod);
        refusal(&snapshot).map_err(|refusal| {
            let c = refusal.condition(&snapshot, JobId(0));
            format!("{}: {}", c.reason, c.message)
        })
    }

    fn refusal(snapshot: &Snapshot) -> Result<(), JobRefusal> {
        let fw = crate::framework(&Default::default(), &snapshot.resources);
        let session = Session::new(snapshot, &fw);
        Gang.validate(&session.view(), JobId(0))
    }

    fn gang(min: i64, pods: usize, pod: impl Fn(usize, &mut PodSpec)) -> Snapshot {
        let mut spec = ClusterSpec {
            nodes: vec![NodeSpec {
                name: "n".into(),
                allocatable: BTreeMap::from([("cpu".into(), 64_000)]),
                ..Default::default()
            }],
            groups: vec![GroupSpec {
                namespace: "ns".into(),
                name: "g".into(),
                queue: None,
                min_member: min,
                min_task_member: BTreeMap::new(),
                min_resources: None,
                priority: None,
                created_ms: 0,
                phase: JobPhase::Inqueue,
                topology: Default::default(),
                sub_groups: Vec::new(),
                schedule_timeout_ms: None,
            }],
            ..Default::default()
        };
        for i in 0..pods {
            let mut p = PodSpec {
                namespace: "ns".into(),
                name: format!("g-{i}"),
                ours: true,
                group: Some("g".into()),
                ..Default::default()
            };
            pod(i, &mut p);
            spec.pods.push(p);
        }
        Snapshot::build(spec).unwrap()
    }

    /// A refusal is typed data (the words come when the plan is written).
    #[test]
    fn a_gang_short_of_pods_is_refused_with_its_counts() {
        let role = |i: usize, p: &mut PodSpec| p.role = Some(["a", "b"][i % 2].into());
        assert_eq!(
            refusal(&gang(3, 2, role)),
            Err(JobRefusal::TooFewPods { have: 2, min: 3 })
        );
        assert_eq!(
            validate(3, 2, role),
            Err("NotEnoughPods: 2/3 pods of the gang exist; waiting for minMember".into())
        );
    }

    #[test]
    fn a_gang_whose_minimum_needs_held_members_is_not_valid() {
        let gate = |i: usize, p: &mut PodSpec| {
            if i == 1 {
                p.scheduling_gates = vec!["example.com/quota".into()];
            }
        };
        assert_eq!(
            validate(2, 2, gate),
            Err("SchedulingGated: 1 pod(s) gated: ns/g-1 (example.com/quota)".into())
        );
        // Without the gated member the minimum is still met: valid, the gated one just waits.
        assert_eq!(validate(2, 3, gate), Ok(()));
        let claims = |i: usize, p: &mut PodSpec| {
            if i == 0 {
                p.waits = vec![basalt_engine::Wait::Claim(
                    "claim ns/c does not exist".into(),
                )];
            }
        };
        assert_eq!(
            validate(1, 1, claims),
            Err(
                "ResourceClaimNotReady: 1 pod(s) wait for ResourceClaims: ns/g-0 (claim ns/c does \
                 not exist)"
                    .into()
            )
        );
        // Bound (its claims allocated before): it counts as usual.
        let bound = |_: usize, p: &mut PodSpec| {
            p.claims = vec!["ns/c".into()];
            p.node = Some("n".into());
            p.phase = basalt_engine::PodPhase::Running;
        };
        assert_eq!(validate(1, 1, bound), Ok(()));
        // Too few pods at all is still NotEnoughPods, whatever is held.
        assert!(validate(3, 2, gate)
            .unwrap_err()
            .starts_with("NotEnoughPods"));
    }
}

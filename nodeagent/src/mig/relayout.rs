//! Applies the scheduler's wanted MIG layouts (NodeTopology `spec.migLayouts`), safely.
//!
//! Rules, per GPU: nothing is destroyed while any of its instances runs a process (NVML) or is
//! held by a pod (`held`; see docs/nodeagent.md for what the agent can know of pods), and this
//! is checked again right before each destroy; instances are destroyed, then the wanted ones
//! created; on a failure the previous layout is restored; at most one re-layout per GPU per
//! `min_interval` (counted from the status' `appliedAt`). Each GPU ends with a truthful
//! [`MigLayoutStatus`].

use basalt_crd_types::{MigLayoutPhase, MigLayoutStatus, WantedMigLayout};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::planner::{self, Placement};
use super::profiles;
use crate::backend::GpuBackend;
use crate::raw::RawGpu;

/// Who holds GPU instance `(gpu, gpu_instance_id)`, if anyone: a pod's name, for the reason.
pub type Held<'a> = &'a (dyn Fn(u32, u32) -> Option<String> + Sync);

/// What to do with one GPU's wanted layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Its instances are the wanted layout already.
    InPlace,
    /// Not yet (`minInterval`): stays pending, with the reason.
    Wait(String),
    /// Busy: refused, with the reason.
    Refuse(String),
    /// Cannot be done on this GPU whatever runs on it.
    Fail(String),
    /// Idle and due: destroy and create.
    Apply,
}

/// Decides, from what the driver reports now, what to do with `want` on `gpu`.
pub fn decide(
    want: &WantedMigLayout,
    gpu: Option<&RawGpu>,
    prev: Option<&MigLayoutStatus>,
    held: Held,
    now: Timestamp,
    min_interval: SignedDuration,
) -> Decision {
    let Some(gpu) = gpu else {
        return Decision::Fail(format!("the node has no GPU {}", want.gpu));
    };
    if let Err(e) = wanted_placements(gpu, want) {
        return Decision::Fail(e);
    }
    if same_layout(gpu, want) {
        return Decision::InPlace;
    }
    if let Some(why) = busy(gpu, held) {
        return Decision::Refuse(why);
    }
    let last = prev.and_then(|s| s.applied_at.as_deref());
    if let Some(last) = last.and_then(|t| t.parse::<Timestamp>().ok()) {
        let next = last.saturating_add(min_interval).unwrap_or(last);
        if now < next {
            return Decision::Wait(format!(
                "minInterval: GPU {} was re-laid at {last}; next at {next}",
                gpu.index
            ));
        }
    }
    Decision::Apply
}

/// The wanted layout as the model's placements, or why it is not a valid one for this GPU.
pub fn wanted_placements(gpu: &RawGpu, want: &WantedMigLayout) -> Result<Vec<Placement>, String> {
    let Some(mig) = &gpu.mig else {
        return Err(format!("{} does not support MIG", gpu.name));
    };
    if !mig.enabled {
        return Err(
            "MIG mode is off: switching it on needs a GPU reset, which the agent does not do"
                .into(),
        );
    }
    let model = profiles::model_for_device(&gpu.name, gpu.memory_mib).ok_or_else(|| {
        format!(
            "no MIG profile table for {} ({} MiB)",
            gpu.name, gpu.memory_mib
        )
    })?;
    let placements = (want.layout.iter())
        .map(|p| match model.profile(&p.profile) {
            Some(profile) => Ok(Placement {
                profile,
                start: p.start,
            }),
            None => Err(format!("{} is not a {} profile", p.profile, model.key)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match planner::validate(model, &placements) {
        Some(e) => Err(format!("layout: {e}")),
        None => Ok(placements),
    }
}

/// Whether the GPU's instances are exactly the wanted placements.
pub fn same_layout(gpu: &RawGpu, want: &WantedMigLayout) -> bool {
    let mut have: Vec<(&str, u32)> = (gpu.mig.iter().flat_map(|m| &m.instances))
        .map(|i| (i.profile.as_str(), i.start))
        .collect();
    let mut wanted: Vec<(&str, u32)> = (want.layout.iter())
        .map(|p| (p.profile.as_str(), p.start))
        .collect();
    have.sort_unstable();
    wanted.sort_unstable();
    have == wanted
}

/// Why the GPU is busy (a process or a pod on one of its instances), if it is.
pub fn busy(gpu: &RawGpu, held: Held) -> Option<String> {
    for i in gpu.mig.iter().flat_map(|m| &m.instances) {
        if i.busy() {
            let processes: u32 = i.compute_instances.iter().map(|c| c.processes).sum();
            return Some(format!(
                "busy: GPU {} instance {} ({} at {}) runs {processes} process(es)",
                gpu.index, i.id, i.profile, i.start
            ));
        }
        if let Some(pod) = held(gpu.index, i.id) {
            return Some(format!(
                "busy: GPU {} instance {} ({} at {}) is held by pod {pod}",
                gpu.index, i.id, i.profile, i.start
            ));
        }
    }
    None
}

/// How an application ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    Applied,
    /// The GPU turned busy between the decision and a destroy; the previous layout is back.
    Refused(String),
    /// A call failed; the reason says which and whether the previous layout is back.
    Failed(String),
}

/// Destroys the GPU's instances that the wanted layout lacks, then creates the missing ones;
/// the GPU is read again before each destroy and left alone when it turned busy. On a failure
/// or a refusal, what was done is undone.
pub fn apply(
    backend: &dyn GpuBackend,
    gpu: &RawGpu,
    want: &WantedMigLayout,
    held: Held,
) -> Applied {
    let index = gpu.index;
    let wanted = match wanted_placements(gpu, want) {
        Ok(w) => w,
        Err(e) => return Applied::Failed(e),
    };
    let instances = gpu.mig.iter().flat_map(|m| &m.instances);
    let kept = |profile: &str, start: u32| {
        wanted
            .iter()
            .any(|w| w.profile.name == profile && w.start == start)
    };
    let doomed: Vec<(u32, String, u32)> = instances
        .filter(|i| !kept(&i.profile, i.start))
        .map(|i| (i.id, i.profile.clone(), i.start))
        .collect();
    let present = |w: &Placement| {
        (gpu.mig.iter().flat_map(|m| &m.instances))
            .any(|i| i.profile == w.profile.name && i.start == w.start)
    };
    let missing: Vec<Placement> = wanted.iter().copied().filter(|w| !present(w)).collect();

    let mut undo = Undo::default();
    for (id, profile, start) in &doomed {
        match backend.report() {
            Ok(now) => match now.gpus.iter().find(|g| g.index == index) {
                Some(g) => {
                    if let Some(why) = busy(g, held) {
                        return Applied::Refused(undo.run(backend, gpu, why));
                    }
                }
                None => {
                    return Applied::Failed(undo.run(backend, gpu, format!("GPU {index} is gone")))
                }
            },
            Err(e) => {
                return Applied::Failed(undo.run(backend, gpu, format!("reading the GPU: {e}")))
            }
        }
        if let Err(e) = backend.destroy_mig_instance(index, *id) {
            let why = format!("destroying {profile} at {start}: {e}");
            return Applied::Failed(undo.run(backend, gpu, why));
        }
        undo.destroyed.push((profile.clone(), *start));
    }
    for w in &missing {
        match backend.create_mig_instance(index, w.profile, w.start) {
            Ok(id) => undo.created.push(id),
            Err(e) => {
                let why = format!("creating {} at {}: {e}", w.profile.name, w.start);
                return Applied::Failed(undo.run(backend, gpu, why));
            }
        }
    }
    Applied::Applied
}

/// What an application did so far, to be undone.
#[derive(Default)]
struct Undo {
    /// GPU instance ids created.
    created: Vec<u32>,
    /// `(profile, start)` of the instances destroyed.
    destroyed: Vec<(String, u32)>,
}

impl Undo {
    /// Restores the previous layout; returns `why` with what the restore did.
    fn run(self, backend: &dyn GpuBackend, gpu: &RawGpu, why: String) -> String {
        if self.created.is_empty() && self.destroyed.is_empty() {
            return format!("{why}; nothing was changed");
        }
        let mut problems = Vec::new();
        for id in self.created.iter().rev() {
            if let Err(e) = backend.destroy_mig_instance(gpu.index, *id) {
                problems.push(format!("destroying new instance {id}: {e}"));
            }
        }
        let model = profiles::model_for_device(&gpu.name, gpu.memory_mib);
        for (profile, start) in &self.destroyed {
            let p = model.and_then(|m| m.profile(profile));
            let result = match p {
                Some(p) => backend
                    .create_mig_instance(gpu.index, p, *start)
                    .map(|_| ()),
                None => Err(crate::backend::BackendError::Other(format!(
                    "unknown profile {profile}"
                ))),
            };
            if let Err(e) = result {
                problems.push(format!("re-creating {profile} at {start}: {e}"));
            }
        }
        if problems.is_empty() {
            format!("{why}; previous layout restored")
        } else {
            format!(
                "{why}; restoring the previous layout failed: {}",
                problems.join("; ")
            )
        }
    }
}

/// The status of a GPU whose wanted layout is `want`, after `phase` with `reason`; the
/// applied generation and instant are carried from `prev` unless this is an application.
pub fn status(
    want: &WantedMigLayout,
    prev: Option<&MigLayoutStatus>,
    phase: MigLayoutPhase,
    reason: Option<String>,
    applied_now: Option<Timestamp>,
) -> MigLayoutStatus {
    let mut s = MigLayoutStatus {
        gpu: want.gpu,
        phase,
        reason,
        observed_generation: want.generation,
        applied_generation: prev.and_then(|p| p.applied_generation),
        applied_at: prev.and_then(|p| p.applied_at.clone()),
    };
    if phase == MigLayoutPhase::Applied {
        s.applied_generation = Some(want.generation);
    }
    if let Some(t) = applied_now {
        s.applied_at = Some(t.to_string());
    }
    s
}

/// What a round of [`reconcile`] is given besides the GPUs and the wanted layouts.
pub struct Round<'a> {
    pub now: Timestamp,
    /// At most one re-layout per GPU in this time.
    pub min_interval: SignedDuration,
    /// Decide only; change no GPU.
    pub dry_run: bool,
    pub held: Held<'a>,
}

/// The statuses the wanted layouts get from what the driver reports now (in `wants` order):
/// final ones, and `applying` for each GPU [`apply_all`] is to change. Written before any
/// instance is touched, so the scheduler sees `applying` while they change.
pub fn decide_all(
    gpus: &[RawGpu],
    wants: &[WantedMigLayout],
    prev: &[MigLayoutStatus],
    round: &Round,
) -> Vec<MigLayoutStatus> {
    (wants.iter())
        .map(|want| {
            let before = prev.iter().find(|s| s.gpu == want.gpu);
            let gpu = gpus.iter().find(|g| g.index == want.gpu);
            let s = |phase, reason| status(want, before, phase, reason, None);
            match decide(want, gpu, before, round.held, round.now, round.min_interval) {
                Decision::InPlace => match before {
                    // Applied before: keep its instant; in place by other means: nothing re-laid.
                    Some(b)
                        if b.phase == MigLayoutPhase::Applied
                            && b.observed_generation == want.generation =>
                    {
                        b.clone()
                    }
                    _ => s(MigLayoutPhase::Applied, None),
                },
                Decision::Wait(why) => s(MigLayoutPhase::Pending, Some(why)),
                Decision::Refuse(why) => s(MigLayoutPhase::Refused, Some(why)),
                Decision::Fail(why) => s(MigLayoutPhase::Failed, Some(why)),
                Decision::Apply if round.dry_run => {
                    s(MigLayoutPhase::Pending, Some("dry run".into()))
                }
                Decision::Apply => s(MigLayoutPhase::Applying, None),
            }
        })
        .collect()
}

/// Applies the layouts `decided` marks `applying`; returns the final statuses.
pub fn apply_all(
    backend: &dyn GpuBackend,
    gpus: &[RawGpu],
    wants: &[WantedMigLayout],
    prev: &[MigLayoutStatus],
    decided: Vec<MigLayoutStatus>,
    round: &Round,
) -> Vec<MigLayoutStatus> {
    (decided.into_iter())
        .map(|d| {
            let want = wants.iter().find(|w| w.gpu == d.gpu);
            let gpu = gpus.iter().find(|g| g.index == d.gpu);
            let (Some(want), Some(gpu)) = (want, gpu) else {
                return d;
            };
            if d.phase != MigLayoutPhase::Applying {
                return d;
            }
            let before = prev.iter().find(|s| s.gpu == want.gpu);
            let s = |phase, reason| status(want, before, phase, reason, None);
            match apply(backend, gpu, want, round.held) {
                Applied::Applied => {
                    status(want, before, MigLayoutPhase::Applied, None, Some(round.now))
                }
                Applied::Refused(why) => s(MigLayoutPhase::Refused, Some(why)),
                Applied::Failed(why) => s(MigLayoutPhase::Failed, Some(why)),
            }
        })
        .collect()
}

/// Both: [`decide_all`], then [`apply_all`] (for callers with nothing to write in between).
pub fn reconcile(
    backend: &dyn GpuBackend,
    gpus: &[RawGpu],
    wants: &[WantedMigLayout],
    prev: &[MigLayoutStatus],
    round: &Round,
) -> Vec<MigLayoutStatus> {
    let decided = decide_all(gpus, wants, prev, round);
    apply_all(backend, gpus, wants, prev, decided, round)
}

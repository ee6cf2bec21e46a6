//! Reconciles each GPU's MIG instances with its wanted layout through the backend.
//!
//! Rules: an instance with running processes is never destroyed (it is kept, and the rest is
//! planned around it); idle instances that fit the wanted layout are kept; MIG mode is never
//! switched (that needs a GPU reset, which a node agent must not do under running pods).
//! Every decision is a [`Step`] with an [`Outcome`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::config::GpuWant;
use super::planner::{self, Placement, Wanted};
use super::profiles::{self, MigProfile};
use crate::backend::GpuBackend;
use crate::raw::{RawGpu, RawGpuInstance};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Step {
    Keep {
        gpu: u32,
        profile: String,
        start: u32,
        #[serde(rename = "gpuInstanceId")]
        gpu_instance_id: u32,
    },
    Destroy {
        gpu: u32,
        profile: String,
        start: u32,
        #[serde(rename = "gpuInstanceId")]
        gpu_instance_id: u32,
    },
    Create {
        gpu: u32,
        profile: String,
        start: u32,
    },
    /// Nothing (more) is done on this GPU, for this reason.
    Blocked { gpu: u32, reason: String },
}

impl Step {
    pub fn gpu(&self) -> u32 {
        match self {
            Step::Keep { gpu, .. }
            | Step::Destroy { gpu, .. }
            | Step::Create { gpu, .. }
            | Step::Blocked { gpu, .. } => *gpu,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Step::Keep { .. } => "keep",
            Step::Destroy { .. } => "destroy",
            Step::Create { .. } => "create",
            Step::Blocked { .. } => "blocked",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Keep {
                gpu,
                profile,
                start,
                gpu_instance_id,
            } => write!(
                f,
                "GPU {gpu}: keep {profile} at {start} (GPU instance {gpu_instance_id})"
            ),
            Step::Destroy {
                gpu,
                profile,
                start,
                gpu_instance_id,
            } => write!(
                f,
                "GPU {gpu}: destroy {profile} at {start} (GPU instance {gpu_instance_id})"
            ),
            Step::Create {
                gpu,
                profile,
                start,
            } => write!(f, "GPU {gpu}: create {profile} at {start}"),
            Step::Blocked { gpu, reason } => write!(f, "GPU {gpu}: blocked: {reason}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "camelCase")]
pub enum Outcome {
    /// Dry run, or a step that needs no call (keep, blocked).
    NotApplied,
    Done,
    Failed(String),
    /// An earlier step on the same GPU failed.
    Skipped,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppliedStep {
    #[serde(flatten)]
    pub step: Step,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// The steps that take `gpus` to `wants` (GPUs absent from `wants` are left alone).
pub fn plan_steps(gpus: &[RawGpu], wants: &BTreeMap<u32, GpuWant>) -> Vec<Step> {
    let mut steps = Vec::new();
    for g in gpus {
        if let Some(want) = wants.get(&g.index) {
            steps.extend(plan_gpu(g, want));
        }
    }
    steps
}

/// What makes `wants` impossible whatever runs on the GPUs: a wanted set that no layout of the
/// GPU's model gives, or a profile the model lacks; one line per reason, naming its GPUs. Busy
/// instances, MIG mode and boards without a table are reported by the steps instead.
pub fn layout_problems(gpus: &[RawGpu], wants: &BTreeMap<u32, GpuWant>) -> Vec<String> {
    let mut gpus_by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in gpus {
        let Some(want) = wants.get(&g.index).filter(|w| w.mig_enabled) else {
            continue;
        };
        let Some(model) = profiles::model_for_device(&g.name, g.memory_mib) else {
            continue;
        };
        if let Err(e) = planner::plan(model, &want.wanted) {
            gpus_by_reason
                .entry(e.to_string())
                .or_default()
                .push(g.index.to_string());
        }
    }
    gpus_by_reason
        .into_iter()
        .map(|(reason, gpus)| format!("GPU {}: {reason}", gpus.join(", ")))
        .collect()
}

fn plan_gpu(g: &RawGpu, want: &GpuWant) -> Vec<Step> {
    let gpu = g.index;
    let blocked = |reason: String| Step::Blocked { gpu, reason };
    let Some(mig) = &g.mig else {
        return if want.mig_enabled {
            vec![blocked(format!("{} does not support MIG", g.name))]
        } else {
            Vec::new()
        };
    };
    let instances = &mig.instances;
    if !want.mig_enabled {
        let mut steps: Vec<Step> = instances
            .iter()
            .map(|i| {
                if i.busy() {
                    blocked(busy_reason(i, "MIG is to be disabled"))
                } else {
                    destroy(gpu, i)
                }
            })
            .collect();
        if mig.enabled {
            steps.push(blocked(
                "MIG mode is on and the layout wants it off: switching needs a GPU reset, which the agent does not do".into(),
            ));
        }
        return steps;
    }
    if !mig.enabled {
        return vec![blocked(
            "MIG mode is off: switching it on needs a GPU reset, which the agent does not do (`nvidia-smi -i N -mig 1`)".into(),
        )];
    }
    let Some(model) = profiles::model_for_device(&g.name, g.memory_mib) else {
        return vec![blocked(format!(
            "no MIG profile table for {} ({} MiB)",
            g.name, g.memory_mib
        ))];
    };
    // Existing instances, by their profile in the table.
    let mut existing: Vec<(&RawGpuInstance, &'static MigProfile)> = Vec::new();
    for i in instances {
        match model.profile(&i.profile) {
            Some(p) if p.memory_slices == i.size && p.starts.contains(&i.start) => {
                existing.push((i, p))
            }
            _ => {
                return vec![blocked(format!(
                    "GPU instance {} ({} at {}:{}) is not a {} profile placement the agent knows; GPU left as is",
                    i.id, i.profile, i.start, i.size, model.key
                ))]
            }
        }
    }
    let mut steps = Vec::new();
    let mut remaining: Wanted = want.wanted.clone();
    let mut fixed = Vec::new();
    for (i, p) in existing.iter().filter(|(i, _)| i.busy()) {
        fixed.push(Placement {
            profile: p,
            start: i.start,
        });
        match remaining.0.get_mut(p.name) {
            Some(c) if *c > 0 => {
                *c -= 1;
                steps.push(keep(gpu, i));
            }
            _ => steps.push(blocked(busy_reason(i, "the layout does not want it"))),
        }
    }
    remaining.0.retain(|_, c| *c > 0);
    let idle: Vec<&(&RawGpuInstance, &MigProfile)> =
        existing.iter().filter(|(i, _)| !i.busy()).collect();
    let plan = planner::plan_around(model, &remaining, &fixed, |p, start| {
        u32::from(
            idle.iter()
                .any(|(i, q)| q.name == p.name && i.start == start),
        )
    });
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            steps.push(blocked(format!("{e}; nothing changed on this GPU")));
            return steps;
        }
    };
    let mut creates = Vec::new();
    let mut kept: Vec<u32> = Vec::new();
    for pl in &plan.placements {
        match idle
            .iter()
            .find(|(i, q)| q.name == pl.profile.name && i.start == pl.start)
        {
            Some((i, _)) => {
                kept.push(i.id);
                steps.push(keep(gpu, i));
            }
            None => creates.push(Step::Create {
                gpu,
                profile: pl.profile.name.to_string(),
                start: pl.start,
            }),
        }
    }
    for (i, _) in &idle {
        if !kept.contains(&i.id) {
            steps.push(destroy(gpu, i));
        }
    }
    steps.extend(creates);
    steps
}

fn keep(gpu: u32, i: &RawGpuInstance) -> Step {
    Step::Keep {
        gpu,
        profile: i.profile.clone(),
        start: i.start,
        gpu_instance_id: i.id,
    }
}

fn destroy(gpu: u32, i: &RawGpuInstance) -> Step {
    Step::Destroy {
        gpu,
        profile: i.profile.clone(),
        start: i.start,
        gpu_instance_id: i.id,
    }
}

fn busy_reason(i: &RawGpuInstance, why: &str) -> String {
    let processes: u32 = i.compute_instances.iter().map(|c| c.processes).sum();
    format!(
        "GPU instance {} ({} at {}) has {processes} running process(es); kept although {why}",
        i.id, i.profile, i.start
    )
}

/// Carries out `steps` in order (destroys before creates on each GPU). With `dry_run`, calls
/// nothing. After a failed step, the GPU's later steps are skipped.
pub fn apply(
    backend: &dyn GpuBackend,
    gpus: &[RawGpu],
    steps: Vec<Step>,
    dry_run: bool,
) -> Vec<AppliedStep> {
    let mut failed_gpus: Vec<u32> = Vec::new();
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let outcome = match &step {
            Step::Keep { .. } | Step::Blocked { .. } => Outcome::NotApplied,
            _ if dry_run => Outcome::NotApplied,
            _ if failed_gpus.contains(&step.gpu()) => Outcome::Skipped,
            Step::Destroy {
                gpu,
                gpu_instance_id,
                ..
            } => match backend.destroy_mig_instance(*gpu, *gpu_instance_id) {
                Ok(()) => Outcome::Done,
                Err(e) => Outcome::Failed(e.to_string()),
            },
            Step::Create {
                gpu,
                profile,
                start,
            } => {
                let p = gpus
                    .iter()
                    .find(|g| g.index == *gpu)
                    .and_then(|g| profiles::model_for_device(&g.name, g.memory_mib))
                    .and_then(|m| m.profile(profile));
                match p {
                    Some(p) => match backend.create_mig_instance(*gpu, p, *start) {
                        Ok(_) => Outcome::Done,
                        Err(e) => Outcome::Failed(e.to_string()),
                    },
                    None => Outcome::Failed(format!("profile {profile} unknown for GPU {gpu}")),
                }
            }
        };
        if matches!(outcome, Outcome::Failed(_)) {
            failed_gpus.push(step.gpu());
        }
        out.push(AppliedStep { step, outcome });
    }
    out
}

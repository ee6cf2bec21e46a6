//! `basalt-sim plan`: one scheduling cycle over cluster dumps.

use std::path::PathBuf;

use crate::{plan, plan_forecast};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
    Yaml,
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// Manifest files: multi-document YAML, JSON, or `kind: List` as `kubectl get -o yaml`
    /// prints them (Nodes, Pods, PriorityClasses, PodGroups, Queues, NodeTopologies,
    /// HyperNodes, Namespaces, PersistentVolumeClaims, PersistentVolumes, StorageClasses;
    /// Jobs, Kubeflow jobs, JobSets and Volcano Jobs for the gangs of their pods).
    #[arg(long = "snapshot", value_name = "FILE")]
    snapshots: Vec<PathBuf>,
    /// Scheduler config (YAML); defaults apply to absent fields.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Pods with this schedulerName are Basalt's (repeatable; overrides the config).
    #[arg(long = "scheduler-name", value_name = "NAME")]
    scheduler_names: Vec<String>,
    #[arg(long, value_enum, default_value_t = PlanOutput::Text)]
    output: PlanOutput,
    /// The instant to plan at (RFC 3339, e.g. 2026-11-29T12:00:00Z); defaults to now. Waiting
    /// times (backfill reservations) are measured against it.
    #[arg(long, value_name = "TIME")]
    now: Option<jiff::Timestamp>,
    /// Refuse the whole dump at its first object that cannot be read or converted (exit
    /// 2), instead of leaving that object out with an error on stderr, as the scheduler
    /// does (the default).
    #[arg(long)]
    strict: bool,
    /// Explain why this job (`NAMESPACE/NAME` of its PodGroup, or of a pod without one)
    /// waits, in full: who holds what it needs, what would free it, its place in line
    /// (repeatable). The text output ends with the explanation; JSON and YAML carry it in
    /// the group's status.
    #[arg(long, value_name = "NS/JOB")]
    explain: Vec<String>,
}

/// The plan as text, JSON or YAML; warnings about left-out objects go to stderr.
pub fn run(args: PlanArgs) -> anyhow::Result<String> {
    let PlanArgs {
        snapshots,
        config,
        scheduler_names,
        output,
        now,
        strict,
        explain,
    } = args;
    let mut config = plan::load_config(config.as_deref())?;
    if !scheduler_names.is_empty() {
        config.scheduler_names = scheduler_names;
    }
    let options = basalt_crds::ConvertOptions {
        scheduler_names: config.scheduler_names.clone(),
        now_ms: now.unwrap_or_else(jiff::Timestamp::now).as_millisecond(),
        device_resources: config.devices.clone(),
        tiers: config.topology.tiers.clone(),
    };
    let (snapshot, warnings) = plan::load(&snapshots, &options, strict)?;
    for w in warnings {
        eprintln!("basalt-sim: warning: {w}");
    }
    let mut fw = basalt_plugins::framework(&config, &snapshot.resources);
    fw.explain_jobs = explain.clone();
    let result = basalt_engine::schedule(&snapshot, &fw, &mut Default::default());
    let mut why = plan::explained(&snapshot, &result, &explain)?;
    if !explain.is_empty() && matches!(output, PlanOutput::Text) {
        let objects = plan_forecast::objects(&snapshots)?;
        why += &plan_forecast::forecast_lines(&objects, &options, &config, &explain);
    }
    Ok(match output {
        PlanOutput::Text => plan::render_text(&snapshot, &result) + &why,
        PlanOutput::Json => serde_json::to_string_pretty(&result)? + "\n",
        PlanOutput::Yaml => serde_yaml::to_string(&result)?,
    })
}

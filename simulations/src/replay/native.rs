//! Basalt's native workload formats, CSV (one row per role) and JSON (jobs with roles). Every
//! value is range-checked before it is scaled or sized by (see [`super::readers`]).

use std::collections::HashMap;

use serde::Deserialize;

use super::readers::{
    count_u32, nonneg, seconds_to_ms, Source, Table, TraceError, MAX_PODS_PER_JOB,
};
use super::workload::*;

/// Columns of the native CSV format: one row per role (a set of identical pods) of a job;
/// rows with the same `job` form one job and must agree on its job-level fields.
pub const NATIVE_COLUMNS: [&str; 13] = [
    "job",
    "queue",
    "priority",
    "submit_s",
    "duration_s",
    "pods",
    "cpu",
    "memory",
    "gpus",
    "gpu_milli",
    "gpu_models",
    "min_member",
    "tp_size",
];

fn quantity(col: &str, resource: &str, s: &str) -> Result<i64, String> {
    basalt_crds::quantity::parse_for_resource(resource, s).map_err(|e| format!("{col}: {e}"))
}

/// Basalt's native CSV workload (see docs/simulations.md for the format).
pub fn read_native_csv(path: &Source) -> Result<Workload, TraceError> {
    let table = Table::open(
        path,
        &NATIVE_COLUMNS,
        &["job", "submit_s", "duration_s", "cpu", "memory"],
    )?;
    let mut jobs: Vec<TraceJob> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    table.rows(|r| {
        let name = r.str("job")?.to_string();
        let queue = r.opt("queue").unwrap_or("default").to_string();
        let priority = r.opt_int("priority")?.unwrap_or(0);
        let priority = i32::try_from(priority).map_err(|_| format!("priority: {priority} is out of range"))?;
        let submit = seconds_to_ms("submit_s", r.num("submit_s")?)?;
        let duration = seconds_to_ms("duration_s", r.num("duration_s")?)?;
        let count = r.opt_int("pods")?.unwrap_or(1);
        if !(1..=MAX_PODS_PER_JOB).contains(&count) {
            return Err(format!("pods: {count} is out of range (1..{MAX_PODS_PER_JOB})"));
        }
        let shape = native_pod(
            r.str("cpu")?,
            r.str("memory")?,
            r.opt_int("gpus")?.unwrap_or(0),
            r.opt_int("gpu_milli")?.unwrap_or(1000),
            r.opt("gpu_models").unwrap_or(""),
        )?;
        let min_member = count_u32("min_member", r.opt_int("min_member")?.unwrap_or(0))?;
        let tp_size = count_u32("tp_size", r.opt_int("tp_size")?.unwrap_or(0))?;
        match by_name.get(&name) {
            Some(&i) => {
                let j = &mut jobs[i];
                if j.queue != queue || j.priority != priority || j.submit_ms != submit || j.duration_ms != duration || j.tp_size != tp_size {
                    return Err(format!("job {name}: queue, priority, submit_s, duration_s and tp_size must match its earlier rows"));
                }
                let total = j.pods.len() as i64 + count;
                if total > MAX_PODS_PER_JOB {
                    return Err(format!(
                        "pods: job {name} has {total} pods over its rows, more than {MAX_PODS_PER_JOB}"
                    ));
                }
                let pods = vec![shape; count as usize];
                if min_member != 0 {
                    j.min_member = min_member;
                }
                j.pods.extend(pods);
            }
            None => {
                by_name.insert(name.clone(), jobs.len());
                jobs.push(TraceJob {
                    name,
                    queue,
                    priority,
                    submit_ms: submit,
                    duration_ms: duration,
                    pods: vec![shape; count as usize],
                    min_member,
                    tp_size,
                });
            }
        }
        Ok(())
    })?;
    let mut w = Workload {
        source: format!("native CSV {}", path.label()),
        jobs,
        queues: vec![],
        notes: vec![],
    };
    check_min_member(&w, &path.label().to_string())?;
    w.complete_queues();
    Ok(w)
}

fn check_min_member(w: &Workload, file: &str) -> Result<(), TraceError> {
    for j in &w.jobs {
        if j.min_member as usize > j.pods.len() {
            return Err(TraceError::File {
                file: file.to_string(),
                message: format!(
                    "job {}: min_member {} is more than its {} pods",
                    j.name,
                    j.min_member,
                    j.pods.len()
                ),
            });
        }
    }
    Ok(())
}

fn native_pod(
    cpu: &str,
    memory: &str,
    gpus: i64,
    milli: i64,
    models: &str,
) -> Result<PodShape, String> {
    let cpu = quantity("cpu", "cpu", cpu)?;
    let memory = quantity("memory", "memory", memory)?;
    let gpus = nonneg("gpus", gpus)?;
    if gpus > basalt_engine::MAX_GPUS_PER_NODE as i64 {
        return Err(format!("gpus: {gpus} is more than a node can hold"));
    }
    if !(1..=1000).contains(&milli) {
        return Err(format!("gpu_milli: {milli} is out of range (1..1000)"));
    }
    if gpus > 1 && milli != 1000 {
        return Err(format!(
            "gpu_milli: {milli} with gpus {gpus}; a share below 1000 needs gpus 1"
        ));
    }
    Ok(PodShape {
        cpu_milli: cpu,
        memory,
        gpus: gpus as u32,
        gpu_milli: if gpus == 0 { 0 } else { milli as u32 },
        gpu_models: models
            .split('|')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NativeFile {
    #[serde(default)]
    queues: Vec<QueueDef>,
    jobs: Vec<NativeJob>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NativeJob {
    name: String,
    #[serde(default = "default_queue")]
    queue: String,
    #[serde(default)]
    priority: i32,
    /// Seconds.
    submit: f64,
    duration: f64,
    #[serde(default)]
    min_member: u32,
    #[serde(default)]
    tp_size: u32,
    pods: Vec<NativeRole>,
}

fn default_queue() -> String {
    "default".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NativeRole {
    #[serde(default = "one")]
    count: i64,
    cpu: String,
    memory: String,
    #[serde(default)]
    gpus: i64,
    #[serde(default = "thousand")]
    gpu_milli: i64,
    #[serde(default)]
    gpu_models: Vec<String>,
}

fn one() -> i64 {
    1
}
fn thousand() -> i64 {
    1000
}

/// Basalt's native JSON workload: `{"queues": [{"name", "weight"}], "jobs": [{"name", "queue",
/// "priority", "submit", "duration", "minMember", "tpSize", "pods": [{"count", "cpu", "memory",
/// "gpus", "gpuMilli", "gpuModels"}]}]}` (times in seconds, quantities as Kubernetes writes them).
pub fn read_native_json(path: &Source) -> Result<Workload, TraceError> {
    let file = path.label();
    let text = match path {
        Source::File(p) => std::fs::read_to_string(p).map_err(|e| TraceError::Io {
            file: file.clone(),
            message: e.to_string(),
        })?,
        Source::Text { text, .. } => text.to_string(),
    };
    let parsed: NativeFile = serde_json::from_str(&text).map_err(|e| TraceError::Row {
        file: file.clone(),
        line: e.line() as u64,
        message: e.to_string(),
    })?;
    let field = |message: String| TraceError::File {
        file: file.clone(),
        message,
    };
    let mut queue_at: HashMap<&str, usize> = HashMap::new();
    for (i, q) in parsed.queues.iter().enumerate() {
        if let Some(first) = queue_at.insert(&q.name, i) {
            return Err(field(format!(
                "queues[{i}].name: duplicate queue {:?} (first at queues[{first}])",
                q.name
            )));
        }
        if q.weight == 0 {
            return Err(field(format!(
                "queues[{i}].weight: queue {:?}: must be at least 1",
                q.name
            )));
        }
    }
    let mut job_at: HashMap<&str, usize> = HashMap::new();
    for (i, j) in parsed.jobs.iter().enumerate() {
        if let Some(first) = job_at.insert(&j.name, i) {
            return Err(field(format!(
                "jobs[{i}].name: duplicate job {:?} (first at jobs[{first}])",
                j.name
            )));
        }
    }
    let mut jobs = Vec::new();
    for (i, j) in parsed.jobs.iter().enumerate() {
        let at = |m: String| field(format!("jobs[{i}] ({}): {m}", j.name));
        // Checked before anything is sized by them.
        let mut total = 0i64;
        for (k, role) in j.pods.iter().enumerate() {
            if !(1..=MAX_PODS_PER_JOB).contains(&role.count) {
                return Err(at(format!(
                    "pods[{k}].count: {} is out of range (1..{MAX_PODS_PER_JOB})",
                    role.count
                )));
            }
            total += role.count;
            if total > MAX_PODS_PER_JOB {
                return Err(at(format!(
                    "pods[{k}].count: {total} pods over its roles, more than {MAX_PODS_PER_JOB}"
                )));
            }
        }
        let mut pods = Vec::new();
        for (k, role) in j.pods.iter().enumerate() {
            let shape = native_pod(
                &role.cpu,
                &role.memory,
                role.gpus,
                role.gpu_milli,
                &role.gpu_models.join("|"),
            )
            .map_err(|m| at(format!("pods[{k}].{m}")))?;
            pods.extend(std::iter::repeat_n(shape, role.count as usize));
        }
        if pods.is_empty() {
            return Err(at("pods: must not be empty".into()));
        }
        jobs.push(TraceJob {
            name: j.name.clone(),
            queue: j.queue.clone(),
            priority: j.priority,
            submit_ms: seconds_to_ms("submit", j.submit).map_err(at)?,
            duration_ms: seconds_to_ms("duration", j.duration).map_err(at)?,
            pods,
            min_member: j.min_member,
            tp_size: j.tp_size,
        });
    }
    let mut w = Workload {
        source: format!("native JSON {}", path.label()),
        jobs,
        queues: parsed.queues,
        notes: vec![],
    };
    check_min_member(&w, &file)?;
    w.complete_queues();
    Ok(w)
}

//! The CSV time series of one run: `timeseries.csv`, `queue_share.csv`, `jobs.csv`.

use std::path::Path;

use anyhow::Context;

use super::RunReport;

pub(super) fn csv_writer(path: &Path) -> anyhow::Result<csv::Writer<std::fs::File>> {
    csv::Writer::from_path(path).with_context(|| format!("{}: cannot write", path.display()))
}

/// Time series of one run: `timeseries.csv`, `queue_share.csv`, `jobs.csv`.
pub fn write_csvs(dir: &Path, r: &RunReport) -> anyhow::Result<()> {
    let o = r.outcome;
    let total = o.total_gpus.max(1) as f64;
    let path = dir.join("timeseries.csv");
    let mut w = csv_writer(&path)?;
    w.write_record([
        "t_s",
        "gpus_allocated",
        "allocation_ratio",
        "gpu_share_used_ratio",
        "gpus_demanded",
        "pending_jobs",
        "running_jobs",
        "fragmented_gpus",
        "fragmented_gpu_compute",
        "free_gpu_compute",
        "partial_gpus",
    ])?;
    let cores = o.total_gpu_cores.max(1) as f64;
    for s in &o.samples {
        w.write_record([
            fmt_s(s.t_ms),
            s.gpus_allocated.to_string(),
            format!("{:.6}", s.gpus_allocated as f64 / total),
            format!("{:.6}", s.gpu_milli_used as f64 / (total * 1000.0)),
            s.gpus_demanded.to_string(),
            s.pending_jobs.to_string(),
            s.running_jobs.to_string(),
            s.fragmented_gpus.to_string(),
            format!("{:.6}", s.fragmented_gpu_cores as f64 / cores),
            format!("{:.6}", s.free_gpu_cores as f64 / cores),
            s.partial_gpus.to_string(),
        ])?;
    }
    w.flush()?;
    let path = dir.join("queue_share.csv");
    let mut w = csv_writer(&path)?;
    w.write_record([
        "t_s",
        "queue",
        "gpus",
        "share",
        "deserved_share",
        "demand_gpus",
    ])?;
    // One row per queue whenever its values change (a step series), so the file stays small.
    for (i, s) in o.samples.iter().enumerate() {
        for (q, def) in o.queues.iter().enumerate() {
            if let Some(prev) = i.checked_sub(1).map(|p| &o.samples[p]) {
                if prev.queue_gpus[q] == s.queue_gpus[q]
                    && prev.queue_demand[q] == s.queue_demand[q]
                {
                    continue;
                }
            }
            w.write_record([
                fmt_s(s.t_ms),
                def.name.clone(),
                s.queue_gpus[q].to_string(),
                format!("{:.6}", s.queue_gpus[q] as f64 / total),
                format!("{:.6}", r.summary.queues[q].deserved_share),
                s.queue_demand[q].to_string(),
            ])?;
        }
    }
    w.flush()?;
    let path = dir.join("jobs.csv");
    let mut w = csv_writer(&path)?;
    w.write_record([
        "job",
        "queue",
        "pods",
        "gpus",
        "submit_s",
        "start_s",
        "end_s",
        "queueing_s",
        "jct_s",
        "evictions",
        "lost_gpu_s",
    ])?;
    for (i, j) in o.jobs.iter().enumerate() {
        let submit = o.job_submit_ms[i];
        let opt = |v: Option<i64>| v.map(fmt_s).unwrap_or_default();
        w.write_record([
            r.job_names[i].clone(),
            o.queues[o.job_queue[i] as usize].name.clone(),
            o.job_pods[i].to_string(),
            o.job_gpus[i].to_string(),
            fmt_s(submit),
            opt(j.first_start_ms),
            opt(j.end_ms),
            opt(j.first_start_ms.map(|s| s - submit)),
            opt(j.end_ms.map(|e| e - submit)),
            j.evictions.to_string(),
            fmt_s(j.lost_gpu_ms),
        ])?;
    }
    w.flush()?;
    Ok(())
}

pub(super) fn fmt_s(ms: i64) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        format!("{:.3}", ms as f64 / 1000.0)
    }
}

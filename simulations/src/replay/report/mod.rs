//! Report writing: `summary.json`, CSV time series ([`csvs`]), charts ([`charts`]),
//! `report.md` with its tables ([`tables`]), each queue's usage with a usage half-life ([`usage`]), and the side-by-side table of `compare`. Output
//! goes to a temporary folder renamed into place at the end, so a failed write never leaves a
//! half-written report behind.

mod charts;
mod csvs;
mod tables;
mod usage;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::metrics::Summary;
use super::sim::Outcome;

pub use charts::{allocation_series, chart, jct_cdf, queue_share_series, Series};
pub use csvs::write_csvs;
pub use tables::{markdown_table, queue_table, table_rows, text_table};

/// One finished (or interrupted) run, ready to be written.
pub struct RunReport<'a> {
    pub label: String,
    pub outcome: &'a Outcome,
    pub summary: &'a Summary,
    pub job_names: &'a [String],
}

/// Creates `out` anew through a sibling temporary folder: `fill` writes into the temporary
/// folder, which replaces `out` only when everything was written.
pub fn write_atomically(
    out: &Path,
    fill: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let tmp: PathBuf = out.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("{}: cannot remove", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
    if let Err(e) = fill(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if out.exists() {
        std::fs::remove_dir_all(out)
            .with_context(|| format!("{}: cannot replace", out.display()))?;
    }
    std::fs::rename(&tmp, out)
        .with_context(|| format!("{}: cannot move into place", out.display()))?;
    Ok(())
}

/// The description of the inputs, shared by replay and compare reports.
pub struct Inputs {
    pub trace: String,
    pub cluster: String,
    pub options: String,
    pub notes: Vec<String>,
}

fn header(out: &mut String, title: &str, complete: bool, inputs: &Inputs) {
    let _ = writeln!(
        out,
        "# {title}{}\n",
        if complete {
            ""
        } else {
            " — PARTIAL (interrupted)"
        }
    );
    if !complete {
        let _ = writeln!(out, "**This report is partial: the run was interrupted before the trace ended. Every figure covers only the simulated time reached.**\n");
    }
    let _ = writeln!(
        out,
        "- trace: {}\n- cluster: {}\n- options: {}",
        inputs.trace, inputs.cluster, inputs.options
    );
    for n in &inputs.notes {
        let _ = writeln!(out, "- note: {n}");
    }
    out.push('\n');
}

/// Everything of one replay into `dir` (already created).
pub fn write_replay(dir: &Path, r: &RunReport, inputs: &Inputs) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r.summary)? + "\n";
    std::fs::write(dir.join("summary.json"), json)
        .with_context(|| format!("{}: cannot write summary.json", dir.display()))?;
    write_csvs(dir, r)?;
    let o = r.outcome;
    chart(
        dir,
        "allocation",
        "GPU allocation over time",
        "hours",
        "allocated GPUs / total",
        &[(r.label.clone(), allocation_series(o))],
        false,
    )?;
    chart(
        dir,
        "jct_cdf",
        "Job completion time (CDF)",
        "JCT (hours, log scale)",
        "fraction of finished jobs",
        &[(r.label.clone(), jct_cdf(o))],
        true,
    )?;
    chart(
        dir,
        "queue_share",
        "Share of GPUs per queue",
        "hours",
        "GPUs held / total",
        &queue_share_series(o),
        false,
    )?;
    let mut md = String::new();
    header(&mut md, "Basalt replay report", r.summary.complete, inputs);
    let _ = writeln!(
        md,
        "## Summary\n\n{}",
        markdown_table(std::slice::from_ref(&r.label), &table_rows(&[r.summary]))
    );
    let _ = writeln!(md, "## Queues\n\n{}", queue_table(r.summary));
    let _ = writeln!(md, "## Unallocated GPUs by load\n\n| load (GPUs demanded / total) | unallocated GPUs | share of time |\n|---:|---:|---:|");
    for p in &r.summary.unallocated_at_load {
        let _ = writeln!(
            md,
            "| {} % | {:.1} % | {:.1} % |",
            p.load_pct,
            p.unallocated_gpu_pct,
            p.time_share * 100.0
        );
    }
    let _ = writeln!(md, "\n## Charts\n\n![allocation](allocation.svg) ([PNG](allocation.png))\n\n![JCT CDF](jct_cdf.svg) ([PNG](jct_cdf.png))\n\n![queue share](queue_share.svg) ([PNG](queue_share.png))\n");
    usage::write_queue_usage(dir, o, &mut md)?;
    let _ = writeln!(md, "## Files\n\n- [summary.json](summary.json): every figure above\n- [timeseries.csv](timeseries.csv): allocation, demand, pending and running jobs, fragmentation (idle GPUs on used nodes; per device: fragmented and free GPU compute, partially used GPUs) at every change\n- [queue_share.csv](queue_share.csv): GPUs per queue against its deserved share, a row whenever a queue's values change\n- [jobs.csv](jobs.csv): per job submit, start, end, queueing delay, JCT, evictions");
    std::fs::write(dir.join("report.md"), md)
        .with_context(|| format!("{}: cannot write report.md", dir.display()))?;
    Ok(())
}

/// A comparison: per run a sub-folder with its replay report, plus combined charts and report.
pub fn write_compare(dir: &Path, runs: &[RunReport], inputs: &Inputs) -> anyhow::Result<()> {
    let complete = runs.iter().all(|r| r.summary.complete);
    let mut md = String::new();
    header(&mut md, "Basalt policy comparison", complete, inputs);
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    let summaries: Vec<&Summary> = runs.iter().map(|r| r.summary).collect();
    let _ = writeln!(
        md,
        "## Side by side\n\n{}",
        markdown_table(&labels, &table_rows(&summaries))
    );
    for (i, r) in runs.iter().enumerate() {
        let sub = dir.join(format!("run-{}", i + 1));
        std::fs::create_dir_all(&sub)
            .with_context(|| format!("{}: cannot create", sub.display()))?;
        write_replay(&sub, r, inputs)?;
        let _ = writeln!(md, "- `{}`: [report](run-{}/report.md)", r.label, i + 1);
    }
    chart(
        dir,
        "allocation",
        "GPU allocation over time",
        "hours",
        "allocated GPUs / total",
        &runs
            .iter()
            .map(|r| (r.label.clone(), allocation_series(r.outcome)))
            .collect::<Vec<_>>(),
        false,
    )?;
    chart(
        dir,
        "jct_cdf",
        "Job completion time (CDF)",
        "JCT (hours, log scale)",
        "fraction of finished jobs",
        &runs
            .iter()
            .map(|r| (r.label.clone(), jct_cdf(r.outcome)))
            .collect::<Vec<_>>(),
        true,
    )?;
    let _ = writeln!(md, "\n## Charts\n\n![allocation](allocation.svg) ([PNG](allocation.png))\n\n![JCT CDF](jct_cdf.svg) ([PNG](jct_cdf.png))\n\nPer-queue shares are in each run's report.");
    for (i, r) in runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.outcome.usage.is_empty())
    {
        let _ = writeln!(
            md,
            "\n`{}`, per-queue usage and adjusted share:\n\n![queue usage](run-{n}/queue_usage.svg) ([PNG](run-{n}/queue_usage.png))",
            r.label,
            n = i + 1
        );
    }
    let json = serde_json::to_string_pretty(&summaries)? + "\n";
    std::fs::write(dir.join("summary.json"), json)?;
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

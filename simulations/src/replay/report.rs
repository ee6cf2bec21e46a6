//! Report writing: `summary.json`, CSV time series, charts (SVG and PNG, drawn with plotters and
//! the DejaVu Sans font shipped in `assets/fonts`), `report.md`, and the side-by-side table of
//! `compare`. Output goes to a temporary folder renamed into place at the end, so a failed
//! write never leaves a half-written report behind.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::metrics::Summary;
use super::sim::Outcome;

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF shipped with the crate; a failure would only lose labels.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One finished (or interrupted) run, ready to be written.
pub struct RunReport<'a> {
    pub label: String,
    pub outcome: &'a Outcome,
    pub summary: &'a Summary,
    pub job_names: &'a [String],
}

/// A named line of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// At most `n` points of a step series, the state at evenly spaced times.
fn resample(samples: &[(i64, f64)], end: i64, n: usize) -> Vec<(f64, f64)> {
    if samples.is_empty() {
        return vec![];
    }
    let t0 = samples[0].0;
    if samples.len() <= n || end <= t0 {
        let mut v: Vec<(f64, f64)> = samples
            .iter()
            .map(|&(t, y)| (t as f64 / 3600e3, y))
            .collect();
        if let Some(&(_, y)) = samples.last() {
            v.push((end as f64 / 3600e3, y));
        }
        return v;
    }
    let mut out = Vec::with_capacity(n + 1);
    let mut i = 0;
    for k in 0..=n {
        let t = t0 + ((end - t0) as i128 * k as i128 / n as i128) as i64;
        while i + 1 < samples.len() && samples[i + 1].0 <= t {
            i += 1;
        }
        out.push((t as f64 / 3600e3, samples[i].1));
    }
    out
}

pub fn allocation_series(o: &Outcome) -> Vec<(f64, f64)> {
    let total = o.total_gpus.max(1) as f64;
    let pts: Vec<(i64, f64)> = o
        .samples
        .iter()
        .map(|s| (s.t_ms, s.gpus_allocated as f64 / total))
        .collect();
    resample(&pts, o.end_ms, 1500)
}

pub fn queue_share_series(o: &Outcome) -> Vec<Series> {
    let total = o.total_gpus.max(1) as f64;
    o.queues
        .iter()
        .enumerate()
        .map(|(q, def)| {
            let pts: Vec<(i64, f64)> = o
                .samples
                .iter()
                .map(|s| (s.t_ms, s.queue_gpus[q] as f64 / total))
                .collect();
            (def.name.clone(), resample(&pts, o.end_ms, 1000))
        })
        .collect()
}

/// Empirical CDF of JCT in hours.
pub fn jct_cdf(o: &Outcome) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = o
        .jobs
        .iter()
        .zip(&o.job_submit_ms)
        .filter_map(|(r, &s)| r.end_ms.map(|e| (e - s) as f64 / 3600e3))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = (n / 1500).max(1);
    let mut out: Vec<(f64, f64)> = v
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || i + 1 == n)
        .map(|(i, &x)| (x, (i + 1) as f64 / n as f64))
        .collect();
    out.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    out
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if log_x {
        x0 = x0.max(1e-3);
        x1 = x1.max(x0 * 10.0);
    } else if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 {
        1.0
    } else {
        (y1 * 1.05).min(1.0).max(y1)
    };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56);
    let palette = |i: usize| Palette99::pick(i).to_rgba();
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
            for (i, (name, p)) in series.iter().enumerate() {
                let color = palette(i);
                let p: Vec<(f64, f64)> = if log_x {
                    p.iter().copied().filter(|&(x, _)| x >= x0).collect()
                } else {
                    p.clone()
                };
                chart
                    .draw_series(LineSeries::new(p, color.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
            }
            if series.len() > 1 {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 12))
                    .draw()
                    .map_err(e)?;
            }
        }};
    }
    if log_x {
        body!(builder
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
            .map_err(e)?);
    } else {
        body!(builder.build_cartesian_2d(x0..x1, 0.0..y1).map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `stem.svg` and `stem.png` into `dir`.
pub fn chart(
    dir: &Path,
    stem: &str,
    title: &str,
    x: &str,
    y: &str,
    series: &[Series],
    log_x: bool,
) -> anyhow::Result<()> {
    register_font();
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    draw(
        SVGBackend::new(&svg, (900, 500)).into_drawing_area(),
        title,
        x,
        y,
        series,
        log_x,
    )
    .map_err(|m| anyhow::anyhow!("{}: {m}", svg.display()))?;
    draw(
        BitMapBackend::new(&png, (900, 500)).into_drawing_area(),
        title,
        x,
        y,
        series,
        log_x,
    )
    .map_err(|m| anyhow::anyhow!("{}: {m}", png.display()))?;
    Ok(())
}

fn csv_writer(path: &Path) -> anyhow::Result<csv::Writer<std::fs::File>> {
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

fn fmt_s(ms: i64) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        format!("{:.3}", ms as f64 / 1000.0)
    }
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

fn opt_pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{:.1} %", v * 100.0))
}

/// The rows of the side-by-side table: (metric, value per run).
pub fn table_rows(summaries: &[&Summary]) -> Vec<(String, Vec<String>)> {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Summary) -> String| {
        rows.push((name.to_string(), summaries.iter().map(|s| f(s)).collect()));
    };
    row("complete", &|s| {
        if s.complete {
            "yes".into()
        } else {
            "NO (interrupted)".into()
        }
    });
    row("jobs finished", &|s| format!("{}/{}", s.finished, s.jobs));
    row("never started", &|s| s.never_started.to_string());
    row("mean allocation", &|s| {
        format!("{:.1} %", s.mean_allocation * 100.0)
    });
    row("mean GPU share used", &|s| {
        format!("{:.1} %", s.mean_gpu_share_used * 100.0)
    });
    row("mean fragmented GPUs", &|s| {
        format!("{:.1}", s.mean_fragmented_gpus)
    });
    row("mean fragmented GPU compute", &|s| {
        format!("{:.1} %", s.mean_fragmented_gpu_compute * 100.0)
    });
    row("mean compute on free GPUs", &|s| {
        format!("{:.1} %", s.mean_free_gpu_compute * 100.0)
    });
    row("mean partially used GPUs", &|s| {
        format!("{:.1}", s.mean_partial_gpus)
    });
    row("queueing mean (s)", &|s| {
        format!("{:.0}", s.queueing_delay_s.mean)
    });
    row("queueing p50 (s)", &|s| {
        format!("{:.0}", s.queueing_delay_s.p50)
    });
    row("queueing p95 (s)", &|s| {
        format!("{:.0}", s.queueing_delay_s.p95)
    });
    row("queueing p99 (s)", &|s| {
        format!("{:.0}", s.queueing_delay_s.p99)
    });
    row("JCT mean (s)", &|s| format!("{:.0}", s.jct_s.mean));
    row("JCT p50 (s)", &|s| format!("{:.0}", s.jct_s.p50));
    row("JCT p95 (s)", &|s| format!("{:.0}", s.jct_s.p95));
    row("JCT p99 (s)", &|s| format!("{:.0}", s.jct_s.p99));
    row("gang wait mean (s)", &|s| {
        format!("{:.0}", s.gang_wait_s.mean)
    });
    row("share error, 1-day windows", &|s| {
        (s.daily_fairness.share_error).map_or("n/a".into(), |e| format!("{e:.4}"))
    });
    row("Jain fairness, 1-day windows", &|s| {
        (s.daily_fairness.jain).map_or("n/a".into(), |j| format!("{j:.3}"))
    });
    row("Jain fairness", &|s| {
        s.jain_fairness.map_or("n/a".into(), |j| format!("{j:.3}"))
    });
    row("gangs in one rack", &|s| opt_pct(s.gangs_in_one_rack));
    row("TP groups in one node", &|s| {
        opt_pct(s.tp_groups_in_one_node)
    });
    row("TP groups in one NVLink domain", &|s| {
        opt_pct(s.tp_groups_in_one_nvlink_domain)
    });
    row("evictions", &|s| s.evictions.to_string());
    row("lost GPU-hours", &|s| format!("{:.1}", s.lost_gpu_hours));
    row("cycles", &|s| s.cycles.to_string());
    rows
}

/// A plain-text table with a header of run labels.
pub fn text_table(labels: &[String], rows: &[(String, Vec<String>)]) -> String {
    let mut widths: Vec<usize> = std::iter::once("metric".len())
        .chain(labels.iter().map(|l| l.chars().count()))
        .collect();
    for (name, vals) in rows {
        widths[0] = widths[0].max(name.chars().count());
        for (i, v) in vals.iter().enumerate() {
            widths[i + 1] = widths[i + 1].max(v.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 0 {
                let _ = write!(s, "{c:<w$}", w = widths[0]);
            } else {
                let _ = write!(s, "  {c:>w$}", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(
        &mut out,
        std::iter::once("metric")
            .chain(labels.iter().map(String::as_str))
            .collect(),
    );
    for (name, vals) in rows {
        line(
            &mut out,
            std::iter::once(name.as_str())
                .chain(vals.iter().map(String::as_str))
                .collect(),
        );
    }
    out
}

/// A Markdown table of the same rows.
pub fn markdown_table(labels: &[String], rows: &[(String, Vec<String>)]) -> String {
    let mut out = format!(
        "| metric | {} |\n|---|{}\n",
        labels.join(" | "),
        "---:|".repeat(labels.len())
    );
    for (name, vals) in rows {
        let _ = writeln!(out, "| {name} | {} |", vals.join(" | "));
    }
    out
}

/// Per-queue table of one run, in Markdown.
pub fn queue_table(s: &Summary) -> String {
    let mut out = String::from("| queue | weight | deserved share | mean share | jobs | finished | never started | queueing mean (s) | queueing p99 (s) | JCT mean (s) | JCT p99 (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for q in &s.queues {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} % | {:.1} % | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            q.name,
            q.weight,
            q.deserved_share * 100.0,
            q.mean_share * 100.0,
            q.jobs,
            q.finished,
            q.never_started,
            q.queueing_delay_s.mean,
            q.queueing_delay_s.p99,
            q.jct_s.mean,
            q.jct_s.p99
        );
    }
    out
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
    let json = serde_json::to_string_pretty(&summaries)? + "\n";
    std::fs::write(dir.join("summary.json"), json)?;
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

//! Each queue's usage over time, written only when the run had a usage half-life:
//! `queue_usage.csv`, the `queue_usage` chart and report.md's section linking both.

use std::fmt::Write as _;
use std::path::Path;

use super::charts::{chart, Series};
use super::csvs::{csv_writer, fmt_s};
use crate::replay::sim::{Outcome, UsagePoint};

/// At most this many instants are written and drawn (the share chart resamples to 1,000).
const MAX_POINTS: usize = 1000;

/// The recorded points at evenly spaced instants (each the last point at or before it), all
/// of them when there are few: the same step-series resampling as the share chart's.
fn thinned(points: &[UsagePoint], n: usize) -> Vec<&UsagePoint> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return vec![];
    };
    if points.len() <= n {
        return points.iter().collect();
    }
    let (t0, t1) = (first.t_ms, last.t_ms);
    let mut out: Vec<&UsagePoint> = Vec::with_capacity(n + 1);
    let mut i = 0;
    for k in 0..=n {
        let t = t0 + ((t1 - t0) as i128 * k as i128 / n as i128) as i64;
        while i + 1 < points.len() && points[i + 1].t_ms <= t {
            i += 1;
        }
        if out.last().is_none_or(|p| !std::ptr::eq(*p, &points[i])) {
            out.push(&points[i]);
        }
    }
    out
}

/// `queue_usage.csv`, the chart and report.md's section; nothing when usage was off.
pub fn write_queue_usage(dir: &Path, o: &Outcome, md: &mut String) -> anyhow::Result<()> {
    if o.usage.is_empty() {
        return Ok(());
    }
    let points = thinned(&o.usage, MAX_POINTS);
    let total = o.total_gpus.max(1) as f64;
    let path = dir.join("queue_usage.csv");
    let mut w = csv_writer(&path)?;
    w.write_record([
        "t_s",
        "queue",
        "usage",
        "usage_fraction",
        "adjusted_share",
        "allocated_gpus",
    ])?;
    for p in &points {
        for (q, def) in o.queues.iter().enumerate() {
            w.write_record([
                fmt_s(p.t_ms),
                def.name.clone(),
                format!("{:.6}", p.usage_gpus[q]),
                format!("{:.6}", p.usage_gpus[q] / total),
                p.adjusted_share[q].map_or_else(String::new, |s| format!("{s:.6}")),
                p.allocated_gpus[q].to_string(),
            ])?;
        }
    }
    w.flush()?;
    let hours = |p: &UsagePoint| p.t_ms as f64 / 3600e3;
    let mut series: Vec<Series> = Vec::new();
    for (q, def) in o.queues.iter().enumerate() {
        let used = points.iter().map(|p| (hours(p), p.usage_gpus[q] / total));
        series.push((format!("{} usage", def.name), used.collect()));
        let shares = (points.iter()).filter_map(|p| p.adjusted_share[q].map(|s| (hours(p), s)));
        let shares: Vec<(f64, f64)> = shares.collect();
        if !shares.is_empty() {
            series.push((format!("{} adjusted share", def.name), shares));
        }
    }
    chart(
        dir,
        "queue_usage",
        "Usage and usage-adjusted share per queue",
        "hours",
        "usage / cluster GPUs; adjusted share",
        &series,
        false,
    )?;
    let _ = writeln!(md, "## Queue usage\n\nWith a usage half-life (`fairness.usage.halfLife`), at each scheduling cycle: each queue's usage (the decayed average of the GPUs it held, as the cycle's plan reports it, over the cluster's GPUs) and its adjusted share (its usage-adjusted weight over its siblings', which divides capacity beyond guarantees).\n\n![queue usage](queue_usage.svg) ([PNG](queue_usage.png))\n\n- [queue_usage.csv](queue_usage.csv): per cycle and queue: usage (GPUs), usage as a fraction of the cluster, adjusted share, GPUs held after the cycle\n");
    Ok(())
}

//! The tables of the reports: the side-by-side summary (plain text and Markdown) and the
//! per-queue table.

use std::fmt::Write as _;

use crate::replay::metrics::Summary;

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

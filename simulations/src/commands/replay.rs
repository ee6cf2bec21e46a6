//! `basalt-sim replay`, `compare` and `forecast`: a workload trace through the scheduler in
//! simulated time, under one config, several side by side, or checked against the forecast.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Output;
use crate::plan;
use crate::replay::{self, report};

/// Set by Ctrl-C: runs stop, print what they measured and mark their report partial.
pub static STOP: AtomicBool = AtomicBool::new(false);

#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    trace: replay::TraceArgs,
    /// Scheduler config (YAML, as for `plan --config`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Report folder (replaced).
    #[arg(long, default_value = "basalt-report")]
    out: PathBuf,
    /// What to print: a text table or summary.json.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(clap::Args)]
pub struct ForecastArgs {
    #[command(flatten)]
    trace: replay::TraceArgs,
    /// Scheduler config (YAML, as for `plan --config`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The forecast instants, in simulated seconds (repeatable).
    #[arg(long = "at", value_name = "SECONDS", required = true)]
    at: Vec<f64>,
    #[arg(long, value_enum, default_value_t = replay::forecast::Runtimes::Exact)]
    runtimes: replay::forecast::Runtimes,
}

#[derive(clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    trace: replay::TraceArgs,
    /// Scheduler configs (repeat; each is one column). `default` names the built-in defaults.
    #[arg(long = "config", value_name = "FILE", required = true)]
    configs: Vec<PathBuf>,
    #[arg(long, default_value = "basalt-compare")]
    out: PathBuf,
}

fn progress(total: u64, label: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stdout().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let pb = indicatif::ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(label.to_string());
    pb
}

fn run_one(
    loaded: &replay::Loaded,
    config: &basalt_plugins::Config,
    label: &str,
) -> anyhow::Result<(replay::sim::Outcome, replay::metrics::Summary)> {
    let pb = progress(2 * loaded.workload.jobs.len() as u64, label);
    let result = replay::execute(loaded, config, label, &STOP, |n| {
        if n % 1024 == 0 {
            pb.set_position(n);
        }
    });
    pb.finish_and_clear();
    result
}

fn config_label(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Each `--at` instant's check, one paragraph each.
pub fn forecast(args: ForecastArgs) -> anyhow::Result<String> {
    let ForecastArgs {
        trace,
        config,
        at,
        runtimes,
    } = args;
    let config = plan::load_config(config.as_deref())?;
    let loaded = trace.load()?;
    let mut out = String::new();
    for s in at {
        let at_ms = (s * 1000.0).round() as i64;
        let c = replay::forecast::check(&loaded, &config, at_ms, runtimes)?;
        out.push_str(&c.text());
        out.push('\n');
    }
    Ok(out)
}

/// One replay: writes the report folder, returns the table (or summary.json).
pub fn replay(args: ReplayArgs) -> anyhow::Result<String> {
    let ReplayArgs {
        trace,
        config,
        out,
        output,
    } = args;
    let label = config
        .as_deref()
        .map_or("default".to_string(), config_label);
    let config = plan::load_config(config.as_deref())?;
    let loaded = trace.load()?;
    let (outcome, summary) = run_one(&loaded, &config, &label)?;
    let names: Vec<String> = loaded
        .workload
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect();
    let run = report::RunReport {
        label: label.clone(),
        outcome: &outcome,
        summary: &summary,
        job_names: &names,
    };
    report::write_atomically(&out, |dir| report::write_replay(dir, &run, &loaded.inputs))?;
    eprintln!("basalt-sim: {}", replay::timing_text(&outcome));
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(&summary)? + "\n",
        Output::Text => {
            let rows = report::table_rows(&[&summary]);
            let mut text = String::new();
            if !summary.complete {
                text.push_str("PARTIAL: interrupted before the trace ended; figures cover the simulated time reached\n");
            }
            text.push_str(&report::text_table(&[label], &rows));
            text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
            text
        }
    })
}

/// The same trace under several configs: writes the combined report, returns the table.
pub fn compare(args: CompareArgs) -> anyhow::Result<String> {
    let CompareArgs {
        trace,
        configs,
        out,
    } = args;
    let mut parsed = Vec::new();
    for path in &configs {
        let config = if path.as_os_str() == "default" {
            basalt_plugins::Config::default()
        } else {
            plan::load_config(Some(path))?
        };
        parsed.push((config_label(path), config));
    }
    let mut labels: Vec<String> = parsed.iter().map(|(l, _)| l.clone()).collect();
    for i in 0..labels.len() {
        if labels[..i].contains(&labels[i]) || labels[i + 1..].contains(&labels[i]) {
            labels[i] = format!("{}#{}", labels[i], i + 1);
        }
    }
    let loaded = trace.load()?;
    let names: Vec<String> = loaded
        .workload
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect();
    let mut results = Vec::new();
    for ((_, config), label) in parsed.iter().zip(&labels) {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        let (o, s) = run_one(&loaded, config, label)?;
        eprintln!("basalt-sim: {label}: {}", replay::timing_text(&o));
        results.push((label.clone(), o, s));
    }
    let runs: Vec<report::RunReport> = results
        .iter()
        .map(|(label, o, s)| report::RunReport {
            label: label.clone(),
            outcome: o,
            summary: s,
            job_names: &names,
        })
        .collect();
    report::write_atomically(&out, |dir| {
        report::write_compare(dir, &runs, &loaded.inputs)
    })?;
    let summaries: Vec<&replay::metrics::Summary> = results.iter().map(|r| &r.2).collect();
    let shown: Vec<String> = results.iter().map(|r| r.0.clone()).collect();
    let mut text = String::new();
    if results.len() < labels.len() || summaries.iter().any(|s| !s.complete) {
        text.push_str("PARTIAL: interrupted; runs not shown did not run, runs marked incomplete stopped early\n");
    }
    text.push_str(&report::text_table(&shown, &report::table_rows(&summaries)));
    text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
    Ok(text)
}

//! `basalt-sim forecast`: the forecast checked against the replay. The replay runs to an
//! instant; the forecast (`basalt_engine::forecast`, the daemon's) runs from the replay's
//! cluster there with arrivals stopped; the replay then goes on without arrivals, and each
//! gang's forecast start is compared with its actual start. With exact run times the two must
//! agree for every gang (the same engine, the same cycles); with learned run times (the
//! median of the queue's last finished jobs, as the daemon learns them) the error is reported.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use basalt_engine::forecast::{forecast, History, Limits, Method};
use serde::Serialize;

use super::sim::{self, Simulator};
use super::Loaded;

/// How the forecast knows run times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtimes {
    /// Every job's run time, as the trace states it.
    Exact,
    /// Learned: the median of the last finished jobs of the same queue before the instant.
    Learned,
}

/// One gang waiting at the instant.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Gang {
    pub job: String,
    pub forecast_ms: Option<i64>,
    pub method: Method,
    pub actual_ms: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub at_ms: i64,
    pub runtimes: Runtimes,
    pub gangs: Vec<Gang>,
    pub cycles: u32,
    /// Wall time of the forecast alone (one thread: its CPU time).
    pub forecast_ms: f64,
}

impl Check {
    /// Gangs whose forecast start is their actual start (both absent counts as equal).
    pub fn equal(&self) -> usize {
        (self.gangs.iter())
            .filter(|g| g.forecast_ms == g.actual_ms)
            .count()
    }

    /// Absolute errors in seconds of the gangs with both a forecast and an actual start, sorted.
    pub fn errors_s(&self) -> Vec<f64> {
        let mut e: Vec<f64> = (self.gangs.iter())
            .filter_map(|g| Some((g.forecast_ms? - g.actual_ms?).abs() as f64 / 1000.0))
            .collect();
        e.sort_by(f64::total_cmp);
        e
    }

    pub fn text(&self) -> String {
        let e = self.errors_s();
        // Nearest rank.
        let pct = |p: f64| match e.len() {
            0 => f64::NAN,
            n => e[((p * n as f64).ceil() as usize).clamp(1, n) - 1],
        };
        let count = |m: Method| self.gangs.iter().filter(|g| g.method == m).count();
        format!(
            "forecast at {} s ({:?} run times): {} gangs waiting; {} forecast as the replay ran ({} exact, {} estimate, {} unknown); error over the {} with both starts: median {:.0} s, p90 {:.0} s, max {:.0} s; {} cycles in {:.1} ms",
            self.at_ms / 1000,
            self.runtimes,
            self.gangs.len(),
            self.equal(),
            count(Method::Exact),
            count(Method::Estimate),
            count(Method::Unknown),
            e.len(),
            pct(0.5),
            pct(0.9),
            e.last().copied().unwrap_or(f64::NAN),
            self.cycles,
            self.forecast_ms,
        ) + &(self.gangs.iter())
            .filter(|g| g.forecast_ms != g.actual_ms && self.runtimes == Runtimes::Exact)
            .take(5)
            .map(|g| format!("\n  {}: forecast {:?} ms, replay {:?} ms", g.job, g.forecast_ms, g.actual_ms))
            .collect::<String>()
    }
}

/// The forecast at the replay's first cycle at or after `at_ms` against the replay of `loaded` (see the module docs).
pub fn check(
    loaded: &Loaded,
    config: &basalt_plugins::Config,
    at_ms: i64,
    runtimes: Runtimes,
) -> anyhow::Result<Check> {
    anyhow::ensure!(
        !loaded.options.dra,
        "forecast: --dra is not supported (the forecast carries no claim allocations)"
    );
    let (workload, o) = (&loaded.workload, &loaded.options);
    let cluster = &loaded.cluster;
    let mut sim = Simulator::new(
        config,
        o.clone(),
        cluster,
        workload,
        &loaded.manifest_queues,
    )?;
    let Some(at_ms) = sim.run_until(at_ms)? else {
        anyhow::bail!("forecast at {at_ms} ms: the replay has no cycle left by then");
    };
    let mut history = History::default();
    for (j, ms) in sim.finished() {
        history.record(&workload.jobs[j].queue, ms);
    }
    let runtime = |j: usize| match runtimes {
        Runtimes::Exact => Some((workload.jobs[j].duration_ms, Method::Exact)),
        Runtimes::Learned => {
            (history.estimate(&workload.jobs[j].queue)).map(|ms| (ms, Method::Estimate))
        }
    };
    let (spec, ends) = sim.forecast_input(runtime);
    let waiting = sim.never_started();
    let limits = Limits {
        period_ms: o.period_ms,
        max_cycles: u32::MAX,
        horizon_ms: i64::MAX,
        max_work: u64::MAX,
    };
    let framework = |names: &_| {
        let mut fw = basalt_plugins::framework(config, names);
        fw.report_queues = false;
        fw.explain_failures = false;
        fw.report_settled_groups = false;
        fw
    };
    let started = std::time::Instant::now();
    let f = forecast(spec, framework, &ends, limits)?;
    let forecast_ms = started.elapsed().as_secs_f64() * 1e3;
    sim.stop_arrivals();
    let outcome = sim.run(&AtomicBool::new(false), |_| {})?;
    let by_name: BTreeMap<&str, _> = f.jobs.iter().map(|j| (j.job.as_str(), j)).collect();
    let gangs = (waiting.into_iter())
        .map(|j| {
            let name = sim::job_name(j);
            let forecast = by_name.get(name.as_str());
            Gang {
                forecast_ms: forecast.and_then(|f| f.start_ms),
                method: forecast.map_or(Method::Unknown, |f| f.method),
                actual_ms: outcome.jobs[j].first_start_ms,
                job: name,
            }
        })
        .collect();
    Ok(Check {
        at_ms,
        runtimes,
        gangs,
        cycles: f.cycles,
        forecast_ms,
    })
}

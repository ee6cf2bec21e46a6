//! The forecast against the replay: with exact run times and arrivals stopped at the forecast
//! instant, every gang waiting then starts when the forecast said (the same engine, the same
//! cycles); with learned run times the forecast still covers every gang.

mod common;

use basalt_engine::forecast::Method;
use basalt_sim::replay::forecast::{check, Runtimes};
use common::load;

fn exact_everywhere(loaded: &basalt_sim::replay::Loaded, instants: &[i64]) {
    let config = basalt_plugins::Config::default();
    for &at in instants {
        let c = check(loaded, &config, at, Runtimes::Exact).expect("runs");
        assert!(
            !c.gangs.is_empty(),
            "no gang waits at {at} ms: pick another instant"
        );
        let wrong: Vec<_> = (c.gangs.iter())
            .filter(|g| g.forecast_ms != g.actual_ms)
            .collect();
        assert!(
            wrong.is_empty(),
            "at {at} ms, of {}: {wrong:#?}",
            c.gangs.len()
        );
        assert!(
            (c.gangs.iter()).all(|g| g.method == Method::Exact),
            "every end is known: {}",
            c.text()
        );
    }
}

#[test]
fn synthetic_trace_forecast_is_the_replay() {
    let loaded = load(&[
        "--synthetic-jobs",
        "400",
        "--nodes",
        "8",
        "--synthetic-load",
        "1.5",
    ]);
    // Instants with gangs waiting (the first cycle at or after each). From 130,000 s on, gangs
    // running at the instant are evicted and started again: each runs its whole run time again.
    exact_everywhere(
        &loaded,
        &[
            40_000_000,
            90_000_000,
            120_000_000,
            130_000_000,
            150_000_000,
            170_000_000,
            200_000_000,
            230_000_000,
        ],
    );
}

#[test]
fn philly_slice_forecast_is_the_replay() {
    let loaded = load(&[]);
    // 18 h, 20 h and 22 h: gangs evicted and started again (see the synthetic trace's test).
    let hours = [4, 8, 18, 20, 22];
    exact_everywhere(&loaded, &hours.map(|h| h * 3_600_000));
}

#[test]
fn learned_run_times_give_estimates() {
    let loaded = load(&[
        "--synthetic-jobs",
        "400",
        "--nodes",
        "8",
        "--synthetic-load",
        "1.5",
    ]);
    let config = basalt_plugins::Config::default();
    let c = check(&loaded, &config, 100_000_000, Runtimes::Learned).expect("runs");
    assert!(
        c.gangs.iter().all(|g| g.method != Method::Exact),
        "{}",
        c.text()
    );
    assert!(
        c.gangs.iter().any(|g| g.forecast_ms.is_some()),
        "{}",
        c.text()
    );
}

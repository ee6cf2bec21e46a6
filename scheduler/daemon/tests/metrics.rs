//! The scheduler's metrics on a running daemon: every family of the README's table, with the
//! values a small workload gives them (`common/workload.rs`), and the table itself against what
//! the daemon exports, both ways.

use std::time::Duration;

use basalt_apiserver::Config;

mod common;
use common::*;

/// The value of the series written exactly `series` (name and labels) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes until every `(series, check)` holds; fails with the last scrape.
async fn until(addr: &str, checks: &[(&str, &dyn Fn(f64) -> bool)]) -> String {
    let mut last = String::new();
    let start = std::time::Instant::now();
    loop {
        last = http_get(addr, "/metrics").unwrap_or(last);
        let failing: Vec<&str> = (checks.iter())
            .filter(|(s, ok)| !value(&last, s).is_some_and(ok))
            .map(|(s, _)| *s)
            .collect();
        if failing.is_empty() {
            return last;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "never held: {failing:#?}\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_of_the_table_reads_what_the_cluster_holds() {
    let c = cluster(Config::default()).await;
    workload::create(&c);
    let addr = free_addr();
    // Usage on, so that the usage gauge has series too (none while it is off).
    let config = c.dir.path().join("config.yaml");
    std::fs::write(&config, "fairness:\n  usage:\n    halfLife: 168h\n").unwrap();
    let _s = c.start_with(&["--listen", &addr, "--config", config.to_str().unwrap()]);
    let positive = &|v: f64| v > 0.0;
    let eq = |want: f64| move |v: f64| v == want;
    let (zero, one) = (eq(0.0), eq(1.0));
    let bound = eq(workload::BOUND_GPUS as f64);
    let free = eq((24 - workload::BOUND_GPUS) as f64);
    let waiting = eq(workload::WAITING_GPUS as f64);
    let text = until(
        &addr,
        &[
            ("basalt_scheduler_binds_total", &eq(2.0)),
            ("basalt_scheduler_leader", &one),
            (r#"basalt_scheduler_build_info{version="0.1.0"}"#, &one),
            ("basalt_scheduler_max_cycle_gap_seconds", &eq(60.0)),
            ("basalt_scheduler_last_cycle_timestamp_seconds", positive),
            (r#"basalt_scheduler_action_duration_seconds_count{action="allocate"}"#, positive),
            (r#"basalt_scheduler_action_duration_seconds_count{action="preempt"}"#, positive),
            // The bound gang once, timed from its PodGroup's creation.
            ("basalt_scheduler_podgroup_scheduling_latency_seconds_count", &one),
            // The workload's too-big gang can never fit: the explanation says so.
            (r#"basalt_scheduler_pending_podgroups{reason="NeverFits"}"#, &one),
            ("basalt_scheduler_partial_gangs", &zero),
            (r#"basalt_scheduler_queue_pending_demand{queue="research",resource="nvidia.com/gpu"}"#, &waiting),
            (r#"basalt_scheduler_queue_pending_demand{queue="research",resource="cpu"}"#, &eq(4.0)),
            (r#"basalt_scheduler_queue_oldest_pending_podgroup_age_seconds{queue="research"}"#, &|v| v >= 0.0),
            (r#"basalt_scheduler_queue_share{queue="research"}"#, positive),
            (r#"basalt_scheduler_queue_usage{queue="research",resource="nvidia.com/gpu"}"#, positive),
            (r#"basalt_scheduler_gpus{state="allocated"}"#, &bound),
            (r#"basalt_scheduler_gpus{state="free"}"#, &free),
            (r#"basalt_scheduler_domain_gpus{tier="rack",domain="r1",state="free"}"#, &|v| v >= 0.0),
            (r#"basalt_scheduler_domain_gpus{tier="rack",domain="r2",state="free"}"#, &|v| v >= 0.0),
            (r#"basalt_scheduler_evictions_total{action="reclaim"}"#, &zero),
            (r#"basalt_scheduler_eviction_errors_total{action="gang_rollback",reason="disruption_budget"}"#, &zero),
        ],
    )
    .await;
    // Per rack (16 GPUs in r1, 8 in r2), wherever the gang went.
    let rack = |r: &str, state: &str| {
        let series =
            format!(r#"basalt_scheduler_domain_gpus{{tier="rack",domain="{r}",state="{state}"}}"#);
        value(&text, &series).unwrap()
    };
    assert_eq!(rack("r1", "free") + rack("r1", "allocated"), 16.0, "{text}");
    assert_eq!(rack("r2", "free") + rack("r2", "allocated"), 8.0, "{text}");
    let allocated = rack("r1", "allocated") + rack("r2", "allocated");
    assert_eq!(allocated, workload::BOUND_GPUS as f64, "{text}");
    // Every family of the README's table is exported with the type the table gives it, and
    // every family exported is in the table.
    let table = readme_table();
    assert!(table.len() >= 25, "{table:#?}");
    for (name, kind) in &table {
        let line = format!("# TYPE {} {kind}", name.trim_end_matches("_total"));
        assert!(text.contains(&line), "{line}\n{text}");
    }
    let exported: Vec<&str> = (text.lines())
        .filter_map(|l| {
            l.strip_prefix("# TYPE basalt_scheduler_")?
                .split(' ')
                .next()
        })
        .collect();
    for family in exported {
        let known = (table.iter()).any(|(name, _)| {
            name.trim_end_matches("_total") == format!("basalt_scheduler_{family}")
        });
        assert!(
            known,
            "basalt_scheduler_{family} is not in the README's table"
        );
    }
    // A gang is timed once, in the cycle that places its minimum, not again in later ones.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = http_get(&addr, "/metrics").unwrap();
    let count = "basalt_scheduler_podgroup_scheduling_latency_seconds_count";
    assert_eq!(value(&later, count), Some(1.0), "{later}");
}

/// The `(family, type)` pairs of the table under `## Metrics` in the crate's README.
fn readme_table() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = (readme.split("\n## ").find(|s| s.starts_with("Metrics\n")))
        .expect("the README has a Metrics section");
    let mut families = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for name in cells[1].split(", ") {
            families.push((name.trim_matches('`').to_string(), cells[2].to_string()));
        }
    }
    families
}

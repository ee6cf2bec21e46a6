//! `deploy/components/monitoring` against the scheduler: the component renders onto the install
//! (alone and with `nodeagent/mig`), its alerts pass `promtool check rules` and their unit tests
//! (each alert firing and quiet), every metric its dashboard and alerts read is one the daemon
//! exports, and a real Prometheus scraping the daemon (in-memory API server, a small workload)
//! gets data for every panel and every metric each alert reads, and evaluates every alert.
//! The node agent's half is in `nodeagent/tests/monitoring.rs`.

use std::collections::BTreeSet;
use std::process::Command;

use basalt_apiserver::Config;
use serde_json::Value;

mod common;
mod render;
use common::*;
use render::{all, find, kustomize, with_components};
mod prom;
use prom::{alerts, metric_names, panels, reads_node_agent, tool, Prometheus, Target};

fn strings(v: &Value) -> Vec<String> {
    (v.as_array().into_iter().flatten())
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn args_of(docs: &[Value], kind: &str, name: &str) -> Vec<String> {
    strings(&find(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]["args"])
}

#[test]
fn the_component_exposes_metrics_to_the_monitoring_namespace_only() {
    let Some(base) = kustomize() else { return };
    for components in [
        &["components/monitoring"][..],
        &["components/monitoring", "nodeagent/mig"],
        &["nodeagent/mig", "components/monitoring"],
    ] {
        let docs = with_components(components).unwrap();
        let scheduler = args_of(&docs, "Deployment", "basalt-scheduler");
        assert!(scheduler.contains(&"--metrics-bind-address=0.0.0.0:8081".into()));
        let agent = args_of(&docs, "DaemonSet", "basalt-nodeagent");
        assert!(agent.contains(&"--metrics-bind-address=0.0.0.0:9401".into()));
        // Whichever order, the MIG variant still takes --no-mig away, and only it does.
        let mig = components.contains(&"nodeagent/mig");
        assert_eq!(!agent.contains(&"--no-mig".into()), mig, "{agent:?}");
        for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"] {
            let objects: Vec<_> = all(&docs, kind).collect();
            assert_eq!(objects.len(), 1, "{kind}");
            assert_eq!(objects[0]["apiVersion"], "monitoring.coreos.com/v1");
        }
        // The ServiceMonitor's port is the Service's, and the Service selects the scheduler.
        let svc = find(&docs, "Service", "basalt-scheduler-metrics");
        let sm = find(&docs, "ServiceMonitor", "basalt-scheduler");
        assert_eq!(
            sm["spec"]["endpoints"][0]["port"],
            svc["spec"]["ports"][0]["name"]
        );
        assert_eq!(
            sm["spec"]["selector"]["matchLabels"],
            svc["metadata"]["labels"]
        );
        let pm = find(&docs, "PodMonitor", "basalt-nodeagent");
        let ports = &find(&docs, "DaemonSet", "basalt-nodeagent")["spec"]["template"]["spec"]
            ["containers"][0]["ports"];
        let named = |name: &str| {
            (ports.as_array().unwrap().iter())
                .find(|p| p["name"] == name)
                .cloned()
        };
        let metrics_port = named(
            pm["spec"]["podMetricsEndpoints"][0]["port"]
                .as_str()
                .unwrap(),
        );
        assert_eq!(metrics_port.unwrap()["containerPort"], 9401);
        // Each metrics port is open to the monitoring namespace alone; the probes to all.
        for (name, metrics, probes) in [
            ("basalt-scheduler-metrics", 8081, 8080),
            ("basalt-nodeagent-metrics", 9401, 9400),
        ] {
            let ingress = &find(&docs, "NetworkPolicy", name)["spec"]["ingress"];
            assert_eq!(ingress[0]["ports"][0]["port"], metrics, "{name}");
            let from = &ingress[0]["from"][0]["namespaceSelector"]["matchLabels"];
            assert_eq!(from["kubernetes.io/metadata.name"], "monitoring", "{name}");
            assert_eq!(ingress[1]["ports"][0]["port"], probes, "{name}");
            assert!(ingress[1].get("from").is_none(), "{name}");
        }
        let dashboard = find(&docs, "ConfigMap", "basalt-dashboard");
        assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
        let json = dashboard["data"]["basalt.json"].as_str().unwrap();
        serde_json::from_str::<Value>(json).expect("the dashboard is JSON");
    }
    // Without the component, nothing changes: /metrics stays on loopback.
    let scheduler = args_of(&base, "Deployment", "basalt-scheduler");
    assert!(scheduler.contains(&"--metrics-bind-address=127.0.0.1:8081".into()));
    assert_eq!(all(&base, "NetworkPolicy").count(), 0);
}

#[test]
fn the_alerts_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (rules, tests) = prom::extract_rules(dir.path());
    for (what, file) in [("check", &rules), ("test", &tests)] {
        let out = Command::new(&promtool)
            .args([what, "rules"])
            .arg(file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool {what} rules:\n{text}");
        assert!(text.contains("SUCCESS"), "{text}");
    }
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() {
    let text = std::fs::read_to_string(prom::component().join("rules.test.yaml")).unwrap();
    let tests: Value = serde_yaml::from_str(&text).unwrap();
    let cases: Vec<&Value> = (tests["tests"].as_array().unwrap().iter())
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap().iter())
        .collect();
    for (alert, _) in alerts() {
        let of = |firing: bool| {
            (cases.iter()).any(|c| {
                let alerts = c["exp_alerts"].as_array().map_or(0, Vec::len);
                c["alertname"] == alert.as_str() && (alerts > 0) == firing
            })
        };
        assert!(of(true), "{alert}: no unit test where it fires");
        assert!(of(false), "{alert}: no unit test where it stays quiet");
    }
}

/// The series names a scrape can hold: each family's name, and its samples' suffixes.
fn exported(scrape: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        out.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    out
}

async fn monitored_scheduler() -> (Cluster, Scheduler, String) {
    let c = cluster(Config::default()).await;
    workload::create(&c);
    let addr = free_addr();
    let s = c.start_with(&["--listen", &addr]);
    // Bound, and the plan's gauges written: the binds are counted as they are sent, the
    // gauges once the cycle's plan is applied.
    eventually("the gang bound and the cycle's gauges written", || {
        http_get(&addr, "/metrics").is_some_and(|m| {
            m.contains("basalt_scheduler_binds_total 2")
                && m.contains("basalt_scheduler_queue_allocated{")
        })
    })
    .await;
    (c, s, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_alerts_read_only_metrics_the_daemon_exports() {
    let (_c, _s, addr) = monitored_scheduler().await;
    let scrape = http_get(&addr, "/metrics").unwrap();
    let mut exported = exported(&scrape);
    exported.insert("up".into());
    let exprs = (panels().into_iter()).chain(alerts());
    let mut read = BTreeSet::new();
    for (what, expr) in exprs.filter(|(_, e)| !reads_node_agent(e)) {
        for name in metric_names(&expr) {
            assert!(
                exported.contains(&name),
                "{what}: {name} is not exported:\n{scrape}"
            );
            read.insert(name);
        }
    }
    // The check reads something: the families the alerts rest on at least.
    for name in [
        "up",
        "basalt_scheduler_leader",
        "basalt_scheduler_queue_deserved",
    ] {
        assert!(read.contains(name), "{read:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_gets_data_for_every_panel_and_alert() {
    let (_c, _s, addr) = monitored_scheduler().await;
    let Some(p) = Prometheus::start(&[Target {
        job: "basalt-scheduler",
        addr: &addr,
        labels: &[],
    }]) else {
        return;
    };
    // Two scrapes at least, so that rates have data.
    p.wait("two scrapes of the scheduler", || {
        !p.query(r#"rate(basalt_scheduler_binds_total{job="basalt-scheduler"}[1m])"#)
            .is_empty()
    });
    let mut checked = 0;
    for (title, expr) in panels().into_iter().filter(|(_, e)| !reads_node_agent(e)) {
        p.wait(&format!("panel {title:?}: {expr}"), || {
            !p.query(&expr).is_empty()
        });
        checked += 1;
    }
    assert!(checked >= 15, "{checked} panels");
    for (alert, expr) in alerts().into_iter().filter(|(_, e)| !reads_node_agent(e)) {
        for name in metric_names(&expr) {
            let selector = format!(r#"{name}{{job="basalt-scheduler"}}"#);
            assert!(
                !p.query(&selector).is_empty(),
                "{alert}: no data for {selector}"
            );
        }
    }
    p.assert_rules_evaluate();
    // The workload is healthy: nothing fires, and the leader is not reported down.
    let firing = p.query("ALERTS");
    let ours: Vec<_> = (firing.iter())
        .filter(|a| !reads_node_agent(a["metric"]["alertname"].as_str().unwrap_or("")))
        .filter(|a| a["metric"]["alertname"] != "BasaltNodeAgentDown")
        .filter(|a| a["metric"]["alertname"] != "BasaltNodeAgentMigLayoutFailed")
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
}

//! Scale figures for the daemon: the in-memory API server with NODES nodes and PODS pods, the
//! real `basalt-scheduler` binary against it. Reports the time until every pending pod is bound
//! (binds per second through the whole daemon), the daemon's resident memory with everything
//! in its stores, and its mean cycle time.
//!
//! ```sh
//! cargo build --release -p basalt-scheduler
//! cargo run --release -p basalt-scheduler --example scale -- target/release/basalt-scheduler 5000 50000
//! ```
//!
//! 90% of the pods are already bound (one CPU each, spread evenly; not Basalt's: they only use
//! capacity); the rest are Basalt pods in gangs of 4, asking 2 GPUs each (nodes have 8).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config};
use serde_json::json;

fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A plain HTTP GET on loopback (blocking; answers are small and local).
fn fetch(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(bin), Some(nodes), Some(pods)) = (args.get(1), args.get(2), args.get(3)) else {
        anyhow::bail!("usage: scale BASALT_SCHEDULER_BINARY NODES PODS");
    };
    let nodes: usize = nodes.parse()?;
    let pods: usize = pods.parse()?;
    let server = ApiServer::start(Config::default()).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;

    let started = Instant::now();
    for n in 0..nodes {
        server
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{n}")},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let bound = pods * 9 / 10;
    for p in 0..bound {
        server
            .create(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("svc-{p}"), "namespace": "default"},
                "spec": {"nodeName": format!("n{}", p % nodes),
                         "containers": [{"name": "m", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    server
        .create(
            json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "research"}, "spec": {"weight": 1}}),
        )
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let pending = pods - bound;
    for g in 0..pending.div_ceil(4) {
        let size = 4.min(pending - g * 4);
        server
            .create(
                json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": format!("g{g}"), "namespace": "default"},
                "spec": {"minMember": size, "queue": "research"}}),
            )
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for i in 0..size {
            server
                .create(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("g{g}-{i}"), "namespace": "default",
                                 "labels": {"scheduling.basalt.dev/pod-group": format!("g{g}")}},
                    "spec": {"schedulerName": "basalt", "containers": [{"name": "m", "image": "i",
                        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]}}))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    }
    println!(
        "created {nodes} nodes, {pods} pods ({pending} pending Basalt pods) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(bin)
        .args(["--listen", &addr, "--period", "1s"])
        .env("KUBECONFIG", &kubeconfig)
        .env(
            "RUST_LOG",
            std::env::var("SCALE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let t0 = Instant::now();
    let mut ready_at = None;
    let result = loop {
        if t0.elapsed() > Duration::from_secs(600) {
            break Err(anyhow::anyhow!("not all pods bound within 600 s"));
        }
        if let Some(status) = child.try_wait()? {
            break Err(anyhow::anyhow!("the scheduler exited: {status}"));
        }
        if ready_at.is_none()
            && fetch(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        {
            ready_at = Some(t0.elapsed());
        }
        let unbound = server
            .list("v1", "Pod")
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .count();
        if unbound == 0 {
            break Ok(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // Let the cycle that made the binds finish (its Events and status writes) before reading.
    let mut metrics = String::new();
    for _ in 0..240 {
        metrics = fetch(&addr, "/metrics").unwrap_or_default();
        if metric(&metrics, "basalt_scheduler_cycle_duration_seconds_count").unwrap_or(0.0) >= 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rss = rss_kib(pid, "VmRSS:");
    let hwm = rss_kib(pid, "VmHWM:");
    let _ = child.kill();
    let _ = child.wait();
    let all_bound = result?;
    let ready = ready_at.unwrap_or(all_bound);
    let sum = metric(&metrics, "basalt_scheduler_cycle_duration_seconds_sum").unwrap_or(0.0);
    let count = metric(&metrics, "basalt_scheduler_cycle_duration_seconds_count").unwrap_or(0.0);
    let binds = metric(&metrics, "basalt_scheduler_binds_total").unwrap_or(0.0);
    println!("caches synced after {:.2} s", ready.as_secs_f64());
    println!(
        "all {pending} pending pods bound {:.2} s after start ({:.2} s after sync): {:.0} binds/s",
        all_bound.as_secs_f64(),
        (all_bound - ready).as_secs_f64(),
        pending as f64 / (all_bound - ready).as_secs_f64().max(1e-9)
    );
    println!(
        "scheduler memory: VmRSS {:.0} MiB, peak VmHWM {:.0} MiB",
        rss.unwrap_or(0) as f64 / 1024.0,
        hwm.unwrap_or(0) as f64 / 1024.0
    );
    println!(
        "cycles: {count:.0}, mean {:.0} ms (snapshot, engine, binds, Events, status); binds counted {binds:.0}",
        if count > 0.0 { sum / count * 1000.0 } else { 0.0 }
    );
    Ok(())
}

//! Scale figures for the daemon: the in-memory API server (in this process) with NODES nodes of
//! 8 GPUs and PODS pods, the real `basalt-scheduler` binary against it over loopback.
//!
//! ```sh
//! cargo build --release -p basalt-scheduler --bins --examples
//! target/release/examples/scale target/release/basalt-scheduler 10000 100000 \
//!     --pending 50000 --gang 8 --queues 200 --arrivals 1000
//! ```
//!
//! The pods that are not pending are bound already (one CPU each, spread evenly; not Basalt's:
//! they only use capacity); the pending ones are Basalt pods in gangs of `--gang`, one GPU
//! each, their PodGroups spread over `--queues` queues. Reported:
//! - the time from start to the caches synced, then to every pending pod bound (binds/s);
//! - cycle times while binding and with nothing changed, and the cycle after one new gang;
//! - `--idle-secs S` (default 60) with nothing changed: the cycles run and the daemon's CPU;
//! - with `--arrivals N`, a stream of N pods a second for 10 s (gangs as above, created as a
//!   controller would: group, then members), and their creation-to-binding p50 and p99;
//! - the daemon's resident memory (sampled from `/proc` every 100 ms: the peak seen, and the
//!   kernel's own peak) and CPU time, and that of its forecast's thread.
//!
//! `scale floor NODES PODS ...` runs, in the daemon's place, a client that only binds the same
//! pending pods and writes their Events (`floor.rs`): what the protocol costs any scheduler.
//!
//! `SCALE_DAEMON_ARGS` adds daemon flags (e.g. `--forecast-interval 30s`); `SCALE_LOG` is the
//! daemon's `RUST_LOG`.
//!
//! Latencies are in milliseconds, measured here: from the return of the call that created a
//! pod to the event of a watch (over HTTP, as any client) that shows it bound. The daemon's own
//! `scheduling_latency` histogram (from `creationTimestamp`, one-second resolution) is printed
//! beside them.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, Handle};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::{json, Value};

mod floor;
mod procfs;

use procfs::{cpu_seconds, proc_field, thread_cpu_seconds, RssSampler};

/// The daemon's allocator, so that the floor's client allocates as the daemon does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The argument that makes this process the floor's client (`floor.rs`).
const FLOOR_CLIENT: &str = "__floor-client";

struct Args {
    bin: String,
    nodes: usize,
    pods: usize,
    pending: usize,
    gang: usize,
    queues: usize,
    arrivals: usize,
    idle_secs: usize,
}

fn args() -> anyhow::Result<Args> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: scale BASALT_SCHEDULER|floor NODES PODS [--pending N] [--gang N] [--queues N] [--arrivals N] [--idle-secs S]";
    let (Some(bin), Some(nodes), Some(pods)) = (raw.first(), raw.get(1), raw.get(2)) else {
        anyhow::bail!(usage);
    };
    let pods: usize = pods.parse()?;
    let mut a = Args {
        bin: bin.clone(),
        nodes: nodes.parse()?,
        pods,
        pending: pods / 10,
        gang: 4,
        queues: 1,
        arrivals: 0,
        idle_secs: 60,
    };
    let mut rest = raw[3..].iter();
    while let Some(flag) = rest.next() {
        let value: usize = rest
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag}: a value; {usage}"))?
            .parse()?;
        match flag.as_str() {
            "--pending" => a.pending = value.min(pods),
            "--gang" => a.gang = value.max(1),
            "--queues" => a.queues = value.max(1),
            "--arrivals" => a.arrivals = value,
            "--idle-secs" => a.idle_secs = value,
            _ => anyhow::bail!("{flag}: unknown; {usage}"),
        }
    }
    Ok(a)
}

fn metric(text: &str, name: &str) -> f64 {
    (text.lines())
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0)
}

/// The `q` quantile of a histogram as the upper bound of the bucket it falls in.
fn quantile(text: &str, name: &str, q: f64) -> Option<f64> {
    let prefix = format!("{name}_bucket{{le=\"");
    let buckets: Vec<(f64, f64)> = (text.lines())
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.split_whitespace().next()?.parse().ok()?))
        })
        .collect();
    let total = buckets.last()?.1;
    (total > 0.0).then(|| {
        (buckets.iter())
            .find(|(_, c)| *c >= q * total)
            .map_or(f64::INFINITY, |(le, _)| *le)
    })
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

fn create(server: &Handle, object: Value) -> anyhow::Result<()> {
    server
        .create(object)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("{e:?}"))
}

/// A gang `g` of `size` one-GPU pods in queue `q`: its PodGroup, then its members. With a
/// probe, the members carry its label and each one's creation is timed.
fn gang(
    server: &Handle,
    g: &str,
    size: usize,
    q: usize,
    probe: Option<&Probe>,
) -> anyhow::Result<Vec<String>> {
    create(
        server,
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": g, "namespace": "default"},
            "spec": {"minMember": size, "queue": format!("q{q}")}}),
    )?;
    let mut names = Vec::with_capacity(size);
    for i in 0..size {
        let name = format!("{g}-{i}");
        let mut labels = json!({"scheduling.basalt.dev/pod-group": g});
        if probe.is_some() {
            labels[PROBE_LABEL] = json!("1");
        }
        create(
            server,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": {"schedulerName": "basalt", "containers": [{"name": "m", "image": "i",
                    "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                  "limits": {"nvidia.com/gpu": "1"}}}]}}),
        )?;
        if let Some(p) = probe {
            p.created(&name);
        }
        names.push(name);
    }
    Ok(names)
}

const PROBE_LABEL: &str = "scale.basalt.dev/probe";

/// Creation-to-bind times of the harness's labelled pods, in this process's clock: from the
/// return of the create call to the watch event that shows the pod bound.
#[derive(Default)]
struct Probe {
    created: Mutex<HashMap<String, Instant>>,
    bound: Mutex<HashMap<String, Instant>>,
}

impl Probe {
    /// Opens the watch (before returning, so no bind is missed) and follows it.
    async fn start(server: &Handle) -> anyhow::Result<Arc<Probe>> {
        let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let params = WatchParams::default().labels(&format!("{PROBE_LABEL}=1"));
        let mut version = server.resource_version().to_string();
        let mut stream = pods.watch(&params, &version).await?.boxed();
        let probe = Arc::new(Probe::default());
        let seen = probe.clone();
        tokio::spawn(async move {
            loop {
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                            let at = Instant::now();
                            if let Some(v) = &pod.metadata.resource_version {
                                version.clone_from(v);
                            }
                            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                            if let (Some(_), Some(name)) = (bound, pod.metadata.name) {
                                seen.bound.lock().unwrap().entry(name).or_insert(at);
                            }
                        }
                        Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                        Ok(WatchEvent::Error(_)) | Err(_) => break,
                        Ok(WatchEvent::Deleted(_)) => {}
                    }
                }
                // The stream ended (the server's timeout): go on from the last version seen.
                match pods.watch(&params, &version).await {
                    Ok(s) => stream = s.boxed(),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        Ok(probe)
    }

    fn created(&self, name: &str) {
        self.created
            .lock()
            .unwrap()
            .insert(name.into(), Instant::now());
    }

    /// Waits until the watch has shown every pod of `names` bound, at most `limit`.
    async fn wait_bound(
        &self,
        names: &[String],
        limit: Duration,
        what: &str,
    ) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            let missing = {
                let bound = self.bound.lock().unwrap();
                names.iter().filter(|n| !bound.contains_key(*n)).count()
            };
            if missing == 0 {
                return Ok(());
            }
            if t.elapsed() > limit {
                anyhow::bail!("{what}: {missing} not bound within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Each pod's creation-to-bind time in ms, sorted.
    fn latencies(&self, names: &[String]) -> Vec<f64> {
        let (created, bound) = (self.created.lock().unwrap(), self.bound.lock().unwrap());
        let mut ms: Vec<f64> = (names.iter())
            .filter_map(|n| Some(bound.get(n)?.duration_since(*created.get(n)?)))
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    }

    /// A gang's creation to bound: from its last member's creation to its last bind.
    fn gang_ms(&self, names: &[String]) -> f64 {
        let (created, bound) = (self.created.lock().unwrap(), self.bound.lock().unwrap());
        let last =
            |m: &HashMap<String, Instant>| names.iter().filter_map(|n| m.get(n)).max().copied();
        match (last(&created), last(&bound)) {
            (Some(c), Some(b)) => b.saturating_duration_since(c).as_secs_f64() * 1000.0,
            _ => f64::NAN,
        }
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn rank(sorted: &[f64], q: f64) -> f64 {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn unbound(server: &Handle) -> usize {
    (server.list("v1", "Pod").iter())
        .filter(|p| p["spec"]["nodeName"].is_null())
        .count()
}

struct Daemon {
    child: Child,
    /// `--listen`: probes.
    addr: String,
    /// `--metrics-bind-address`: `/metrics`.
    metrics_addr: String,
}

impl Daemon {
    fn metrics(&self) -> String {
        fetch(&self.metrics_addr, "/metrics").unwrap_or_default()
    }

    fn cycles(&self) -> (f64, f64) {
        let m = self.metrics();
        (
            metric(&m, "basalt_scheduler_cycle_duration_seconds_count"),
            metric(&m, "basalt_scheduler_cycle_duration_seconds_sum"),
        )
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).is_some_and(|a| a == FLOOR_CLIENT) {
        return floor::client(raw.get(2).and_then(|n| n.parse().ok()).unwrap_or(1)).await;
    }
    let a = args()?;
    let server = ApiServer::start(Config::default()).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;

    let started = Instant::now();
    for n in 0..a.nodes {
        create(
            &server,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{n}")},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}),
        )?;
    }
    for p in 0..a.pods - a.pending {
        create(
            &server,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("svc-{p}"), "namespace": "default"},
                "spec": {"nodeName": format!("n{}", p % a.nodes),
                         "containers": [{"name": "m", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}),
        )?;
    }
    for q in 0..a.queues {
        create(
            &server,
            json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": format!("q{q}")}, "spec": {"weight": 1}}),
        )?;
    }
    let mut made = 0;
    let mut g = 0;
    while made < a.pending {
        let size = a.gang.min(a.pending - made);
        gang(&server, &format!("g{g}"), size, g % a.queues, None)?;
        made += size;
        g += 1;
    }
    println!(
        "created {} nodes, {} pods ({} pending Basalt pods in {g} gangs of {}, {} queues) in {:.1} s",
        a.nodes,
        a.pods,
        a.pending,
        a.gang,
        a.queues,
        started.elapsed().as_secs_f64()
    );

    let free_addr = || -> anyhow::Result<String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(format!("127.0.0.1:{port}"))
    };
    if a.bin == "floor" {
        let status = Command::new(std::env::current_exe()?)
            .args([FLOOR_CLIENT, &a.nodes.to_string()])
            .env("KUBECONFIG", &kubeconfig)
            .status()?;
        anyhow::ensure!(status.success(), "the floor client failed: {status}");
        return Ok(());
    }
    let (addr, metrics_addr) = (free_addr()?, free_addr()?);
    let child = Command::new(&a.bin)
        .args(["--listen", &addr, "--period", "1s"])
        .args(["--metrics-bind-address", &metrics_addr])
        // Extra daemon flags, e.g. `--forecast-interval 30s`.
        .args(
            std::env::var("SCALE_DAEMON_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("KUBECONFIG", &kubeconfig)
        .env(
            "RUST_LOG",
            std::env::var("SCALE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .spawn()?;
    let mut d = Daemon {
        child,
        addr,
        metrics_addr,
    };
    let pid = d.child.id();
    let result = run(&a, &server, &d, pid, g).await;
    let _ = d.child.kill();
    let _ = d.child.wait();
    result
}

async fn run(a: &Args, server: &Handle, d: &Daemon, pid: u32, gangs: usize) -> anyhow::Result<()> {
    let probe = &*Probe::start(server).await?;
    let rss = RssSampler::start(pid);
    let t0 = Instant::now();
    let mut ready_at = None;
    let all_bound = loop {
        if t0.elapsed() > Duration::from_secs(900) {
            anyhow::bail!("not all pods bound within 900 s");
        }
        if ready_at.is_none()
            && fetch(&d.addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        {
            ready_at = Some((t0.elapsed(), cpu_seconds(pid)));
        }
        // The daemon's count first: listing every pod here takes CPU from the daemon.
        let binds = metric(&d.metrics(), "basalt_scheduler_binds_total");
        if ready_at.is_some() && binds >= a.pending as f64 && unbound(server) == 0 {
            break t0.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (ready, cpu_ready) = ready_at.unwrap_or((all_bound, 0.0));
    let cpu_bound = cpu_seconds(pid);
    let m = d.metrics();
    let binding_cycles = metric(&m, "basalt_scheduler_cycle_duration_seconds_count");
    let binding_mean = metric(&m, "basalt_scheduler_cycle_duration_seconds_sum")
        / binding_cycles.max(1.0)
        * 1000.0;
    let after = (all_bound - ready).as_secs_f64();
    println!("caches synced {:.2} s after start", ready.as_secs_f64());
    println!(
        "all {} pending pods bound {after:.2} s after sync: {:.0} binds/s; daemon CPU {:.2} s meanwhile",
        a.pending,
        a.pending as f64 / after.max(1e-9),
        cpu_bound - cpu_ready
    );
    println!("cycles until then: {binding_cycles:.0}, mean {binding_mean:.0} ms");
    // Let the binding cycle's writes (Events, status) and their watch events settle: until the
    // daemon uses under a fifth of a core for a second (at most a minute).
    for _ in 0..60 {
        let cpu = cpu_seconds(pid);
        tokio::time::sleep(Duration::from_secs(1)).await;
        if cpu_seconds(pid) - cpu < 0.2 {
            break;
        }
    }
    // Nothing changes for `--idle-secs`: the cycles that run anyway, and the daemon's CPU.
    let ((c0, s0), cpu0) = (d.cycles(), cpu_seconds(pid));
    tokio::time::sleep(Duration::from_secs(a.idle_secs as u64)).await;
    let ((c, s), cpu) = (d.cycles(), cpu_seconds(pid));
    let mean = if c > c0 {
        format!("mean {:.1} ms", (s - s0) / (c - c0) * 1000.0)
    } else {
        "none".to_string()
    };
    println!(
        "idle {} s with nothing changed: {:.0} cycles ({mean}); daemon CPU {:.0} ms = {:.2} % of a core",
        a.idle_secs,
        c - c0,
        (cpu - cpu0) * 1000.0,
        (cpu - cpu0) / a.idle_secs.max(1) as f64 * 100.0
    );
    // One new gang: creation to bound, and the cycles meanwhile.
    let (c0, s0) = d.cycles();
    let names = gang(server, &format!("g{gangs}"), a.gang, 0, Some(probe))?;
    (probe.wait_bound(&names, Duration::from_secs(60), "the new gang")).await?;
    // The cycle that bound it ends after its binds.
    while d.cycles().0 <= c0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (c, s) = d.cycles();
    println!(
        "one new gang of {}: bound {:.1} ms after its last member's creation; {:.0} cycle(s) meanwhile, mean {:.1} ms",
        a.gang,
        probe.gang_ms(&names),
        c - c0,
        (s - s0) / (c - c0).max(1.0) * 1000.0
    );
    if a.arrivals > 0 {
        arrivals(a, server, d, probe, gangs + 1).await?;
    }
    println!(
        "daemon memory: VmRSS {:.0} MiB; peak sampled {:.0} MiB, VmHWM {:.0} MiB",
        proc_field(pid, "status", "VmRSS:").unwrap_or(0) as f64 / 1024.0,
        rss.peak_mib(),
        proc_field(pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
    println!(
        "daemon CPU in all: {:.2} s, of which the forecast's thread {:.2} s",
        cpu_seconds(pid),
        thread_cpu_seconds(pid, "forecast")
    );
    Ok(())
}

/// `--arrivals` pods a second for 10 s, a gang at a time; creation-to-binding quantiles of
/// those pods alone (the histogram's counts before the stream are subtracted).
async fn arrivals(
    a: &Args,
    server: &Handle,
    d: &Daemon,
    probe: &Probe,
    first: usize,
) -> anyhow::Result<()> {
    let before = d.metrics();
    let gangs_per_s = (a.arrivals / a.gang).max(1);
    let start = Instant::now();
    let mut names = Vec::new();
    for k in 0..gangs_per_s * 10 {
        let due = start + Duration::from_secs_f64(k as f64 / gangs_per_s as f64);
        tokio::time::sleep_until(due.into()).await;
        names.extend(gang(
            server,
            &format!("g{}", first + k),
            a.gang,
            k % a.queues,
            Some(probe),
        )?);
    }
    (probe.wait_bound(&names, Duration::from_secs(120), "the arrivals")).await?;
    // The histogram is observed as the binds are answered; let the last ones land.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = d.metrics();
    let name = "basalt_scheduler_scheduling_latency_seconds";
    let delta = subtract_histogram(&after, &before, name);
    let q =
        |p| quantile(&delta, name, p).map_or("-".to_string(), |v| format!("{:.0} ms", v * 1000.0));
    let ms = probe.latencies(&names);
    println!(
        "arrivals: {} pods/s for 10 s in gangs of {}: creation to bind seen on a watch p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} pods); the daemon's histogram: p50 ≤ {}, p99 ≤ {}",
        gangs_per_s * a.gang,
        a.gang,
        rank(&ms, 0.5),
        rank(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        ms.len(),
        q(0.5),
        q(0.99)
    );
    Ok(())
}

/// The histogram's bucket lines of `after` less those of `before`.
fn subtract_histogram(after: &str, before: &str, name: &str) -> String {
    let prefix = format!("{name}_bucket");
    (after.lines())
        .filter(|l| l.starts_with(&prefix))
        .map(|l| {
            let key = l.split_whitespace().next().unwrap_or("");
            let was = (before.lines())
                .find(|b| b.split_whitespace().next() == Some(key))
                .and_then(|b| b.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0);
            let now: f64 = l
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            format!("{key} {}", now - was)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

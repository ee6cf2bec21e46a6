//! Leadership and probes end to end: the in-memory API server with injected stalls and the real
//! `basalt-scheduler` binary, two replicas where it matters. Who wrote what is read from the
//! server's request log (each replica names itself in its User-Agent), not from Events.
//! Every wait is a bounded poll.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, FaultRule, Handle, RequestRecord, Verb};
use serde_json::{json, Value};

mod common;

use common::{eventually, Scheduler, BIN, DEADLINE};

struct Cluster {
    server: Handle,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

async fn cluster(nodes: u32) -> Cluster {
    let server = ApiServer::start(Config::default())
        .await
        .expect("server starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let c = Cluster {
        server,
        _dir: dir,
        kubeconfig,
    };
    for i in 0..nodes {
        c.create(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{i}")},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                       "nvidia.com/gpu": "8"}},
        }));
    }
    c.create(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "research"}, "spec": {"weight": 1},
    }));
    c
}

/// A free loopback address for a replica's probes.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

impl Cluster {
    /// A replica with its probes on `addr`.
    fn start(&self, addr: &str, extra: &[&str]) -> Scheduler {
        let child = Command::new(BIN)
            .args(["--listen", addr, "--period", "200ms"])
            .args(["--metrics-bind-address", addr])
            .args(extra)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "basalt_scheduler=info,kube=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scheduler starts");
        Scheduler(child)
    }

    fn replica(&self, addr: &str, identity: &str) -> Scheduler {
        self.start(
            addr,
            &[
                "--leader-elect",
                "--lease-duration",
                "3s",
                "--identity",
                identity,
            ],
        )
    }

    fn create(&self, obj: Value) {
        let what = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
        self.server
            .create(obj)
            .unwrap_or_else(|e| panic!("create {what}: {e:?}"));
    }

    /// A gang of one: a PodGroup and its pod asking for one GPU.
    fn job(&self, name: &str) {
        self.create(json!({
            "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": 1, "queue": "research"},
        }));
        self.create(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"scheduling.basalt.dev/pod-group": name}},
            "spec": {"schedulerName": "basalt", "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                              "limits": {"nvidia.com/gpu": "1"}},
            }]},
        }));
    }

    /// A gang of one like [`Self::job`], at PriorityClass `class`.
    fn job_at(&self, name: &str, class: &str) {
        self.job(name);
        let mut pod = self.server.get("v1", "Pod", "default", name).unwrap();
        pod["spec"]["priorityClassName"] = json!(class);
        self.server.delete("v1", "Pod", "default", name).unwrap();
        pod["metadata"] = json!({"name": name, "namespace": "default",
                                 "labels": {"scheduling.basalt.dev/pod-group": name}});
        self.create(pod);
    }

    fn bound(&self, pod: &str) -> bool {
        self.server
            .get("v1", "Pod", "default", pod)
            .is_some_and(|p| p["spec"]["nodeName"].is_string())
    }

    fn holder(&self) -> Option<String> {
        self.server
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "kube-system",
                "basalt-scheduler",
            )
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    }

    /// Every node: GPUs requested by its pods at most what it has.
    fn assert_no_node_over_capacity(&self) {
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        for p in self.server.list("v1", "Pod") {
            if let Some(node) = p["spec"]["nodeName"].as_str() {
                let gpus = p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
                    .as_str()
                    .map_or(0, |s| s.parse::<i64>().unwrap());
                *used.entry(node.to_string()).or_default() += gpus;
            }
        }
        for (node, gpus) in used {
            assert!(gpus <= 8, "node {node}: {gpus} GPUs bound, 8 allocatable");
        }
    }
}

/// Status code and body of a plain HTTP GET on loopback; None until something answers.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let out = common::http_get(addr, path)?;
    let code = out.get(9..12)?.parse().ok()?;
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((code, body))
}

fn by(r: &RequestRecord, identity: &str) -> bool {
    r.user_agent.contains(&format!("({identity})"))
}

fn succeeded(r: &RequestRecord) -> bool {
    (200..300).contains(&r.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_lease_renewal_never_yields_two_acting_leaders() {
    let c = cluster(6).await;
    let _a = c.replica(&free_addr(), "replica-a");
    let _b = c.replica(&free_addr(), "replica-b");
    eventually("one replica holds the lease", || c.holder().is_some()).await;
    let old = c.holder().unwrap();
    let new = if old == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    c.job("warm-up");
    eventually("the leader schedules", || c.bound("warm-up")).await;

    // Work keeps arriving while the leader's lease requests hang (as on a network that drops
    // its packets): the leader must stop writing before its lease can expire, and the other
    // replica, once it has taken the lease, binds what is pending.
    let mark = c.server.requests().last().map_or(0, |r| r.seq);
    c.server
        .add_fault(FaultRule::stall(None, "leases").from_client(&format!("({old})")))
        .unwrap();
    let mut jobs = Vec::new();
    let start = Instant::now();
    while c.holder().as_deref() != Some(new) {
        assert!(start.elapsed() < DEADLINE, "{new} never took the lease");
        let name = format!("j{}", jobs.len());
        c.job(&name);
        jobs.push(name);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..3 {
        let name = format!("j{}", jobs.len());
        c.job(&name);
        jobs.push(name);
    }
    eventually("every job bound", || jobs.iter().all(|j| c.bound(j))).await;
    // The stalled requests go on now; the old leader finds the lease taken and stays quiet.
    c.server.clear_faults();
    c.job("after");
    eventually("the last job bound", || c.bound("after")).await;

    let log: Vec<_> = c
        .server
        .requests()
        .into_iter()
        .filter(|r| r.seq > mark)
        .collect();
    let takeover = log
        .iter()
        .find(|r| by(r, new) && r.resource == "leases" && succeeded(r))
        .expect("the new leader wrote the lease")
        .seq;
    let late: Vec<_> = log
        .iter()
        .filter(|r| by(r, &old) && r.seq > takeover && (r.resource != "leases" || succeeded(r)))
        .collect();
    assert!(
        late.is_empty(),
        "{old} wrote after {new} took the lease: {late:#?}"
    );
    let early: Vec<_> = log
        .iter()
        .filter(|r| by(r, new) && r.seq < takeover && r.resource != "leases")
        .collect();
    assert!(early.is_empty(), "{new} wrote before it led: {early:#?}");
    let binds_by_new = log
        .iter()
        .filter(|r| by(r, new) && r.resource == "pods/binding" && succeeded(r))
        .count();
    assert!(binds_by_new > 0, "the new leader bound the pending pods");
    // Each pod bound once, by one replica.
    let mut binds: BTreeMap<String, usize> = BTreeMap::new();
    for r in c.server.requests() {
        if r.resource == "pods/binding" && r.verb == Verb::Create && succeeded(&r) {
            *binds.entry(r.name.unwrap_or_default()).or_default() += 1;
        }
    }
    assert!(binds.values().all(|n| *n == 1), "{binds:?}");
    c.assert_no_node_over_capacity();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_fails_while_a_cycle_hangs_and_recovers_after() {
    let c = cluster(1).await;
    let addr = free_addr();
    // Binds may take a minute each, far past the liveness limit.
    let _s = c.start(
        &addr,
        &["--max-cycle-gap", "2s", "--kube-api-timeout", "60s"],
    );
    c.job("first");
    eventually("the first job bound", || c.bound("first")).await;
    eventually("/healthz ok", || {
        http_get(&addr, "/healthz").is_some_and(|(code, _)| code == 200)
    })
    .await;

    c.server
        .add_fault(FaultRule::stall(Some(Verb::Create), "pods/binding"))
        .unwrap();
    c.job("stuck");
    eventually("/healthz fails while the bind hangs", || {
        http_get(&addr, "/healthz").is_some_and(|(code, body)| {
            code == 503 && body.contains("no scheduling cycle finished")
        })
    })
    .await;
    assert!(!c.bound("stuck"));

    c.server.clear_faults();
    eventually("the bind goes through", || c.bound("stuck")).await;
    eventually("/healthz ok again", || {
        http_get(&addr, "/healthz").is_some_and(|(code, _)| code == 200)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_ready_and_a_follower_not_yet_both_stay_live() {
    let c = cluster(1).await;
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let live = ["--max-cycle-gap", "1s"];
    let elect = |addr: &str, id: &str| {
        let mut args = vec!["--leader-elect", "--lease-duration", "3s", "--identity", id];
        args.extend(live);
        c.start(addr, &args)
    };
    let _a = elect(&addr_a, "replica-a");
    let _b = elect(&addr_b, "replica-b");
    eventually("one replica holds the lease", || c.holder().is_some()).await;
    let (leader, follower) = if c.holder().as_deref() == Some("replica-a") {
        (&addr_a, &addr_b)
    } else {
        (&addr_b, &addr_a)
    };
    eventually("the leader is ready", || {
        http_get(leader, "/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    eventually("the follower says why it is not ready", || {
        http_get(follower, "/readyz")
            .is_some_and(|(code, body)| code == 503 && body.contains("not the leader"))
    })
    .await;
    // Over a few liveness limits, a follower (which runs no cycle) stays live.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        for addr in [leader, follower] {
            let (code, body) = http_get(addr, "/healthz").expect("/healthz answers");
            assert_eq!(code, 200, "{addr}: {body}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(http_get(follower, "/readyz").map(|r| r.0), Some(503));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_cycle_hangs_gives_the_lease_up_and_the_follower_schedules() {
    let c = cluster(2).await;
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let elect = |addr: &str, id: &str| {
        c.start(
            addr,
            &[
                "--leader-elect",
                "--lease-duration",
                "3s",
                "--identity",
                id,
                "--max-cycle-gap",
                "2s",
                "--kube-api-timeout",
                "60s",
            ],
        )
    };
    let _a = elect(&addr_a, "replica-a");
    let _b = elect(&addr_b, "replica-b");
    eventually("one replica holds the lease", || c.holder().is_some()).await;
    let old = c.holder().unwrap();
    let (new, old_addr) = if old == "replica-a" {
        ("replica-b", &addr_a)
    } else {
        ("replica-a", &addr_b)
    };
    c.job("warm-up");
    eventually("the leader schedules", || c.bound("warm-up")).await;

    // The leader's binds hang (a minute each): its cycle is stuck, so it stops leading and gives
    // the lease up; the follower takes over and binds the pod the stuck cycle could not.
    let mark = c.server.requests().last().map_or(0, |r| r.seq);
    c.server
        .add_fault(
            FaultRule::stall(Some(Verb::Create), "pods/binding").from_client(&format!("({old})")),
        )
        .unwrap();
    c.job("stuck");
    eventually("the stuck leader is not live", || {
        http_get(old_addr, "/healthz").is_some_and(|(code, _)| code == 503)
    })
    .await;
    eventually("the follower took the lease", || {
        c.holder().as_deref() == Some(new)
    })
    .await;
    eventually("the new leader bound the pod", || c.bound("stuck")).await;
    // The old leader's bind, sent while it led, is answered now: the pod is taken (409).
    c.server.clear_faults();
    eventually("the old leader is live again, as a follower", || {
        http_get(old_addr, "/healthz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    c.job("after");
    eventually("the last job bound", || c.bound("after")).await;

    let log: Vec<_> = c
        .server
        .requests()
        .into_iter()
        .filter(|r| r.seq > mark)
        .collect();
    let takeover = log
        .iter()
        .find(|r| by(r, new) && r.resource == "leases" && succeeded(r))
        .expect("the new leader wrote the lease")
        .seq;
    let late: Vec<_> = log
        .iter()
        .filter(|r| by(r, &old) && r.seq > takeover && succeeded(r) && r.resource != "leases")
        .collect();
    assert!(late.is_empty(), "{old} wrote after {new} led: {late:#?}");
    let stuck_binds: Vec<_> = log
        .iter()
        .filter(|r| r.resource == "pods/binding" && r.name.as_deref() == Some("stuck"))
        .map(|r| (r.user_agent.contains(new), r.code))
        .collect();
    assert!(stuck_binds.contains(&(true, 201)), "{stuck_binds:?}");
    assert!(
        stuck_binds
            .iter()
            .all(|(by_new, code)| *by_new || *code == 409),
        "{stuck_binds:?}"
    );
    c.assert_no_node_over_capacity();
}

/// The failover of issue 30: the leader's binds take 9.5 s (under the 10 s request timeout)
/// while its lease requests hang. The other replica takes over and binds; the old leader's
/// binds must never land beside its own (they are cut with its term, and the new leader waits
/// out whatever an old holder may still have in flight): never more GPUs bound than a node has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_binds_outlast_its_lease_never_overfills_a_node() {
    let c = cluster(1).await;
    // Pods the next leader takes first, without preempting the ones already placed.
    c.create(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "urgent"}, "value": 1000, "preemptionPolicy": "Never",
    }));
    let args = |id: &'static str| ["--leader-elect", "--lease-duration", "6s", "--identity", id];
    let _a = c.start(&free_addr(), &args("alpha"));
    eventually("alpha leads", || c.holder().as_deref() == Some("alpha")).await;
    let _b = c.start(&free_addr(), &args("beta"));

    let slow_binds = FaultRule {
        resource: Some("pods/binding".into()),
        delay_ms: 9500,
        ..Default::default()
    };
    c.server
        .add_fault(slow_binds.from_client("(alpha)"))
        .unwrap();
    c.server
        .add_fault(FaultRule::stall(None, "leases").from_client("(alpha)"))
        .unwrap();
    let faulted = Instant::now();
    for i in 0..8 {
        c.job(&format!("first-{i}"));
    }
    // alpha has sent its 8 binds (each answered only after 9.5 s) before these arrive.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for i in 0..8 {
        c.job_at(&format!("urgent-{i}"), "urgent");
    }
    let bound = |c: &Cluster| {
        (c.server.list("v1", "Pod").iter())
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(45);
    while !(c.holder().as_deref() == Some("beta") && bound(&c) == 8) {
        assert!(
            Instant::now() < deadline,
            "beta never took over and bound 8 pods"
        );
        c.assert_no_node_over_capacity();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past the moment alpha's binds would have been answered.
    let landed = faulted + Duration::from_secs(12);
    while Instant::now() < landed {
        c.assert_no_node_over_capacity();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.assert_no_node_over_capacity();
    assert_eq!(bound(&c), 8);
    // No bind of alpha's succeeded after the faults: they were cut, not answered.
    let late = c
        .server
        .requests()
        .into_iter()
        .filter(|r| by(r, "alpha") && r.resource == "pods/binding" && succeeded(r));
    assert_eq!(late.count(), 0);
}

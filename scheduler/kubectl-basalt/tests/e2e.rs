//! `kubectl basalt` end to end: the in-memory API server on loopback, the real scheduler
//! writing status, and the plugin run as kubectl runs it (`kubectl basalt ...`, found on the
//! `PATH`) and on its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, Handle};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-basalt");

/// The scheduler binary beside the plugin's (same target directory and profile), brought up
/// to date by cargo (a binary of another package is no `CARGO_BIN_EXE_` of this one).
fn scheduler_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "basalt-scheduler"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cannot build basalt-scheduler");
    Path::new(PLUGIN).with_file_name("basalt-scheduler")
}

struct Scheduler(Child);

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Cluster {
    server: Handle,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let server = ApiServer::start(Config::default()).await.expect("server");
        let dir = tempfile::tempdir().expect("temp dir");
        server
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        Cluster { server, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn create(&self, obj: Value) {
        self.server.create(obj).expect("created");
    }

    fn scheduler(&self) -> Scheduler {
        let child = Command::new(scheduler_binary())
            .args([
                "--listen",
                "127.0.0.1:0",
                "--metrics-bind-address",
                "127.0.0.1:0",
            ])
            .args(["--period", "200ms", "--forecast-interval", "1s"])
            .env("KUBECONFIG", self.kubeconfig())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scheduler starts");
        Scheduler(child)
    }

    /// The plugin on its own, on this cluster's kubeconfig.
    fn plugin(&self, args: &[&str]) -> String {
        let out = Command::new(PLUGIN)
            .env("KUBECONFIG", self.kubeconfig())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .args(args)
            .output()
            .expect("plugin runs");
        ok(args, out)
    }
}

fn ok(args: &[&str], out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never happened: {what}");
}

fn node(name: &str, rack: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"topology.basalt.dev/rack": rack}},
           "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                      "nvidia.com/gpu": "8"}}})
}

fn gang(c: &Cluster, name: &str, queue: &str, members: u32) {
    c.create(
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": "ml"},
                    "spec": {"minMember": members, "queue": queue}}),
    );
    for i in 0..members {
        c.create(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{i}"), "namespace": "ml",
                         "labels": {"scheduling.basalt.dev/pod-group": name}},
            "spec": {"schedulerName": "basalt", "containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_reads_what_the_scheduler_wrote() {
    let c = Cluster::start().await;
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}));
    for (n, rack) in [("g1", "r1"), ("g2", "r1"), ("g3", "r2")] {
        c.create(node(n, rack));
    }
    c.create(
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
                    "metadata": {"name": "research"}, "spec": {"weight": 2}}),
    );
    c.create(
        json!({"apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
                    "metadata": {"name": "team"}, "spec": {"weight": 1, "parent": "research"}}),
    );
    gang(&c, "pretrain", "team", 2);
    let _s = c.scheduler();
    eventually("pretrain runs", || {
        c.server
            .get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "ml",
                "pretrain",
            )
            .is_some_and(|g| g["status"]["phase"] == "Running")
    })
    .await;
    gang(&c, "sweep", "team", 2);
    eventually("sweep explained", || {
        c.server
            .get("scheduling.basalt.dev/v1alpha1", "PodGroup", "ml", "sweep")
            .is_some_and(|g| g["status"]["explanation"]["verdict"] == "Waiting")
    })
    .await;
    // Nobody knows when pretrain ends (no run time stated, no start): the forecast says so.
    eventually("sweep forecast", || {
        c.server
            .get("scheduling.basalt.dev/v1alpha1", "PodGroup", "ml", "sweep")
            .is_some_and(|g| g["status"]["forecast"]["method"] == "unknown")
    })
    .await;

    // why: through kubectl, which finds the plugin on the PATH.
    let path = format!(
        "{}:{}",
        Path::new(PLUGIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = Command::new("kubectl")
        .env("KUBECONFIG", c.kubeconfig())
        .env("PATH", &path)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(["basalt", "why", "ml/sweep"])
        .output();
    let why = match kubectl {
        Ok(out) => ok(&["kubectl", "basalt", "why"], out),
        Err(_) => {
            eprintln!("kubectl is not installed: the plugin is run on its own");
            c.plugin(&["why", "ml/sweep"])
        }
    };
    for line in [
        "PodGroup ml/sweep: Inqueue, 0/2 running",
        "Reason:    NotEnoughResources: 0/2 members of the gang could be placed",
        "Verdict:   Waiting",
        "Held by:   ml/pretrain (16) of nvidia.com/gpu",
        "Frees it:  the end of ml/pretrain",
        "Position:  1 of 1 waiting in queue team",
        "Forecast:  unknown, computed at ",
    ] {
        assert!(why.contains(line), "no {line:?} in:\n{why}");
    }
    let json: Value =
        serde_json::from_str(&c.plugin(&["why", "sweep", "-n", "ml", "-o", "json"])).expect("JSON");
    assert_eq!(
        json["explanation"]["unblock"]["jobs"],
        json!(["ml/pretrain"])
    );

    // queues: the tree, parents first, children indented.
    let queues = c.plugin(&["queues"]);
    let lines: Vec<&str> = queues.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{queues}");
    let research = lines
        .iter()
        .position(|l| l.starts_with("research "))
        .unwrap();
    let team = lines.iter().position(|l| l.starts_with("  team ")).unwrap();
    assert!(research < team, "{queues}");
    assert!(lines[team].contains("nvidia.com/gpu=16"), "{queues}");
    let yaml = c.plugin(&["queues", "-o", "yaml"]);
    assert!(
        yaml.contains("name: team") && yaml.contains("depth: 1"),
        "{yaml}"
    );

    // jobs: every namespace, or one queue.
    let jobs = c.plugin(&["jobs", "-A"]);
    let sweep = jobs.lines().find(|l| l.starts_with("ml/sweep ")).unwrap();
    assert!(
        sweep.contains("team") && sweep.contains("1/1") && sweep.contains("NotEnoughResources"),
        "{jobs}"
    );
    assert!(
        jobs.lines().next().unwrap().contains("ESTIMATED START") && sweep.ends_with(" unknown"),
        "{jobs}"
    );
    assert!(
        c.plugin(&["jobs", "-n", "ml", "-q", "other"])
            .lines()
            .count()
            == 1
    );

    // top nodes: GPUs per rack and per node.
    let top: Value = serde_json::from_str(&c.plugin(&["top", "nodes", "-o", "json"])).unwrap();
    let r1 = (top["domains"].as_array().unwrap().iter())
        .find(|d| d["name"] == "r1")
        .expect("rack r1");
    assert_eq!(
        (r1["gpus"].as_i64(), r1["used"].as_i64()),
        (Some(16), Some(16))
    );
    let text = c.plugin(&["top", "nodes"]);
    assert!(text.contains("TIER") && text.contains("NODE"), "{text}");
}

#[test]
fn a_job_that_does_not_exist_is_an_error_naming_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(Cluster::start());
    let out = Command::new(PLUGIN)
        .env("KUBECONFIG", c.kubeconfig())
        .args(["why", "ml/nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PodGroup ml/nope not found"), "{err}");
}

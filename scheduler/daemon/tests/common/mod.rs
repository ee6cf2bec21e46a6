//! The test harness shared by the end-to-end tests: the in-memory API server on loopback, the
//! real `basalt-scheduler` binary as a child process, the objects they use, bounded polls.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use basalt_apiserver::{ApiServer, Config, Handle};

pub mod workload;
use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_basalt-scheduler");
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Kills the scheduler when the test ends, however it ends.
pub struct Scheduler(pub Child);

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Cluster {
    pub server: Handle,
    pub dir: tempfile::TempDir,
}

pub async fn cluster(server_config: Config) -> Cluster {
    let server = ApiServer::start(server_config)
        .await
        .expect("server starts");
    let dir = tempfile::tempdir().expect("temp dir");
    server
        .write_kubeconfig(&dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    Cluster { server, dir }
}

impl Cluster {
    pub fn start_scheduler(&self) -> Scheduler {
        self.start_with(&[])
    }

    pub fn start_with(&self, extra: &[&str]) -> Scheduler {
        let mut cmd = Command::new(BIN);
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        // /metrics beside the probes (one server), never the fixed default port, which
        // schedulers running at once would fight over.
        if !extra.contains(&"--metrics-bind-address") {
            let at = extra.iter().position(|a| *a == "--listen");
            let listen = at.map_or("127.0.0.1:0", |i| extra[i + 1]);
            cmd.args(["--metrics-bind-address", listen]);
        }
        let child = cmd
            .args(["--period", "200ms"])
            .args(extra)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("RUST_LOG", "basalt_scheduler=info,kube=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scheduler starts");
        Scheduler(child)
    }

    pub fn create(&self, obj: Value) {
        let what = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
        self.server
            .create(obj)
            .unwrap_or_else(|e| panic!("create {what}: {e:?}"));
    }

    pub fn pod(&self, name: &str) -> Value {
        self.server
            .get("v1", "Pod", "default", name)
            .unwrap_or_else(|| panic!("pod {name} exists"))
    }

    pub fn node_of(&self, pod: &str) -> Option<String> {
        self.pod(pod)["spec"]["nodeName"]
            .as_str()
            .map(str::to_string)
    }

    pub fn group(&self, name: &str) -> Value {
        self.server
            .get(
                "scheduling.basalt.dev/v1alpha1",
                "PodGroup",
                "default",
                name,
            )
            .unwrap_or_else(|| panic!("PodGroup {name} exists"))
    }

    pub fn events(&self, reason: &str, about: &str) -> Vec<Value> {
        self.server
            .list("v1", "Event")
            .into_iter()
            .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == about)
            .collect()
    }

    /// Every node's GPUs: requested by its pods at most what it has, and no GPU id twice.
    pub fn assert_no_node_over_capacity(&self) {
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in self.server.list("v1", "Pod") {
            let Some(node) = p["spec"]["nodeName"].as_str() else {
                continue;
            };
            let gpus: i64 = p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
                .as_str()
                .map_or(0, |s| s.parse().unwrap());
            *used.entry(node.to_string()).or_default() += gpus;
            // Malformed ids (some tests plant them) name no GPU.
            if let Some(a) = p["metadata"]["annotations"]["scheduling.basalt.dev/gpu-ids"]
                .as_str()
                .filter(|a| a.split(',').all(|id| id.parse::<u32>().is_ok()))
            {
                let list = ids.entry(node.to_string()).or_default();
                for id in a.split(',') {
                    assert!(
                        !list.contains(&id.to_string()),
                        "GPU {id} of {node} given twice"
                    );
                    list.push(id.to_string());
                }
                assert_eq!(
                    a.split(',').count() as i64,
                    gpus,
                    "gpu-ids of {}",
                    p["metadata"]["name"]
                );
            }
        }
        for n in self.server.list("v1", "Node") {
            let name = n["metadata"]["name"].as_str().unwrap();
            let cap: i64 = n["status"]["allocatable"]["nvidia.com/gpu"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let u = used.get(name).copied().unwrap_or(0);
            assert!(u <= cap, "node {name}: {u} GPUs bound, {cap} allocatable");
        }
    }
}

pub fn node(name: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()}},
    })
}

pub fn queue(name: &str) -> Value {
    json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": name}, "spec": {"weight": 1},
    })
}

pub fn group(name: &str, min_member: u32, queue: &str) -> Value {
    json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "queue": queue},
    })
}

pub fn pod(name: &str, group: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"scheduling.basalt.dev/pod-group": group}},
        "spec": {"schedulerName": "basalt", "containers": [{
            "name": "main", "image": "trainer:1",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()},
                          "limits": {"nvidia.com/gpu": gpus.to_string()}},
        }]},
    })
}

/// A plain HTTP/1.1 GET on loopback: the whole answer (status line, headers, body).
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// A loopback address with a port free now.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Polls `f` until it holds; the deadline only stops a hung test.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never happened within {DEADLINE:?}: {what}");
}

/// Someone else's pod already running on `node`, holding `gpus` GPUs (`ids` when known).
pub fn busy_pod(name: &str, node: &str, gpus: u32, ids: Option<&str>) -> Value {
    let mut p = pod(name, "", gpus);
    p["metadata"].as_object_mut().unwrap().remove("labels");
    p["metadata"]["namespace"] = json!("default");
    if let Some(ids) = ids {
        p["metadata"]["annotations"] = json!({"scheduling.basalt.dev/gpu-ids": ids});
    }
    p["spec"]["schedulerName"] = json!("default-scheduler");
    p["spec"]["nodeName"] = json!(node);
    p["status"] = json!({"phase": "Running"});
    p
}

// ---------------------------------------------------------------------------------------------
// JSON logs and Volcano's objects
// ---------------------------------------------------------------------------------------------

/// The scheduler's stderr, one parsed JSON log line each (`--log-format json`), gathered on a
/// thread while it runs.
pub struct Logs(pub std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

impl Logs {
    pub fn lines(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    pub fn any(&self, f: impl Fn(&Value) -> bool) -> bool {
        self.0.lock().unwrap().iter().any(f)
    }

    /// Warnings and errors so far, as text.
    pub fn problems(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l["level"] == "WARN" || l["level"] == "ERROR")
            .map(|l| l.to_string())
            .collect()
    }
}

impl Cluster {
    /// The scheduler with JSON logs collected.
    pub fn start_logged(&self, extra: &[&str]) -> (Scheduler, Logs) {
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--period", "200ms"])
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .args(extra)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("RUST_LOG", "basalt_scheduler=info,kube=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("scheduler starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                sink.lock().unwrap().push(v);
            }
        });
        (Scheduler(child), Logs(lines))
    }

    pub fn volcano_group(&self, name: &str) -> Value {
        self.server
            .get("scheduling.volcano.sh/v1beta1", "PodGroup", "default", name)
            .unwrap_or_else(|| panic!("Volcano PodGroup {name} exists"))
    }

    /// A kube client on the same kubeconfig, for writes the server's handle does not offer.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.dir.path().join("kubeconfig"))
            .expect("kubeconfig reads");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kubeconfig loads");
        kube::Client::try_from(cfg).expect("client")
    }
}

pub fn volcano_queue(name: &str) -> Value {
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": name}, "spec": {"weight": 1, "reclaimable": true},
    })
}

pub fn volcano_group(name: &str, min_member: u32, queue: &str) -> Value {
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "queue": queue},
    })
}

/// A pod in a Volcano PodGroup, named the way Volcano's job controller names it.
pub fn volcano_pod(name: &str, group: &str, gpus: u32) -> Value {
    let mut p = pod(name, group, gpus);
    p["metadata"].as_object_mut().unwrap().remove("labels");
    p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": group});
    p
}

/// A namespaced CRD of one served version, its schema open.
pub fn crd(group: &str, kind: &str, plural: &str, version: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                 "versions": [{"name": version, "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

/// A pod as an operator makes it: `schedulerName: basalt` from the user's template, the
/// operator's labels and its controller ownerReference.
pub fn operator_pod(
    name: &str,
    labels: Value,
    owner: (&str, &str, &str, &str),
    gpus: u32,
) -> Value {
    let mut p = pod(name, "", gpus);
    p["metadata"]["labels"] = labels;
    let (api_version, kind, owner_name, uid) = owner;
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind,
        "name": owner_name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    p
}

/// The uid the server gave an object of namespace `default`.
pub fn uid(c: &Cluster, api_version: &str, kind: &str, name: &str) -> String {
    let o = c
        .server
        .get(api_version, kind, "default", name)
        .expect("created");
    o["metadata"]["uid"].as_str().expect("a uid").to_string()
}

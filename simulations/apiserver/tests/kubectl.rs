//! The real kubectl against the server: create -f, get -o json, get -w, apply -f, delete.
//! Skipped (with a printed reason) when kubectl is not installed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use basalt_apiserver::{ApiServer, Config, Handle, PatchKind};
use serde_json::{json, Value};

fn kubectl_path() -> Option<String> {
    let found = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .ok()?;
    found.status.success().then(|| "kubectl".to_string())
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(args)
        .output()
        .expect("kubectl runs")
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout.into_owned()
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  schedulerName: basalt
  containers:
  - name: main
    image: nginx:1
"#;

const LATE: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "late"},
 "spec": {"containers": [{"name": "main", "image": "busybox"}]}}"#;

const PODGROUP: &str = r#"
apiVersion: scheduling.basalt.dev/v1alpha1
kind: PodGroup
metadata: {name: gang}
spec: {minMember: 4, queue: default}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_speaks_to_the_server() {
    if kubectl_path().is_none() {
        eprintln!("skipped: kubectl is not installed (or does not run)");
        return;
    }
    let server = ApiServer::start(Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kc).unwrap();
    std::fs::write(dir.path().join("pod.yaml"), POD).unwrap();
    std::fs::write(dir.path().join("late.json"), LATE).unwrap();
    std::fs::write(dir.path().join("pg.yaml"), PODGROUP).unwrap();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let file = |n: &str| dir.path().join(n).to_string_lossy().into_owned();

    let kc2 = kc.clone();
    let (pod, late, pg) = (file("pod.yaml"), file("late.json"), file("pg.yaml"));
    let crds = crds.to_string_lossy().into_owned();
    tokio::task::spawn_blocking(move || {
        let kc = kc2.as_path();
        // create -f with default (strict, server-side) validation, then get -o json
        assert!(ok(kc, &["create", "-f", &pod]).contains("pod/web created"));
        let got: Value =
            serde_json::from_str(&ok(kc, &["get", "pod", "web", "-o", "json"])).unwrap();
        assert_eq!(got["spec"]["schedulerName"], "basalt");
        assert_eq!(got["status"]["phase"], "Pending");
        let list: Value =
            serde_json::from_str(&ok(kc, &["get", "pods", "-l", "app=web", "-o", "json"])).unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        assert!(ok(kc, &["get", "pods"]).contains("web"));

        // get -w sees a pod created while it watches
        let mut watch = Command::new("kubectl")
            .env("KUBECONFIG", kc)
            .args(["get", "pods", "-w", "-o", "name", "--request-timeout=60s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let stdout = watch.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), "pod/web");
        ok(kc, &["create", "-f", &late]);
        let seen = rx.recv_timeout(Duration::from_secs(30));
        watch.kill().ok();
        watch.wait().ok();
        assert_eq!(seen.unwrap(), "pod/late");

        // apply -f (client-side apply) on the CRDs, a custom resource, and a change to it
        ok(kc, &["apply", "-f", &crds]);
        assert!(ok(kc, &["apply", "-f", &pg]).contains("created"));
        std::fs::write(&pg, PODGROUP.replace("minMember: 4", "minMember: 6")).unwrap();
        assert!(ok(kc, &["apply", "-f", &pg]).contains("configured"));
        assert_eq!(
            ok(
                kc,
                &[
                    "get",
                    "podgroup",
                    "gang",
                    "-o",
                    "jsonpath={.spec.minMember}"
                ]
            ),
            "6"
        );
        assert!(ok(kc, &["apply", "-f", &pod]).contains("web"));

        // delete, and a clear error for what is gone
        assert!(ok(kc, &["delete", "pod", "web"]).contains("deleted"));
        ok(kc, &["delete", "-f", &pg]);
        let gone = kubectl(kc, &["get", "pod", "web"]);
        assert!(!gone.status.success());
        assert!(String::from_utf8_lossy(&gone.stderr).contains("pods \"web\" not found"));
    })
    .await
    .unwrap();
    assert!(server.get("v1", "Pod", "default", "web").is_none());
    assert!(server.get("v1", "Pod", "default", "late").is_some());
    server.shutdown().await;
}

const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: one}
  data: {k: v}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: two}
"#;

/// kubectl's table output, each line's columns joined by one space (its padding varies).
fn table(kubeconfig: &Path, args: &[&str]) -> Vec<String> {
    ok(kubeconfig, args)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A server, its kubeconfig, and `files` written beside it; `None` without kubectl.
async fn serve(files: &[(&str, &str)]) -> Option<(Handle, tempfile::TempDir, PathBuf)> {
    if kubectl_path().is_none() {
        eprintln!("skipped: kubectl is not installed (or does not run)");
        return None;
    }
    let server = ApiServer::start(Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kc).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    Some((server, dir, kc))
}

/// Runs `f` with the kubeconfig off the async runtime (kubectl blocks; the server must serve).
async fn blocking(kc: &Path, f: impl FnOnce(&Path) + Send + 'static) {
    let kc = kc.to_path_buf();
    tokio::task::spawn_blocking(move || f(&kc)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_namespace_and_configmap_post_protobuf_and_succeed() {
    let Some((server, _dir, kc)) = serve(&[]).await else {
        return;
    };
    // kubectl 1.31+ POSTs built-in kinds from its typed client as protobuf: a 415 before.
    blocking(&kc, |kc| {
        assert!(ok(kc, &["create", "namespace", "x"]).contains("namespace/x created"));
        ok(
            kc,
            &["create", "configmap", "c", "--from-literal=a=b", "-n", "x"],
        );
    })
    .await;
    assert!(server.get("v1", "Namespace", "", "x").is_some());
    let c = server.get("v1", "ConfigMap", "x", "c").unwrap();
    assert_eq!(c["data"]["a"], "b");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_real_servers_columns() {
    let Some((server, dir, kc)) = serve(&[("pod.yaml", POD)]).await else {
        return;
    };
    let pod = dir.path().join("pod.yaml").to_string_lossy().into_owned();
    // What the scheduler and the node agent write: an Event about the pod, a Ready node.
    server
        .create(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "type": "Warning", "reason": "FailedScheduling", "message": "0/1 nodes are available",
        }))
        .unwrap();
    server
        .create(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.34.1"}},
        }))
        .unwrap();
    // Before: NAME and AGE only, for every kind.
    blocking(&kc, move |kc| {
        ok(kc, &["create", "-f", &pod]);
        let pods = table(kc, &["get", "pods"]);
        assert_eq!(pods[0], "NAME READY STATUS RESTARTS AGE", "{pods:?}");
        assert!(pods[1].starts_with("web 0/1 Pending 0 "), "{pods:?}");
        let wide = table(kc, &["get", "pods", "-o", "wide"]);
        assert!(
            wide[0].starts_with("NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE"),
            "{wide:?}"
        );
        let one = table(kc, &["get", "pod", "web"]);
        assert_eq!(one[0], "NAME READY STATUS RESTARTS AGE", "{one:?}");
        let events = table(kc, &["get", "events"]);
        assert_eq!(
            events[0], "LAST SEEN TYPE REASON OBJECT MESSAGE",
            "{events:?}"
        );
        assert!(
            events[1].ends_with("Warning FailedScheduling pod/web 0/1 nodes are available"),
            "{events:?}"
        );
        let nodes = table(kc, &["get", "nodes"]);
        assert_eq!(nodes[0], "NAME STATUS ROLES AGE VERSION", "{nodes:?}");
        assert!(nodes[1].starts_with("gpu-1 Ready worker "), "{nodes:?}");
        assert!(nodes[1].ends_with(" v1.34.1"), "{nodes:?}");
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_podgroups_prints_the_crds_printer_columns() {
    let Some((server, dir, kc)) = serve(&[("pg.yaml", PODGROUP)]).await else {
        return;
    };
    let pg = dir.path().join("pg.yaml").to_string_lossy().into_owned();
    blocking(&kc, move |kc| {
        // No `kubectl apply -f deploy/crds` first: the server preinstalls those very files.
        ok(kc, &["create", "-f", &pg]);
        let pgs = table(kc, &["get", "podgroups"]);
        assert_eq!(
            pgs[0], "NAME PHASE MINMEMBER RUNNING QUEUE REASON AGE",
            "{pgs:?}"
        );
        assert!(pgs[1].starts_with("gang 4 default "), "{pgs:?}");
    })
    .await;
    // The scheduler's status: phase, running count, and the Unschedulable condition's reason.
    let status = json!({"status": {"phase": "Pending", "running": 1, "conditions": [
        {"type": "Scheduled", "status": "False", "reason": "Waiting"},
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughGPUs"}]}});
    server
        .patch_status(
            "scheduling.basalt.dev/v1alpha1",
            "PodGroup",
            "default",
            "gang",
            PatchKind::Merge,
            &status,
        )
        .unwrap();
    blocking(&kc, |kc| {
        let pgs = table(kc, &["get", "pg"]);
        assert!(
            pgs[1].starts_with("gang Pending 4 1 default NotEnoughGPUs "),
            "{pgs:?}"
        );
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_f_a_list_needs_no_validate_false() {
    let Some((server, dir, kc)) = serve(&[("list.yaml", LIST)]).await else {
        return;
    };
    let list = dir.path().join("list.yaml").to_string_lossy().into_owned();
    // Before: "error validating data: the server could not find the requested resource"
    // (kubectl validates a List's items against /openapi/v2).
    blocking(&kc, move |kc| {
        let created = ok(kc, &["create", "-f", &list]);
        assert!(
            created.contains("configmap/one created") && created.contains("configmap/two created"),
            "{created}"
        );
    })
    .await;
    assert!(server.get("v1", "ConfigMap", "default", "two").is_some());
    server.shutdown().await;
}

//! The real kubectl against the server: create -f, get -o json, get -w, apply -f, delete.
//! Skipped (with a printed reason) when kubectl is not installed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use basalt_apiserver::{ApiServer, Config};
use serde_json::Value;

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

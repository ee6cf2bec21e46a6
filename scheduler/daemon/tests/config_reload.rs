//! The config file is read again when it changes (a ConfigMap update): a valid new config is
//! used from the next cycle on; an invalid one is reported and the config before kept.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::json;

/// A groupless pod for scheduler `scheduler`.
fn pod_for(name: &str, scheduler: &str) -> serde_json::Value {
    let mut p = pod(name, "", 1);
    p["metadata"].as_object_mut().unwrap().remove("labels");
    p["spec"]["schedulerName"] = json!(scheduler);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_file_is_taken_and_an_invalid_one_refused() {
    let c = cluster(Config::default()).await;
    c.create(node("n1", 8));
    let path = c.dir.path().join("config.yaml");
    std::fs::write(&path, "schedulerNames: [basalt]\n").unwrap();
    c.create(pod_for("mine", "basalt"));
    c.create(pod_for("theirs", "gang"));
    let (_s, logs) = c.start_logged(&["--config", path.to_str().unwrap()]);
    eventually("the pod for basalt bound", || c.node_of("mine").is_some()).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(c.node_of("theirs").is_none(), "not ours yet");
    // A ConfigMap volume replaces the file: the new names are taken.
    let new = c.dir.path().join("config.yaml.new");
    std::fs::write(&new, "schedulerNames: [basalt, gang]\n").unwrap();
    std::fs::rename(&new, &path).unwrap();
    eventually("the pod for gang bound under the new config", || {
        c.node_of("theirs").is_some()
    })
    .await;
    // An invalid file is reported and the config before kept.
    std::fs::write(&path, "schedulerNames: [basalt]\nfrobnicate: 1\n").unwrap();
    eventually("the invalid config is reported", || {
        (logs.problems().iter())
            .any(|l| l.contains("frobnicate") && l.contains("config before is kept"))
    })
    .await;
    c.create(pod_for("theirs-2", "gang"));
    eventually("gang's pods still bound: the valid config is kept", || {
        c.node_of("theirs-2").is_some()
    })
    .await;
}

//! Partitionable DRA devices (KEP-4815) end to end, as NVIDIA's DRA driver publishes dynamic
//! MIG: one GPU's placements of each profile are devices of a pool whose counter set (the
//! GPU's 8 memory slices, in a slice of its own as Kubernetes 1.35 has it) they consume. Claims
//! get placements that do not overlap, and a claim whose placement would overlap one in use
//! waits with kube-scheduler's words.

mod common;

use basalt_apiserver::Config;
use common::*;
use serde_json::{json, Value};

const RESOURCE: &str = "resource.k8s.io/v1";
const DRIVER: &str = "gpu.nvidia.com";

/// The GPU's counter set: 8 memory slices.
fn counters() -> Value {
    json!({"apiVersion": RESOURCE, "kind": "ResourceSlice", "metadata": {"name": "n1-counters"},
        "spec": {"driver": DRIVER, "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                 "sharedCounters": [{"name": "gpu-0", "counters": {"memorySlices": {"value": "8"}}}]}})
}

/// Every placement the test uses: a 7g on all 8 slices, 3g at 0 and 4, 1g at 0.
fn placements() -> Value {
    let device = |name: &str, profile: &str, slices: u32| {
        json!({"name": name,
            "attributes": {"profile": {"string": profile}},
            "consumesCounters": [{"counterSet": "gpu-0",
                                  "counters": {"memorySlices": {"value": slices.to_string()}}}]})
    };
    let devices = [
        device("gpu-0-7g-0", "7g.80gb", 8),
        device("gpu-0-3g-0", "3g.40gb", 4),
        device("gpu-0-3g-4", "3g.40gb", 4),
        device("gpu-0-1g-0", "1g.10gb", 1),
    ];
    json!({"apiVersion": RESOURCE, "kind": "ResourceSlice", "metadata": {"name": "n1-mig"},
        "spec": {"driver": DRIVER, "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                 "devices": devices}})
}

/// A claim for one placement of `profile`, and a pod (its own group) using it.
fn claimed_pod(c: &Cluster, name: &str, profile: &str) {
    let selector = format!("device.attributes[\"{DRIVER}\"].profile == \"{profile}\"");
    c.create(json!({"apiVersion": RESOURCE, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER,
            "selectors": [{"cel": {"expression": selector}}]}}]}}}));
    c.create(group(name, 1, "q"));
    let mut p = pod(&format!("{name}-0"), name, 0);
    p["spec"]["resourceClaims"] = json!([{"name": "mig", "resourceClaimName": name}]);
    p["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1"}, "claims": [{"name": "mig"}]});
    c.create(p);
}

fn allocated_device(c: &Cluster, claim: &str) -> Option<String> {
    let cl = c.server.get(RESOURCE, "ResourceClaim", "default", claim)?;
    let device = &cl["status"]["allocation"]["devices"]["results"][0]["device"];
    device.as_str().map(str::to_string)
}

fn unschedulable(c: &Cluster, group: &str) -> Option<String> {
    let conditions = c.group(group)["status"]["conditions"].as_array()?.clone();
    (conditions.iter())
        .find(|k| k["type"] == "Unschedulable" && k["status"] == "True")
        .and_then(|k| k["message"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_mig_placements_are_never_allocated_together() {
    let c = cluster(Config::default()).await;
    c.create(queue("q"));
    c.create(
        json!({"apiVersion": RESOURCE, "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.nvidia.com\""}}]}}),
    );
    c.create(node("n1", 0));
    c.create(counters());
    c.create(placements());
    for name in ["a", "b", "c"] {
        claimed_pod(&c, name, "3g.40gb");
    }

    let _s = c.start_scheduler();
    eventually("two of the three 3g pods are bound", || {
        ["a-0", "b-0", "c-0"]
            .iter()
            .filter(|p| c.node_of(p).is_some())
            .count()
            == 2
    })
    .await;
    let mut taken: Vec<String> = ["a", "b", "c"]
        .iter()
        .filter_map(|claim| allocated_device(&c, claim))
        .collect();
    taken.sort();
    assert_eq!(
        taken,
        ["gpu-0-3g-0", "gpu-0-3g-4"],
        "both halves, no overlap"
    );
    let waiting = ["a", "b", "c"]
        .into_iter()
        .find(|g| c.node_of(&format!("{g}-0")).is_none())
        .unwrap();
    eventually("the third says why it waits", || {
        unschedulable(&c, waiting).is_some_and(|m| m.contains("too few free devices"))
    })
    .await;

    // The 1g's slice is held by a 3g, and so are all of the 7g's: both wait too.
    claimed_pod(&c, "small", "1g.10gb");
    claimed_pod(&c, "whole", "7g.80gb");
    for g in ["small", "whole"] {
        eventually("a placement overlapping one in use waits", || {
            unschedulable(&c, g).is_some_and(|m| m.contains("too few free devices"))
        })
        .await;
        assert_eq!(c.node_of(&format!("{g}-0")), None);
        assert_eq!(allocated_device(&c, g), None);
    }
}

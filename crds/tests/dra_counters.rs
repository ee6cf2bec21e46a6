//! Partitionable devices as conversion reads them: a pool's counter sets (in the devices' slice,
//! as Kubernetes 1.34 has them, or in a slice of their own, as from 1.35) become the engine's
//! counters; a device consuming a set or counter its pool lacks is left out with a warning
//! naming the field.

mod common;

use basalt_crds::{cluster_spec_with_warnings, ConvertOptions};
use serde_json::{json, Value};

fn device(name: &str, set: &str, slices: &str) -> Value {
    json!({"name": name, "consumesCounters": [{"counterSet": set,
        "counters": {"memorySlices": {"value": slices}}}]})
}

fn slice(name: &str, count: u32, extra: Value) -> Value {
    let mut spec = json!({"driver": "gpu.nvidia.com", "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": count}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": name}, "spec": spec})
}

fn convert(slices: Vec<Value>) -> (basalt_engine::ClusterSpec, Vec<String>) {
    let mut items = vec![json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})];
    items.extend(slices);
    let text = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let objects = common::objects("dra.json", &text);
    cluster_spec_with_warnings(&objects, &ConvertOptions::default()).unwrap()
}

#[test]
fn counters_in_their_own_slice_or_beside_the_devices_are_read_alike() {
    let set = json!([{"name": "gpu-0", "counters": {"memorySlices": {"value": "8"}}}]);
    let devices = json!([
        device("gpu-0-3g-4", "gpu-0", "4"),
        device("gpu-0-1g-0", "gpu-0", "1")
    ]);
    // 1.35: a slice of counters, a slice of devices.
    let (apart, warnings) = convert(vec![
        slice("n1-counters", 2, json!({"sharedCounters": set})),
        slice("n1-mig", 2, json!({"devices": devices})),
    ]);
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(apart.dra.counters, [8000]);
    let consumes: Vec<_> = apart
        .dra
        .devices
        .iter()
        .map(|d| d.consumes.clone())
        .collect();
    // Devices in name order: the 1g, then the 3g.
    assert_eq!(consumes, [vec![(0, 1000)], vec![(0, 4000)]]);
    // 1.34: both in one slice.
    let (together, warnings) = convert(vec![slice(
        "n1-mig",
        1,
        json!({"sharedCounters": set, "devices": devices}),
    )]);
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(together.dra, apart.dra);
}

#[test]
fn a_device_consuming_what_its_pool_lacks_is_left_out_and_said() {
    let set = json!([{"name": "gpu-0", "counters": {"memorySlices": {"value": "8"}}}]);
    let devices = json!([
        device("gpu-0-3g-0", "gpu-0", "4"),
        device("gpu-1-3g-0", "gpu-1", "4"),
        device("gpu-0-bad", "gpu-0", "lots"),
    ]);
    let (spec, warnings) = convert(vec![slice(
        "n1-mig",
        1,
        json!({"sharedCounters": set, "devices": devices}),
    )]);
    let names: Vec<&str> = spec.dra.devices.iter().map(|d| &*d.name).collect();
    assert_eq!(names, ["gpu-0-3g-0"]);
    let said = warnings.join("\n");
    assert!(
        said.contains("ResourceSlice n1-mig: spec.devices[1].consumesCounters[0].counters[memorySlices]: pool n1 has no counter memorySlices in a counter set gpu-1; device gpu-1-3g-0 is not used"),
        "{said}"
    );
    assert!(
        said.contains(
            "spec.devices[2].consumesCounters[0].counters[memorySlices]: invalid quantity \"lots\""
        ),
        "{said}"
    );
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
}

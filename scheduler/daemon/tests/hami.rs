//! HAMi GPU sharing end to end (`docs/protocols.md`, section 1): on a node whose
//! `hami.io/node-nvidia-register` annotation says HAMi's device plugin runs there, the real
//! binary hands each pod off as HAMi's own scheduler does — it takes the node lock
//! `hami.io/mutex.lock`, writes HAMi's pod annotations (`vgpu-node` also as a label,
//! `vgpu-time`, the devices in `vgpu-devices-to-allocate` = `vgpu-devices-allocated`,
//! `bind-phase: allocating`, `bind-time`), then binds — and binds one HAMi pod per node at a
//! time, until the device plugin (played here by the test) sets `bind-phase: success` and
//! releases the lock. A lock whose pod is gone is taken over. A time-sliced node that is no
//! HAMi node keeps its NodeTopology: physical GPU ids in one NVLink island, no HAMi annotations.
//! A Volcano vGPU pod gets Volcano's annotations with its binding, without a lock.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use basalt_apiserver::{Config, FaultRule, PatchKind, Verb};
use common::*;
use serde_json::{json, Value};

const LOCK: &str = "hami.io/mutex.lock";
const GPU_MEM: u64 = 81920;

/// HAMi's device register, JSON as its device plugin writes it: split count 10, 80 GiB each.
fn register(uuids: &[&str]) -> String {
    let devices: Vec<Value> = (uuids.iter().enumerate())
        .map(|(i, id)| {
            json!({"id": id, "index": i, "count": 10, "devmem": GPU_MEM, "devcore": 100,
                   "type": "NVIDIA-A100-SXM4-80GB", "numa": 0, "mode": "hami-core",
                   "health": true})
        })
        .collect();
    serde_json::to_string(&devices).unwrap()
}

/// A node running HAMi's device plugin over `uuids`; allocatable `nvidia.com/gpu` is the
/// devices times the split count, as the kubelet sees it.
fn hami_node(name: &str, uuids: &[&str], extra: &[(&str, &str)]) -> Value {
    let mut n = node(name, uuids.len() as u32 * 10);
    let mut annotations = json!({"hami.io/node-nvidia-register": register(uuids)});
    for (k, v) in extra {
        annotations[*k] = json!(v);
    }
    n["metadata"]["annotations"] = annotations;
    n
}

/// A pod of no PodGroup asking, as HAMi's users do, in limits only.
fn sharing_pod(name: &str, gpus: u32, mem_mib: Option<u32>) -> Value {
    let mut limits = json!({"nvidia.com/gpu": gpus.to_string()});
    if let Some(m) = mem_mib {
        limits["nvidia.com/gpumem"] = json!(m.to_string());
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "basalt", "containers": [{
            "name": "main", "image": "worker:1",
            "resources": {"requests": {"cpu": "1"}, "limits": limits},
        }]},
    })
}

fn node_obj(c: &Cluster, name: &str) -> Value {
    c.server
        .get("v1", "Node", "", name)
        .unwrap_or_else(|| panic!("node {name} exists"))
}

/// The pod the node's HAMi lock names (`<RFC3339>,<ns>,<pod>`), checked well formed.
fn lock_holder(c: &Cluster, node: &str) -> Option<String> {
    let n = node_obj(c, node);
    let value = n["metadata"]["annotations"][LOCK].as_str()?;
    let mut parts = value.splitn(3, ',');
    let (at, ns, pod) = (parts.next()?, parts.next()?, parts.next()?);
    let at: jiff::Timestamp = at
        .parse()
        .unwrap_or_else(|e| panic!("lock {value:?}: its time is not RFC 3339: {e}"));
    let age = jiff::Timestamp::now().duration_since(at).as_secs();
    assert!(
        (-5..300).contains(&age),
        "lock {value:?} is {age}s old: not fresh"
    );
    assert_eq!(ns, "default", "lock {value:?}");
    Some(pod.to_string())
}

fn annotation(p: &Value, key: &str) -> Option<String> {
    p["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

fn bound(c: &Cluster, names: &[&str]) -> Vec<String> {
    (names.iter())
        .filter(|n| c.node_of(n).is_some())
        .map(|n| n.to_string())
        .collect()
}

/// Checks a pod Basalt handed off to HAMi on `node`; returns its devices (UUID, MiB).
fn assert_handed_off(c: &Cluster, name: &str, node: &str, mem_mib: u64) -> Vec<(String, u64)> {
    let p = c.pod(name);
    assert_eq!(p["spec"]["nodeName"], node, "{name} bound to {node}");
    assert_eq!(
        p["metadata"]["labels"]["hami.io/vgpu-node"], node,
        "{name}: vgpu-node label"
    );
    assert_eq!(
        annotation(&p, "hami.io/vgpu-node").as_deref(),
        Some(node),
        "{name}: vgpu-node annotation"
    );
    let now = jiff::Timestamp::now().as_second();
    for key in ["hami.io/vgpu-time", "hami.io/bind-time"] {
        let t: i64 = annotation(&p, key)
            .unwrap_or_else(|| panic!("{name}: no {key}"))
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {key} is not Unix seconds: {e}"));
        assert!((now - 300..=now + 5).contains(&t), "{name}: {key} {t}");
    }
    let allocated = annotation(&p, "hami.io/vgpu-devices-allocated")
        .unwrap_or_else(|| panic!("{name}: no vgpu-devices-allocated"));
    assert_eq!(
        annotation(&p, "hami.io/vgpu-devices-to-allocate").as_deref(),
        Some(allocated.as_str()),
        "{name}: to-allocate and allocated differ"
    );
    // One container, one device: `UUID,NVIDIA,<MiB>,<cores>:;`, cores 0 (a memory share).
    let entry = allocated
        .strip_suffix(":;")
        .unwrap_or_else(|| panic!("{name}: {allocated:?} is not one device of one container"));
    let fields: Vec<&str> = entry.split(',').collect();
    assert!(
        fields.len() == 4
            && ["GPU-aaa", "GPU-bbb"].contains(&fields[0])
            && fields[1] == "NVIDIA"
            && fields[2] == mem_mib.to_string()
            && fields[3] == "0",
        "{name}: devices {allocated:?}, expected GPU-xxx,NVIDIA,{mem_mib},0:;"
    );
    // The physical index travels as before, and names that device.
    if let Some(ids) = annotation(&p, "scheduling.basalt.dev/gpu-ids") {
        let index = if fields[0] == "GPU-aaa" { "0" } else { "1" };
        assert_eq!(ids, index, "{name}: gpu-ids name another device");
    }
    vec![(fields[0].to_string(), mem_mib)]
}

/// What HAMi's device plugin does once its Allocate has placed the pod's containers.
fn plugin_allocates(c: &Cluster, pod: &str, node: &str) {
    c.server
        .patch(
            "v1",
            "Pod",
            "default",
            pod,
            PatchKind::Merge,
            &json!({"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}),
        )
        .expect("bind-phase success");
    c.server
        .patch(
            "v1",
            "Node",
            "",
            node,
            PatchKind::Merge,
            &json!({"metadata": {"annotations": {LOCK: null}}}),
        )
        .expect("lock released");
}

/// For `secs`, polling: exactly `held` bound, and the lock still names `holder`.
async fn stays(c: &Cluster, names: &[&str], held: &[String], holder: &str, secs: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let now = bound(c, names);
        assert_eq!(
            &now,
            held,
            "another pod bound while {holder} holds the lock ({:?} in)",
            start.elapsed()
        );
        assert_eq!(lock_holder(c, "h1").as_deref(), Some(holder), "lock holder");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hami_pods_bind_one_per_node_at_a_time_with_hami_s_annotations() {
    let c = cluster(Config::default()).await;
    c.create(hami_node("h1", &["GPU-aaa", "GPU-bbb"], &[]));
    let names = ["share-0", "share-1", "share-2"];
    for n in names {
        c.create(sharing_pod(n, 1, Some(30000)));
    }
    let (_s, logs) = c.start_logged(&[]);

    let mut held: Vec<String> = Vec::new();
    let mut devices: Vec<(String, u64)> = Vec::new();
    for round in 0..3 {
        eventually(&format!("pod {} of 3 bound", round + 1), || {
            bound(&c, &names).len() > held.len()
        })
        .await;
        let now = bound(&c, &names);
        assert_eq!(now.len(), held.len() + 1, "one pod at a time: {now:?}");
        let new = (now.iter())
            .find(|n| !held.contains(n))
            .unwrap()
            .to_string();
        assert_eq!(
            lock_holder(&c, "h1").as_deref(),
            Some(new.as_str()),
            "the node lock names the pod just bound"
        );
        let p = c.pod(&new);
        assert_eq!(
            annotation(&p, "hami.io/bind-phase").as_deref(),
            Some("allocating"),
            "{new}: bind-phase"
        );
        devices.extend(assert_handed_off(&c, &new, "h1", 30000));
        held = now;
        if round < 2 {
            // Cycles every 200 ms: the others try, and wait for the lock (told on the pod).
            let refused = format!("locked by HAMi pod default/{new}");
            eventually(&format!("a bind waiting for the lock of {new}"), || {
                (c.server.list("v1", "Event").iter()).any(|e| {
                    e["reason"] == "WaitingForNodeLock"
                        && e["message"].as_str().is_some_and(|m| m.contains(&refused))
                })
            })
            .await;
            assert!(
                !logs.problems().iter().any(|l| l.contains(&refused)),
                "a wait on the lock is no warning: {:?}",
                logs.problems()
            );
            assert_eq!(bound(&c, &names), held, "another pod bound past the lock");
            stays(&c, &names, &held, &new, if round == 0 { 3 } else { 1 }).await;
        }
        plugin_allocates(&c, &new, "h1");
    }
    eventually("the lock left free", || lock_holder(&c, "h1").is_none()).await;

    // Three pods of 30000 MiB over two devices of 81920: two on one, one on the other.
    let mut per_device: BTreeMap<String, (u64, u32)> = BTreeMap::new();
    for (uuid, mem) in &devices {
        let e = per_device.entry(uuid.clone()).or_default();
        e.0 += mem;
        e.1 += 1;
    }
    for (uuid, (mem, pods)) in &per_device {
        assert!(*mem <= GPU_MEM, "{uuid}: {mem} MiB given, {GPU_MEM} there");
        assert!(*pods <= 2, "{uuid}: {pods} pods");
    }
    let mut counts: Vec<u32> = per_device.values().map(|v| v.1).collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![1, 2], "devices per pod: {per_device:?}");
    // The phases the plugin set are kept: Basalt wrote nothing over them.
    for n in names {
        assert_eq!(
            annotation(&c.pod(n), "hami.io/bind-phase").as_deref(),
            Some("success"),
            "{n}: bind-phase"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_a_pod_that_is_gone_is_taken_over() {
    let c = cluster(Config::default()).await;
    let fresh = format!(
        "{},default,ghost",
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
    );
    c.create(hami_node("h1", &["GPU-aaa", "GPU-bbb"], &[(LOCK, &fresh)]));
    c.create(sharing_pod("share", 1, Some(30000)));
    let _s = c.start_scheduler();

    eventually("share bound", || c.node_of("share").is_some()).await;
    assert_eq!(lock_holder(&c, "h1").as_deref(), Some("share"));
    assert_handed_off(&c, "share", "h1", 30000);
    assert_eq!(
        annotation(&c.pod("share"), "hami.io/bind-phase").as_deref(),
        Some("allocating")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_binding_releases_the_lock_and_marks_the_pod_failed() {
    let c = cluster(Config::default()).await;
    c.create(hami_node("h1", &["GPU-aaa", "GPU-bbb"], &[]));
    c.create(sharing_pod("share", 1, Some(30000)));
    c.server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 1.0, 403))
        .expect("fault");
    let _s = c.start_scheduler();

    // Between attempts: the lock is free again and the pod's phase says the bind failed.
    eventually("a refused binding undone", || {
        let p = c.pod("share");
        annotation(&p, "hami.io/bind-phase").as_deref() == Some("failed")
            && lock_holder(&c, "h1").is_none()
    })
    .await;
    assert!(c.node_of("share").is_none());
    c.server.clear_faults();
    eventually("share bound", || c.node_of("share").is_some()).await;
    assert_eq!(lock_holder(&c, "h1").as_deref(), Some("share"));
    assert_handed_off(&c, "share", "h1", 30000);
    assert_eq!(
        annotation(&c.pod("share"), "hami.io/bind-phase").as_deref(),
        Some("allocating")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_sliced_node_keeps_its_nodetopology_and_gets_no_hami_annotations() {
    let c = cluster(Config::default()).await;
    let topology = |name: &str| {
        json!({
            "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "NodeTopology",
            "metadata": {"name": name},
            "spec": {"gpus": (0..8).map(|i| json!({"index": i})).collect::<Vec<_>>(),
                     "islands": [[0, 1, 2, 3], [4, 5, 6, 7]], "timeSliceReplicas": 4},
        })
    };
    // 8 GPUs × 4 replicas = 32, as the NVIDIA device plugin advertises them time-sliced.
    c.create(node("ts", 32));
    c.create(topology("ts"));
    // A control: 24 is not 8 × 4, so this node's topology is refused, and said on the node
    // (cordoned, so the pod cannot go there).
    let mut odd = node("odd", 24);
    odd["spec"] = json!({"unschedulable": true});
    c.create(odd);
    c.create(topology("odd"));
    c.create(sharing_pod("pair", 2, None));
    let (_s, logs) = c.start_logged(&[]);

    eventually("pair bound", || c.node_of("pair").is_some()).await;
    let p = c.pod("pair");
    assert_eq!(p["spec"]["nodeName"], "ts");
    let ids: Vec<u32> = annotation(&p, "scheduling.basalt.dev/gpu-ids")
        .expect("gpu-ids")
        .split(',')
        .map(|i| i.parse().expect("a GPU index"))
        .collect();
    assert_eq!(ids.len(), 2, "two GPUs: {ids:?}");
    assert_ne!(ids[0], ids[1], "two distinct physical GPUs: {ids:?}");
    assert!(ids.iter().all(|&i| i < 8), "physical indices: {ids:?}");
    assert!(
        ids.iter().all(|&i| i < 4) || ids.iter().all(|&i| i >= 4),
        "one NVLink island: {ids:?}"
    );
    let hami: Vec<&String> = (p["metadata"]["annotations"].as_object())
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .chain(
            (p["metadata"]["labels"].as_object())
                .into_iter()
                .flatten()
                .map(|(k, _)| k),
        )
        .filter(|k| k.starts_with("hami.io/"))
        .collect();
    assert!(
        hami.is_empty(),
        "HAMi annotations on a non-HAMi pod: {hami:?}"
    );
    assert!(
        node_obj(&c, "ts")["metadata"]["annotations"][LOCK].is_null(),
        "no HAMi lock on a non-HAMi node"
    );

    // The mismatch is said on the control node; none on ts.
    eventually("a ConversionWarning Event on odd", || {
        (c.events("ConversionWarning", "odd").iter())
            .any(|e| (e["message"].as_str()).is_some_and(|m| m.contains("NodeTopology lists")))
    })
    .await;
    let on_ts: Vec<Value> = (c.server.list("v1", "Event").into_iter())
        .filter(|e| e["involvedObject"]["name"] == "ts" && e["type"] == "Warning")
        .collect();
    assert!(on_ts.is_empty(), "Warning Events on ts: {on_ts:?}");
    assert!(
        !logs.any(|l| {
            let l = l.to_string();
            l.contains("Node ts") && l.contains("NodeTopology lists")
        }),
        "a topology mismatch said of ts: {:?}",
        logs.problems()
    );
}

/// An unreadable register (here cut off mid-write) drives no bind sequence: the node's GPUs
/// take no pod and the pod asking for one is told why, nothing HAMi reads is written (no lock,
/// no empty-UUID device list), the register is said on the node, and the node's CPUs still
/// take a pod that asks for none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_register_closes_the_node_s_gpus_and_writes_nothing() {
    let c = cluster(Config::default()).await;
    let whole = register(&["GPU-aaa", "GPU-bbb"]);
    let cut = &whole[..whole.len() / 2];
    let register_key = "hami.io/node-nvidia-register";
    c.create(hami_node(
        "h1",
        &["GPU-aaa", "GPU-bbb"],
        &[(register_key, cut)],
    ));
    c.create(sharing_pod("gpu", 1, None));
    let mut cpu = sharing_pod("cpu", 1, None);
    cpu["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    c.create(cpu);
    let (_s, logs) = c.start_logged(&[]);

    eventually("cpu bound", || c.node_of("cpu").is_some()).await;
    eventually(
        "a ConversionWarning Event on h1 naming the register",
        || {
            (c.events("ConversionWarning", "h1").iter()).any(|e| {
                (e["message"].as_str()).is_some_and(|m| {
                    m.contains("metadata.annotations[hami.io/node-nvidia-register]: malformed JSON")
                })
            })
        },
    )
    .await;
    eventually("a FailedScheduling Event on gpu saying why", || {
        (c.events("FailedScheduling", "gpu").iter()).any(|e| {
            (e["message"].as_str()).is_some_and(|m| {
                m.contains(
                    "had their GPUs closed (metadata.annotations[hami.io/node-nvidia-register]",
                )
            })
        })
    })
    .await;
    assert!(
        c.node_of("gpu").is_none(),
        "gpu bound to a node whose GPUs are closed"
    );
    assert!(
        node_obj(&c, "h1")["metadata"]["annotations"][LOCK].is_null(),
        "a HAMi lock taken on h1"
    );
    for name in ["gpu", "cpu"] {
        let p = c.pod(name);
        let hami: Vec<&String> = (p["metadata"]["annotations"].as_object())
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .filter(|k| k.starts_with("hami.io/"))
            .collect();
        assert!(
            hami.is_empty(),
            "{name}: HAMi annotations written: {hami:?}"
        );
    }
    assert!(
        !logs.any(|l| l.to_string().contains("InvalidObject")),
        "an object refused: {:?}",
        logs.problems()
    );
}

/// Volcano vGPU: on a node Volcano's vGPU plugin registered, the pod binds at once (no lock)
/// and Volcano's annotations arrive with the binding, as Volcano's scheduler writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volcano_vgpu_pod_gets_volcano_s_annotations_on_its_binding() {
    let c = cluster(Config::default()).await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "v1", "annotations": {
            "volcano.sh/node-vgpu-register":
                "GPU-v0,10,32768,NVIDIA-Tesla-V100,true,hami-core:GPU-v1,10,32768,NVIDIA-Tesla-V100,true,hami-core:",
        }},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110",
            "volcano.sh/vgpu-number": "20", "volcano.sh/vgpu-memory": "65536",
            "volcano.sh/vgpu-cores": "200"}},
    }));
    let mut p = sharing_pod("vg", 1, None);
    p["spec"]["containers"][0]["resources"] = json!({"limits": {
        "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000", "volcano.sh/vgpu-cores": "25",
    }});
    c.create(p);
    let (_s, _logs) = c.start_logged(&[]);

    eventually("vg bound", || c.node_of("vg").is_some()).await;
    let p = c.pod("vg");
    assert_eq!(p["spec"]["nodeName"], "v1");
    let ids = annotation(&p, "volcano.sh/vgpu-ids-new").expect("vgpu-ids-new");
    assert_eq!(ids, "GPU-v0,NVIDIA,3000,25:");
    assert_eq!(
        annotation(&p, "volcano.sh/devices-to-allocate").as_deref(),
        Some(ids.as_str())
    );
    assert_eq!(
        annotation(&p, "volcano.sh/vgpu-node").as_deref(),
        Some("v1")
    );
    assert_eq!(
        annotation(&p, "volcano.sh/bind-phase").as_deref(),
        Some("allocating")
    );
    assert!(annotation(&p, "volcano.sh/vgpu-time").is_some_and(|t| t.parse::<i64>().is_ok()));
    assert!(
        node_obj(&c, "v1")["metadata"]["annotations"][LOCK].is_null(),
        "no HAMi lock"
    );
}

/// A wait on HAMi's node lock is a wait: the PodGroup says `WaitingForNodeLock` and is never
/// reported Running while its pod is not bound, the pod is told once, and nothing is logged
/// as a bind error; once the lock is free the pod binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_hami_s_node_lock_is_a_wait_not_a_bind_error() {
    let c = cluster(Config::default()).await;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let lock = format!("{now},default,holder");
    c.create(hami_node("h1", &["GPU-aaa"], &[(LOCK, &lock)]));
    // The lock's holder, alive (another scheduler's pod on its way).
    let mut holder = sharing_pod("holder", 1, Some(1000));
    holder["spec"]["schedulerName"] = json!("hami-scheduler");
    c.create(holder);
    c.create(queue("q"));
    c.create(group("g", 1, "q"));
    let mut p = sharing_pod("g-0", 1, Some(1000));
    p["metadata"]["labels"] = json!({"scheduling.basalt.dev/pod-group": "g"});
    c.create(p);
    let (_s, logs) = c.start_logged(&[]);

    eventually("the PodGroup says it waits for the node lock", || {
        (c.group("g")["status"]["conditions"].as_array().into_iter())
            .flatten()
            .any(|k| k["type"] == "WaitingForNodeLock")
    })
    .await;
    for _ in 0..15 {
        let g = c.group("g");
        assert_ne!(g["status"]["phase"], "Running", "{g}");
        assert_eq!(g["status"]["running"], 0, "{g}");
        assert!(c.node_of("g-0").is_none());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(c.events("WaitingForNodeLock", "g-0").len(), 1, "told once");
    let problems = logs.problems();
    assert!(
        !problems.iter().any(|l| l.contains("bind")),
        "no bind error logged: {problems:?}"
    );

    // The lock is released: the pod binds and the group runs.
    let free = json!({"metadata": {"annotations": {LOCK: null}}});
    (c.server)
        .patch("v1", "Node", "", "h1", PatchKind::Merge, &free)
        .unwrap();
    eventually("the pod binds once the lock is free", || {
        c.node_of("g-0").is_some()
    })
    .await;
    eventually("the group runs", || {
        c.group("g")["status"]["phase"] == "Running"
    })
    .await;
}

/// Issue 31 item 3: HAMi allocates per container, each container's cards chosen after the
/// previous containers'. A pod whose first container asks a whole card's memory and whose
/// last asks 1000 MiB (a container without GPUs between them) takes one card per container,
/// and `vgpu-devices-to-allocate` lists each container's cards in its own slot, as HAMi's
/// device plugin pops them container by container. Summed into one share, the pod stayed
/// pending: 82,920 MiB on each of two cards fits neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_container_gets_its_own_cards_and_its_own_slot_in_the_annotation() {
    let c = cluster(Config::default()).await;
    c.create(hami_node("h1", &["GPU-aaa", "GPU-bbb"], &[]));
    let container = |name: &str, mem: Option<&str>| match mem {
        Some(m) => json!({"name": name, "image": "worker:1", "resources": {
            "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": m}}}),
        None => json!({"name": name, "image": "worker:1"}),
    };
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {"schedulerName": "basalt", "containers": [
            container("big", Some("81920")),
            container("sidecar", None),
            container("small", Some("1000")),
        ]},
    }));
    let _s = c.start_scheduler();

    eventually("two bound", || c.node_of("two").is_some()).await;
    let p = c.pod("two");
    let expected = "GPU-aaa,NVIDIA,81920,0:;;GPU-bbb,NVIDIA,1000,0:;";
    for key in [
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
    ] {
        assert_eq!(annotation(&p, key).as_deref(), Some(expected), "{key}");
    }
}

//! How long `IncrementalSnapshot::update` takes at scale, against the whole tolerant build:
//! NODES nodes of 8 GPUs, PODS pods (half bound, not Basalt's; half pending Basalt pods in
//! gangs of 8 over 200 queues), then a cycle with nothing changed, one new gang, and 1,000
//! pending pods bound: given every object (`update`), then told what changed
//! (`update_changes`).
//!
//! ```sh
//! cargo run --release -p basalt-crds --example incremental -- 10000 100000
//! ```
//!
//! With a third argument `changes`: only the steps told what changed (for a profiler), the
//! last of them every other pending pod bound (the cycle after a backlog's binds).
//!
//! With a third argument `forecast`: what the daemon's forecast spends on its input instead
//! (thread CPU, best of 3): the shared list of conversions made on the cycle's thread, the
//! spec assembled from it, against every object converted again, and the pods' ends.

use std::sync::Arc;
use std::time::Instant;

use basalt_crds::ends::{ends, Learned};
use basalt_crds::incremental::usable_spec;
use basalt_crds::types::{PodGroup, Queue};
use basalt_crds::{build_snapshot_tolerant, Change, ConvertOptions, IncrementalSnapshot, Object};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

fn node(i: usize) -> Object {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:05}"), "labels": {"topology.basalt.dev/rack": format!("r{}", i / 16)}},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"}}
    }))
    .unwrap();
    Object::Node(Arc::new(n))
}

fn pod(i: usize, nodes: usize, pending: bool) -> Object {
    let p: Pod = if pending {
        serde_json::from_value(json!({
            "metadata": {"name": format!("job-{:05}-{}", i / 8, i % 8), "namespace": "ml",
                "creationTimestamp": "2026-12-03T00:00:00Z",
                "annotations": {"scheduling.basalt.dev/pod-group": format!("job-{:05}", i / 8)}},
            "spec": {"schedulerName": "basalt", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}
        }))
    } else {
        serde_json::from_value(json!({
            "metadata": {"name": format!("other-{i:06}"), "namespace": "ml"},
            "spec": {"schedulerName": "default-scheduler", "nodeName": format!("node-{:05}", i % nodes),
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        }))
    }
    .unwrap();
    Object::Pod(Arc::new(p))
}

fn group(j: usize) -> Object {
    let g: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": format!("job-{j:05}"), "namespace": "ml"},
        "spec": {"minMember": 8, "queue": format!("q{}", j % 200)}
    }))
    .unwrap();
    Object::PodGroup(Arc::new(g))
}

fn queue(q: usize) -> Object {
    let q: Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.basalt.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": format!("q{q}")}, "spec": {"weight": 1}
    }))
    .unwrap();
    Object::Queue(Box::new(q))
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let forecast = raw.get(2).is_some_and(|a| a == "forecast");
    let changes_only = raw.get(2).is_some_and(|a| a == "changes");
    let args: Vec<usize> = raw.iter().take(2).map(|a| a.parse().unwrap()).collect();
    let (nodes, pods) = (
        args.first().copied().unwrap_or(10_000),
        args.get(1).copied().unwrap_or(100_000),
    );
    let src = || "cluster".to_string();
    let mut objects: Vec<(String, Object)> = (0..nodes).map(|i| (src(), node(i))).collect();
    objects.extend((0..200).map(|q| (src(), queue(q))));
    let pending = pods / 2;
    objects.extend((0..pending / 8).map(|j| (src(), group(j))));
    objects.extend((0..pods - pending).map(|i| (src(), pod(i, nodes, false))));
    objects.extend((0..pending).map(|i| (src(), pod(i, nodes, true))));
    let options = ConvertOptions::default();
    if forecast {
        return forecast_input(&objects, &options);
    }
    // The objects are cloned before the clock starts: a daemon makes them each cycle anyway.
    let time = |what: &str, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        let rss = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        println!(
            "{what}: {:.1} ms (VmRSS {} MiB)",
            t.elapsed().as_secs_f64() * 1000.0,
            rss / 1024
        );
    };
    time("whole tolerant build", &mut || {
        build_snapshot_tolerant(&objects, &options);
    });
    told_changes(&objects, nodes, pending, &options, &time);
    if changes_only {
        return;
    }
    let mut inc = IncrementalSnapshot::new();
    let mut given = Some(objects.clone());
    time("first update", &mut || {
        inc.update(given.take().unwrap(), &options);
    });
    given = Some(objects.clone());
    time("nothing changed", &mut || {
        inc.update(given.take().unwrap(), &options);
    });
    let n = objects.len();
    let new_gang = pending / 8 + 1;
    objects.push((src(), group(new_gang)));
    objects.extend((0..8).map(|k| (src(), pod(new_gang * 8 + k, nodes, true))));
    given = Some(objects.clone());
    time("one new gang", &mut || {
        inc.update(given.take().unwrap(), &options);
    });
    // 1,000 pending pods bound.
    for (k, (_, o)) in objects[n - 1000..n].iter_mut().enumerate() {
        let Object::Pod(p) = o else { continue };
        let mut bound = (**p).clone();
        bound.spec.as_mut().unwrap().node_name = Some(format!("node-{:05}", k % nodes));
        bound.status.as_mut().unwrap().phase = Some("Running".into());
        *o = Object::Pod(Arc::new(bound));
    }
    given = Some(objects.clone());
    time("1,000 pods bound", &mut || {
        inc.update(given.take().unwrap(), &options);
    });
    given = Some(objects.clone());
    time("nothing changed", &mut || {
        inc.update(given.take().unwrap(), &options);
    });
    time("whole tolerant build", &mut || {
        build_snapshot_tolerant(&objects, &options);
    });
}

/// The same steps, told what changed.
fn told_changes(
    objects: &[(String, Object)],
    nodes: usize,
    pending: usize,
    options: &ConvertOptions,
    time: &dyn Fn(&str, &mut dyn FnMut()),
) {
    let set = |o: &Object| Change::Set("cluster".into(), o.clone());
    let mut inc = IncrementalSnapshot::new();
    let mut given = Some(objects.iter().map(|(_, o)| set(o)).collect::<Vec<_>>());
    time("changes: first update", &mut || {
        inc.update_changes(given.take().unwrap(), options);
    });
    time("changes: nothing changed", &mut || {
        inc.update_changes(Vec::new(), options);
    });
    let new_gang = pending / 8 + 1;
    let mut gang = vec![set(&group(new_gang))];
    gang.extend((0..8).map(|k| set(&pod(new_gang * 8 + k, nodes, true))));
    given = Some(gang);
    time("changes: one new gang", &mut || {
        inc.update_changes(given.take().unwrap(), options);
    });
    let n = objects.len();
    // Each pod of `range` bound to a node, running.
    let bind = |range: std::ops::Range<usize>| -> Vec<Change> {
        (objects[range].iter().enumerate())
            .filter_map(|(k, (_, o))| {
                let Object::Pod(p) = o else { return None };
                let mut bound = (**p).clone();
                bound.spec.as_mut()?.node_name = Some(format!("node-{:05}", k % nodes));
                bound.status.as_mut()?.phase = Some("Running".into());
                Some(set(&Object::Pod(Arc::new(bound))))
            })
            .collect()
    };
    let bound = bind(n - 1000..n);
    given = Some(bound);
    time("changes: 1,000 pods bound", &mut || {
        inc.update_changes(given.take().unwrap(), options);
    });
    // Then every other pending pod bound: the cycle after a backlog's binds.
    let bound = bind(n - pending..n - 1000);
    let what = format!("changes: the other {} pending pods bound", bound.len());
    given = Some(bound);
    time(&what, &mut || {
        inc.update_changes(given.take().unwrap(), options);
    });
}

/// What the forecast's input costs (see the module documentation).
fn forecast_input(objects: &[(String, Object)], options: &ConvertOptions) {
    let mut inc = IncrementalSnapshot::new();
    let all = (objects.iter()).map(|(_, o)| Change::Set("cluster".into(), o.clone()));
    inc.update_changes(all.collect::<Vec<_>>(), options);
    let best = |what: &str, f: &mut dyn FnMut()| {
        let cpu_ms = (0..3)
            .map(|_| {
                let before = thread_cpu_ns();
                f();
                (thread_cpu_ns() - before) as f64 / 1e6
            })
            .fold(f64::INFINITY, f64::min);
        println!("{what}: {cpu_ms:.1} ms CPU");
    };
    let (mut list_ms, mut strings_ms) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        // A pod changed: the next list is made anew.
        let Object::Pod(p) = &objects[objects.len() - 1].1 else {
            unreachable!("pods last")
        };
        let changed = Object::Pod(Arc::new((**p).clone()));
        inc.update_changes([Change::Set("cluster".into(), changed)], options);
        let before = thread_cpu_ns();
        let converted = inc.converted().expect("updated");
        let between = thread_cpu_ns();
        // What the cycle's thread made before: every object with its origin as a `String`.
        drop(converted.objects());
        list_ms = list_ms.min((between - before) as f64 / 1e6);
        strings_ms = strings_ms.min((thread_cpu_ns() - between) as f64 / 1e6);
    }
    println!("the shared list (on the cycle's thread): {list_ms:.1} ms CPU");
    println!(
        "the objects as (String, Object), as the cycle made them before: {strings_ms:.1} ms CPU"
    );
    let converted = inc.converted().expect("updated");
    best(
        "the spec from the kept conversions, pods shared",
        &mut || {
            drop(converted.kept_shared_spec(options).expect("kept"));
        },
    );
    best(
        "the spec from the kept conversions, pods copied",
        &mut || {
            drop(converted.kept_spec(options).expect("kept"));
        },
    );
    let listed = converted.objects();
    best("the spec converted anew", &mut || {
        drop(usable_spec(&listed, options).expect("converts"));
    });
    let (spec, usable) = converted.kept_spec(options).expect("kept");
    best("the pods' ends", &mut || {
        drop(ends(&usable, &spec, &Learned::default()));
    });
}

/// This thread's time on a CPU in nanoseconds (Linux's schedstat).
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

//! The protocol's floor under the daemon's figures: what any scheduler written on kube-rs pays
//! to bind the same pending pods, with no scheduling in it. `scale floor NODES PODS ...` sets the
//! cluster up as for the daemon and runs this client in its place, in a process of its own:
//! it watches pods and nodes into kube's reflector stores (a scheduler must see every pod and
//! node), then for each pending Basalt pod sends what the daemon sends, a `pods/binding` and a
//! `Scheduled` Event, `CONCURRENCY` at a time, and waits until its watch shows every one bound.
//! Reported: the client's CPU from the caches synced to every bind seen, per bind, and its
//! resident memory then. The daemon's own cost is its figure less this one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status, Time};
use kube::api::{Api, PostParams};
use kube::runtime::{reflector, watcher};
use kube::Client;

/// Requests in flight: the daemon's `--bind-concurrency` default.
const CONCURRENCY: usize = 64;

/// The client's side: run in the child process `scale __floor-client NODES`.
pub async fn client(nodes: usize) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let bound_seen = Arc::new(AtomicUsize::new(0));
    let seen = bound_seen.clone();
    let pods = watch(client.clone(), move |p: &Pod| {
        if (p.spec.as_ref()).is_some_and(|s| s.node_name.is_some()) {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });
    let nodes_store = watch(client.clone(), |_: &Node| {});
    pods.wait_until_ready().await?;
    nodes_store.wait_until_ready().await?;
    let (t0, cpu0) = (
        Instant::now(),
        crate::procfs::cpu_seconds(std::process::id()),
    );
    let seen0 = bound_seen.load(Ordering::Relaxed);
    let pending: Vec<Arc<Pod>> = (pods.state().into_iter())
        .filter(|p| (p.spec.as_ref()).is_some_and(|s| s.node_name.is_none()))
        .collect();
    futures::stream::iter(pending.iter().enumerate())
        .map(|(i, pod)| bind_and_tell(&client, pod, format!("n{}", i % nodes.max(1))))
        .buffer_unordered(CONCURRENCY)
        .for_each(|r| async move {
            if let Err(e) = r {
                eprintln!("floor: {e}");
            }
        })
        .await;
    while bound_seen.load(Ordering::Relaxed) - seen0 < pending.len() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (secs, cpu) = (
        t0.elapsed().as_secs_f64(),
        crate::procfs::cpu_seconds(std::process::id()) - cpu0,
    );
    let n = pending.len().max(1) as f64;
    println!(
        "floor: {} binds and Events sent and seen on the watch in {secs:.2} s ({:.0} binds/s); \
         client CPU {cpu:.2} s = {:.0} µs a bind",
        pending.len(),
        n / secs,
        cpu / n * 1e6
    );
    let mib =
        |field| crate::procfs::proc_field(std::process::id(), "status", field).unwrap_or(0) / 1024;
    println!(
        "floor: VmRSS {} MiB holding the pod and node stores (peak VmHWM {} MiB)",
        mib("VmRSS:"),
        mib("VmHWM:")
    );
    Ok(())
}

/// A reflector store of every `K`, its watch driven by a task that shows `updated` each
/// object updated after the initial list.
fn watch<K>(client: Client, updated: impl Fn(&K) + Send + 'static) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = reflector(
        writer,
        watcher(Api::<K>::all(client), watcher::Config::default()),
    );
    tokio::spawn(events.for_each(move |event| {
        if let Ok(watcher::Event::Apply(object)) = &event {
            updated(object);
        }
        async {}
    }));
    store
}

/// What the daemon writes for one bind: the Binding, then the `Scheduled` Event.
async fn bind_and_tell(client: &Client, pod: &Pod, node: String) -> anyhow::Result<()> {
    let (ns, name) = (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.clone()),
            ..Default::default()
        },
    };
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create_subresource::<_, Status>("binding", &name, &PostParams::default(), &binding)
        .await?;
    let now = Time(jiff::Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ns.clone()),
            name: Some(name.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some("Scheduled".into()),
        message: Some(format!("Successfully assigned {ns}/{name} to {node}")),
        type_: Some("Normal".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some("basalt".into()),
            host: None,
        }),
        reporting_component: Some("basalt".into()),
        reporting_instance: Some("floor".into()),
        ..Default::default()
    };
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await?;
    Ok(())
}

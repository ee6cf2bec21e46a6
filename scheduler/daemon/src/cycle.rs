//! One scheduling cycle: the stores (plus the assume cache) to a snapshot, the engine, the plan
//! applied.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_crds::convert::namespace_queue;
use basalt_crds::{
    build_snapshot_tolerant, ConvertError, ConvertOptions, Object, PodGroup, QueueStatus,
};
use basalt_engine::{Snapshot, DEFAULT_QUEUE};
use k8s_openapi::api::core::v1::Pod;

use crate::apply::Scheduler;
use crate::scheduler_plugins;
use crate::stores::Stores;
use crate::volcano;

/// Source label of every object (errors say `cluster: Pod ns/name: field: message`).
pub const SOURCE: &str = "cluster";

/// The API a PodGroup or Queue of this cycle was read from, where its status is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Basalt,
    Volcano,
    /// scheduler-plugins' coscheduling PodGroup: read, its status never written.
    SchedulerPlugins,
}

impl Origin {
    pub fn api_version(self) -> &'static str {
        match self {
            Origin::Basalt => basalt_crds::types::API_VERSION,
            Origin::Volcano => volcano::API_VERSION,
            Origin::SchedulerPlugins => scheduler_plugins::API_VERSION,
        }
    }
}

pub struct GroupEntry {
    pub group: Arc<PodGroup>,
    pub origin: Origin,
    /// The queue it goes to: its own, else its namespace's, else `default`.
    pub queue: String,
}

pub struct QueueEntry {
    /// The status as it stands (only what the scheduler writes).
    pub status: Option<QueueStatus>,
    pub origin: Origin,
}

/// The PodGroups and Queues that went into this cycle's snapshot, Basalt's and Volcano's, by
/// `ns/name` and name.
#[derive(Default)]
pub struct View {
    pub groups: HashMap<String, GroupEntry>,
    pub queues: HashMap<String, QueueEntry>,
    /// Per namespace, the queue it names for its jobs (`scheduling.basalt.dev/queue`).
    pub namespace_queues: HashMap<String, String>,
}

pub struct Outcome {
    /// How long to wait before the next cycle (binds failed with a retryable error).
    pub backoff: Duration,
}

/// The last snapshot and what it was built from: a cycle whose inputs are the same objects
/// (the watch caches' very objects, held here so that no other can take their place) under the
/// same options schedules on it again, at the new instant, instead of converting and building
/// everything anew. Conversion is a pure function of the objects and options, and the engine
/// takes the instant as an argument, so the plan is the one a fresh build would give.
pub struct LastBuild {
    objects: Vec<(String, Object)>,
    options: ConvertOptions,
    snapshot: Snapshot,
}

impl LastBuild {
    fn same_inputs(&self, objects: &[(String, Object)], options: &ConvertOptions) -> bool {
        let same = |(oa, a): &(String, Object), (ob, b): &(String, Object)| {
            oa == ob
                && match (a, b) {
                    // The caches replace an object's Arc on every event.
                    (Object::Pod(x), Object::Pod(y)) => Arc::ptr_eq(x, y),
                    (Object::Node(x), Object::Node(y)) => Arc::ptr_eq(x, y),
                    // DRA's objects likewise; a claim written and not yet watched is the
                    // assume cache's one Arc until then.
                    (Object::DeviceClass(x), Object::DeviceClass(y)) => Arc::ptr_eq(x, y),
                    (Object::ResourceSlice(x), Object::ResourceSlice(y)) => Arc::ptr_eq(x, y),
                    (Object::ResourceClaim(x), Object::ResourceClaim(y)) => Arc::ptr_eq(x, y),
                    // Peers' groups are converted afresh each cycle: their values tell.
                    (Object::PodGroup(x), Object::PodGroup(y)) => Arc::ptr_eq(x, y) || x == y,
                    (x, y) => x == y,
                }
        };
        let timeless = |o: &ConvertOptions| ConvertOptions {
            now_ms: 0,
            ..o.clone()
        };
        timeless(&self.options) == timeless(options)
            && self.objects.len() == objects.len()
            && self.objects.iter().zip(objects).all(|(a, b)| same(a, b))
    }
}

pub async fn run_cycle(s: &mut Scheduler, stores: &Stores) -> Outcome {
    let started = Instant::now();
    s.auto_groups(stores).await;
    let t_auto = started.elapsed();
    let (objects, unreadable, mut warnings) = collect(s, stores);
    let t_collect = started.elapsed();
    let options = ConvertOptions {
        scheduler_names: s.config.scheduler_names.clone(),
        now_ms: jiff::Timestamp::now().as_millisecond(),
        device_resources: s.config.devices.clone(),
        tiers: s.config.topology.tiers.clone(),
    };
    let reused = match s.last.as_mut() {
        Some(last) if unreadable.is_empty() && last.same_inputs(&objects, &options) => {
            last.snapshot.now_ms = options.now_ms;
            true
        }
        _ => false,
    };
    if !reused {
        s.last = None;
        // Each bad object is reported and left out alone (its bound pods still count on their
        // nodes); no number of them stops the cycle.
        let built = build_snapshot_tolerant(&objects, &options);
        let mut errors = built.errors;
        errors.extend(unreadable);
        s.report_convert_errors(&errors).await;
        warnings.extend(built.warnings);
        s.report_warnings(warnings).await;
        let Some(snapshot) = built.snapshot else {
            s.metrics
                .cycle_duration
                .observe(started.elapsed().as_secs_f64());
            return Outcome {
                backoff: Duration::ZERO,
            };
        };
        s.held = crate::report::held(&snapshot);
        s.last = Some(LastBuild {
            objects,
            options,
            snapshot,
        });
    }
    let t_build = started.elapsed();
    let last = s.last.take().expect("a snapshot was built or kept");
    let plan = basalt_plugins::schedule(&last.snapshot, &s.config);
    s.last = Some(last);
    let t_schedule = started.elapsed();
    let backoff = s.apply(&plan, stores).await;
    let total = started.elapsed();
    s.metrics.cycle_duration.observe(total.as_secs_f64());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    tracing::debug!(
        auto_groups_ms = ms(t_auto),
        collect_ms = ms(t_collect - t_auto),
        build_ms = ms(t_build - t_collect),
        reused,
        schedule_ms = ms(t_schedule - t_build),
        apply_ms = ms(total - t_schedule),
        binds = plan.bindings.len(),
        "cycle"
    );
    Outcome { backoff }
}

/// The stores' objects, with pods this scheduler bound but the watch does not show bound yet
/// placed where they were bound (the assume cache), so their capacity is never handed out twice;
/// likewise the DRA claims it wrote, as written (`assumed_claims.rs`).
/// Volcano's PodGroups and Queues join Basalt's (Basalt's win a name they share); those that
/// cannot be read are returned as errors. Volcano's HyperNodes join too (conversion turns them
/// into node labels). Also returns warnings about Volcano fields not honoured.
fn collect(
    s: &mut Scheduler,
    stores: &Stores,
) -> (Vec<(String, Object)>, Vec<ConvertError>, Vec<String>) {
    let mut objects = Vec::new();
    let mut unreadable = Vec::new();
    let mut warnings = Vec::new();
    let mut view = View::default();
    let mut collisions = HashSet::new();
    let volcano = stores.volcano.current();
    let src = || SOURCE.to_string();
    for n in stores.nodes.state() {
        objects.push((src(), Object::Node(n)));
    }
    for c in stores.priority_classes.state() {
        objects.push((src(), Object::PriorityClass(Box::new((*c).clone()))));
    }
    let mut namespace_queues = HashMap::new();
    for n in stores.namespaces.state() {
        if let (Some(name), Some(q)) = (&n.metadata.name, namespace_queue(&n.metadata)) {
            namespace_queues.insert(name.clone(), q.to_string());
        }
        objects.push((src(), Object::Namespace(Box::new((*n).clone()))));
    }
    let queue_of = |g: &PodGroup| {
        let ns = g.metadata.namespace.as_deref().unwrap_or("default");
        (g.spec.queue.clone().filter(|q| !q.is_empty()))
            .or_else(|| namespace_queues.get(ns).cloned())
            .unwrap_or_else(|| DEFAULT_QUEUE.to_string())
    };
    for c in stores.claims.state() {
        objects.push((src(), Object::PersistentVolumeClaim(Box::new((*c).clone()))));
    }
    for v in stores.volumes.state() {
        objects.push((src(), Object::PersistentVolume(Box::new((*v).clone()))));
    }
    for c in stores.storage_classes.state() {
        objects.push((src(), Object::StorageClass(Box::new((*c).clone()))));
    }
    // DRA: the claims this scheduler wrote stand as written until the watch shows them.
    match stores.dra.current() {
        Some(dra) => {
            let kinds = &dra.kinds;
            for c in kinds.classes.iter().flat_map(|s| s.state()) {
                objects.push((src(), Object::DeviceClass(c)));
            }
            for sl in kinds.slices.iter().flat_map(|s| s.state()) {
                objects.push((src(), Object::ResourceSlice(sl)));
            }
            for c in s.assumed_claims.overlay(kinds.claims()) {
                objects.push((src(), Object::ResourceClaim(c)));
            }
        }
        None => s.assumed_claims.clear(),
    }
    for q in stores.queues.state() {
        let name = q.metadata.name.clone().unwrap_or_default();
        view.queues.insert(
            name,
            QueueEntry {
                status: q.status.clone(),
                origin: Origin::Basalt,
            },
        );
        objects.push((src(), Object::Queue(Box::new((*q).clone()))));
    }
    for q in volcano
        .iter()
        .flat_map(|v| v.kinds.queues.iter())
        .flat_map(|s| s.state())
    {
        let name = q.metadata.name.clone().unwrap_or_default();
        // Volcano's `root` is its queue tree's implicit top, which Basalt has built in.
        if name == "root" {
            continue;
        }
        if view.queues.contains_key(&name) {
            collisions.insert(format!("Queue {name}"));
            continue;
        }
        match q.to_basalt() {
            Ok(b) => {
                view.queues.insert(
                    name,
                    QueueEntry {
                        status: q.current_status(),
                        origin: Origin::Volcano,
                    },
                );
                objects.push((volcano::ORIGIN.to_string(), Object::Queue(Box::new(b))));
            }
            Err(e) => unreadable.push(e),
        }
    }
    for h in stores
        .hyper_nodes
        .current()
        .iter()
        .flat_map(|w| w.kinds.hyper_nodes.state())
    {
        match h.to_basalt() {
            Ok(typed) => objects.push((
                volcano::TOPOLOGY_ORIGIN.to_string(),
                Object::HyperNode(Box::new(typed)),
            )),
            Err(e) => unreadable.push(e),
        }
    }
    for t in stores.topologies.state() {
        objects.push((src(), Object::NodeTopology(Box::new((*t).clone()))));
    }
    let mut group_keys = HashSet::new();
    for g in stores.pod_groups.state() {
        let key = format!(
            "{}/{}",
            g.metadata.namespace.as_deref().unwrap_or("default"),
            g.metadata.name.as_deref().unwrap_or("")
        );
        group_keys.insert(key.clone());
        objects.push((src(), Object::PodGroup(g.clone())));
        view.groups.insert(
            key,
            GroupEntry {
                queue: queue_of(&g),
                group: g,
                origin: Origin::Basalt,
            },
        );
    }
    // Volcano's groups, then scheduler-plugins', each where no group before it has the name
    // (Basalt's win, then Volcano's).
    let sigs = stores.scheduler_plugins.current();
    let mut add_peer =
        |key: String,
         origin: Origin,
         convert: &dyn Fn() -> Result<(PodGroup, Vec<String>), ConvertError>| {
            if view.groups.contains_key(&key) {
                collisions.insert(format!("PodGroup {key}"));
                return;
            }
            match convert() {
                Ok((b, w)) => {
                    warnings.extend(w);
                    let label = match origin {
                        Origin::SchedulerPlugins => scheduler_plugins::ORIGIN,
                        _ => volcano::ORIGIN,
                    };
                    let queue = queue_of(&b);
                    let group = Arc::new(b);
                    objects.push((label.to_string(), Object::PodGroup(group.clone())));
                    view.groups.insert(
                        key,
                        GroupEntry {
                            group,
                            origin,
                            queue,
                        },
                    );
                }
                Err(e) => unreadable.push(e),
            }
        };
    let key_of = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        let ns = m.namespace.as_deref().unwrap_or("default");
        format!("{ns}/{}", m.name.as_deref().unwrap_or(""))
    };
    let volcano_groups = (volcano.iter()).flat_map(|v| v.kinds.pod_groups.iter());
    for g in volcano_groups.flat_map(|s| s.state()) {
        add_peer(key_of(&g.metadata), Origin::Volcano, &|| g.to_basalt());
    }
    for g in (sigs.iter()).flat_map(|s| s.kinds.pod_groups.state()) {
        add_peer(key_of(&g.metadata), Origin::SchedulerPlugins, &|| {
            g.to_basalt()
        });
    }
    for c in &collisions {
        if !s.collisions.contains(c) {
            tracing::warn!(object = %c, "PodGroups of two APIs share this name; Basalt's is used, then Volcano's, and the other ignored");
        }
    }
    s.collisions = collisions;
    view.namespace_queues = namespace_queues;
    s.view = view;
    // An auto PodGroup the watch shows: nothing left to bridge.
    s.auto_groups.retain(|pod, group| {
        let (ns, _) = pod.split_once('/').unwrap_or(("default", pod));
        !group_keys.contains(&format!("{ns}/{group}"))
    });
    let mut seen = HashSet::new();
    let mut live_members = HashSet::new();
    // Nothing assumed, held or being joined to a group: every pod goes in as the cache has it
    // (no key is made for each of them).
    let bridging = !(s.assumed.is_empty()
        && s.hold.is_empty()
        && s.owner_members.is_empty()
        && s.auto_groups.is_empty());
    let now = jiff::Timestamp::now();
    for p in stores.pods.state() {
        if waits_for_its_group(&p, &s.view, now) && !s.auto_groups.contains_key(&pod_key(&p)) {
            continue;
        }
        if !bridging {
            objects.push((src(), Object::Pod(p)));
            continue;
        }
        // The cache's own object, copied only where the cycle must see it otherwise.
        let mut pod: Arc<Pod> = p;
        let key = pod_key(&pod);
        if let Some(assumed) = s.assumed.get(&key) {
            let watched = pod.spec.as_ref().and_then(|sp| sp.node_name.clone());
            let same_pod = pod.metadata.uid == assumed.uid;
            if watched.is_some() || !same_pod {
                // The watch caught up (or the pod was replaced): the store is the truth now.
                s.assumed.remove(&key);
            } else {
                seen.insert(key.clone());
                let pod = Arc::make_mut(&mut pod);
                if let Some(spec) = pod.spec.as_mut() {
                    spec.node_name = Some(assumed.node.clone());
                }
                if !assumed.gpus.is_empty() {
                    pod.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(
                            basalt_crds::convert::GPU_IDS.to_string(),
                            assumed.gpus.clone(),
                        );
                }
            }
        }
        if s.hold.contains(&key) {
            continue;
        }
        if let Some(group) = s.owner_members.get(&key) {
            let (ns, _) = key.split_once('/').unwrap_or(("default", &key));
            let named = crate::apply::member_of(&pod).map(|g| format!("{ns}/{g}"));
            if named.as_ref() == Some(group) && group_keys.contains(group) {
                // Both watched: an ordinary member from now on.
                s.owner_members.remove(&key);
            } else {
                live_members.insert(key);
                continue;
            }
        }
        // The pod may name its new auto PodGroup before the group's watch shows it: until
        // then it stays in its implicit group of one.
        let names_group = (pod.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(basalt_crds::convert::POD_GROUP));
        if names_group && s.auto_groups.contains_key(&key) {
            if let Some(a) = Arc::make_mut(&mut pod).metadata.annotations.as_mut() {
                a.remove(basalt_crds::convert::POD_GROUP);
            }
        }
        objects.push((src(), Object::Pod(pod)));
    }
    // A pod that left the store was deleted: nothing to assume any more.
    s.assumed.retain(|k, _| seen.contains(k));
    s.owner_members.retain(|k, _| live_members.contains(k));
    (objects, unreadable, warnings)
}

/// How long a pod may name a PodGroup the watch has not shown before it is reported as naming
/// one that does not exist: a controller makes the group first, but two watches need not
/// deliver in that order.
const GROUP_GRACE_S: i64 = 30;

/// A pod waiting to be placed that names a PodGroup the watches have not shown yet, created
/// less than [`GROUP_GRACE_S`] ago: left out of this cycle quietly (not an invalid object).
fn waits_for_its_group(p: &Pod, view: &View, now: jiff::Timestamp) -> bool {
    let spec = p.spec.as_ref();
    if spec.and_then(|s| s.node_name.as_deref()).is_some() {
        return false;
    }
    let Some(group) = crate::apply::member_of(p) else {
        return false;
    };
    let Some(created) = p.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let young = now.duration_since(created.0).as_secs() < GROUP_GRACE_S;
    young && {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        !view.groups.contains_key(&format!("{ns}/{group}"))
    }
}

pub fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

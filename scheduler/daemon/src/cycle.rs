//! One scheduling cycle: the stores (plus the assume cache) to a snapshot, the engine, the plan
//! applied.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_crds::convert::{explicit_group, namespace_queue};
use basalt_crds::{Change, ConvertError, ConvertOptions, Object, Origin as Source, PodGroup};
use basalt_engine::TaskState;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

use crate::apply::auto_groups::awaits_group;
use crate::changes::{Changed, Changes, Key};
use crate::held_pods::HeldPods;
use crate::kept_groups::Read;
use crate::keys::{group_key, key_of, pod_key};
use crate::lenient::Lenient;
use crate::overfull::Overfull;
use crate::ownership::Ownership;
use crate::scheduler::Scheduler;
use crate::scheduler_plugins;
use crate::stores::{Stores, SOURCE};
use crate::view::{Origin, View};
use crate::volcano;
use crate::wake::{grace_end, Deadlines};

pub struct Outcome {
    /// How long to wait before the next cycle (binds failed with a retryable error).
    pub backoff: Duration,
    /// When what this cycle saw changes with time alone (`wake.rs`).
    pub deadlines: Deadlines,
}

pub async fn run_cycle(s: &mut Scheduler, stores: &Stores) -> Outcome {
    let started = Instant::now();
    // Taken first: what changes from here on is the next cycle's.
    let changes = stores.changes.take();
    let pod_at = |(ns, name): &Key| {
        let at = ObjectRef::new(name);
        stores.pods.get(&match ns {
            Some(ns) => at.within(ns),
            None => at,
        })
    };
    let pods_changed = changes.of("pods");
    s.unbound
        .update(pods_changed, || stores.pods.state(), pod_at);
    s.auto_groups(stores).await;
    let t_auto = started.elapsed();
    let mut deadlines = Deadlines::default();
    let (objects, unreadable, mut warnings) = collect(s, stores, &changes, &mut deadlines);
    let t_collect = started.elapsed();
    let options = ConvertOptions {
        scheduler_names: s.config.scheduler_names.clone(),
        now_ms: jiff::Timestamp::now().as_millisecond(),
        device_resources: s.config.devices.clone(),
        tiers: s.config.topology.tiers.clone(),
    };
    // Only what changed since the last cycle is converted and built again; nothing when
    // nothing did (`basalt_crds::incremental`).
    let update = s.snapshots.update_changes(objects, &options);
    let t_update = started.elapsed();
    let reused = update.unchanged && unreadable.is_empty();
    let names = &s.config.scheduler_names;
    // Read from the pods alone, and from those that changed where the log names them.
    match pods_changed {
        _ if s.ownership.names() != names.as_slice() => {
            s.ownership = Ownership::of(&stores.pods.state(), names);
        }
        None => {}
        Some(Changed::Objects(keys)) => s.ownership.update(keys, pod_at),
        Some(Changed::Everything) => {
            s.ownership = Ownership::of(&stores.pods.state(), names);
        }
    }
    if !update.unchanged {
        s.report_shared_groups();
    }
    if !reused {
        // Each bad object is reported and left out alone (its bound pods still count on their
        // nodes); no number of them stops the cycle.
        let mut errors = update.errors;
        errors.extend(unreadable);
        s.report_convert_errors(&errors).await;
        warnings.extend(update.warnings);
        s.report_warnings(warnings).await;
    }
    // The usage this scheduler carries wins over its own status writes coming back.
    let carried = (s.snapshots.snapshot()).and_then(|snap| s.usage.merged(&snap.usage));
    if let Some(usage) = carried {
        s.snapshots.set_usage(usage);
    }
    let Some(snapshot) = s.snapshots.snapshot() else {
        s.metrics
            .cycle_ended(started.elapsed().as_secs_f64(), unix_now());
        return Outcome {
            backoff: Duration::ZERO,
            deadlines,
        };
    };
    if !update.unchanged {
        s.held = HeldPods::of(snapshot);
        s.overfull = Overfull::of(snapshot);
    }
    if (snapshot.tasks.iter()).any(|t| t.state == TaskState::Pending) {
        deadlines.every_period("pods pending");
    }
    let t_build = started.elapsed();
    let (fw, warm) = s.framework.get(&s.config, &snapshot.resources);
    let metrics = &s.metrics;
    let plan = Arc::new(basalt_engine::schedule_each(
        snapshot,
        fw,
        warm,
        |action, run| {
            let t = Instant::now();
            run();
            metrics.action_ran(action.name(), t.elapsed().as_secs_f64());
        },
    ));
    s.usage.remember(&plan);
    let topology = warm.topology(snapshot, &s.config.topology.tiers, false);
    s.metrics.observe_plan(snapshot, &plan, topology.as_deref());
    s.held_binds = s.overfull.held(&plan, snapshot);
    s.report_overfull();
    let t_schedule = started.elapsed();
    let backoff = s.apply(&plan, stores).await;
    let t_apply = started.elapsed();
    // The forecast task shares the objects the snapshot was updated from, their conversions
    // and this cycle's plan (its own first cycle): nothing is copied, converted or decided
    // again. After the binds, which never wait for the list it makes.
    if let Some(forecaster) = &s.forecaster {
        forecaster.offer(|| {
            Some(crate::forecast::Input {
                objects: s.snapshots.converted()?,
                options: options.clone(),
                config: s.config.clone(),
                plan: plan.clone(),
            })
        });
    }
    s.report_bad_runtimes();
    let total = started.elapsed();
    s.metrics.cycle_ended(total.as_secs_f64(), unix_now());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    tracing::debug!(
        auto_groups_ms = ms(t_auto),
        collect_ms = ms(t_collect - t_auto),
        build_ms = ms(t_build - t_collect),
        snapshot_update_ms = ms(t_update - t_collect),
        build_rest_ms = ms(t_build - t_update),
        reused,
        schedule_ms = ms(t_schedule - t_build),
        apply_ms = ms(t_apply - t_schedule),
        forecast_offer_ms = ms(total - t_apply),
        binds = plan.bindings.len(),
        "cycle"
    );
    if !backoff.is_zero() {
        deadlines.at(Instant::now() + backoff, "binds to retry");
    }
    Outcome { backoff, deadlines }
}

/// The stores' objects, with pods this scheduler bound but the watch does not show bound yet
/// placed where they were bound (the assume cache), so their capacity is never handed out twice;
/// likewise the DRA claims it wrote, as written (`assumed_claims.rs`).
/// Volcano's PodGroups and Queues join Basalt's (Basalt's win a name they share); those that
/// cannot be read are returned as errors. Volcano's HyperNodes join too (conversion turns them
/// into node labels). Also returns warnings about Volcano fields not honoured.
/// Groups and pods left out for a grace set a deadline in `deadlines` at its end.
///
/// Returned as changes to the last cycle's objects (`IncrementalSnapshot::update_changes`):
/// the pods the change log names and the few seen otherwise than stored (without a node,
/// assumed, joining a group), the nodes when any changed, every object of the other kinds
/// (few; the snapshot tells an unchanged one by identity or equality).
fn collect(
    s: &mut Scheduler,
    stores: &Stores,
    changes: &Changes,
    deadlines: &mut Deadlines,
) -> (Vec<Change>, Vec<ConvertError>, Vec<String>) {
    // Everything after a list, for a new snapshot, or when whose pods these are changed.
    let whole = matches!(changes.of("pods"), Some(Changed::Everything))
        || s.snapshots.is_new()
        || s.ownership.names() != s.config.scheduler_names.as_slice();
    let mut objects = Vec::new();
    let mut unreadable = Vec::new();
    let mut warnings = Vec::new();
    let mut collisions = HashSet::new();
    let volcano = stores.volcano.current();
    let src = || Source::Borrowed(SOURCE);
    if whole || changes.of("nodes").is_some() {
        objects.push(Change::Everything("Node"));
        for n in stores.nodes.state() {
            objects.push(Change::Set(src(), Object::Node(n)));
        }
    }
    // The other kinds whole: each relisted every cycle.
    objects.extend(
        [
            "PriorityClass",
            "Namespace",
            "PersistentVolumeClaim",
            "PersistentVolume",
            "StorageClass",
            "DeviceClass",
            "ResourceSlice",
            "ResourceClaim",
            "Queue",
            "HyperNode",
            "NodeTopology",
        ]
        .map(Change::Everything),
    );
    for c in stores.priority_classes.state() {
        objects.push(Change::Set(
            src(),
            Object::PriorityClass(Box::new((*c).clone())),
        ));
    }
    let mut namespace_queues = HashMap::new();
    for n in stores.namespaces.state() {
        if let (Some(name), Some(q)) = (&n.metadata.name, namespace_queue(&n.metadata)) {
            namespace_queues.insert(name.clone(), q.to_string());
        }
        objects.push(Change::Set(
            src(),
            Object::Namespace(Box::new((*n).clone())),
        ));
    }
    let mut view = View::new(namespace_queues);
    let now = jiff::Timestamp::now();
    for c in stores.claims.state() {
        objects.push(Change::Set(
            src(),
            Object::PersistentVolumeClaim(Box::new((*c).clone())),
        ));
    }
    for v in stores.volumes.state() {
        objects.push(Change::Set(
            src(),
            Object::PersistentVolume(Box::new((*v).clone())),
        ));
    }
    for c in stores.storage_classes.state() {
        objects.push(Change::Set(
            src(),
            Object::StorageClass(Box::new((*c).clone())),
        ));
    }
    // DRA: the claims this scheduler wrote stand as written until the watch shows them.
    match stores.dra.current() {
        Some(dra) => {
            let kinds = &dra.kinds;
            for c in kinds.classes.iter().flat_map(|s| s.state()) {
                objects.push(Change::Set(src(), Object::DeviceClass(c)));
            }
            for sl in kinds.slices.iter().flat_map(|s| s.state()) {
                objects.push(Change::Set(src(), Object::ResourceSlice(sl)));
            }
            for c in s.assumed_claims.overlay(kinds.claims()) {
                objects.push(Change::Set(src(), Object::ResourceClaim(c)));
            }
        }
        None => s.assumed_claims.clear(),
    }
    // Basalt's own kinds: an object that did not decode is reported on itself and left out.
    for q in stores.queues.state() {
        match q.typed(SOURCE) {
            Ok(q) => {
                let name = q.metadata.name.clone().unwrap_or_default();
                view.add_queue(name, q.status.clone(), Origin::Basalt);
                objects.push(Change::Set(src(), Object::Queue(Box::new((**q).clone()))));
            }
            Err(e) => unreadable.push(e),
        }
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
        if view.has_queue(&name) {
            collisions.insert(format!("Queue {name}"));
            continue;
        }
        match q.to_basalt() {
            Ok(b) => {
                view.add_queue(name, q.current_status(), Origin::Volcano);
                let b = Object::Queue(Box::new(b));
                objects.push(Change::Set(Source::Borrowed(volcano::ORIGIN), b));
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
            Ok(typed) => objects.push(Change::Set(
                Source::Borrowed(volcano::TOPOLOGY_ORIGIN),
                Object::HyperNode(Box::new(typed)),
            )),
            Err(e) => unreadable.push(e),
        }
    }
    for t in stores.topologies.state() {
        match t.typed(SOURCE) {
            Ok(t) => objects.push(Change::Set(
                src(),
                Object::NodeTopology(Box::new((**t).clone())),
            )),
            Err(e) => unreadable.push(e),
        }
    }
    // Volcano's groups, then scheduler-plugins', each where no group before it has the name
    // (Basalt's win, then Volcano's).
    let sigs = stores.scheduler_plugins.current();
    // Basalt's groups: those the change log names, while nothing else they are read against
    // changed (`kept_groups.rs`: the queues' names, not their status); else every one.
    let peers = (volcano.iter()).any(|v| {
        let k = &v.kinds;
        (k.queues.iter()).any(|s| !s.state().is_empty())
            || (k.pod_groups.iter()).any(|s| !s.state().is_empty())
    }) || (sigs.iter()).any(|s| !s.kinds.pod_groups.state().is_empty());
    let podgroups = changes.of("podgroups");
    let by_change = !whole
        && !peers
        && s.kept_groups.current()
        && view.same_queues(&s.view)
        && changes.of("namespaces").is_none()
        && !matches!(podgroups, Some(Changed::Everything));
    if !by_change {
        objects.push(Change::Everything("PodGroup"));
    }
    let mut read =
        |s: &mut Scheduler, view: &mut View, key: String, g: Option<&Lenient<PodGroup>>| {
            let waits = |g: &PodGroup| waits_for_its_queue(g, view, now, deadlines);
            match s.kept_groups.read(key.clone(), g, waits) {
                Read::Goes(g) => {
                    objects.push(Change::Set(src(), Object::PodGroup(g.clone())));
                    view.add_group(key, g, Origin::Basalt);
                }
                Read::Out => objects.push(Change::Removed("PodGroup", key)),
            }
        };
    if by_change {
        view.keep_groups(std::mem::take(&mut s.view));
        for (ns, name) in podgroups.into_iter().flat_map(|c| match c {
            Changed::Objects(keys) => keys.iter(),
            Changed::Everything => unreachable!("read whole"),
        }) {
            let key = format!("{}/{name}", ns.as_deref().unwrap_or("default"));
            view.remove_group(&key);
            let at = ObjectRef::new(name);
            let g = stores.pod_groups.get(&match ns {
                Some(ns) => at.within(ns),
                None => at,
            });
            read(s, &mut view, key, g.as_deref());
        }
    } else {
        s.kept_groups.restart(!peers);
        for g in stores.pod_groups.state() {
            read(s, &mut view, key_of(&g.metadata), Some(&*g));
        }
    }
    unreadable.extend(s.kept_groups.unreadable().cloned());
    let mut add_peer = |key: String,
                        origin: Origin,
                        convert: &dyn Fn()
        -> Result<(Arc<PodGroup>, Vec<String>), ConvertError>| {
        if view.has_group(&key) {
            collisions.insert(format!("PodGroup {key}"));
            return;
        }
        match convert() {
            Ok((b, _)) if waits_for_its_queue(&b, &view, now, deadlines) => {}
            Ok((b, w)) => {
                warnings.extend(w);
                let label = match origin {
                    Origin::SchedulerPlugins => scheduler_plugins::ORIGIN,
                    _ => volcano::ORIGIN,
                };
                // The stored object's own conversion: the same `Arc` while it is unchanged.
                objects.push(Change::Set(label.into(), Object::PodGroup(b.clone())));
                view.add_group(key, b, origin);
            }
            Err(e) => unreadable.push(e),
        }
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
    for c in s.reported.new_collisions(collisions) {
        let kind = c.split(' ').next().unwrap_or("object");
        tracing::warn!(object = %c, "{kind}s of two APIs share this name; Basalt's is used, then Volcano's, and the other ignored");
    }
    s.view = view;
    collect_pods(s, stores, changes, whole, deadlines, &mut objects);
    (objects, unreadable, warnings)
}

/// The pods of [`collect`]: with `whole` every pod, else those the change log names and
/// those that may be seen otherwise than last cycle (without a node: assumed, joining,
/// waiting for a group; or named by grouping). A pod left out is removed.
fn collect_pods(
    s: &mut Scheduler,
    stores: &Stores,
    changes: &Changes,
    whole: bool,
    deadlines: &mut Deadlines,
    objects: &mut Vec<Change>,
) {
    let now = jiff::Timestamp::now();
    // Pods this scheduler bound (`assumed_pods.rs`) and pods on their way into a group
    // (`grouping.rs`) are seen as they must be, not as the store has them.
    let mut grouping = s.grouping.walk(s.kept_groups.keys());
    // Nothing assumed, held or being joined to a group: every pod goes in as the cache has it
    // (no key is made for each of them).
    let bridging = !(s.assumed.is_empty() && grouping.is_idle());
    // Of the bound pods, only those grouping names (a few) can be seen otherwise, so no key
    // is made for each bound pod. An assumed pod the watch shows bound is not met, and the
    // walk's end releases it, as meeting it would.
    let named_bound: HashSet<usize> = match bridging {
        false => HashSet::new(),
        true => (grouping.keys())
            .filter_map(|key| stores.pod(key))
            .filter(|p| !unbound(p))
            .map(|p| Arc::as_ptr(&p) as usize)
            .collect(),
    };
    let pods: Vec<(String, Option<Arc<Pod>>)> = if whole {
        objects.push(Change::Everything("Pod"));
        (stores.pods.state().into_iter())
            .map(|p| (pod_key(&p), Some(p)))
            .collect()
    } else {
        let mut keys: BTreeSet<String> = (s.unbound.iter()).map(|p| pod_key(p)).collect();
        keys.extend(grouping.keys().map(str::to_string));
        if let Some(Changed::Objects(changed)) = changes.of("pods") {
            keys.extend(
                changed
                    .iter()
                    .map(|(ns, name)| format!("{}/{name}", ns.as_deref().unwrap_or("default"))),
            );
        }
        (keys.into_iter())
            .map(|key| {
                let pod = stores.pod(&key);
                (key, pod)
            })
            .collect()
    };
    let mut assumed = s.assumed.walk();
    for (key, p) in pods {
        let removed = || Change::Removed("Pod", key.clone());
        let Some(p) = p else {
            objects.push(removed());
            continue;
        };
        if waits_for_its_group(&p, &s.view, now, deadlines) && !grouping.has_auto_group(&key) {
            objects.push(removed());
            continue;
        }
        // A groupless pod the auto groups did not see (it came after them): its owner may
        // want a gang, so it waits for the next cycle rather than go alone.
        if awaits_group(&p, &s.config.scheduler_names) && !grouping.knows(&key) {
            objects.push(removed());
            continue;
        }
        if !bridging || !(unbound(&p) || named_bound.contains(&(Arc::as_ptr(&p) as usize))) {
            objects.push(Change::Set(Source::Borrowed(SOURCE), Object::Pod(p)));
            continue;
        }
        // The cache's own object, copied only where the cycle must see it otherwise.
        let pod = assumed.view_of(&key, p);
        match grouping.view_of(&key, pod) {
            Some(pod) => objects.push(Change::Set(Source::Borrowed(SOURCE), Object::Pod(pod))),
            None => objects.push(removed()),
        }
    }
    assumed.finish();
    grouping.finish();
}

/// How long a pod may name a PodGroup the watch has not shown before it is reported as naming
/// one that does not exist: a controller makes the group first, but two watches need not
/// deliver in that order.
const GROUP_GRACE_S: i64 = 30;

/// The same for a PodGroup naming a Queue: both come from one `kubectl apply` (or a Volcano
/// install), seconds apart at most; shorter than for pods, so a misspelt queue is told soon.
const QUEUE_GRACE_S: i64 = 5;

/// A PodGroup naming a queue the watches have not shown yet, created less than
/// [`QUEUE_GRACE_S`] ago: left out of this cycle quietly (not an invalid object), with a
/// deadline at the grace's end.
fn waits_for_its_queue(
    g: &PodGroup,
    view: &View,
    now: jiff::Timestamp,
    deadlines: &mut Deadlines,
) -> bool {
    let queue = view.queue_of(g);
    if queue == basalt_engine::DEFAULT_QUEUE || view.has_queue(&queue) {
        return false;
    }
    let Some(created) = g.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let young = now.duration_since(created.0).as_secs() < QUEUE_GRACE_S;
    if young {
        let grace = Duration::from_secs(QUEUE_GRACE_S as u64);
        deadlines.at(grace_end(created.0, grace, now), "a group's queue grace");
    }
    young
}

/// A pod waiting to be placed that names a PodGroup the watches have not shown yet, created
/// less than [`GROUP_GRACE_S`] ago: left out of this cycle quietly (not an invalid object),
/// with a deadline at the grace's end.
fn waits_for_its_group(
    p: &Pod,
    view: &View,
    now: jiff::Timestamp,
    deadlines: &mut Deadlines,
) -> bool {
    let spec = p.spec.as_ref();
    if spec.and_then(|s| s.node_name.as_deref()).is_some() {
        return false;
    }
    if explicit_group(&p.metadata).is_none() {
        return false;
    }
    let Some(created) = p.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let young = now.duration_since(created.0).as_secs() < GROUP_GRACE_S;
    // The key is made for young pods only: this runs for every pod each cycle.
    let waits = young && group_key(p).is_some_and(|g| !view.has_group(&g));
    if waits {
        let grace = Duration::from_secs(GROUP_GRACE_S as u64);
        deadlines.at(grace_end(created.0, grace, now), "a pod's group grace");
    }
    waits
}

fn unbound(p: &Pod) -> bool {
    (p.spec.as_ref()).is_none_or(|s| s.node_name.is_none())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
}

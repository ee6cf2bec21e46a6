//! `IncrementalSnapshot` gives what a fresh `build_snapshot_tolerant` of the same objects
//! gives (the snapshot field by field, the errors and the warnings), after any sequence of
//! watch events: adds, updates, deletes, relists after a dropped watch (every object a new
//! `Arc`, some changed), cycles with nothing changed and objects in another order. Both
//! ways of telling it: all objects each time (`update`), or what changed (`update_changes`).

mod common;

use std::collections::BTreeMap;

use basalt_crds::incremental::usable_spec;
use basalt_crds::{build_snapshot_tolerant, Change, ConvertOptions, IncrementalSnapshot, Object};
use common::objects;
use proptest::prelude::*;

/// The objects a slot may hold: one per variant (`None` when the slot is empty).
fn variant(slot: usize, v: u8) -> String {
    let i = slot % 4;
    match slot {
        // Nodes.
        0..=3 => {
            let (alloc, labels, extra) = match v % 5 {
                0 => ("{cpu: \"32\", memory: 256Gi, nvidia.com/gpu: \"8\"}", "{rack: a}", ""),
                1 => ("{cpu: \"16\", memory: 128Gi, nvidia.com/gpu: \"4\"}", "{rack: b}", ""),
                // A heartbeat: only the status' time changes.
                2 => (
                    "{cpu: \"32\", memory: 256Gi, nvidia.com/gpu: \"8\"}",
                    "{rack: a}",
                    "annotations: {beat: \"2\"}",
                ),
                3 => ("{cpu: \"32\", memory: 256Gi, nvidia.com/gpu: \"8\"}", "{rack: a}", "spec-unschedulable"),
                _ => ("{cpu: lots, nvidia.com/gpu: \"8\"}", "{rack: a}", ""),
            };
            let spec = if extra == "spec-unschedulable" {
                "spec: {unschedulable: true}\n"
            } else {
                ""
            };
            let extra = if extra.starts_with("annotations") { extra } else { "" };
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {labels}, {extra}}}\n{spec}status: {{allocatable: {alloc}}}\n"
            )
        }
        // Queues: q0 a leaf, q1 a leaf or q0's parent; or bad trees: q0 its own parent, q1
        // on a cycle with q0, q1 invalid (then q0 is its invalid parent's child), or a queue
        // named `root` that is q0's parent.
        4 | 5 => {
            let mut name = format!("q{}", slot - 4);
            let spec = match (slot, v % 6) {
                (4, 0) => "{weight: 1}",
                (4, 1) => "{weight: 2, capability: {nvidia.com/gpu: \"8\"}}",
                (4, 2) => "{weight: 1, parent: q0}",
                (4, 3) => "{weight: 1, parent: root}",
                (4, _) => "{weight: 1, parent: q1}",
                (_, 0) => "{weight: 1}",
                (_, 1) => "{weight: 3}",
                (_, 2) => "{weight: 1, parent: q0}",
                (_, 3) => "{weight: 0}",
                (_, 4) => {
                    name = "root".to_string();
                    "{weight: 1, parent: q0}"
                }
                _ => "{weight: 1, guarantee: {nvidia.com/gpu: \"2\"}}",
            };
            format!(
                "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {spec}\n"
            )
        }
        // PodGroups g0..g3.
        6..=9 => {
            let g = slot - 6;
            let spec = match v % 6 {
                0 => "{minMember: 1, queue: q0}".to_string(),
                1 => "{minMember: 2, queue: q1}".to_string(),
                2 => "{minMember: 1, queue: nope}".to_string(),
                // The engine refuses it: the whole build's rounds.
                3 => "{minMember: -1, queue: q0}".to_string(),
                4 => "{minMember: 1, queue: q0, priorityClassName: high}".to_string(),
                _ => "{minMember: 1}".to_string(),
            };
            format!(
                "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: g{g}, namespace: ml}}\nspec: {spec}\n"
            )
        }
        // Pods p0..p7.
        10..=17 => {
            let p = slot - 10;
            let group = format!("{{scheduling.basalt.dev/pod-group: g{}}}", p % 4);
            let (labels, spec, status) = match v % 9 {
                0 => (group.as_str(), "schedulerName: basalt, containers: [{name: c, resources: {requests: {nvidia.com/gpu: \"1\"}}}]".to_string(), "{phase: Pending}".to_string()),
                1 => (group.as_str(), format!("schedulerName: basalt, nodeName: n{i}, containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: \"2\"}}}}}}]"), "{phase: Running}".to_string()),
                2 => ("{}", format!("schedulerName: other, nodeName: n{i}, containers: [{{name: c, resources: {{requests: {{cpu: \"4\"}}}}}}]"), "{phase: Running}".to_string()),
                3 => (group.as_str(), format!("schedulerName: basalt, nodeName: n{i}, containers: [{{name: c, resources: {{requests: {{cpu: lots}}}}}}]"), "{phase: Running}".to_string()),
                4 => ("{}", "schedulerName: basalt, containers: [{name: c, resources: {requests: {cpu: lots}}}]".to_string(), "{phase: Pending}".to_string()),
                5 => ("{}", "schedulerName: basalt, volumes: [{name: data, persistentVolumeClaim: {claimName: c0}}], containers: [{name: c}]".to_string(), "{phase: Pending}".to_string()),
                6 => ("{}", "schedulerName: basalt, nodeName: gone, containers: [{name: c}]".to_string(), "{phase: Running}".to_string()),
                7 => (group.as_str(), "schedulerName: basalt, containers: [{name: c, resources: {requests: {nvidia.com/gpu: \"1\"}}}]".to_string(), "{phase: Pending, nominatedNodeName: n1}".to_string()),
                _ => (group.as_str(), format!("schedulerName: basalt, nodeName: n{i}, containers: [{{name: c}}]"), "{phase: Succeeded}".to_string()),
            };
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{p}, namespace: ml, labels: {labels}}}\nspec: {{{spec}}}\nstatus: {status}\n"
            )
        }
        18 => format!(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: high}}\nvalue: {}\n",
            [100, 1000, 5][v as usize % 3]
        ),
        19 => match v % 2 {
            0 => "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n".to_string(),
            _ => "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: a}, annotations: {scheduling.basalt.dev/queue: q1}}\n".to_string(),
        },
        20 => format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: c0, namespace: ml}}\nspec: {{storageClassName: wait, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}{}}}\n",
            ["", ", volumeName: pv0"][v as usize % 2]
        ),
        _ => "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: wait}\nprovisioner: x\nvolumeBindingMode: WaitForFirstConsumer\n".to_string(),
    }
}

const SLOTS: usize = 22;

fn parse(slot: usize, v: u8) -> Object {
    let mut o = objects(&format!("slot{slot}"), &variant(slot, v));
    assert_eq!(o.len(), 1, "slot {slot} variant {v}");
    o.pop().unwrap().1
}

#[derive(Clone, Debug)]
enum Event {
    /// An add or an update: the slot's object replaced by a new one.
    Set(usize, u8),
    Delete(usize),
    /// The watch dropped and relisted: every object anew, `changed` slots with a new variant.
    Relist(Vec<(usize, u8)>),
    /// A cycle with no event.
    Nothing,
    /// The caches hand their objects over in another order.
    Reorder(u64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0..SLOTS, any::<u8>()).prop_map(|(s, v)| Event::Set(s, v)),
        2 => (0..SLOTS).prop_map(Event::Delete),
        1 => prop::collection::vec((0..SLOTS, any::<u8>()), 0..4).prop_map(Event::Relist),
        1 => Just(Event::Nothing),
        1 => any::<u64>().prop_map(Event::Reorder),
    ]
}

/// The cache: per slot its variant and object (kept while unchanged, as a watch cache keeps
/// its `Arc`).
struct Cache {
    slots: BTreeMap<usize, (u8, Object)>,
    order: Vec<usize>,
}

impl Cache {
    /// A cache holding `variant` at each slot given, in slot order.
    fn holding(slots: impl IntoIterator<Item = (usize, u8)>) -> Cache {
        Cache {
            slots: (slots.into_iter())
                .map(|(s, v)| (s, (v, parse(s, v))))
                .collect(),
            order: (0..SLOTS).collect(),
        }
    }

    fn objects(&self) -> Vec<(String, Object)> {
        (self.order.iter())
            .filter_map(|s| {
                self.slots
                    .get(s)
                    .map(|(_, o)| (format!("cluster slot{s}"), o.clone()))
            })
            .collect()
    }

    fn apply(&mut self, e: &Event) {
        match e {
            Event::Set(s, v) => {
                self.slots.insert(*s, (*v, parse(*s, *v)));
            }
            Event::Delete(s) => {
                self.slots.remove(s);
            }
            Event::Relist(changed) => {
                for (s, (v, o)) in self.slots.iter_mut() {
                    *o = parse(*s, *v);
                }
                for (s, v) in changed {
                    self.slots.insert(*s, (*v, parse(*s, *v)));
                }
            }
            Event::Nothing => {}
            Event::Reorder(seed) => {
                // A deterministic shuffle.
                let mut x = *seed | 1;
                for i in (1..self.order.len()).rev() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    self.order.swap(i, (x % (i as u64 + 1)) as usize);
                }
            }
        }
    }
}

fn check(inc: &mut IncrementalSnapshot, objects: &[(String, Object)], now: i64, step: usize) {
    let options = ConvertOptions {
        now_ms: now,
        ..ConvertOptions::default()
    };
    let fresh = build_snapshot_tolerant(objects, &options);
    let update = inc.update(objects.to_vec(), &options);
    let got = inc.snapshot().map(|s| format!("{s:?}"));
    let want = fresh.snapshot.as_ref().map(|s| format!("{s:?}"));
    assert_eq!(got, want, "snapshot after step {step}");
    assert_eq!(update.errors, fresh.errors, "errors after step {step}");
    assert_eq!(
        update.warnings, fresh.warnings,
        "warnings after step {step}"
    );
    check_kept(inc, &options, step);
}

/// The spec assembled from the kept conversions (where they can tell) is the one converting
/// the objects anew gives, objects that do not convert left out alike. Says whether they
/// could tell.
fn check_kept(inc: &IncrementalSnapshot, options: &ConvertOptions, step: usize) -> bool {
    let converted = inc.converted().expect("updated");
    let Some(kept) = converted.kept_spec(options) else {
        return false;
    };
    let anew = usable_spec(&converted.objects(), options);
    assert_eq!(
        format!("{kept:?}"),
        format!("{:?}", anew.expect("converts")),
        "the kept spec after step {step}"
    );
    true
}

/// The changes a watch reports for `e` applied to `cache` (what the cache held before).
fn changes(before: &Cache, after: &Cache, e: &Event) -> Vec<Change> {
    let set = |s: &usize| {
        let (_, o) = &after.slots[s];
        Change::Set(format!("cluster slot{s}").into(), o.clone())
    };
    // An object gone, or replaced by one of another key (a queue renamed).
    let gone = |s: &usize| {
        let (_, old) = before.slots.get(s)?;
        let in_place = (after.slots.get(s)).is_some_and(|(_, o)| o.key() == old.key());
        (!in_place).then(|| Change::Removed(old.kind(), old.key()))
    };
    match e {
        Event::Set(s, _) => gone(s).into_iter().chain([set(s)]).collect(),
        Event::Delete(s) => gone(s).into_iter().collect(),
        Event::Relist(_) => {
            let kinds: std::collections::BTreeSet<&'static str> = (0..SLOTS)
                .flat_map(|s| [parse(s, 0).kind(), parse(s, 4).kind()])
                .collect();
            let mut changes: Vec<Change> = kinds.into_iter().map(Change::Everything).collect();
            changes.extend(after.slots.keys().map(set));
            changes
        }
        Event::Nothing | Event::Reorder(_) => Vec::new(),
    }
}

/// As [`check`], through `update_changes`: the snapshot holds exactly the cache's objects, and
/// gives what a fresh build of them (in its order) gives.
fn check_changes(
    inc: &mut IncrementalSnapshot,
    cache: &Cache,
    changes: Vec<Change>,
    now: i64,
    step: usize,
) {
    let options = ConvertOptions {
        now_ms: now,
        ..ConvertOptions::default()
    };
    let update = inc.update_changes(changes, &options);
    let held = inc.objects().expect("updated");
    let sorted = |mut v: Vec<(String, Object)>| {
        v.sort_by_key(|(origin, o)| (o.kind(), o.key(), origin.clone()));
        v
    };
    assert_eq!(
        sorted(held.to_vec()),
        sorted(cache.objects()),
        "objects after step {step}"
    );
    let fresh = build_snapshot_tolerant(&held, &options);
    let got = inc.snapshot().map(|s| format!("{s:?}"));
    let want = fresh.snapshot.as_ref().map(|s| format!("{s:?}"));
    assert_eq!(got, want, "snapshot after step {step}");
    assert_eq!(update.errors, fresh.errors, "errors after step {step}");
    assert_eq!(
        update.warnings, fresh.warnings,
        "warnings after step {step}"
    );
    check_kept(inc, &options, step);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn incremental_equals_a_fresh_build(
        initial in prop::collection::vec(any::<Option<u8>>(), SLOTS),
        events in prop::collection::vec(event(), 1..30),
    ) {
        let mut cache =
            Cache::holding(initial.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s, v))));
        let mut inc = IncrementalSnapshot::new();
        check(&mut inc, &cache.objects(), 1_000, 0);
        for (step, e) in events.iter().enumerate() {
            cache.apply(e);
            check(&mut inc, &cache.objects(), 1_000 + 500 * step as i64, step + 1);
        }
    }

    #[test]
    fn changes_equal_a_fresh_build(
        initial in prop::collection::vec(any::<Option<u8>>(), SLOTS),
        events in prop::collection::vec(event(), 1..30),
    ) {
        let mut cache =
            Cache::holding(initial.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s, v))));
        let mut inc = IncrementalSnapshot::new();
        let first = (cache.objects().into_iter())
            .map(|(origin, o)| Change::Set(origin.into(), o))
            .collect();
        check_changes(&mut inc, &cache, first, 1_000, 0);
        for (step, e) in events.iter().enumerate() {
            let before = Cache { slots: cache.slots.clone(), order: cache.order.clone() };
            cache.apply(e);
            let changes = changes(&before, &cache, e);
            check_changes(&mut inc, &cache, changes, 1_000 + 500 * step as i64, step + 1);
        }
    }
}

/// What a pod refers to changing under it, told both ways: its queue's tree, its PodGroup's
/// queue, its PodGroup removed, the node it is bound to removed (and back).
#[test]
fn references_changing_under_pods() {
    // Nodes n0, n1; queues q0, q1 leaves; g0 in q0, g1 in q1; p0, p4 bound to n0 in g0; p1
    // pending in g1; p5 bound to n1 in g1.
    let initial = [
        (0, 0),
        (1, 0),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 1),
        (10, 1),
        (14, 1),
        (11, 0),
        (15, 1),
    ];
    let events = [
        Event::Set(5, 2), // q1 becomes q0's child: q0 is no leaf, g0 goes
        Event::Set(5, 0), // back
        Event::Set(6, 2), // g0 names a queue that does not exist
        Event::Set(6, 0), // back
        Event::Set(4, 4), // q0 names q1 as parent; q1 is a leaf no more
        Event::Delete(6), // g0 removed under its bound pods
        Event::Delete(0), // n0 removed under bound pods
        Event::Set(0, 1), // n0 back, smaller
        Event::Set(6, 1), // g0 back, in q1
        Event::Delete(5), // q1 removed under g0, g1 and their pods
        Event::Relist(vec![(5, 0)]),
    ];
    let fresh_cache = || Cache::holding(initial.iter().copied());
    let (mut whole, mut changed) = (fresh_cache(), fresh_cache());
    let (mut by_list, mut by_change) = (IncrementalSnapshot::new(), IncrementalSnapshot::new());
    check(&mut by_list, &whole.objects(), 0, 0);
    let first = (changed.objects().into_iter())
        .map(|(origin, o)| Change::Set(origin.into(), o))
        .collect();
    check_changes(&mut by_change, &changed, first, 0, 0);
    for (step, e) in events.iter().enumerate() {
        whole.apply(e);
        check(&mut by_list, &whole.objects(), step as i64, step + 1);
        let before = Cache {
            slots: changed.slots.clone(),
            order: changed.order.clone(),
        };
        changed.apply(e);
        let changes = changes(&before, &changed, e);
        check_changes(&mut by_change, &changed, changes, step as i64, step + 1);
    }
}

/// Options changing (a config reload) start everything afresh, and the result still matches.
#[test]
fn new_options_start_afresh() {
    let objects: Vec<(String, Object)> = (0..SLOTS)
        .map(|s| (format!("cluster slot{s}"), parse(s, 0)))
        .collect();
    let mut inc = IncrementalSnapshot::new();
    check(&mut inc, &objects, 1, 0);
    let other = ConvertOptions {
        scheduler_names: vec!["other".into()],
        ..ConvertOptions::default()
    };
    let update = inc.update(objects.clone(), &other);
    let fresh = build_snapshot_tolerant(&objects, &other);
    assert_eq!(
        inc.snapshot().map(|s| format!("{s:?}")),
        fresh.snapshot.map(|s| format!("{s:?}"))
    );
    assert_eq!(update.errors, fresh.errors);
}

/// The objects of the last update are shared, not copied: a reader off the scheduling path
/// (the daemon's forecast) takes the very ones the snapshot was updated from, also after an
/// update given the same objects again.
#[test]
fn the_last_objects_are_shared() {
    let objects: Vec<(String, Object)> = (0..SLOTS)
        .map(|s| (format!("cluster slot{s}"), parse(s, 0)))
        .collect();
    let mut inc = IncrementalSnapshot::new();
    assert!(inc.objects().is_none(), "nothing before the first update");
    inc.update(objects.clone(), &ConvertOptions::default());
    let first = inc.objects().expect("the last update's objects");
    assert_eq!(*first, objects);
    inc.update(objects.clone(), &ConvertOptions::default());
    let again = inc.objects().expect("the last update's objects");
    assert_eq!(*again, objects);
    assert!(
        std::sync::Arc::ptr_eq(&inc.objects().unwrap(), &again),
        "handed out shared, not copied"
    );
}

/// The daemon's forecast assembles the cluster's spec from the conversions the cycle kept:
/// what converting every object anew gives, a pod that does not convert left out alike; and
/// nothing when a node (read by the context of every conversion) does not convert, or under
/// other options.
#[test]
fn the_kept_conversions_assemble_the_spec_converting_anew_gives() {
    // Nodes n0, n1; queues; g0, g1 (minMember -1, which only the engine refuses); p0 bound in
    // g0, p1 pending in g1, p2 another scheduler's, p4 whose request does not read.
    let mut cache = Cache::holding([
        (0, 0),
        (1, 1),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 3),
        (10, 1),
        (11, 0),
        (12, 2),
        (14, 4),
        (18, 0),
    ]);
    let options = ConvertOptions {
        now_ms: 7,
        ..ConvertOptions::default()
    };
    let mut inc = IncrementalSnapshot::new();
    inc.update(cache.objects(), &options);
    let converted = inc.converted().expect("updated");
    let (spec, usable) = converted
        .kept_spec(&options)
        .expect("told by the kept conversions");
    assert!(
        usable.iter().all(|(_, o)| o.key() != "ml/p4"),
        "p4 left out"
    );
    assert_eq!(spec.pods.len(), 3, "p0, p1, p2");
    assert_eq!(spec.now_ms, 7);
    assert!(check_kept(&inc, &options, 0));
    let other = ConvertOptions {
        scheduler_names: vec!["other".into()],
        ..options.clone()
    };
    assert!(
        converted.kept_spec(&other).is_none(),
        "converted under other options"
    );
    // A node that does not convert: every conversion is made again without it.
    cache.apply(&Event::Set(1, 4));
    inc.update(cache.objects(), &options);
    let converted = inc.converted().expect("updated");
    assert!(converted.kept_spec(&options).is_none());
    let (spec, _) = usable_spec(&converted.objects(), &options).expect("converts");
    assert_eq!(spec.nodes.len(), 1, "n1 left out");
}

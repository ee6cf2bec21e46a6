//! An update that changed only pods and PodGroups, told to the builder from the changed
//! objects alone: no walk of every kept object, no reference check of every pod.
//!
//! It applies when what the whole walk would find differs from the last update's only in the
//! changed objects, and these convert and refer cleanly: the context, the nodes and the queues
//! are the same (a Queue whose status alone changed only moves its usage record); every changed pod and PodGroup converts, before and after, without an error or
//! a warning; every changed pod's references hold (its node exists, its PodGroup is kept) and
//! every changed PodGroup's queue does; and no unchanged pod names a PodGroup that comes or
//! goes. Then the errors and warnings are the last update's, and the builder needs only the
//! changed pods and PodGroups. Otherwise the whole walk runs (`super::IncrementalSnapshot`).

use std::collections::HashSet;
use std::sync::Arc;

use basalt_engine::{GroupSpec, PodPhase, PodSpec, QueueSpec, QueueUsage, DEFAULT_QUEUE};

use super::feed::{Fed, Form, GroupTag, Wanted};
use super::store::{identity, Conversion, Identity, Replaced, Store};
use super::HashMap;
use crate::convert::Converted;
use crate::read::Object;

/// What the reference checks of the last whole walk decided, kept up to date by each delta.
#[derive(Debug, PartialEq)]
pub(super) struct References {
    /// The PodGroups kept, by namespace and name.
    kept_groups: HashMap<String, HashSet<String>>,
    /// How many of our pods name each PodGroup (namespace → name → count), kept or not.
    named: HashMap<String, HashMap<String, usize>>,
    /// The queues a PodGroup may name: kept, valid, leaves.
    leaf_queues: HashSet<String>,
    /// What the queues' statuses say they used (the builder is told it on every update).
    usage: Vec<QueueUsage>,
}

impl References {
    /// From a whole walk's wanted objects, after its reference checks.
    pub(super) fn of(wanted: &Wanted) -> Self {
        let mut kept_groups: HashMap<String, HashSet<String>> = HashMap::default();
        for (g, _) in &wanted.groups {
            let names = kept_groups.entry(g.namespace.clone()).or_default();
            names.insert(g.name.clone());
        }
        let mut named = HashMap::default();
        for (p, _, _) in &wanted.pods {
            if let Some(group) = group_of(p) {
                count(&mut named, &p.namespace, group, 1);
            }
        }
        let parents: HashSet<&str> = (wanted.queues.iter())
            .filter_map(|q| q.parent.as_deref())
            .collect();
        let leaf_queues: HashSet<String> = (wanted.queues.iter())
            .map(|q| q.name.clone())
            .chain([DEFAULT_QUEUE.to_string()])
            .filter(|q| {
                !parents.contains(q.as_str()) && !wanted.left_out.bad_queues.contains_key(q)
            })
            .collect();
        References {
            kept_groups,
            named,
            leaf_queues,
            usage: wanted.usage.clone(),
        }
    }

    fn kept(&self, namespace: &str, name: &str) -> bool {
        (self.kept_groups.get(namespace)).is_some_and(|names| names.contains(name))
    }

    fn named(&self, namespace: &str, name: &str) -> usize {
        (self.named.get(namespace))
            .and_then(|names| names.get(name))
            .copied()
            .unwrap_or(0)
    }

    /// Whether the reference check keeps the PodGroup (its queue is a valid leaf).
    fn keeps_group(&self, g: &GroupSpec) -> bool {
        let queue = g.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
        self.leaf_queues.contains(queue)
    }
}

/// The PodGroup a pod of ours names.
fn group_of(p: &PodSpec) -> Option<&str> {
    p.group.as_deref().filter(|_| p.ours)
}

/// Counts `by` more pods naming `ns/group`; a group none names is dropped.
fn count(named: &mut HashMap<String, HashMap<String, usize>>, ns: &str, group: &str, by: isize) {
    if let Some(names) = named.get_mut(ns) {
        if let Some(n) = names.get_mut(group) {
            *n = n.saturating_add_signed(by);
            if *n == 0 {
                names.remove(group);
                if names.is_empty() {
                    named.remove(ns);
                }
            }
            return;
        }
    }
    if by > 0 {
        let names = named.entry(ns.to_string()).or_default();
        names.insert(group.to_string(), by.unsigned_abs());
    }
}

/// Whether the reference check keeps the pod as it is (`tolerant::judge_references`'s
/// `Fate::Keep`): a live pod's node exists, and the PodGroup it names, if ours, is kept.
fn keeps_pod(p: &PodSpec, node: impl Fn(&str) -> bool, kept: impl Fn(&str, &str) -> bool) -> bool {
    let live = matches!(p.phase, PodPhase::Pending | PodPhase::Running);
    if let (Some(n), true) = (&p.node, live) {
        if !node(n) {
            return false;
        }
    }
    group_of(p).is_none_or(|g| kept(&p.namespace, g))
}

/// One changed object: its conversion before and after, each with the object's identity
/// (pods' and PodGroups'; a Queue has none).
struct Step<'a> {
    old: Option<(&'a Converted, Option<Identity>)>,
    new: Option<(&'a Converted, Option<Identity>)>,
}

/// A clean conversion: no error, no warning. `Some(None)`: one that gives nothing.
fn clean(c: &Conversion) -> Option<Option<&Converted>> {
    match &c.result {
        Ok(converted) if c.warnings.is_empty() => Some(converted.as_ref()),
        _ => None,
    }
}

/// Tells the builder the changes `replaced` made to `store` (converted already), when the
/// module's conditions hold; `None` (nothing changed) when they do not.
pub(super) fn apply(
    replaced: &[Replaced],
    store: &Store,
    fed: &mut Fed,
    refs: &mut References,
    generation: u64,
) -> Option<()> {
    let steps = steps(replaced, store)?;
    // Kept before: what the changed objects were judged with last time.
    let node = |n: &str| fed.nodes.contains_key(n);
    let mut flips: HashMap<(&str, &str), bool> = HashMap::default();
    let mut leaving: HashMap<(&str, &str), usize> = HashMap::default();
    for step in &steps {
        match step.old.map(|(c, _)| c) {
            Some(Converted::Pod(p)) => {
                if !keeps_pod(p, node, |ns, g| refs.kept(ns, g)) {
                    return None;
                }
                if let Some(g) = group_of(p) {
                    *leaving.entry((p.namespace.as_str(), g)).or_default() += 1;
                }
            }
            Some(Converted::Group(g)) if !refs.kept(&g.namespace, &g.name) => return None,
            Some(Converted::Group(_) | Converted::Queue(..)) | None => {}
            Some(_) => return None,
        }
        match step.new.map(|(c, _)| c) {
            Some(Converted::Group(g)) => {
                if !refs.keeps_group(g) {
                    return None;
                }
                flips.insert((g.namespace.as_str(), g.name.as_str()), true);
            }
            Some(Converted::Pod(_) | Converted::Queue(..)) | None => {}
            Some(_) => return None,
        }
    }
    let usage = queues_usage(&steps, &refs.usage)?;
    for step in &steps {
        if let Some((Converted::Group(g), _)) = step.old {
            (flips.entry((g.namespace.as_str(), g.name.as_str()))).or_insert(false);
        }
    }
    flips.retain(|&(ns, name), kept| refs.kept(ns, name) != *kept);
    // No unchanged pod may name a PodGroup that comes or goes: its fate would change.
    for &(ns, name) in flips.keys() {
        let changed = leaving.get(&(ns, name)).copied().unwrap_or(0);
        if refs.named(ns, name) != changed {
            return None;
        }
    }
    let kept_after = |ns: &str, g: &str| match flips.get(&(ns, g)) {
        Some(&kept) => kept,
        None => refs.kept(ns, g),
    };
    for step in &steps {
        if let Some((Converted::Pod(p), _)) = step.new {
            if !keeps_pod(p, node, kept_after) {
                return None;
            }
        }
    }
    // Everything told before must be held by the builder as told.
    for step in &steps {
        let told = match step.old {
            Some((Converted::Pod(_), Some(id))) => fed.pods.by.contains_key(&(id, Form::Converted)),
            Some((Converted::Group(_), Some(id))) => {
                fed.groups.by.contains_key(&GroupTag::Shared(id))
            }
            Some((Converted::Pod(_) | Converted::Group(_), None)) => false,
            _ => true,
        };
        if !told {
            return None;
        }
    }
    let flipped: Vec<(String, String, bool)> = (flips.iter())
        .map(|(&(ns, name), &kept)| (ns.to_string(), name.to_string(), kept))
        .collect();
    tell(&steps, fed, refs, generation);
    for (ns, name, kept) in flipped {
        let names = refs.kept_groups.entry(ns).or_default();
        match kept {
            true => names.insert(name),
            false => names.remove(&name),
        };
    }
    if let Some(usage) = usage {
        refs.usage = usage;
    }
    fed.builder.set_usage(refs.usage.clone());
    Some(())
}

/// A Queue's spec and the usage its status records.
fn queue(c: Option<(&Converted, Option<Identity>)>) -> Option<(&QueueSpec, &Option<QueueUsage>)> {
    match c? {
        (Converted::Queue(q, u), _) => Some((q, u)),
        _ => None,
    }
}

/// The queues' usage after the steps' Queues changed, `None` (no delta) when one changed more
/// than the usage its status records, or when its record's place in `usage` is not certain;
/// `Some(None)` when no record changed.
fn queues_usage(steps: &[Step], usage: &[QueueUsage]) -> Option<Option<Vec<QueueUsage>>> {
    let mut changed: Option<Vec<QueueUsage>> = None;
    for step in steps {
        let (was, now) = match (queue(step.old), queue(step.new)) {
            (Some(was), Some(now)) if was.0 == now.0 => (was.1, now.1),
            (None, None) => continue,
            _ => return None,
        };
        let (Some(was), Some(now)) = (was, now) else {
            match was == now {
                true => continue,
                false => return None,
            }
        };
        let list = changed.get_or_insert_with(|| usage.to_vec());
        let mut at = (list.iter().enumerate()).filter(|(_, u)| *u == was);
        let (Some((i, _)), None) = (at.next(), at.next()) else {
            return None;
        };
        list[i] = now.clone();
    }
    Some(changed)
}

/// The changed objects with their clean conversions; `None` when one is not clean, is of a
/// kind other than pods and PodGroups, or changed twice.
fn steps<'a>(replaced: &'a [Replaced], store: &'a Store) -> Option<Vec<Step<'a>>> {
    let mut seen = HashSet::new();
    let mut steps = Vec::with_capacity(replaced.len());
    for r in replaced {
        let object = r.new.as_ref().or(r.old.as_ref())?;
        if !matches!(
            object,
            Object::Pod(_) | Object::PodGroup(_) | Object::Queue(_)
        ) {
            return None;
        }
        let key = r.key.as_str();
        let old = match &r.old {
            Some(o) => clean(r.old_converted.as_deref()?)?.map(|c| (c, identity(o))),
            None => None,
        };
        let new = match &r.new {
            Some(o) => {
                let entry = store.get(o.kind(), key)?;
                clean(entry.converted.as_deref()?)?.map(|c| (c, identity(o)))
            }
            None => None,
        };
        if !seen.insert((object.kind(), key)) {
            return None;
        }
        steps.push(Step { old, new });
    }
    Some(steps)
}

/// Tells the builder the steps: what was told of the old objects removed, the new set. A pod
/// set again (bound, its status changed) is replaced in place, not removed first.
fn tell(steps: &[Step], fed: &mut Fed, refs: &mut References, generation: u64) {
    for step in steps {
        match step.old {
            Some((Converted::Pod(p), Some(id))) => {
                let told = fed.pods.by.remove(&(id, Form::Converted));
                let replaced = matches!(step.new, Some((Converted::Pod(_), _)));
                if let (Some(((ns, name), _)), false) = (told, replaced) {
                    fed.builder.remove_pod(&ns, &name);
                }
                if let Some(g) = group_of(p) {
                    count(&mut refs.named, &p.namespace, g, -1);
                }
            }
            Some((Converted::Group(_), Some(id))) => {
                if let Some(((ns, name), _)) = fed.groups.by.remove(&GroupTag::Shared(id)) {
                    fed.builder.remove_group(&ns, &name);
                }
            }
            _ => {}
        }
    }
    for step in steps {
        match step.new {
            Some((Converted::Pod(p), Some(id))) => {
                let key = (p.namespace.clone(), p.name.clone());
                fed.builder.set_pod(Arc::clone(p));
                fed.pods.tell((id, Form::Converted), key, generation, false);
                if let Some(g) = group_of(p) {
                    count(&mut refs.named, &p.namespace, g, 1);
                }
            }
            Some((Converted::Group(g), Some(id))) => {
                let key = (g.namespace.clone(), g.name.clone());
                fed.builder.set_group(g.clone());
                fed.groups
                    .tell(GroupTag::Shared(id), key, generation, false);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Change, IncrementalSnapshot};
    use crate::convert::ConvertOptions;
    use crate::read::{read_objects, Object};
    use crate::tolerant::build_snapshot_tolerant;

    fn object(yaml: &str) -> Object {
        let mut o = read_objects("test", yaml).unwrap().objects;
        o.pop().unwrap().1
    }

    fn node(i: usize) -> Object {
        object(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}}}\nstatus: {{allocatable: {{cpu: \"8\", nvidia.com/gpu: \"8\", pods: \"100\"}}}}\n"
        ))
    }

    fn queue(name: &str, parent: Option<&str>) -> Object {
        queue_using(name, parent, None)
    }

    /// A queue whose status records `gpus` used.
    fn queue_using(name: &str, parent: Option<&str>, gpus: Option<u32>) -> Object {
        let parent = parent.map_or(String::new(), |p| format!(", parent: {p}"));
        let status = gpus.map_or(String::new(), |n| {
            format!("status: {{usage: {{takenAt: \"2026-01-01T00:00:00Z\", resources: {{nvidia.com/gpu: \"{n}\"}}}}}}\n")
        });
        object(&format!(
            "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{weight: 1{parent}}}\n{status}"
        ))
    }

    fn group(name: &str, queue: &str, status: &str) -> Object {
        object(&format!(
            "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: ml}}\nspec: {{minMember: 2, queue: {queue}}}\nstatus: {{phase: {status}}}\n"
        ))
    }

    fn pod(name: &str, group: &str, node: Option<&str>) -> Object {
        let (node, phase) = match node {
            Some(n) => (format!(", nodeName: {n}"), "Running"),
            None => (String::new(), "Pending"),
        };
        object(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, labels: {{scheduling.basalt.dev/pod-group: {group}}}}}\nspec: {{schedulerName: basalt{node}, containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: \"1\"}}}}}}]}}\nstatus: {{phase: {phase}}}\n"
        ))
    }

    fn set(o: &Object) -> Change {
        Change::Set("cluster".into(), o.clone())
    }

    /// The snapshot, errors and warnings equal a fresh build's, and the references kept by the
    /// deltas equal those a whole walk of the same objects finds.
    fn check(inc: &mut IncrementalSnapshot, changes: Vec<Change>, delta: bool, step: &str) {
        let options = ConvertOptions::default();
        let deltas = inc.deltas();
        let update = inc.update_changes(changes, &options);
        assert_eq!(
            inc.deltas() - deltas,
            delta as u64,
            "told by the delta: {step}"
        );
        let objects: Vec<(String, Object)> = inc.objects().unwrap().to_vec();
        let fresh = build_snapshot_tolerant(&objects, &options);
        let got = inc.snapshot().map(|s| format!("{s:?}"));
        assert_eq!(got, fresh.snapshot.map(|s| format!("{s:?}")), "{step}");
        assert_eq!(update.errors, fresh.errors, "{step}");
        assert_eq!(update.warnings, fresh.warnings, "{step}");
        let mut walked = IncrementalSnapshot::new();
        walked.update(objects, &options);
        assert_eq!(inc.references, walked.references, "references: {step}");
    }

    #[test]
    fn pods_and_groups_changed_cleanly_are_told_alone_and_give_what_a_fresh_build_gives() {
        let mut inc = IncrementalSnapshot::new();
        let mut first: Vec<Change> = (0..3).map(|i| set(&node(i))).collect();
        first.extend([queue("q0", None), queue("q1", None)].iter().map(set));
        first.push(set(&group("g0", "q0", "Running")));
        first.extend((0..2).map(|k| set(&pod(&format!("a{k}"), "g0", Some("n0")))));
        // A pod naming a group that does not exist: an error the deltas must keep.
        first.push(set(&pod("lost", "nope", None)));
        check(&mut inc, first, false, "first");
        // A new gang: its PodGroup and its pods.
        let mut gang = vec![set(&group("g1", "q1", "Pending"))];
        gang.extend((0..2).map(|k| set(&pod(&format!("b{k}"), "g1", None))));
        check(&mut inc, gang, true, "a new gang");
        // Bound, and the PodGroup's status written.
        let mut bound: Vec<Change> = (0..2)
            .map(|k| set(&pod(&format!("b{k}"), "g1", Some("n1"))))
            .collect();
        bound.push(set(&group("g1", "q1", "Running")));
        check(&mut inc, bound, true, "the gang bound");
        // Set again, one elsewhere: each replaced in place in the builder.
        let again = vec![
            set(&pod("b0", "g1", Some("n1"))),
            set(&pod("b1", "g1", Some("n2"))),
        ];
        check(&mut inc, again, true, "the gang set again");
        // Moved to another queue; a pod deleted.
        let moved = vec![
            set(&group("g1", "q0", "Running")),
            Change::Removed("Pod", "ml/b1".into()),
        ];
        check(&mut inc, moved, true, "moved, a pod gone");
        // A group named by no pod removed, and one whose pods all go with it.
        let gone = vec![
            Change::Removed("PodGroup", "ml/g1".into()),
            Change::Removed("Pod", "ml/b0".into()),
        ];
        check(&mut inc, gone, true, "a gang gone");
        // A queue's status: its usage recorded, then changed; its spec changed is no delta.
        let used = |gpus| vec![set(&queue_using("q1", None, gpus))];
        check(&mut inc, used(Some(2)), false, "usage recorded");
        check(&mut inc, used(Some(5)), true, "usage changed");
        let weight = vec![set(&queue_using("q1", Some("q0"), Some(5)))];
        check(&mut inc, weight, false, "a queue's spec changed");
        check(
            &mut inc,
            vec![set(&queue("q1", None))],
            false,
            "back, no usage",
        );
        // Not cleanly: a group removed under its pods, a group naming a queue that does not
        // exist, the group that pods were lost for, a pod on a node that does not exist, a
        // queue changed. Each takes the whole walk, and deltas follow again.
        let steps = [
            (vec![Change::Removed("PodGroup", "ml/g0".into())], "g0 gone"),
            (vec![set(&group("g0", "q0", "Running"))], "g0 back"),
            (
                vec![set(&group("g2", "nope", "Pending"))],
                "a missing queue",
            ),
            (
                vec![set(&group("nope", "q1", "Pending"))],
                "the lost pod's group",
            ),
            (vec![set(&pod("far", "g0", Some("n9")))], "a missing node"),
            (vec![set(&queue("q2", Some("q1")))], "a queue added"),
        ];
        for (changes, step) in steps {
            check(&mut inc, changes, false, step);
        }
        let again = vec![set(&pod("a0", "g0", Some("n2")))];
        check(&mut inc, again, true, "clean again");
        // The same object set again is no change at all.
        let Object::Pod(p) = pod("a1", "g0", Some("n0")) else {
            unreachable!()
        };
        let p = Object::Pod(Arc::clone(&p));
        check(&mut inc, vec![set(&p)], true, "a1 replaced");
        check(&mut inc, vec![set(&p)], false, "a1 the same");
    }
}

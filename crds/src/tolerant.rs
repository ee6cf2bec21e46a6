//! A snapshot of a cluster in which some objects are bad. Each bad object is reported and left
//! out on its own, and what it holds on its node still counts, so one bad object never takes
//! other objects, its node or the whole cycle with it. This is what a live scheduler needs: a
//! user's malformed pod must not stop everyone else's work.
//!
//! - Conversion is per object, in one pass: a bad object is one error, not a rebuild.
//! - A pod of ours that is bound but cannot be scheduled as ours (its own fields are bad, or its
//!   PodGroup is) is kept as if another scheduler had bound it: its request counts on its node,
//!   and nothing moves or evicts it. Only when even that fails (its request cannot be read) is
//!   its node closed to new pods for the cycle, since its usage there is unknown.
//! - The references the engine refuses most (a queue whose parent is missing, invalid or on a
//!   cycle with it, a PodGroup naming a missing, invalid or non-leaf queue, a pod naming a
//!   missing PodGroup, a live pod bound to a missing node) are checked before the build. What
//!   names an invalid object is told it is invalid, and why, rather than that it is missing.
//!   Whatever the engine still refuses is left out and the snapshot built again, one object at a
//!   time; the loop ends because every round leaves out one more object.

use std::collections::{HashMap, HashSet};

use basalt_engine::{
    ClusterSpec, GroupSpec, PodPhase, PodSpec, QueueSpec, Snapshot, DEFAULT_QUEUE,
};
use k8s_openapi::api::core::v1::Pod;

use crate::convert::device_names::GPU_NAME;
use crate::convert::{locate, Context, ConvertError, ConvertOptions};
use crate::read::Object;
use queues::{reason as queue_reason, BadQueues};

mod queues;

/// What [`build_snapshot_tolerant`] made of the objects.
#[derive(Debug)]
pub struct TolerantSnapshot {
    /// `None` only when the engine refuses something no object stands for.
    pub snapshot: Option<Snapshot>,
    /// As from [`crate::build_snapshot_with_warnings`].
    pub warnings: Vec<String>,
    /// One per object left out or kept only as another scheduler's pod, in input order.
    pub errors: Vec<ConvertError>,
}

/// Builds a snapshot of every object that can be used, reporting the rest (see the module
/// documentation for what happens to a bad object).
pub fn build_snapshot_tolerant(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> TolerantSnapshot {
    let mut errors = Vec::new();
    let (context, warnings) = context(objects, &mut errors);
    // Objects the engine refused, by kind and key, with how often.
    let mut refused: HashMap<(String, String), u32> = HashMap::new();
    let (snapshot, warnings) = loop {
        let mut round = Round {
            warnings: warnings.clone(),
            errors: Vec::new(),
            left_out: LeftOut::default(),
        };
        let spec = round.convert_all(&context, objects, options, &refused);
        let e = match Snapshot::build(spec) {
            Ok(snapshot) => {
                errors.extend(round.errors);
                break (Some(snapshot), round.warnings);
            }
            Err(e) => locate(objects, e),
        };
        // Refused once: a bound pod is kept as another scheduler's; twice: left out.
        let times = refused_object(objects, &e).map(|key| {
            let times = refused.entry(key).or_insert(0);
            *times += 1;
            *times
        });
        match times {
            Some(1) => errors.push(e),
            Some(2) => {}
            // Nothing to leave out, or refused however it is read.
            _ => {
                errors.extend(round.errors);
                errors.push(e);
                break (None, round.warnings);
            }
        }
    };
    name_origins(objects, &mut errors);
    TolerantSnapshot {
        snapshot,
        warnings,
        errors,
    }
}

/// The context of every conversion, leaving out each PriorityClass, NodeTopology or HyperNode
/// that cannot be read (these are few, so trying again without one is cheap).
pub(crate) fn context(
    objects: &[(String, Object)],
    errors: &mut Vec<ConvertError>,
) -> (Context, Vec<String>) {
    let mut warnings = Vec::new();
    let first = match Context::collect(objects, &mut warnings) {
        Ok(c) => return (c, warnings),
        Err(e) => e,
    };
    // Only what informs the context: other kinds are left out of the retries.
    let mut informers: Vec<(String, Object)> = (objects.iter())
        .filter(|(_, o)| informs_context(o))
        .cloned()
        .collect();
    let mut next = Some(first);
    while let Some(e) = next.take() {
        let before = informers.len();
        informers.retain(|(_, o)| !(o.kind() == e.kind && o.key() == e.object));
        let progressed = informers.len() < before;
        errors.push(e);
        if !progressed {
            break;
        }
        warnings.clear();
        match Context::collect(&informers, &mut warnings) {
            Ok(c) => return (c, warnings),
            Err(e) => next = Some(e),
        }
    }
    // Nothing left to drop: convert without any context object.
    warnings.clear();
    let context = Context::collect(&[], &mut warnings).expect("an empty context reads");
    (context, warnings)
}

/// The kinds the context of a conversion is read from (see [`Context::collect`]).
pub(crate) fn informs_context(o: &Object) -> bool {
    matches!(
        o,
        Object::PriorityClass(_)
            | Object::NodeTopology(_)
            | Object::HyperNode(_)
            // Their names and labels: HyperNodes' members, DRA slices' node selectors.
            | Object::Node(_)
            // Their labels name queues.
            | Object::Namespace(_)
            // Pods' volumes: the claims, volumes and classes, and the pods using each claim.
            | Object::PersistentVolumeClaim(_)
            | Object::PersistentVolume(_)
            | Object::StorageClass(_)
            | Object::Pod(_)
            // Pods' claims: classes, the devices slices publish, and the claims.
            | Object::DeviceClass(_)
            | Object::ResourceSlice(_)
            | Object::ResourceClaim(_)
            | Object::ResourceClaimTemplate(_)
            // Pods' owners: the gangs their specs state.
            | Object::Workload(_)
    )
}

/// Errors made here name their object's source, as conversion errors do.
pub(crate) fn name_origins(objects: &[(String, Object)], errors: &mut [ConvertError]) {
    if errors.iter().all(|e| e.origin.is_some()) {
        return;
    }
    let origins: HashMap<(&str, String), &str> = objects
        .iter()
        .map(|(origin, o)| ((o.kind(), o.key()), origin.as_str()))
        .collect();
    for e in errors.iter_mut().filter(|e| e.origin.is_none()) {
        e.origin = origins
            .get(&(e.kind.as_str(), e.object.clone()))
            .map(|o| o.to_string());
    }
}

/// The object an engine error names. The engine names a pod without a PodGroup by its implicit
/// group, so a PodGroup that is not an object is looked up as a pod.
fn refused_object(objects: &[(String, Object)], e: &ConvertError) -> Option<(String, String)> {
    let exists = |kind: &str| {
        objects
            .iter()
            .any(|(_, o)| o.kind() == kind && o.key() == e.object)
    };
    let kind = if exists(&e.kind) {
        e.kind.as_str()
    } else if e.kind == "PodGroup" && exists("Pod") {
        "Pod"
    } else {
        return None;
    };
    Some((kind.to_string(), e.object.clone()))
}

/// One conversion of every object.
struct Round {
    warnings: Vec<String>,
    errors: Vec<ConvertError>,
    left_out: LeftOut,
}

/// What the objects that fail to convert leave behind for the others: the one bookkeeping of
/// a failed object, for the whole build and the incremental one alike.
#[derive(Default)]
pub(crate) struct LeftOut {
    /// Nodes with a bound pod whose usage is unknown: no new pod goes there.
    pub(crate) cordoned: HashSet<String>,
    /// PodGroups left out (`ns/name`): their pods say so.
    pub(crate) bad_groups: HashSet<String>,
    /// Queues left out: their children and PodGroups say so.
    pub(crate) bad_queues: BadQueues,
}

impl LeftOut {
    /// Records `object` (keyed `key`), whose conversion failed with `e` (`None`: refused by
    /// the engine in an earlier round). A live pod is kept as another scheduler's when
    /// `foreign` reads it so, and that conversion is returned; otherwise its node is closed.
    pub(crate) fn failed<C>(
        &mut self,
        object: &Object,
        key: &str,
        e: Option<&ConvertError>,
        foreign: impl FnOnce() -> Option<C>,
    ) -> Option<C> {
        match object {
            Object::PodGroup(_) => {
                self.bad_groups.insert(key.to_string());
            }
            Object::Queue(_) => {
                self.bad_queues.insert(key.to_string(), queue_reason(e));
            }
            Object::Pod(p) => {
                let node = live_node(p)?;
                let kept = foreign();
                if kept.is_none() {
                    self.cordoned.insert(node.to_string());
                }
                return kept;
            }
            _ => {}
        }
        None
    }
}

impl Round {
    fn convert_all(
        &mut self,
        context: &Context,
        objects: &[(String, Object)],
        options: &ConvertOptions,
        refused: &HashMap<(String, String), u32>,
    ) -> ClusterSpec {
        let foreign = foreign_options(options);
        let mut spec = ClusterSpec {
            now_ms: options.now_ms,
            device_resource: GPU_NAME.to_string(),
            ..ClusterSpec::default()
        };
        for (origin, object) in objects {
            // Empty in the first round, which is every cycle without an engine refusal: no
            // key is made then.
            let times = if refused.is_empty() {
                0
            } else {
                (refused.get(&(object.kind().to_string(), object.key())))
                    .copied()
                    .unwrap_or(0)
            };
            // `Err(None)`: refused by the engine in an earlier round.
            let converted = if times > 0 {
                Err(None)
            } else {
                context
                    .convert(origin, object, options, &mut self.warnings)
                    .map_err(Some)
            };
            let e = match converted {
                Ok(Some(c)) => {
                    c.add_to(&mut spec);
                    continue;
                }
                Ok(None) => continue,
                Err(e) => e,
            };
            // A live pod's request, as if another scheduler had bound it.
            let warnings = &mut self.warnings;
            let as_foreign = || {
                (times < 2)
                    .then(|| context.convert(origin, object, &foreign, warnings))
                    .and_then(Result::ok)
                    .flatten()
            };
            let kept = (self.left_out).failed(object, &object.key(), e.as_ref(), as_foreign);
            self.errors.extend(e);
            if let Some(c) = kept {
                c.add_to(&mut spec);
            }
        }
        spec.dra = context.dra.spec();
        self.check_references(&mut spec);
        for n in &mut spec.nodes {
            if self.left_out.cordoned.contains(&n.name) {
                n.unschedulable = true;
            }
        }
        spec
    }

    /// Leaves out queues whose parent is missing, invalid or on a cycle with them, PodGroups
    /// whose queue is missing, invalid or not a leaf, and pods whose PodGroup is missing (kept
    /// as another scheduler's when bound) or that are bound to a missing node.
    fn check_references(&mut self, spec: &mut ClusterSpec) {
        let Judged {
            queues: keep_queues,
            groups: keep_groups,
            fates,
        } = judge_references(
            &spec.queues.iter().collect::<Vec<_>>(),
            &spec.groups.iter().collect::<Vec<_>>(),
            &spec.nodes.iter().map(|n| n.name.as_str()).collect(),
            &spec.pods.iter().collect::<Vec<_>>(),
            &mut self.left_out,
            &mut self.errors,
        );
        let mut keep_queues = keep_queues.into_iter();
        spec.queues.retain(|_| keep_queues.next() == Some(true));
        let mut keep_groups = keep_groups.into_iter();
        spec.groups.retain(|_| keep_groups.next() == Some(true));
        let mut fates = fates.into_iter();
        spec.pods.retain_mut(|p| match fates.next() {
            Some(Fate::Keep) => true,
            Some(Fate::Foreign) => {
                p.ours = false;
                p.group = None;
                true
            }
            Some(Fate::Drop) | None => false,
        });
    }
}

/// What the reference check decides for a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fate {
    Keep,
    /// Left out.
    Drop,
    /// Kept as another scheduler's pod (`ours` false, no group): it is bound and its PodGroup
    /// is missing or bad, so its request stays on its node.
    Foreign,
}

/// What [`judge_references`] keeps: one flag per queue and per PodGroup, one fate per pod.
pub(crate) struct Judged {
    pub(crate) queues: Vec<bool>,
    pub(crate) groups: Vec<bool>,
    pub(crate) fates: Vec<Fate>,
}

/// The reference checks over borrowed specs: whether each queue stays (its parent is the top
/// or a queue that stays), each PodGroup stays (its queue stays and is a leaf) and each pod's
/// [`Fate`] (its PodGroup exists among those that stay, a live pod's node exists). Each
/// failure is an error; queues and PodGroups left out join `left_out` (which holds, on entry,
/// those whose conversion failed).
pub(crate) fn judge_references(
    queues: &[&QueueSpec],
    groups: &[&GroupSpec],
    nodes: &HashSet<&str>,
    pods: &[&PodSpec],
    left_out: &mut LeftOut,
    errors: &mut Vec<ConvertError>,
) -> Judged {
    type Set<T> = HashSet<T, foldhash::fast::RandomState>;
    let (bad_queues, bad_groups) = (&mut left_out.bad_queues, &mut left_out.bad_groups);
    let keep_queues = queues::judge_queues(queues, bad_queues, errors);
    let kept_queues = || (queues.iter().zip(&keep_queues)).filter_map(|(q, &k)| k.then_some(q));
    let queue_names: Set<&str> = kept_queues().map(|q| q.name.as_str()).collect();
    let parents: Set<&str> = kept_queues().filter_map(|q| q.parent.as_deref()).collect();
    let keep_groups: Vec<bool> = (groups.iter())
        .map(|g| {
            let queue = g.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
            // The engine adds `default` when it is not declared.
            let exists = queue_names.contains(queue) || queue == DEFAULT_QUEUE;
            let message = if let Some(why) = bad_queues.get(queue) {
                format!("names queue {queue}, which is invalid ({why})")
            } else if !exists {
                format!("names queue {queue}, which does not exist")
            } else if parents.contains(queue) {
                format!("queue {queue} has child queues; only leaf queues hold jobs")
            } else {
                return true;
            };
            let key = format!("{}/{}", g.namespace, g.name);
            errors.push(error("PodGroup", &key, "spec.queue", message));
            bad_groups.insert(key);
            false
        })
        .collect();
    // Borrowed names: this runs over every pod every cycle, so nothing is allocated for a pod
    // that passes.
    let kept: Set<(&str, &str)> = (groups.iter().zip(&keep_groups))
        .filter(|(_, &keep)| keep)
        .map(|(g, _)| (g.namespace.as_str(), g.name.as_str()))
        .collect();
    let fates = (pods.iter())
        .map(|p| {
            let key = || format!("{}/{}", p.namespace, p.name);
            let live = matches!(p.phase, PodPhase::Pending | PodPhase::Running);
            if let (Some(node), true) = (&p.node, live) {
                if !nodes.contains(node.as_str()) {
                    let message = format!("names node {node}, which does not exist");
                    errors.push(error("Pod", &key(), "spec.nodeName", message));
                    return Fate::Drop;
                }
            }
            let Some(group) = p.group.as_deref().filter(|_| p.ours) else {
                return Fate::Keep;
            };
            if kept.contains(&(p.namespace.as_str(), group)) {
                return Fate::Keep;
            }
            let group_key = format!("{}/{group}", p.namespace);
            let message = if bad_groups.contains(&group_key) {
                format!("its PodGroup {group_key} is invalid (see the PodGroup)")
            } else {
                format!("names PodGroup {group_key}, which does not exist")
            };
            let field = "metadata.labels/annotations (pod group)";
            errors.push(error("Pod", &key(), field, message));
            if p.node.is_some() && live {
                // Bound: its request stays on its node, as another scheduler's pod.
                Fate::Foreign
            } else {
                Fate::Drop
            }
        })
        .collect();
    Judged {
        queues: keep_queues,
        groups: keep_groups,
        fates,
    }
}

/// The options a pod is read with as another scheduler's: none of its scheduler names is ours.
pub(crate) fn foreign_options(options: &ConvertOptions) -> ConvertOptions {
    ConvertOptions {
        scheduler_names: Vec::new(),
        ..options.clone()
    }
}

/// The node of a pod that holds resources there (bound, neither succeeded nor failed).
pub(crate) fn live_node(p: &Pod) -> Option<&str> {
    let node = p
        .spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    (!matches!(phase, Some("Succeeded") | Some("Failed"))).then_some(node)
}

fn error(kind: &str, object: &str, field: &str, message: String) -> ConvertError {
    ConvertError {
        origin: None,
        kind: kind.to_string(),
        object: object.to_string(),
        field: field.to_string(),
        message,
    }
}

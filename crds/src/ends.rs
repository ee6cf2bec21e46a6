//! Each pod's end, as a forecast needs it (`basalt_engine::forecast::End`), read from the
//! objects a cluster was converted from: its `activeDeadlineSeconds`, else the
//! `scheduling.basalt.dev/expected-runtime` annotation on the pod or its PodGroup (exact), else
//! the run time learned from finished jobs of the same owner and queue ([`Learned`], an
//! estimate). An annotation that does not read is reported and taken as absent. Shared by the
//! daemon's forecast task and `basalt-sim plan --explain`.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet, VecDeque};

use basalt_engine::forecast::{End, History, Method};
use basalt_engine::{ClusterSpec, GroupSpec, PodSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Object;

/// foldhash: the maps here are made and read once per pod of the cluster each run.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A stated run time, on a pod or its PodGroup (a Go duration: `90m`, `1h30m`, `2.5h`).
pub const EXPECTED_RUNTIME: &str = "scheduling.basalt.dev/expected-runtime";

/// An annotation that does not read: the object (`Pod ns/name`, `PodGroup ns/name`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRuntime {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// Reads a Go duration (`time.ParseDuration`) into milliseconds: a sequence of decimal numbers
/// each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); negative or empty is refused (a
/// run time cannot be).
pub fn parse_go_duration(text: &str) -> Result<i64, String> {
    let bad = |why: &str| {
        Err(format!(
            "{text:?} is not a duration such as 90m or 1h30m: {why}"
        ))
    };
    if text.is_empty() {
        return bad("empty");
    }
    if text == "0" {
        return Ok(0);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return bad("negative");
    }
    let mut total_ns = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = match rest[..digits].parse() {
            Ok(n) if digits > 0 => n,
            _ => return bad("a number must come before each unit"),
        };
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let ns_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return bad("missing unit"),
            _ => return bad("unknown unit"),
        };
        rest = &rest[unit_len..];
        total_ns += number * ns_per;
    }
    // Go's durations end at about 292 years.
    if total_ns > i64::MAX as f64 {
        return bad("too long");
    }
    Ok((total_ns / 1e6).round() as i64)
}

/// Run times learned from the pods of finished jobs, keyed by queue and owner.
#[derive(Default)]
pub struct Learned {
    history: History,
    /// Pods already recorded (by uid), the oldest forgotten first.
    seen: HashSet<String>,
    order: VecDeque<String>,
}

impl Learned {
    /// Pods remembered as recorded.
    const SEEN: usize = 100_000;

    /// Records each succeeded pod's run time (start to its last container's finish) once.
    pub fn learn(&mut self, pods: &[&Pod], queue_of: impl Fn(&Pod) -> Option<String>) {
        for p in pods {
            self.learn_pod(p, queue_of(p).as_deref());
        }
    }

    /// Records `p`'s run time once, when it succeeded, under its `queue`.
    pub fn learn_pod(&mut self, p: &Pod, queue: Option<&str>) {
        let Some(status) = &p.status else { return };
        if status.phase.as_deref() != Some("Succeeded") {
            return;
        }
        let Some(uid) = p.metadata.uid.clone() else {
            return;
        };
        let finished = (status.container_statuses.iter().flatten())
            .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0.as_millisecond())
            .max();
        let started = status.start_time.as_ref().map(|t| t.0.as_millisecond());
        let (Some(start), Some(end)) = (started, finished) else {
            return;
        };
        if !self.seen.insert(uid.clone()) {
            return;
        }
        self.order.push_back(uid);
        if self.order.len() > Self::SEEN {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        let key = history_key(queue, &p.metadata);
        self.history.record(&key, end - start);
    }

    pub fn estimate(&self, queue: Option<&str>, meta: &ObjectMeta) -> Option<i64> {
        // Nothing learned yet (a pod forgotten was recorded first): no key to make per pod.
        if self.seen.is_empty() {
            return None;
        }
        self.history.estimate(&history_key(queue, meta))
    }
}

/// `queue/Kind/name` of the object's controller (or the object itself when it has none), with a
/// generated suffix dropped from the name so that each run of one workload counts alike.
fn history_key(queue: Option<&str>, meta: &ObjectMeta) -> String {
    let owner = (meta.owner_references.iter().flatten())
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name));
    let owner = owner.unwrap_or_else(|| match &meta.generate_name {
        Some(g) => format!("Pod/{g}"),
        None => format!("Pod/{}", meta.name.as_deref().unwrap_or_default()),
    });
    format!("{}/{owner}", queue.unwrap_or("default"))
}

/// Per pod (`namespace/name`) of `spec` its end when one is known, and the annotations that did
/// not read. `objects` are the ones `spec` was converted from (for annotations and owners).
pub fn ends(
    objects: &[(String, Object)],
    spec: &ClusterSpec,
    learned: &Learned,
) -> (HashMap<String, End>, Vec<BadRuntime>) {
    ends_of(objects, &spec.groups, &spec.pods, learned)
}

/// [`ends`] of a spec's `groups` and `pods` (owned or shared), each pod's object found among
/// `objects` by its name.
pub fn ends_of(
    objects: &[(String, Object)],
    groups: &[GroupSpec],
    pods_of_spec: &[impl Borrow<PodSpec>],
    learned: &Learned,
) -> (HashMap<String, End>, Vec<BadRuntime>) {
    let pods = (pods_of_spec.iter().map(Borrow::borrow)).collect::<Vec<_>>();
    let raw = objects_of(objects, &pods);
    let pods = pods.into_iter().zip(raw);
    ends_paired(objects, groups, pods, learned)
}

/// Per pod of `pods`, its object among `objects` (by namespace and name), when there.
pub fn objects_of<'o>(objects: &'o [(String, Object)], pods: &[&PodSpec]) -> Vec<Option<&'o Pod>> {
    let raw: FastMap<(&str, &str), &Pod> = (objects.iter())
        .filter_map(|(_, o)| match o {
            Object::Pod(p) => Some((object_key(&p.metadata), &**p)),
            _ => None,
        })
        .collect();
    (pods.iter())
        .map(|p| raw.get(&(p.namespace.as_str(), p.name.as_str())).copied())
        .collect()
}

/// [`ends_of`] with each pod given beside the object it was converted from, when known
/// (`SharedSpec::sources`): no pod is looked up by name. `objects` are read for their
/// PodGroups' annotations.
pub fn ends_paired<'p>(
    objects: &[(String, Object)],
    groups: &[GroupSpec],
    pods: impl IntoIterator<Item = (&'p PodSpec, Option<&'p Pod>)>,
    learned: &Learned,
) -> (HashMap<String, End>, Vec<BadRuntime>) {
    let mut bad = Vec::new();
    let mut read = |kind: &'static str, meta: &ObjectMeta| -> Option<i64> {
        let text = meta.annotations.as_ref()?.get(EXPECTED_RUNTIME)?;
        match parse_go_duration(text.trim()) {
            Ok(ms) => Some(ms),
            Err(message) => {
                bad.push(BadRuntime {
                    kind,
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    name: meta.name.clone().unwrap_or_default(),
                    message: format!("metadata.annotations[{EXPECTED_RUNTIME}]: {message}"),
                });
                None
            }
        }
    };
    // Keyed by borrowed (namespace, name): a `String` is made only for a pod with an end.
    let group_runtime: FastMap<(&str, &str), Option<i64>> = (objects.iter())
        .filter_map(|(_, o)| match o {
            Object::PodGroup(g) => Some((object_key(&g.metadata), read("PodGroup", &g.metadata))),
            _ => None,
        })
        .collect();
    let queues: FastMap<(&str, &str), Option<&str>> = (groups.iter())
        .map(|g| ((g.namespace.as_str(), g.name.as_str()), g.queue.as_deref()))
        .collect();
    let mut ends = HashMap::new();
    for (p, pod) in pods {
        let group = p.group.as_deref().map(|g| (p.namespace.as_str(), g));
        let stated = pod
            .and_then(|pod| read("Pod", &pod.metadata))
            .or_else(|| group_runtime.get(&group?).copied().flatten());
        let run = match (p.active_deadline_s, stated) {
            (Some(s), _) => Some((s.saturating_mul(1000), Method::Exact)),
            (None, Some(ms)) => Some((ms, Method::Exact)),
            (None, None) => pod
                .and_then(|pod| {
                    let queue =
                        (p.queue.as_deref()).or_else(|| queues.get(&group?).copied().flatten());
                    learned.estimate(queue, &pod.metadata)
                })
                .map(|ms| (ms, Method::Estimate)),
        };
        let Some((ms, method)) = run else { continue };
        let end = match (p.node.is_some(), p.started_ms) {
            (true, Some(start)) => End::At {
                ms: start.saturating_add(ms),
                method,
            },
            _ => End::After { ms, method },
        };
        ends.insert(format!("{}/{}", p.namespace, p.name), end);
    }
    (ends, bad)
}

/// An object's namespace (`default` when it has none) and name, borrowed.
fn object_key(meta: &ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default(),
    )
}

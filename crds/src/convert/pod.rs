//! Pods to the engine's [`PodSpec`]: requests as Kubernetes computes them, placement rules,
//! priority, scheduling gates, whether it claims DRA resources, and the labels and annotations
//! Basalt honours; its constraints on other pods ([`super::constraints`]), and for a pending
//! pod of ours what its volumes allow ([`super::volumes`]) and what it states that Basalt does
//! not act on ([`super::unsupported`]).
//!
//! A pod of another scheduler (`ours == false`) only takes room on its node, so fields that
//! matter only to Basalt's own pods (GPU ids, rank, priority class, placement rules) are read
//! leniently on it: a bad value is left out with a warning rather than failing the pod, and a
//! request beyond [`quantity::MAX_QUANTITY`] is clamped to it (the pod is already there).

use std::collections::BTreeMap;

use basalt_engine::{
    NodeSelectorTerm, PlacementRules, PodPhase, PodSpec, RequiredNodeAffinity, ResourceList,
    Toleration, TolerationOperator,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::selectors::requirements;
use super::{
    annotation, created_ms, label_or_annotation, namespace, taint_effect, Context, ConvertError,
    ConvertOptions, Cx, Lenience, GPU_IDS, POD_GROUP, PREEMPTABLE, QUEUE, ROLE,
    SCHEDULER_PLUGINS_POD_GROUP, VOLCANO_GROUP_NAME, VOLCANO_PREEMPTABLE, VOLCANO_TASK_SPEC,
};
use super::{constraints, devices, unsupported};
use crate::quantity::{self, MAX_QUANTITY};

mod hami;
pub use hami::device_ask;
use hami::{clamp_hami_percents, device_containers};

pub(super) fn pod(
    cx: &Cx,
    p: &Pod,
    context: &Context,
    options: &ConvertOptions,
    warnings: &mut Vec<String>,
) -> Result<PodSpec, ConvertError> {
    let meta = &p.metadata;
    let name = cx.name(meta)?.to_string();
    let Some(spec) = p.spec.as_ref() else {
        return Err(cx.err("spec", "missing"));
    };
    let scheduler = spec
        .scheduler_name
        .as_deref()
        .unwrap_or("default-scheduler");
    let ours = options.scheduler_names.iter().any(|s| s == scheduler);
    let mut lenient = Lenience { ours, warnings };
    let priorities = &context.priorities;

    let priority = match (spec.priority, spec.priority_class_name.as_deref()) {
        (Some(v), _) => v,
        (None, Some(class)) if !class.is_empty() => {
            lenient.or(priorities.lookup(cx, "spec.priorityClassName", class), 0)?
        }
        _ => priorities.global_default.unwrap_or(0),
    };

    let preemption_never = match spec.preemption_policy.as_deref() {
        Some(policy) => policy == "Never",
        None => spec
            .priority_class_name
            .as_deref()
            .is_some_and(|c| priorities.never_preempts(c)),
    };
    let node = spec.node_name.clone().filter(|n| !n.is_empty());
    let phase = match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        // The kubelet lost touch; a bound pod still holds its node's resources.
        Some("Unknown") if node.is_some() => PodPhase::Running,
        Some("Unknown") => PodPhase::Pending,
        // Another scheduler's pod of an unknown phase holds its node, if it has one.
        Some(other) => lenient.or(
            Err(cx.err("status.phase", format!("unknown phase {other:?}"))),
            if node.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
        )?,
    };

    // Else the group made for the workload that owns it (see `owners.rs`).
    let group = (explicit_group(meta).map(str::to_string)).or_else(|| context.workload_group(meta));
    // A groupless pod's own job: its queue annotation, else its namespace's.
    let queue = match &group {
        Some(_) => None,
        None => (label_or_annotation(meta, QUEUE).filter(|q| !q.is_empty()))
            .or_else(|| context.namespace_queue(&namespace(meta)))
            .map(str::to_string),
    };
    // Else the role its workload's operator labels it with (see `crate::workloads`).
    let role = label_or_annotation(meta, ROLE)
        .or_else(|| label_or_annotation(meta, VOLCANO_TASK_SPEC))
        .or_else(|| {
            (crate::workloads::ROLE_LABELS.iter()).find_map(|l| label_or_annotation(meta, l))
        })
        .map(str::to_string);
    let non_preemptable = [PREEMPTABLE, VOLCANO_PREEMPTABLE].iter().any(|key| {
        let get = |m: &Option<BTreeMap<String, String>>| {
            m.as_ref()
                .and_then(|m| m.get(*key))
                .is_some_and(|v| v == "false")
        };
        get(&meta.labels) || get(&meta.annotations)
    });
    let gpu_ids = match annotation(meta, GPU_IDS) {
        None => Vec::new(),
        Some(s) => {
            let ids = parse_gpu_ids(s).ok_or_else(|| {
                cx.err(
                    format!("metadata.annotations[{GPU_IDS}]"),
                    format!("expected comma-separated GPU indices, got {s:?}"),
                )
            });
            lenient.or(ids, Vec::new())?
        }
    };
    let mut request = pod_request(cx, spec, &mut lenient)?;
    let rules = placement_rules(cx, spec);
    let mut rules = lenient.or(rules, PlacementRules::default())?;
    let held_devices;
    (held_devices, rules.devices) = devices::pod_devices(cx, meta, node.is_some(), &mut lenient)?;
    let rank = lenient.or(pod_rank(cx, meta), None)?;
    let labels = meta.labels.clone().unwrap_or_default();
    let constraints = constraints::pod_constraints(cx, spec, &labels, &mut lenient)?;
    let constraints = (!constraints.is_empty()).then(|| context.share(constraints));
    let namespace = namespace(meta);
    let mut waits = Vec::new();
    let mut claims = Vec::new();
    if ours {
        waits = unsupported::unsupported(spec);
        // Only a pod still to be placed is judged by its volumes.
        if node.is_none() && phase == PodPhase::Pending {
            let (volume_rules, volume_waits) = (context.volumes).judge(
                &namespace,
                &name,
                meta.uid.as_deref(),
                spec,
                &options.scheduler_names,
            );
            rules.volumes = volume_rules;
            waits.extend(volume_waits);
            match context.dra.pod_claims(p, &namespace) {
                Ok(Some((need, names))) => {
                    add_devices(&mut request, context.dra.asked_counts(&need));
                    rules.claims = Some(std::sync::Arc::new(need));
                    claims = names;
                }
                Ok(None) => {}
                Err(claim_waits) => waits.extend(claim_waits),
            }
        }
    }

    // DRA devices a bound pod holds count on its node like any resource (see `dra.rs`).
    if node.is_some() && phase != PodPhase::Succeeded && phase != PodPhase::Failed {
        add_devices(&mut request, context.dra.held_counts(p, &namespace));
    }

    let devices = basalt_engine::devices::DeviceAsk {
        containers: device_containers(spec),
        ..device_ask(&request)
    };
    Ok(PodSpec {
        namespace,
        name,
        ours,
        group,
        queue,
        role,
        request,
        rules,
        priority,
        created_ms: created_ms(meta),
        phase,
        node,
        terminating: meta.deletion_timestamp.is_some(),
        gpu_ids,
        held_devices,
        devices,
        nominated_node: p
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty()),
        non_preemptable,
        preemption_never,
        started_ms: p
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|Time(t)| t.as_millisecond()),
        active_deadline_s: spec.active_deadline_seconds,
        labels,
        rank,
        pinned_queue: None,
        scheduling_gates: (spec.scheduling_gates.iter().flatten())
            .map(|g| g.name.clone())
            .collect(),
        claims,
        constraints,
        waits,
    })
}

/// Adds DRA device counts (by driver) to a request.
fn add_devices(request: &mut ResourceList, counts: BTreeMap<String, i64>) {
    for (driver, n) in counts {
        let v = request.entry(driver).or_default();
        *v = v.saturating_add(n);
    }
}

/// Labels (or annotations) that give a pod's index in its workload, most specific first.
pub const RANK_LABELS: [&str; 5] = [
    "batch.kubernetes.io/job-completion-index",
    "apps.kubernetes.io/pod-index",
    "training.kubeflow.org/replica-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "volcano.sh/task-index",
];

/// The pod's rank from the first index label it carries.
fn pod_rank(cx: &Cx, meta: &ObjectMeta) -> Result<Option<u32>, ConvertError> {
    for key in RANK_LABELS {
        if let Some(v) = label_or_annotation(meta, key) {
            return v.parse().map(Some).map_err(|_| {
                cx.err(
                    format!("metadata.labels[{key}]"),
                    format!("expected a non-negative integer index, got {v:?}"),
                )
            });
        }
    }
    Ok(None)
}

fn parse_gpu_ids(s: &str) -> Option<Vec<u32>> {
    if s.trim().is_empty() {
        return Some(Vec::new());
    }
    s.split(',').map(|x| x.trim().parse().ok()).collect()
}

/// Where a quantity was stated: spelt out (`spec.containers[0].resources.requests[cpu]`) only
/// for a message, since converting a pod makes many and most are never shown.
#[derive(Clone, Copy)]
struct At<'a> {
    list: List,
    name: &'a str,
}

/// A resource list of a pod spec.
#[derive(Clone, Copy)]
enum List {
    Container {
        init: bool,
        index: usize,
        limits: bool,
    },
    Pod {
        limits: bool,
    },
    Overhead,
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = |limits| if limits { "limits" } else { "requests" };
        match self.list {
            List::Container {
                init,
                index,
                limits,
            } => {
                let containers = if init { "initContainers" } else { "containers" };
                write!(f, "spec.{containers}[{index}].resources.{}", kind(limits))?
            }
            List::Pod { limits } => write!(f, "spec.resources.{}", kind(limits))?,
            List::Overhead => f.write_str("spec.overhead")?,
        }
        write!(f, "[{}]", self.name)
    }
}

/// Resource name to its value and where it came from, to name that field in errors.
type Entries<'a> = BTreeMap<&'a str, (i64, At<'a>)>;

/// A container's requests, with limits standing in for requests it does not state (the API
/// server defaults them so).
fn container_request<'a>(
    cx: &Cx,
    (init, index): (bool, usize),
    c: &'a Container,
    lenient: &mut Lenience,
) -> Result<Entries<'a>, ConvertError> {
    let Some(res) = c.resources.as_ref() else {
        return Ok(Entries::new());
    };
    let list = |limits| List::Container {
        init,
        index,
        limits,
    };
    let mut out = match &res.requests {
        Some(r) => entries(cx, list(false), r, lenient)?,
        None => Entries::new(),
    };
    if let Some(limits) = &res.limits {
        for (name, v) in entries(cx, list(true), limits, lenient)? {
            out.entry(name).or_insert(v);
        }
    }
    clamp_hami_percents(cx, &mut out, lenient);
    Ok(out)
}

/// Parses a resource list: strictly for a pod of ours; for another scheduler's pod a value
/// beyond [`MAX_QUANTITY`] is clamped to it, with a warning.
fn entries<'a>(
    cx: &Cx,
    list: List,
    quantities: &'a BTreeMap<String, Quantity>,
    lenient: &mut Lenience,
) -> Result<Entries<'a>, ConvertError> {
    let mut out = Entries::new();
    for (name, q) in quantities {
        let at = At { list, name };
        let value = match lenient.ours {
            true => quantity::parse_for_resource(name, &q.0),
            false => quantity::parse_clamped(name, &q.0).map(|(v, clamped)| {
                if clamped {
                    lenient.warnings.push(clamp_warning(cx, at));
                }
                v
            }),
        };
        let value = value.map_err(|e| cx.err(at.to_string(), e.to_string()))?;
        out.insert(name.as_str(), (value, at));
    }
    Ok(out)
}

fn clamp_warning(cx: &Cx, field: At) -> String {
    cx.warning(
        field.to_string(),
        format!(
            "{}; counted as 2^60 on a pod of another scheduler",
            quantity::above_limit()
        ),
    )
}

/// Adds `other` to `into`, within [`MAX_QUANTITY`]: a pod of ours beyond it is an error at the
/// field whose value crossed it, another scheduler's pod stops at it (with a warning).
fn add<'a>(
    cx: &Cx,
    into: &mut Entries<'a>,
    other: &Entries<'a>,
    lenient: &mut Lenience,
) -> Result<(), ConvertError> {
    for (&name, &(v, field)) in other {
        let entry = into.entry(name).or_insert((0, field));
        match entry.0.checked_add(v).filter(|&sum| sum <= MAX_QUANTITY) {
            Some(sum) => *entry = (sum, field),
            None if lenient.ours => {
                return Err(cx.err(
                    field.to_string(),
                    format!("the pod's request sum {}", quantity::above_limit()),
                ))
            }
            None => {
                lenient.warnings.push(clamp_warning(cx, field));
                *entry = (MAX_QUANTITY, field);
            }
        }
    }
    Ok(())
}

fn max_into<'a>(into: &mut Entries<'a>, other: &Entries<'a>) {
    for (&k, &v) in other {
        let e = into.entry(k).or_insert(v);
        if v.0 > e.0 {
            *e = v;
        }
    }
}

/// The pod's effective request, as Kubernetes computes it (`PodRequests` in
/// `k8s.io/component-helpers`): the larger of (a) the sum of its containers and sidecars (init
/// containers with `restartPolicy: Always`) and (b) the peak of each ordinary init container
/// plus the sidecars started before it, or of the sidecars alone as each starts; plus the pod
/// overhead. Every sum stays within [`MAX_QUANTITY`].
fn pod_request(
    cx: &Cx,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    lenient: &mut Lenience,
) -> Result<ResourceList, ConvertError> {
    let mut total = Entries::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let req = container_request(cx, (false, i), c, lenient)?;
        add(cx, &mut total, &req, lenient)?;
    }
    let mut sidecars = Entries::new();
    let mut init_peak = Entries::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let req = container_request(cx, (true, i), c, lenient)?;
        if c.restart_policy.as_deref() == Some("Always") {
            add(cx, &mut total, &req, lenient)?;
            add(cx, &mut sidecars, &req, lenient)?;
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut running = req;
            add(cx, &mut running, &sidecars, lenient)?;
            max_into(&mut init_peak, &running);
        }
    }
    max_into(&mut total, &init_peak);
    // Pod-level resources (PodLevelResources) replace the containers' aggregate for the
    // resources they name; the API server defaults their requests to their limits.
    if let Some(pod_level) = &spec.resources {
        let mut stated = Entries::new();
        if let Some(limits) = &pod_level.limits {
            stated = entries(cx, List::Pod { limits: true }, limits, lenient)?;
        }
        if let Some(requests) = &pod_level.requests {
            stated.extend(entries(cx, List::Pod { limits: false }, requests, lenient)?);
        }
        stated.retain(|name, _| unsupported::POD_LEVEL_RESOURCES.contains(name));
        total.extend(stated);
    }
    if let Some(overhead) = &spec.overhead {
        let overhead = entries(cx, List::Overhead, overhead, lenient)?;
        add(cx, &mut total, &overhead, lenient)?;
    }
    Ok(total
        .into_iter()
        .map(|(k, (v, _))| (k.to_string(), v))
        .collect())
}

fn placement_rules(
    cx: &Cx,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> Result<PlacementRules, ConvertError> {
    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(cx.err(
                    format!("spec.tolerations[{i}].operator"),
                    format!("unknown operator {other:?}"),
                ))
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(taint_effect(e).ok_or_else(|| {
                cx.err(
                    format!("spec.tolerations[{i}].effect"),
                    format!("unknown effect {e:?}"),
                )
            })?),
        };
        tolerations.push(Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator,
            value: t.value.clone().unwrap_or_default(),
            effect,
        });
    }

    const REQUIRED: &str =
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity = match required {
        None => None,
        Some(sel) => {
            let mut terms = Vec::with_capacity(sel.node_selector_terms.len());
            for (i, term) in sel.node_selector_terms.iter().enumerate() {
                let base = format!("{REQUIRED}.nodeSelectorTerms[{i}]");
                terms.push(NodeSelectorTerm {
                    match_expressions: requirements(
                        cx,
                        &format!("{base}.matchExpressions"),
                        term.match_expressions.as_deref(),
                    )?,
                    match_fields: requirements(
                        cx,
                        &format!("{base}.matchFields"),
                        term.match_fields.as_deref(),
                    )?,
                });
            }
            Some(RequiredNodeAffinity { terms })
        }
    };

    Ok(PlacementRules {
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        affinity,
        tolerations,
        volumes: Vec::new(),
        devices: None,
        claims: None,
    })
}

/// The PodGroup a pod names itself: Basalt's label or annotation, Volcano's group-name
/// annotation, or scheduler-plugins' label.
pub fn explicit_group(meta: &ObjectMeta) -> Option<&str> {
    label_or_annotation(meta, POD_GROUP)
        .or_else(|| annotation(meta, VOLCANO_GROUP_NAME))
        .or_else(|| {
            meta.labels
                .as_ref()?
                .get(SCHEDULER_PLUGINS_POD_GROUP)
                .map(String::as_str)
        })
        .filter(|g| !g.is_empty())
}

//! What a pod states about other pods and its soft node preferences, to the engine's
//! [`PodConstraints`]: inter-pod affinity and anti-affinity, topology spread constraints, host
//! ports, in-tree disks and preferred node affinity, validated as the API server validates them.
//!
//! `matchLabelKeys` / `mismatchLabelKeys` are merged into the selector from the pod's own labels
//! as the API server (pod affinity) and kube-scheduler (topology spread) do: `key In [value]` /
//! `key NotIn [value]`, keys the pod lacks ignored, nothing merged into an absent selector (it
//! matches no pod either way). A pod read from a live cluster already carries the merged
//! requirements; merging again adds nothing.

use std::collections::BTreeMap;

use basalt_engine::{
    Disk, HostPort, InclusionPolicy, LabelSelector, NodeSelectorTerm, PodAffinityRules,
    PodAffinityTerm, PodConstraints, PreferredNodeTerm, SelectorOperator, SelectorRequirement,
    TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use k8s_openapi::api::core::v1 as k8s;

use super::selectors::{requirements, selector_requirements};
use super::{ConvertError, Cx, Lenience};

/// The pod's constraints. On another scheduler's pod each part (affinity, anti-affinity,
/// spread, ports, preferred node affinity) that cannot be read is left out with a warning, so
/// the rest still counts.
pub(super) fn pod_constraints(
    cx: &Cx,
    spec: &k8s::PodSpec,
    labels: &BTreeMap<String, String>,
    lenient: &mut Lenience,
) -> Result<PodConstraints, ConvertError> {
    let stated = spec.affinity.as_ref();
    let pod_affinity = stated.and_then(|a| a.pod_affinity.as_ref());
    let affinity = pod_affinity.map_or(Ok(PodAffinityRules::default()), |a| {
        affinity_rules(
            cx,
            "spec.affinity.podAffinity",
            labels,
            a.required_during_scheduling_ignored_during_execution
                .as_deref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )
    });
    let pod_anti = stated.and_then(|a| a.pod_anti_affinity.as_ref());
    let anti_rules = pod_anti.map_or(Ok(PodAffinityRules::default()), |a| {
        affinity_rules(
            cx,
            "spec.affinity.podAntiAffinity",
            labels,
            a.required_during_scheduling_ignored_during_execution
                .as_deref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )
    });
    let node_affinity = stated.and_then(|a| a.node_affinity.as_ref());
    let preferred_node = node_affinity
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .map_or(Ok(Vec::new()), |p| preferred_node_affinity(cx, p));
    Ok(PodConstraints {
        affinity: lenient.or(affinity, PodAffinityRules::default())?,
        anti_affinity: lenient.or(anti_rules, PodAffinityRules::default())?,
        spread: lenient.or(spread_constraints(cx, spec, labels), Vec::new())?,
        host_ports: lenient.or(host_ports(cx, spec), Vec::new())?,
        disks: disks(spec),
        preferred_node_affinity: lenient.or(preferred_node, Vec::new())?,
    })
}

fn affinity_rules(
    cx: &Cx,
    field: &str,
    labels: &BTreeMap<String, String>,
    required: Option<&[k8s::PodAffinityTerm]>,
    preferred: Option<&[k8s::WeightedPodAffinityTerm]>,
) -> Result<PodAffinityRules, ConvertError> {
    let mut rules = PodAffinityRules::default();
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    for (i, t) in required.unwrap_or_default().iter().enumerate() {
        let at = format!("{field}.{REQUIRED}[{i}]");
        rules.required.push(affinity_term(cx, &at, labels, t)?);
    }
    for (i, w) in preferred.unwrap_or_default().iter().enumerate() {
        let at = format!("{field}.{PREFERRED}[{i}]");
        let weight = weight(cx, &at, w.weight)?;
        let term = affinity_term(
            cx,
            &format!("{at}.podAffinityTerm"),
            labels,
            &w.pod_affinity_term,
        )?;
        rules
            .preferred
            .push(WeightedPodAffinityTerm { weight, term });
    }
    Ok(rules)
}

/// A preference weight: 1..=100, as the API server validates it.
fn weight(cx: &Cx, field: &str, weight: i32) -> Result<i32, ConvertError> {
    if (1..=100).contains(&weight) {
        Ok(weight)
    } else {
        Err(cx.err(
            format!("{field}.weight"),
            format!("must be in the range 1-100, got {weight}"),
        ))
    }
}

fn affinity_term(
    cx: &Cx,
    field: &str,
    labels: &BTreeMap<String, String>,
    t: &k8s::PodAffinityTerm,
) -> Result<PodAffinityTerm, ConvertError> {
    if t.topology_key.is_empty() {
        return Err(cx.err(format!("{field}.topologyKey"), "must not be empty"));
    }
    let match_keys = t.match_label_keys.as_deref().unwrap_or_default();
    let mismatch_keys = t.mismatch_label_keys.as_deref().unwrap_or_default();
    label_keys(cx, &format!("{field}.matchLabelKeys"), match_keys)?;
    label_keys(cx, &format!("{field}.mismatchLabelKeys"), mismatch_keys)?;
    if let Some((j, key)) = (mismatch_keys.iter().enumerate()).find(|(_, k)| match_keys.contains(k))
    {
        return Err(cx.err(
            format!("{field}.mismatchLabelKeys[{j}]"),
            format!("{key:?} is also in matchLabelKeys"),
        ));
    }
    let mut pods = selector(
        cx,
        &format!("{field}.labelSelector"),
        t.label_selector.as_ref(),
    )?;
    if let Some(s) = &mut pods {
        merge_label_keys(s, labels, match_keys, SelectorOperator::In);
        merge_label_keys(s, labels, mismatch_keys, SelectorOperator::NotIn);
    }
    let namespaces = t.namespaces.clone().unwrap_or_default();
    if let Some(j) = namespaces.iter().position(String::is_empty) {
        return Err(cx.err(format!("{field}.namespaces[{j}]"), "must not be empty"));
    }
    Ok(PodAffinityTerm {
        selector: pods,
        namespaces,
        namespace_selector: selector(
            cx,
            &format!("{field}.namespaceSelector"),
            t.namespace_selector.as_ref(),
        )?,
        topology_key: t.topology_key.clone(),
    })
}

fn selector(
    cx: &Cx,
    field: &str,
    s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<Option<LabelSelector>, ConvertError> {
    s.map(|s| {
        selector_requirements(cx, field, s).map(|requirements| LabelSelector { requirements })
    })
    .transpose()
}

fn label_keys(cx: &Cx, field: &str, keys: &[String]) -> Result<(), ConvertError> {
    match keys.iter().position(String::is_empty) {
        Some(j) => Err(cx.err(format!("{field}[{j}]"), "must not be empty")),
        None => Ok(()),
    }
}

/// Adds `key <operator> [the pod's value]` for each key the pod carries, once.
fn merge_label_keys(
    selector: &mut LabelSelector,
    labels: &BTreeMap<String, String>,
    keys: &[String],
    operator: SelectorOperator,
) {
    for key in keys {
        let Some(value) = labels.get(key) else {
            continue;
        };
        let requirement = SelectorRequirement {
            key: key.clone(),
            operator,
            values: vec![value.clone()],
        };
        if !selector.requirements.contains(&requirement) {
            selector.requirements.push(requirement);
        }
    }
}

fn spread_constraints(
    cx: &Cx,
    spec: &k8s::PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<TopologySpreadConstraint>, ConvertError> {
    let mut out: Vec<TopologySpreadConstraint> = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.topologySpreadConstraints[{i}]");
        let max_skew = u32::try_from(c.max_skew)
            .ok()
            .filter(|&s| s >= 1)
            .ok_or_else(|| {
                cx.err(
                    format!("{at}.maxSkew"),
                    format!("must be at least 1, got {}", c.max_skew),
                )
            })?;
        if c.topology_key.is_empty() {
            return Err(cx.err(format!("{at}.topologyKey"), "must not be empty"));
        }
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(cx.err(
                    format!("{at}.whenUnsatisfiable"),
                    format!("unknown value {other:?}: expected DoNotSchedule or ScheduleAnyway"),
                ))
            }
        };
        if let Some(j) = (out.iter()).position(|o| {
            o.topology_key == c.topology_key && o.when_unsatisfiable == when_unsatisfiable
        }) {
            return Err(cx.err(
                format!("{at}.topologyKey"),
                format!(
                    "{:?} with {} is also spec.topologySpreadConstraints[{j}]",
                    c.topology_key, c.when_unsatisfiable
                ),
            ));
        }
        let min_domains = match c.min_domains {
            None => None,
            Some(_) if when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule => {
                return Err(cx.err(
                    format!("{at}.minDomains"),
                    "only allowed with whenUnsatisfiable: DoNotSchedule",
                ))
            }
            Some(m) => Some(u32::try_from(m).ok().filter(|&m| m >= 1).ok_or_else(|| {
                cx.err(
                    format!("{at}.minDomains"),
                    format!("must be at least 1, got {m}"),
                )
            })?),
        };
        let match_keys = c.match_label_keys.as_deref().unwrap_or_default();
        label_keys(cx, &format!("{at}.matchLabelKeys"), match_keys)?;
        let mut pods = selector(
            cx,
            &format!("{at}.labelSelector"),
            c.label_selector.as_ref(),
        )?;
        if let Some(s) = &mut pods {
            merge_label_keys(s, labels, match_keys, SelectorOperator::In);
        }
        out.push(TopologySpreadConstraint {
            max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable,
            selector: pods,
            min_domains,
            node_affinity_policy: policy(
                cx,
                &format!("{at}.nodeAffinityPolicy"),
                c.node_affinity_policy.as_deref(),
                InclusionPolicy::Honor,
            )?,
            node_taints_policy: policy(
                cx,
                &format!("{at}.nodeTaintsPolicy"),
                c.node_taints_policy.as_deref(),
                InclusionPolicy::Ignore,
            )?,
        });
    }
    Ok(out)
}

fn policy(
    cx: &Cx,
    field: &str,
    value: Option<&str>,
    default: InclusionPolicy,
) -> Result<InclusionPolicy, ConvertError> {
    match value {
        None | Some("") => Ok(default),
        Some("Honor") => Ok(InclusionPolicy::Honor),
        Some("Ignore") => Ok(InclusionPolicy::Ignore),
        Some(other) => Err(cx.err(
            field,
            format!("unknown value {other:?}: expected Honor or Ignore"),
        )),
    }
}

/// The host ports the pod's containers take, as kube-scheduler's NodePorts counts them: the
/// ports of `spec.containers` with a `hostPort` (with `hostNetwork` the API server sets
/// `hostPort` to `containerPort` where it is absent, so that is done here too).
fn host_ports(cx: &Cx, spec: &k8s::PodSpec) -> Result<Vec<HostPort>, ConvertError> {
    let host_network = spec.host_network == Some(true);
    let mut out: Vec<HostPort> = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let at = format!("spec.containers[{i}].ports[{j}]");
            let port = match p.host_port {
                Some(port) if port != 0 => port,
                _ if host_network => p.container_port,
                _ => continue,
            };
            let port = u16::try_from(port)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| {
                    cx.err(
                        format!("{at}.hostPort"),
                        format!("must be in the range 1-65535, got {port}"),
                    )
                })?;
            let protocol = match p.protocol.as_deref() {
                None | Some("") => "TCP",
                Some(proto @ ("TCP" | "UDP" | "SCTP")) => proto,
                Some(other) => {
                    return Err(cx.err(
                        format!("{at}.protocol"),
                        format!("unknown protocol {other:?}: expected TCP, UDP or SCTP"),
                    ))
                }
            };
            let host_ip = match p.host_ip.as_deref() {
                None | Some("") => HostPort::WILDCARD,
                Some(ip) => ip,
            };
            let hp = HostPort {
                host_ip: host_ip.to_string(),
                protocol: protocol.to_string(),
                port,
            };
            if out.contains(&hp) {
                return Err(cx.err(
                    format!("{at}.hostPort"),
                    format!("duplicate host port {port}/{protocol} on {host_ip}"),
                ));
            }
            out.push(hp);
        }
    }
    Ok(out)
}

/// The in-tree disks the pod mounts, for kube-scheduler's VolumeRestrictions: a volume source's
/// own `readOnly` decides sharing (the API server defaults an RBD pool to `rbd`).
fn disks(spec: &k8s::PodSpec) -> Vec<Disk> {
    let read_only = |r: Option<bool>| r == Some(true);
    let disk = |v: &k8s::Volume| {
        if let Some(d) = &v.gce_persistent_disk {
            Some(Disk::GcePd {
                pd_name: d.pd_name.clone(),
                read_only: read_only(d.read_only),
            })
        } else if let Some(d) = &v.aws_elastic_block_store {
            Some(Disk::AwsEbs {
                volume_id: d.volume_id.clone(),
            })
        } else if let Some(d) = &v.rbd {
            Some(Disk::Rbd {
                monitors: d.monitors.clone(),
                pool: d.pool.clone().unwrap_or_else(|| "rbd".into()),
                image: d.image.clone(),
                read_only: read_only(d.read_only),
            })
        } else {
            (v.iscsi.as_ref()).map(|d| Disk::Iscsi {
                iqn: d.iqn.clone(),
                read_only: read_only(d.read_only),
            })
        }
    };
    spec.volumes.iter().flatten().filter_map(disk).collect()
}

fn preferred_node_affinity(
    cx: &Cx,
    preferred: &[k8s::PreferredSchedulingTerm],
) -> Result<Vec<PreferredNodeTerm>, ConvertError> {
    const FIELD: &str =
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";
    let mut out = Vec::with_capacity(preferred.len());
    for (i, p) in preferred.iter().enumerate() {
        let at = format!("{FIELD}[{i}]");
        let weight = weight(cx, &at, p.weight)?;
        let base = format!("{at}.preference");
        out.push(PreferredNodeTerm {
            weight,
            term: NodeSelectorTerm {
                match_expressions: requirements(
                    cx,
                    &format!("{base}.matchExpressions"),
                    p.preference.match_expressions.as_deref(),
                )?,
                match_fields: requirements(
                    cx,
                    &format!("{base}.matchFields"),
                    p.preference.match_fields.as_deref(),
                )?,
            },
        });
    }
    Ok(out)
}

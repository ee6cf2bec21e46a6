//! What a pod of ours states that Basalt does not act on. Rather than place the pod as if the
//! field were absent, it is held ([`Wait::Unsupported`]) with the field named; the decisions
//! for every field of the pod spec are the table in docs/crds.md.

use basalt_engine::Wait;
use k8s_openapi::api::core::v1::PodSpec;

/// The pod-level resources (`spec.resources`, Kubernetes' PodLevelResources) Basalt computes a
/// request from, as Kubernetes supports them.
pub(super) const POD_LEVEL_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The fields of `spec` Basalt does not act on, one wait each.
pub(super) fn unsupported(spec: &PodSpec) -> Vec<Wait> {
    let mut out = Vec::new();
    let pod_level = spec.resources.as_ref();
    let lists = pod_level.into_iter().flat_map(|r| {
        [
            ("requests", r.requests.as_ref()),
            ("limits", r.limits.as_ref()),
        ]
    });
    for (list, values) in lists {
        for name in values.into_iter().flat_map(|v| v.keys()) {
            if !POD_LEVEL_RESOURCES.contains(&name.as_str()) {
                out.push(Wait::Unsupported {
                    field: format!("spec.resources.{list}[{name}]"),
                    message: "pod-level resources other than cpu and memory are not supported"
                        .into(),
                });
            }
        }
    }
    out
}

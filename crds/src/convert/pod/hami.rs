//! HAMi's per-device asks as HAMi's own scheduler reads them from a pod: per container when
//! several containers ask (HAMi allocates such a pod container by container), and percentages
//! above 100 counted as 100.

use k8s_openapi::api::core::v1::Container;

use super::super::{Cx, Lenience};
use super::Entries;
use crate::quantity;
use basalt_engine::ResourceList;

/// Per container, its HAMi device requests (count, memory, memory percentage, compute; limits,
/// else requests, percentages clamped to 100), when two or more containers ask for devices
/// and no init container does: HAMi allocates such a pod per container. Empty otherwise (a
/// value that does not parse is the pod request's error, said there).
pub(super) fn device_containers(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<ResourceList> {
    use basalt_engine::devices::{GPU_CORES_NAME, GPU_MEMORY_NAME, GPU_MEMORY_PERCENT_NAME};
    const NAMES: [&str; 4] = [
        basalt_engine::resources::GPU_NAME,
        GPU_MEMORY_NAME,
        GPU_MEMORY_PERCENT_NAME,
        GPU_CORES_NAME,
    ];
    let asks = |c: &Container| -> ResourceList {
        let res = c.resources.as_ref();
        let lists = [
            res.and_then(|r| r.limits.as_ref()),
            res.and_then(|r| r.requests.as_ref()),
        ];
        let mut out = ResourceList::new();
        for name in NAMES {
            let value = (lists.iter().flatten()).find_map(|l| l.get(name));
            let Some(v) = value.and_then(|q| quantity::parse_for_resource(name, &q.0).ok()) else {
                continue;
            };
            let percent = name == GPU_MEMORY_PERCENT_NAME || name == GPU_CORES_NAME;
            let v = if percent { v.min(100) } else { v };
            if v > 0 {
                out.insert(name.to_string(), v);
            }
        }
        out
    };
    if spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| !asks(c).is_empty())
    {
        return Vec::new();
    }
    let all: Vec<ResourceList> = spec.containers.iter().map(asks).collect();
    match all.iter().filter(|c| !c.is_empty()).count() >= 2 {
        true => all,
        false => Vec::new(),
    }
}

/// HAMi's percentages per device above 100 count as 100, as HAMi does (`device.go` Fit clamps
/// `nvidia.com/gpucores`, GenerateResourceRequests `nvidia.com/gpumem-percentage`); said in a
/// warning on a pod of ours. Refusing the pod instead would leave pending what HAMi places.
pub(super) fn clamp_hami_percents(cx: &Cx, request: &mut Entries, lenient: &mut Lenience) {
    use basalt_engine::devices::{GPU_CORES_NAME, GPU_MEMORY_PERCENT_NAME};
    for name in [GPU_CORES_NAME, GPU_MEMORY_PERCENT_NAME] {
        if let Some((value, at)) = request.get_mut(name).filter(|(v, _)| *v > 100) {
            if lenient.ours {
                let why = format!("{value} is above 100; counted as 100, as HAMi does");
                lenient.warnings.push(cx.warning(at.to_string(), why));
            }
            *value = 100;
        }
    }
}

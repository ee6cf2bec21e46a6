//! A pod's device shares in the engine's terms ([`DeviceAsk`]), read from HAMi's and Volcano
//! vGPU's resource names with the defaults their webhooks and schedulers apply: per container
//! when several containers ask (HAMi allocates such a pod container by container), and
//! percentages above 100 counted as 100. The engine never reads these names.

use k8s_openapi::api::core::v1::Container;

use super::super::{Cx, Lenience};
use super::Entries;
use crate::convert::device_names::{
    GPU_CORES_NAME, GPU_MEMORY_NAME, GPU_MEMORY_PERCENT_NAME, GPU_NAME, VGPU_CORES_NAME,
    VGPU_MEMORY_NAME, VGPU_MEMORY_PERCENT_NAME, VGPU_NUMBER_NAME,
};
use crate::quantity;
use basalt_engine::devices::{ContainerAsk, DeviceAsk, ShareAsk, ShareMemory};
use basalt_engine::ResourceList;

/// What a pod whose request (a sum over its containers, in base units) is `request` asks of
/// the devices it shares; [`DeviceAsk::containers`] is left empty (see [`device_containers`]).
/// HAMi's names win over Volcano's when a request states both.
pub fn device_ask(request: &ResourceList) -> DeviceAsk {
    let hami = hami_share(request);
    let vgpu = vgpu_share(request);
    let implied_counts = [(hami, GPU_NAME), (vgpu, VGPU_NUMBER_NAME)]
        .into_iter()
        .filter(|(share, _)| share.is_some())
        .map(|(_, count)| count.to_string())
        .collect();
    DeviceAsk {
        share: hami.or(vgpu),
        implied_counts,
        containers: Vec::new(),
    }
}

/// The share a request states with HAMi's names, with the defaults HAMi's webhook and
/// scheduler apply (`device.go` GenerateResourceRequests, defaultExclusiveCoreIfNeeded):
/// memory in MiB, else a percentage above 0 (clamped to 100), else 100 %; cores as given,
/// else 100 when memory is not given or is 100 %, else 0. `None`: the request names
/// neither memory nor cores (what it takes then depends on the node, see
/// [`ShareAsk::WHOLE`]).
fn hami_share(request: &ResourceList) -> Option<ShareAsk> {
    let all_memory = |memory| match memory == ShareMemory::Percent(100) {
        true => 100,
        false => 0,
    };
    let names = [GPU_MEMORY_NAME, GPU_MEMORY_PERCENT_NAME, GPU_CORES_NAME];
    share_of(request, names, all_memory)
}

/// The share a request states with Volcano vGPU's names, with Volcano's defaults
/// (`vgpu.go`): memory in MiB, else a percentage, else 100 %; cores as given, else 0.
/// `None`: it names neither memory nor cores.
fn vgpu_share(request: &ResourceList) -> Option<ShareAsk> {
    let names = [VGPU_MEMORY_NAME, VGPU_MEMORY_PERCENT_NAME, VGPU_CORES_NAME];
    share_of(request, names, |_| 0)
}

/// The share a request states by (memory MiB, memory percent, cores) names: memory in MiB,
/// else a percentage above 0 (clamped to 100), else 100 %; cores as given, else
/// `default_cores` of the memory. `None` when it names neither memory nor cores.
fn share_of(
    request: &ResourceList,
    [memory, percent, cores]: [&str; 3],
    default_cores: impl Fn(ShareMemory) -> u32,
) -> Option<ShareAsk> {
    let get = |name: &str| request.get(name).copied().filter(|&v| v > 0);
    let (mib, pct, cores) = (get(memory), get(percent), get(cores));
    if mib.is_none() && pct.is_none() && cores.is_none() {
        return None;
    }
    let clamp = |v: i64| v.clamp(0, u32::MAX as i64) as u32;
    let memory = match (mib, pct) {
        (Some(m), _) => ShareMemory::Mib(clamp(m)),
        (None, Some(p)) => ShareMemory::Percent(clamp(p).min(100)),
        (None, None) => ShareMemory::Percent(100),
    };
    let cores = cores.map_or_else(|| default_cores(memory), clamp);
    Some(ShareAsk { memory, cores })
}

/// Per container that asks for devices (a GPU count or a HAMi share; a share without a count
/// takes one device, as HAMi's webhook adds it), its ask (limits, else requests, percentages
/// clamped to 100), when two or more containers ask and no init container does: HAMi
/// allocates such a pod per container. Empty otherwise (a value that does not parse is the
/// pod request's error, said there).
pub(super) fn device_containers(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<ContainerAsk> {
    const NAMES: [&str; 4] = [
        GPU_NAME,
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
    let all: Vec<ContainerAsk> = spec
        .containers
        .iter()
        .map(|c| container_ask(&asks(c)))
        .filter(|c| c.count > 0)
        .collect();
    match all.len() >= 2 {
        true => all,
        false => Vec::new(),
    }
}

/// One container's ask from its HAMi names: its GPU count (at most 64), one when it states
/// only a share.
fn container_ask(list: &ResourceList) -> ContainerAsk {
    let share = hami_share(list);
    let count = list.get(GPU_NAME).map_or(0, |&v| v.clamp(0, 64) as u32);
    let count = match count == 0 && share.is_some() {
        true => 1,
        false => count,
    };
    ContainerAsk { count, share }
}

/// HAMi's percentages per device above 100 count as 100, as HAMi does (`device.go` Fit clamps
/// `nvidia.com/gpucores`, GenerateResourceRequests `nvidia.com/gpumem-percentage`); said in a
/// warning on a pod of ours. Refusing the pod instead would leave pending what HAMi places.
pub(super) fn clamp_hami_percents(cx: &Cx, request: &mut Entries, lenient: &mut Lenience) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(list: &[(&str, i64)]) -> DeviceAsk {
        device_ask(&list.iter().map(|&(k, v)| (k.to_string(), v)).collect())
    }

    #[test]
    fn hami_defaults_apply_as_its_webhook_and_scheduler_do() {
        let share = |list: &[(&str, i64)]| ask(list).share;
        assert_eq!(ask(&[("nvidia.com/gpu", 1)]), DeviceAsk::default());
        assert_eq!(
            ask(&[("nvidia.com/gpumem", 30000)]),
            DeviceAsk {
                share: Some(ShareAsk {
                    memory: ShareMemory::Mib(30000),
                    cores: 0
                }),
                // A share without a count takes one device, as HAMi's webhook adds it.
                implied_counts: vec!["nvidia.com/gpu".to_string()],
                containers: Vec::new(),
            }
        );
        // Percentage 100 and no cores: exclusive, as the webhook makes it.
        assert_eq!(
            share(&[("nvidia.com/gpumem-percentage", 100)]),
            Some(ShareAsk::WHOLE)
        );
        assert_eq!(
            share(&[
                ("nvidia.com/gpumem-percentage", 250),
                ("nvidia.com/gpucores", 30)
            ]),
            Some(ShareAsk {
                memory: ShareMemory::Percent(100),
                cores: 30
            })
        );
        // Cores alone: all memory, the cores asked.
        assert_eq!(
            share(&[("nvidia.com/gpucores", 50)]),
            Some(ShareAsk {
                memory: ShareMemory::Percent(100),
                cores: 50
            })
        );
    }

    #[test]
    fn volcano_defaults_and_count_and_hami_winning_over_volcano() {
        let vgpu = ask(&[("volcano.sh/vgpu-memory-percentage", 30)]);
        assert_eq!(
            vgpu.share,
            Some(ShareAsk {
                memory: ShareMemory::Percent(30),
                cores: 0
            })
        );
        assert_eq!(vgpu.implied_counts, ["volcano.sh/vgpu-number"]);
        // Volcano's memory defaults to all of it, its compute to none.
        assert_eq!(
            ask(&[("volcano.sh/vgpu-cores", 20)]).share,
            Some(ShareAsk {
                memory: ShareMemory::Percent(100),
                cores: 20
            })
        );
        let both = ask(&[("nvidia.com/gpucores", 40), ("volcano.sh/vgpu-memory", 512)]);
        assert_eq!(both.share.map(|s| s.cores), Some(40));
        assert_eq!(
            both.implied_counts,
            ["nvidia.com/gpu", "volcano.sh/vgpu-number"]
        );
    }

    #[test]
    fn a_container_stating_only_a_share_takes_one_device() {
        let list = |l: &[(&str, i64)]| l.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        assert_eq!(
            container_ask(&list(&[("nvidia.com/gpumem", 1000)])),
            ContainerAsk {
                count: 1,
                share: Some(ShareAsk {
                    memory: ShareMemory::Mib(1000),
                    cores: 0
                })
            }
        );
        let whole = container_ask(&list(&[("nvidia.com/gpu", 200)]));
        assert_eq!((whole.count, whole.share), (64, None));
    }
}

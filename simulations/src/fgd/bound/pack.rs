//! An achievable point: an offline packing of a set of arrivals into the real nodes.
//!
//! It knows every pod in advance and may take them in any order and leave any out (those
//! without GPUs it leaves out: they hold no GPU); it keeps every feasibility rule of the engine
//! (CPU, memory, model, `num_gpu` GPUs each with free share ≥ the pod's). So what it places is a
//! placement of a subset of the arrivals, not necessarily one an online scheduler that sees them
//! in order could reach.

use crate::fgd::Experiment;

/// The orders tried; the packing keeps the best.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// Largest GPU request first, then the least CPU.
    GpuThenLeanCpu,
    /// Largest GPU request first, then the most CPU.
    GpuThenHeavyCpu,
    /// The least CPU per GPU first (CPU strands GPUs on openb), then the largest request.
    LeanCpuPerGpu,
}

/// GPU (milli) the best of the packings of `pods` (trace indices) holds.
pub fn best(exp: &Experiment, pods: &[u32]) -> u64 {
    [
        Order::GpuThenLeanCpu,
        Order::GpuThenHeavyCpu,
        Order::LeanCpuPerGpu,
    ]
    .into_iter()
    .map(|o| pack(exp, pods, o))
    .max()
    .unwrap_or(0)
}

/// Best fit decreasing: each pod, in `order`, goes to the feasible node it leaves with the least
/// free GPU (then the least free CPU, then the lowest index); a sharing pod to that node's
/// tightest GPU, a whole-GPU pod to its lowest-numbered free ones. Returns the GPU placed.
fn pack(exp: &Experiment, pods: &[u32], order: Order) -> u64 {
    let mut items: Vec<u32> = (pods.iter())
        .copied()
        .filter(|&p| exp.pods[p as usize].request > 0)
        .collect();
    items.sort_by_key(|&p| {
        let pod = &exp.pods[p as usize];
        // CPU per GPU in milli-CPU per milli-GPU, scaled to keep it whole.
        let density = pod.cpu as i128 * 1_000_000 / pod.request as i128;
        match order {
            Order::GpuThenLeanCpu => (-(pod.request as i128), pod.cpu as i128, p),
            Order::GpuThenHeavyCpu => (-(pod.request as i128), -(pod.cpu as i128), p),
            Order::LeanCpuPerGpu => (density, -(pod.request as i128), p),
        }
    });
    let mut cpu_free: Vec<i64> = exp.nodes.iter().map(|n| n.cpu).collect();
    let mut mem_free: Vec<i64> = exp.nodes.iter().map(|n| n.mem).collect();
    let mut gpu_free = vec![crate::openb::GPU_MILLI as u16; exp.gpu_total];
    let mut node_gpu_free: Vec<u64> = (exp.nodes.iter())
        .map(|n| n.gpus as u64 * crate::openb::GPU_MILLI as u64)
        .collect();
    let mut placed = 0;
    for p in items {
        let pod = &exp.pods[p as usize];
        let mut best: Option<(u64, i64, usize)> = None;
        for (i, n) in exp.nodes.iter().enumerate() {
            if cpu_free[i] < pod.cpu
                || mem_free[i] < pod.mem
                || node_gpu_free[i] < pod.request
                || !pod.models.allows(n.model)
            {
                continue;
            }
            let gpus = &gpu_free[n.off..n.off + n.gpus as usize];
            if gpus.iter().filter(|&&f| f >= pod.share).count() < pod.num_gpu as usize {
                continue;
            }
            let key = (node_gpu_free[i] - pod.request, cpu_free[i] - pod.cpu, i);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        let Some((_, _, i)) = best else { continue };
        let n = &exp.nodes[i];
        cpu_free[i] -= pod.cpu;
        mem_free[i] -= pod.mem;
        node_gpu_free[i] -= pod.request;
        placed += pod.request;
        let gpus = &mut gpu_free[n.off..n.off + n.gpus as usize];
        if pod.num_gpu == 1 {
            let tightest = (0..gpus.len())
                .filter(|&g| gpus[g] >= pod.share)
                .min_by_key(|&g| (gpus[g], g))
                .expect("the node was checked to have such a GPU");
            gpus[tightest] -= pod.share;
        } else {
            for g in gpus
                .iter_mut()
                .filter(|f| **f >= pod.share)
                .take(pod.num_gpu as usize)
            {
                *g -= pod.share;
            }
        }
    }
    placed
}

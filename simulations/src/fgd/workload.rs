//! The arrival sequence of one seed: every trace pod once in a seeded shuffled order, then pods
//! drawn uniformly with replacement, appended until the next draw would push the total GPU request
//! above 130 % of the cluster's GPU capacity. Depends only on the trace, the capacity and the
//! seed (its own random stream), never on the policy.

use super::rng::{Rng, Stream};

/// Total arrived GPU request stops at this share of capacity (percent).
pub const TARGET_PCT: u64 = 130;

/// At most this many arrivals a seed: about ten times the openb default list's 10,800. Each
/// arrival is a scheduling cycle, and how many there are is hidden in the ratio of capacity to
/// request: one pod of 1 milli-GPU on one 64-GPU node is 83,200 arrivals (23 s a seed and
/// policy in a debug build), on a few hundred such nodes tens of millions.
pub const MAX_ARRIVALS: usize = 100_000;
/// At most this many arrivals × nodes a seed (each arrival scores every node): about ten times
/// the openb default list's 13 million (1,213 nodes), which take 10–17 s a seed in release.
pub const MAX_NODE_VISITS: usize = 150_000_000;

/// The most arrivals a seed may have on `nodes` nodes.
pub fn max_arrivals(nodes: usize) -> usize {
    MAX_ARRIVALS.min(MAX_NODE_VISITS / nodes.max(1))
}

/// Indices into the trace, in arrival order. `requests[i]` is pod i's GPU request in milli.
/// Draws stop one past [`MAX_ARRIVALS`]: a longer workload is refused by its caller, and
/// making it would already take the time and memory the limit is for.
pub fn generate(requests: &[u64], capacity_milli: u64, seed: u64) -> Vec<u32> {
    let mut rng = Rng::stream(seed, Stream::Workload);
    let mut order: Vec<u32> = (0..requests.len() as u32).collect();
    rng.shuffle(&mut order);
    let mut total: u64 = requests.iter().sum();
    let limit = capacity_milli as u128 * TARGET_PCT as u128;
    // With no GPU request anywhere the draws would never stop: the trace alone is the workload.
    if requests.is_empty() || requests.iter().all(|&r| r == 0) {
        return order;
    }
    while order.len() <= MAX_ARRIVALS {
        let i = rng.below(requests.len() as u64) as usize;
        let next = total + requests[i];
        if next as u128 * 100 > limit {
            break;
        }
        total = next;
        order.push(i as u32);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_once_then_draws_up_to_130_percent() {
        // 4 pods requesting 1000, 500, 0, 2000 milli (3500) on 10 GPUs (10000 milli): draws
        // continue until the next one would pass 13000.
        let req = [1000, 500, 0, 2000];
        let w = generate(&req, 10_000, 42);
        let mut head = w[..4].to_vec();
        head.sort_unstable();
        assert_eq!(head, vec![0, 1, 2, 3]);
        let total: u64 = w.iter().map(|&i| req[i as usize]).sum();
        assert!(total <= 13_000, "{total}");
        // The stop rule: the largest request would have fitted only if total ≤ 11000; at least
        // the smallest non-zero one (500) no longer fits, or the draw that stopped was larger.
        assert!(total > 13_000 - 2000, "{total}");
    }

    #[test]
    fn same_seed_same_workload_and_seeds_differ() {
        let req: Vec<u64> = (0..50).map(|i| (i % 7) * 250).collect();
        assert_eq!(generate(&req, 20_000, 7), generate(&req, 20_000, 7));
        assert_ne!(generate(&req, 20_000, 7), generate(&req, 20_000, 8));
    }

    #[test]
    fn trace_above_target_is_kept_whole_and_cpu_only_trace_terminates() {
        let w = generate(&[1000, 1000, 1000], 1000, 1);
        assert_eq!(w.len(), 3);
        let w = generate(&[0, 0], 1000, 1);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn draws_stop_past_the_limit() {
        // 1 milli-GPU a pod on 64 GPUs: 83,200 arrivals; on 6,400 GPUs, 8.3 million.
        assert_eq!(generate(&[1], 64_000, 1).len(), 83_200);
        assert_eq!(generate(&[1], 6_400_000, 1).len(), MAX_ARRIVALS + 1);
        // CPU-only pods are arrivals too.
        assert_eq!(
            generate(&[0, 0, 0, 1], 6_400_000, 1).len(),
            MAX_ARRIVALS + 1
        );
    }
}

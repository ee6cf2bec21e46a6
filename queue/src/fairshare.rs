//! Deserved shares: weighted max-min water-filling down the queue tree, one resource dimension at
//! a time, floored by guarantees and capped by capability and by demand.
//!
//! At every level the parent's amount is split among its children:
//! 1. each child first receives its guarantee (reserved: it is never lent out);
//! 2. children with an explicit `deserved` receive it (it is an entitlement, demand or not);
//! 3. what is left is poured into the other children in proportion to their weights (weighted
//!    max-min: the water level rises evenly per unit of weight), each filling up to
//!    `min(capability, max(demand, guarantee))`; a guarantee is a floor under the water, so a
//!    guaranteed child only rises once the level passes its guarantee.
//!
//! When the floors or the explicit entitlements together exceed what the parent has, they are
//! scaled down in proportion, so deserved shares never add up to more than the parent's amount.
//! Everything is integer arithmetic; leftovers of integer division go one unit at a time to the
//! heaviest children, then by name.

use basalt_engine::{QueueId, ResourceId, Resources, Snapshot};

/// One child in one dimension.
#[derive(Clone, Copy, Debug)]
struct Kid {
    weight: i64,
    floor: i64,
    /// What water-filling may raise it to.
    target: i64,
    explicit: bool,
}

/// Splits `amount` among `kids`; returns each kid's part. The parts never sum above `amount`.
fn split(amount: i64, kids: &[Kid]) -> Vec<i64> {
    let amount = amount.max(0);
    let floors: i64 = kids.iter().map(|k| k.floor).sum();
    if floors >= amount {
        return scale(kids.iter().map(|k| k.floor), amount);
    }
    let mut give: Vec<i64> = kids.iter().map(|k| k.floor).collect();

    // Explicit entitlements, scaled down together if the rest cannot cover them.
    let extra: Vec<i64> = kids
        .iter()
        .map(|k| if k.explicit { k.target - k.floor } else { 0 })
        .collect();
    let wanted: i64 = extra.iter().sum();
    let granted = if wanted <= amount - floors {
        extra
    } else {
        scale(extra.iter().copied(), amount - floors)
    };
    for (g, e) in give.iter_mut().zip(&granted) {
        *g += e;
    }

    // Water-filling: the highest level λ (per unit of weight) at which every other kid holds
    // clamp(weight · λ, floor, target) without exceeding what is left. A guarantee is a floor
    // under the water, not extra water on top of it.
    let pool: Vec<usize> = (0..kids.len())
        .filter(|&i| !kids[i].explicit && kids[i].weight > 0)
        .collect();
    let fixed: i64 = (0..kids.len())
        .filter(|i| !pool.contains(i))
        .map(|i| give[i])
        .sum();
    let room = amount - fixed;
    let level = |i: usize, lambda: i64| -> i64 {
        let k = &kids[i];
        let wet = (k.weight as i128 * lambda as i128).min(i64::MAX as i128) as i64;
        wet.clamp(k.floor, k.target.max(k.floor))
    };
    let fill = |lambda: i64| -> i128 { pool.iter().map(|&i| level(i, lambda) as i128).sum() };
    let (mut lo, mut hi) = (
        0i64,
        pool.iter().map(|&i| kids[i].target).max().unwrap_or(0),
    );
    if fill(hi) <= room as i128 {
        lo = hi;
    } else {
        // Largest λ with fill(λ) ≤ room; fill(0) = the floors, which fit.
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if fill(mid) <= room as i128 {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
    }
    for &i in &pool {
        give[i] = level(i, lo);
    }
    // What λ + 1 would overshoot goes one unit at a time to the kids still rising, heaviest
    // first, then by position.
    let mut left = room - pool.iter().map(|&i| give[i]).sum::<i64>();
    let mut rising: Vec<usize> = pool
        .iter()
        .copied()
        .filter(|&i| level(i, lo + 1) > give[i])
        .collect();
    rising.sort_by_key(|&i| (std::cmp::Reverse(kids[i].weight), i));
    while left > 0 && !rising.is_empty() {
        rising.retain(|&i| level(i, lo + 1) > give[i]);
        for &i in &rising {
            if left == 0 {
                break;
            }
            give[i] += 1;
            left -= 1;
        }
    }
    give
}

/// `values` scaled in proportion so that they sum to `amount` (which is below their sum);
/// the units that rounding down leaves go to the largest remainders, then by position.
fn scale(values: impl Iterator<Item = i64>, amount: i64) -> Vec<i64> {
    let values: Vec<i64> = values.collect();
    let total: i128 = values.iter().map(|&v| v as i128).sum();
    if total == 0 {
        return values;
    }
    let exact: Vec<i128> = values.iter().map(|&v| v as i128 * amount as i128).collect();
    let mut out: Vec<i64> = exact.iter().map(|&e| (e / total) as i64).collect();
    let mut left = amount - out.iter().sum::<i64>();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(exact[i] % total), i));
    for i in order {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

/// Deserved share of every queue (leaves and inner queues), indexed by `QueueId`.
///
/// `capacity` is what the cluster offers; `leaf_demand[q]` what leaf queue `q` holds plus what
/// its pending pods ask for (zero for inner queues: their demand is their subtree's).
pub fn deserved(
    snapshot: &Snapshot,
    capacity: &Resources,
    leaf_demand: &[Resources],
) -> Vec<Resources> {
    let queues = &snapshot.queues;
    let dims = snapshot.resources.len();
    let mut children: Vec<Vec<QueueId>> = vec![Vec::new(); queues.len()];
    let mut top: Vec<QueueId> = Vec::new();
    for q in queues {
        match q.parent {
            Some(p) => children[p.index()].push(q.id),
            None => top.push(q.id),
        }
    }
    // Subtree demand, children before parents.
    let mut demand: Vec<Resources> = leaf_demand.to_vec();
    demand.resize(queues.len(), Resources::zero(dims));
    for q in post_order(&top, &children) {
        for &c in &children[q.index()] {
            let d = demand[c.index()].clone();
            demand[q.index()].add(&d);
        }
    }

    let mut out = vec![Resources::zero(dims); queues.len()];
    let mut stack: Vec<(Vec<QueueId>, Resources)> = vec![(top, capacity.clone())];
    while let Some((kids, amount)) = stack.pop() {
        for r in (0..dims as u16).map(ResourceId) {
            let spec: Vec<Kid> = kids
                .iter()
                .map(|&k| kid(snapshot, k, r, &demand[k.index()]))
                .collect();
            for (&k, part) in kids.iter().zip(split(amount.get(r), &spec)) {
                out[k.index()].set(r, part);
            }
        }
        for &k in &kids {
            if !children[k.index()].is_empty() {
                stack.push((children[k.index()].clone(), out[k.index()].clone()));
            }
        }
    }
    out
}

fn kid(snapshot: &Snapshot, q: QueueId, r: ResourceId, demand: &Resources) -> Kid {
    let queue = snapshot.queue(q);
    let cap = queue.capability.get(r).map_or(i64::MAX, |c| c.max(0));
    let floor = queue.guarantee.get(r).unwrap_or(0).clamp(0, cap);
    match queue.deserved.get(r) {
        Some(d) => Kid {
            weight: queue.weight as i64,
            floor,
            target: d.clamp(0, cap).max(floor),
            explicit: true,
        },
        None => Kid {
            weight: queue.weight as i64,
            floor,
            target: demand.get(r).clamp(0, cap).max(floor),
            explicit: false,
        },
    }
}

fn post_order(top: &[QueueId], children: &[Vec<QueueId>]) -> Vec<QueueId> {
    let mut out = Vec::new();
    let mut stack: Vec<(QueueId, bool)> = top.iter().rev().map(|&q| (q, false)).collect();
    while let Some((q, done)) = stack.pop() {
        if done {
            out.push(q);
        } else {
            stack.push((q, true));
            stack.extend(children[q.index()].iter().rev().map(|&c| (c, false)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(weight: i64, floor: i64, target: i64) -> Kid {
        Kid {
            weight,
            floor,
            target,
            explicit: false,
        }
    }

    #[test]
    fn two_to_one_weights_split_in_proportion() {
        assert_eq!(split(12, &[k(2, 0, 100), k(1, 0, 100)]), vec![8, 4]);
    }

    #[test]
    fn demand_caps_and_the_rest_flows_on() {
        // The heavy queue wants only 2; the light one takes what remains.
        assert_eq!(split(12, &[k(2, 0, 2), k(1, 0, 100)]), vec![2, 10]);
    }

    #[test]
    fn guarantee_is_a_floor_even_without_demand() {
        assert_eq!(split(10, &[k(1, 4, 4), k(1, 0, 100)]), vec![4, 6]);
    }

    #[test]
    fn guarantee_is_a_floor_not_extra_water() {
        // Equal weights on 8: max-min gives 4 and 4; the guarantee of 4 is already met.
        assert_eq!(split(8, &[k(1, 4, 100), k(1, 0, 100)]), vec![4, 4]);
        // A guarantee above the even share holds.
        assert_eq!(split(8, &[k(1, 6, 100), k(1, 0, 100)]), vec![6, 2]);
    }

    #[test]
    fn overcommitted_floors_scale_down() {
        assert_eq!(split(10, &[k(1, 10, 10), k(1, 10, 10)]), vec![5, 5]);
    }

    #[test]
    fn explicit_entitlement_ignores_demand() {
        let explicit = Kid {
            weight: 1,
            floor: 0,
            target: 6,
            explicit: true,
        };
        assert_eq!(split(10, &[explicit, k(1, 0, 100)]), vec![6, 4]);
    }

    #[test]
    fn leftover_units_go_to_the_heaviest() {
        assert_eq!(split(1, &[k(1, 0, 5), k(2, 0, 5)]), vec![0, 1]);
        assert_eq!(split(3, &[k(1, 0, 5), k(1, 0, 5)]).iter().sum::<i64>(), 3);
    }

    proptest::proptest! {
        /// Never more than the amount; floors first; nobody above its target; and nothing
        /// left over while someone still wants more (work-conserving).
        #[test]
        fn split_invariants(
            amount in 0i64..1_000,
            kids in proptest::collection::vec((1i64..5, 0i64..50, 0i64..400, proptest::bool::weighted(0.2)), 1..6),
        ) {
            let kids: Vec<Kid> = kids
                .into_iter()
                .map(|(weight, floor, extra, explicit)| Kid { weight, floor, target: floor + extra, explicit })
                .collect();
            let give = split(amount, &kids);
            let total: i64 = give.iter().sum();
            proptest::prop_assert!(total <= amount);
            let floors: i64 = kids.iter().map(|k| k.floor).sum();
            for (k, g) in kids.iter().zip(&give) {
                proptest::prop_assert!(*g <= k.target);
                if floors <= amount {
                    proptest::prop_assert!(*g >= k.floor);
                }
            }
            if total < amount {
                for (k, g) in kids.iter().zip(&give) {
                    proptest::prop_assert!(*g == k.target || k.explicit, "{g} < {} with {} left", k.target, amount - total);
                }
            }
        }
    }
}

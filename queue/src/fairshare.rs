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

#[cfg(test)]
use basalt_engine::ResourceList;
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
/// The water rises by `1/steps` of a unit per unit of weight at a step: 1 for plain weights,
/// [`crate::usage::WEIGHT_SCALE`] for weights adjusted by usage (fractions of a unit).
/// Sums are taken in `i128` and every loop is bounded by the number of kids (times the 64
/// steps of a bisection over `i64`), whatever the size of the quantities.
fn split(amount: i64, kids: &[Kid], steps: i64) -> Vec<i64> {
    let amount = amount.max(0);
    let total = |parts: &mut dyn Iterator<Item = i64>| parts.map(i128::from).sum::<i128>();
    let floors = total(&mut kids.iter().map(|k| k.floor));
    if floors >= amount as i128 {
        return scale(kids.iter().map(|k| k.floor), amount);
    }
    let mut give: Vec<i64> = kids.iter().map(|k| k.floor).collect();

    // Explicit entitlements, scaled down together if the rest cannot cover them.
    let extra: Vec<i64> = kids
        .iter()
        .map(|k| if k.explicit { k.target - k.floor } else { 0 })
        .collect();
    // Below `amount`, so it is an `i64`.
    let rest = (amount as i128 - floors) as i64;
    let granted = if total(&mut extra.iter().copied()) <= rest as i128 {
        extra
    } else {
        scale(extra.iter().copied(), rest)
    };
    for (g, e) in give.iter_mut().zip(&granted) {
        // floor + part of (target - floor): at most the target.
        *g += e;
    }

    // Water-filling: the highest level λ (per unit of weight) at which every other kid holds
    // clamp(weight · λ, floor, target) without exceeding what is left. A guarantee is a floor
    // under the water, not extra water on top of it.
    let pool: Vec<usize> = (0..kids.len())
        .filter(|&i| !kids[i].explicit && kids[i].weight > 0)
        .collect();
    let fixed = total(
        &mut (0..kids.len())
            .filter(|i| !pool.contains(i))
            .map(|i| give[i]),
    );
    let room = amount as i128 - fixed;
    let level = |i: usize, lambda: i128| -> i64 {
        let k = &kids[i];
        let wet = (k.weight as i128 * lambda / steps as i128).min(i64::MAX as i128) as i64;
        wet.clamp(k.floor, k.target.max(k.floor))
    };
    let fill = |lambda: i128| total(&mut pool.iter().map(|&i| level(i, lambda)));
    // At λ = the largest target (times `steps`) every kid is at its target (weights are at
    // least 1).
    let top = pool.iter().map(|&i| kids[i].target).max().unwrap_or(0) as i128 * steps as i128;
    // Largest λ with fill(λ) ≤ room; fill(0) = the floors, which fit.
    let lo = last_true(0, top, |lambda| fill(lambda) <= room);
    for &i in &pool {
        give[i] = level(i, lo);
    }
    // What λ + 1 would overshoot goes one unit at a time, round after round, to the kids still
    // rising, heaviest first, then by position; each stops at its level for λ + 1.
    let left = room - total(&mut pool.iter().map(|&i| give[i]));
    let mut rising: Vec<(usize, i64)> = pool
        .iter()
        .map(|&i| (i, level(i, lo + 1) - give[i]))
        .filter(|&(_, room)| room > 0)
        .collect();
    rising.sort_by_key(|&(i, _)| (std::cmp::Reverse(kids[i].weight), i));
    // The rounds every kid still rising takes whole, then one more unit to the first few.
    let units = |rounds: i128| {
        total(
            &mut rising
                .iter()
                .map(|&(_, up)| (up as i128).min(rounds) as i64),
        )
    };
    let most = rising.iter().map(|&(_, up)| up).max().unwrap_or(0) as i128;
    let rounds = last_true(0, most, |r| units(r) <= left);
    let mut left = left - units(rounds);
    for &(i, up) in &rising {
        give[i] += (up as i128).min(rounds) as i64;
        if left > 0 && up as i128 > rounds {
            give[i] += 1;
            left -= 1;
        }
    }
    give
}

/// The largest `x` in `lo..=hi` for which `ok` holds, given that `ok(lo)` does and `ok` is
/// monotone (true, then false). A bisection: at most 128 steps for any `i64` range.
fn last_true(mut lo: i128, mut hi: i128, ok: impl Fn(i128) -> bool) -> i128 {
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// `values` scaled in proportion so that they sum to `amount` (which is below their sum);
/// the units that rounding down leaves go to the largest remainders, then by position (fewer
/// units than values, so one pass).
fn scale(values: impl Iterator<Item = i64>, amount: i64) -> Vec<i64> {
    let values: Vec<i64> = values.collect();
    let total: i128 = values.iter().map(|&v| v as i128).sum();
    if total == 0 {
        return values;
    }
    let exact: Vec<i128> = values.iter().map(|&v| v as i128 * amount as i128).collect();
    let mut out: Vec<i64> = exact.iter().map(|&e| (e / total) as i64).collect();
    let mut left = amount as i128 - out.iter().map(|&v| v as i128).sum::<i128>();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(exact[i] % total), i));
    for i in order {
        if left <= 0 {
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
/// its pending pods ask for (zero for inner queues: their demand is their subtree's);
/// `weights[q]` what queue `q`'s share of the water is in proportion to (its own weight, or
/// one adjusted by usage), the water rising `1/steps` of a unit per unit of weight at a step.
pub fn deserved(
    snapshot: &Snapshot,
    capacity: &Resources,
    leaf_demand: &[Resources],
    weights: &[i64],
    steps: i64,
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
                .map(|&k| kid(snapshot, k, r, &demand[k.index()], weights[k.index()]))
                .collect();
            for (&k, part) in kids.iter().zip(split(amount.get(r), &spec, steps)) {
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

fn kid(snapshot: &Snapshot, q: QueueId, r: ResourceId, demand: &Resources, weight: i64) -> Kid {
    let queue = snapshot.queue(q);
    let cap = queue.capability.get(r).map_or(i64::MAX, |c| c.max(0));
    let floor = queue.guarantee.get(r).unwrap_or(0).clamp(0, cap);
    match queue.deserved.get(r) {
        Some(d) => Kid {
            weight,
            floor,
            target: d.clamp(0, cap).max(floor),
            explicit: true,
        },
        None => Kid {
            weight,
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
        assert_eq!(split(12, &[k(2, 0, 100), k(1, 0, 100)], 1), vec![8, 4]);
    }

    /// Weights adjusted by usage are fractions of 2^20: 1/3 and 2/3 of 16 are 5.33 and 10.67,
    /// the leftover unit to the heavier. Stepping the water a whole unit per unit of weight
    /// would give 8 and 8 (the first step overshoots, the rest go round by round).
    #[test]
    fn fractional_weights_split_by_their_fractions() {
        let (third, two_thirds) = (349_525, 699_051);
        let kids = [k(third, 0, 16), k(two_thirds, 0, 16)];
        assert_eq!(split(16, &kids, 1 << 20), vec![5, 11]);
        // Demand still caps, and the rest flows on.
        let kids = [k(third, 0, 16), k(two_thirds, 0, 3)];
        assert_eq!(split(16, &kids, 1 << 20), vec![13, 3]);
    }

    #[test]
    fn demand_caps_and_the_rest_flows_on() {
        // The heavy queue wants only 2; the light one takes what remains.
        assert_eq!(split(12, &[k(2, 0, 2), k(1, 0, 100)], 1), vec![2, 10]);
    }

    #[test]
    fn guarantee_is_a_floor_even_without_demand() {
        assert_eq!(split(10, &[k(1, 4, 4), k(1, 0, 100)], 1), vec![4, 6]);
    }

    #[test]
    fn guarantee_is_a_floor_not_extra_water() {
        // Equal weights on 8: max-min gives 4 and 4; the guarantee of 4 is already met.
        assert_eq!(split(8, &[k(1, 4, 100), k(1, 0, 100)], 1), vec![4, 4]);
        // A guarantee above the even share holds.
        assert_eq!(split(8, &[k(1, 6, 100), k(1, 0, 100)], 1), vec![6, 2]);
    }

    #[test]
    fn overcommitted_floors_scale_down() {
        assert_eq!(split(10, &[k(1, 10, 10), k(1, 10, 10)], 1), vec![5, 5]);
    }

    #[test]
    fn explicit_entitlement_ignores_demand() {
        let explicit = Kid {
            weight: 1,
            floor: 0,
            target: 6,
            explicit: true,
        };
        assert_eq!(split(10, &[explicit, k(1, 0, 100)], 1), vec![6, 4]);
    }

    #[test]
    fn leftover_units_go_to_the_heaviest() {
        assert_eq!(split(1, &[k(1, 0, 5), k(2, 0, 5)], 1), vec![0, 1]);
        assert_eq!(
            split(3, &[k(1, 0, 5), k(1, 0, 5)], 1).iter().sum::<i64>(),
            3
        );
    }

    /// What every split must give: never above the amount; floors first (when they fit);
    /// nobody above its target; and nothing left over while someone still wants more.
    fn check(amount: i64, kids: &[Kid], give: &[i64]) -> Result<(), String> {
        let total: i128 = give.iter().map(|&g| g as i128).sum();
        let floors: i128 = kids.iter().map(|k| k.floor as i128).sum();
        if total > amount.max(0) as i128 {
            return Err(format!("{total} given out of {amount}"));
        }
        for (k, &g) in kids.iter().zip(give) {
            if g > k.target || g < 0 {
                return Err(format!("{g} for {k:?}"));
            }
            if floors <= amount as i128 && g < k.floor {
                return Err(format!("{g} below the floor of {k:?}"));
            }
            if total < amount as i128 && g != k.target && !k.explicit {
                return Err(format!(
                    "{g} < {} with {} left",
                    k.target,
                    amount as i128 - total
                ));
            }
        }
        Ok(())
    }

    const MAX: i64 = i64::MAX;

    /// A pod asking `i64::MAX` (or two whose requests sum to 2^63 - 1) sent the bisection's
    /// midpoint out of range, and the leftover units went one per iteration: the cycle never
    /// ended. Every split over the extremes finishes and stays sane.
    #[test]
    fn extreme_quantities_split_and_stay_sane() {
        let half = MAX / 2;
        let explicit = |floor, target| Kid {
            weight: 1,
            floor,
            target,
            explicit: true,
        };
        let cases: Vec<(i64, Vec<Kid>)> = vec![
            (MAX, vec![k(1, 0, MAX)]),
            (MAX, vec![k(1, 0, MAX), k(1, 0, MAX)]),
            (MAX, vec![k(1, 0, MAX - 1), k(3, 0, MAX)]),
            (MAX, vec![k(1, 0, half), k(1, 0, half + 1)]),
            (MAX - 1, vec![k(1, 0, half), k(1, 0, half + 1)]),
            (1000, vec![k(1, 0, MAX), k(2, 0, 5)]),
            (MAX, vec![k(1, MAX, MAX), k(1, MAX, MAX)]),
            (MAX, vec![k(1, half, MAX), k(1, half + 1, MAX)]),
            (MAX, vec![k(1, MAX - 1, MAX), k(1, 0, MAX)]),
            (MAX, vec![explicit(0, MAX), k(1, 0, MAX)]),
            (MAX, vec![explicit(0, MAX), explicit(half, MAX)]),
            (MAX, vec![explicit(0, half), k(1, 0, MAX)]),
            (MAX, vec![k(u32::MAX as i64, 0, MAX), k(1, 0, MAX - 1)]),
            (
                MAX,
                vec![k(u32::MAX as i64, 0, 3), k(u32::MAX as i64 - 1, 0, MAX)],
            ),
            (MAX - 2, (0..7).map(|w| k(w + 1, 0, MAX - w)).collect()),
            (0, vec![k(1, MAX, MAX), k(1, 0, MAX)]),
        ];
        for (amount, kids) in cases {
            let give = split(amount, &kids, 1);
            if let Err(e) = check(amount, &kids, &give) {
                panic!("split({amount}, {kids:?}) = {give:?}: {e}");
            }
        }
        // Two equal kids that want everything share it, one unit apart at most.
        let give = split(MAX, &[k(1, 0, MAX), k(1, 0, MAX)], 1);
        assert_eq!(give, vec![half + 1, half]);
    }

    /// Deserved shares down a queue tree whose guarantees, capabilities, entitlements and
    /// demands sit at the ends of `i64`.
    #[test]
    fn deserved_shares_finish_on_extreme_queues() {
        use basalt_engine::{ClusterSpec, NodeSpec, QueueSpec, GPU, MEMORY};
        let mem = |v: i64| ResourceList::from([("memory".to_string(), v)]);
        let queue = |name: &str, parent: Option<&str>| QueueSpec {
            parent: parent.map(str::to_string),
            ..QueueSpec::new(name)
        };
        let mut a = queue("a", None);
        a.guarantee = Some(mem(MAX));
        a.capability = Some(mem(MAX));
        let mut b = queue("b", None);
        b.deserved = Some(mem(MAX - 1));
        let mut c = queue("c", Some("a"));
        c.capability = Some(mem(MAX / 2));
        let d = queue("d", Some("a"));
        let node = |name: &str, memory: i64| NodeSpec {
            name: name.into(),
            allocatable: ResourceList::from([
                ("memory".to_string(), memory),
                ("nvidia.com/gpu".to_string(), 8),
            ]),
            ..Default::default()
        };
        let spec = ClusterSpec {
            device_resource: "nvidia.com/gpu".into(),
            nodes: vec![node("n0", MAX), node("n1", MAX / 2 + 1)],
            queues: vec![a, b, c, d],
            ..Default::default()
        };
        let snap = Snapshot::build(spec).unwrap();
        let dims = snap.resources.len();
        let mut capacity = Resources::zero(dims);
        for n in &snap.nodes {
            capacity.add(&n.allocatable);
        }
        assert_eq!(
            capacity.get(MEMORY),
            MAX,
            "the sum saturates instead of wrapping"
        );
        let mut demand = vec![Resources::zero(dims); snap.queues.len()];
        for (i, d) in demand.iter_mut().enumerate() {
            d.set(MEMORY, MAX - i as i64);
            d.set(GPU, MAX / 2 + 1);
        }
        let weights: Vec<i64> = snap.queues.iter().map(|q| q.weight as i64).collect();
        let out = deserved(&snap, &capacity, &demand, &weights, 1);
        let id = |name: &str| {
            snap.queues
                .iter()
                .find(|q| q.name == name)
                .unwrap()
                .id
                .index()
        };
        for r in [MEMORY, GPU] {
            let top = out[id("a")].get(r) as i128 + out[id("b")].get(r) as i128;
            assert!(
                top <= capacity.get(r) as i128,
                "{top} over {}",
                capacity.get(r)
            );
            let under_a = out[id("c")].get(r) as i128 + out[id("d")].get(r) as i128;
            assert!(under_a <= out[id("a")].get(r) as i128);
            assert!(out.iter().all(|d| d.get(r) >= 0));
        }
        // The guarantee of `a` is a floor: it takes all the memory, `b`'s entitlement nothing.
        assert_eq!(out[id("a")].get(MEMORY), MAX);
        assert!(out[id("c")].get(MEMORY) <= MAX / 2);
        assert_eq!(out[id("a")].get(GPU) + out[id("b")].get(GPU), 16);
    }

    proptest::proptest! {
        /// Never more than the amount; floors first; nobody above its target; and nothing
        /// left over while someone still wants more (work-conserving).
        #[test]
        fn split_invariants(
            amount in 0i64..1_000,
            kids in proptest::collection::vec((1i64..5, 0i64..50, 0i64..400, proptest::bool::weighted(0.2)), 1..6),
            fractional in proptest::bool::ANY,
        ) {
            // Weights adjusted by usage: fractions of 2^20, the water rising by 2^-20 a step.
            let scale = if fractional { 1 << 20 } else { 1 };
            let kids: Vec<Kid> = kids
                .into_iter()
                .map(|(weight, floor, extra, explicit)| Kid { weight: if fractional { weight * scale / 5 + 1 } else { weight }, floor, target: floor + extra, explicit })
                .collect();
            let give = split(amount, &kids, scale);
            proptest::prop_assert!(check(amount, &kids, &give).is_ok(), "{:?}", check(amount, &kids, &give));
        }

        /// The same over the whole range of `i64`: small values mixed with huge ones.
        #[test]
        fn split_invariants_over_the_whole_range(
            amount in quantity(),
            kids in proptest::collection::vec((1i64..=u32::MAX as i64, quantity(), quantity(), proptest::bool::weighted(0.2)), 1..6),
        ) {
            let kids: Vec<Kid> = kids
                .into_iter()
                .map(|(weight, floor, target, explicit)| Kid { weight, floor, target: target.max(floor), explicit })
                .collect();
            let give = split(amount, &kids, 1);
            proptest::prop_assert!(check(amount, &kids, &give).is_ok(), "{:?}", check(amount, &kids, &give));
        }
    }

    /// Quantities from 0 to `i64::MAX`: small, huge, at the very top, and halves of it.
    fn quantity() -> impl proptest::strategy::Strategy<Value = i64> {
        use proptest::prelude::*;
        prop_oneof![
            0i64..100,
            0i64..=MAX,
            (0i64..4).prop_map(|d| MAX - d),
            (0i64..2).prop_map(|d| MAX / 2 + d),
        ]
    }
}

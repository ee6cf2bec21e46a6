//! The island and order choice against the plain statement of it (islands gathered in a map,
//! the chosen positions sorted), on random nodes.

use std::collections::BTreeMap;

use super::*;

/// The choice as first written: open positions per island, the fitting island with the fewest
/// (first in island order on ties) or all open ones, sorted by `order` (stable), `count` taken.
fn reference(islands: &[u32], open: u64, count: u32, order: Option<&dyn Fn(usize) -> i64>) -> u64 {
    let mut by_island: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (p, &i) in islands.iter().enumerate() {
        if open & (1 << p) != 0 {
            by_island.entry(i).or_default().push(p);
        }
    }
    let fitting = by_island
        .values()
        .filter(|free| free.len() >= count as usize);
    let mut chosen: Vec<usize> = match fitting.min_by_key(|free| free.len()) {
        Some(free) => free.clone(),
        None => (0..islands.len())
            .filter(|&p| open & (1 << p) != 0)
            .collect(),
    };
    if let Some(order) = order {
        chosen.sort_by_key(|&p| order(p));
    }
    chosen
        .iter()
        .take(count as usize)
        .fold(0, |m, &p| m | 1 << p)
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = (self.0)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn choice_matches_the_plain_statement_on_random_nodes() {
    let mut rng = Lcg(7);
    for case in 0..20_000 {
        let devices = [1, 2, 4, 8, 16, 64][rng.below(6) as usize];
        let spread = 1 + rng.below(4) as u32;
        let islands: Vec<u32> = (0..devices)
            .map(|_| rng.below(spread as u64) as u32)
            .collect();
        let open = match devices {
            64 => rng.below(u64::MAX) ^ (rng.below(u64::MAX) << 31),
            _ => rng.below(1 << devices),
        };
        let count = rng.below(devices as u64 + 2) as u32;
        let slots: Vec<i64> = (0..devices).map(|_| rng.below(4) as i64).collect();
        let by_slots = |p: usize| slots[p];
        let island = |p: usize| islands[p];
        let chosen = fullest_island(devices, &island, open, count);
        let whole = lowest_bits(chosen, count);
        assert_eq!(whole, reference(&islands, open, count, None), "case {case}");
        let shared = first_by(chosen, count, &by_slots);
        let want = reference(&islands, open, count, Some(&by_slots));
        assert_eq!(
            shared, want,
            "case {case}: {islands:?} open {open:b} count {count}"
        );
    }
}

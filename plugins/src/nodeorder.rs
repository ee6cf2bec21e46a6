//! Node scoring as a weighted utilisation of the node's capacity: `binpack` prefers the most
//! allocated node (GPUs weighted highest by default, so GPU nodes fill up and whole nodes stay
//! free for big gangs); `spread` prefers the least allocated.

use basalt_engine::{NodeOrder, ResourceNames, Resources};

use crate::config::{NodeOrderArgs, NodeOrderPolicy};

/// Utilisation in millionths per unit of weight.
const SCALE: u128 = 1_000_000;

pub struct Utilisation {
    policy: NodeOrderPolicy,
    /// Weight by resource id; resources without a weight do not count.
    weights: Vec<u32>,
}

impl Utilisation {
    pub fn new(args: &NodeOrderArgs, names: &ResourceNames) -> Self {
        let weights = names
            .ids()
            .map(|id| args.weights.get(names.name(id)).copied().unwrap_or(0))
            .collect();
        Utilisation {
            policy: args.policy,
            weights,
        }
    }

    /// Weighted mean utilisation over the weighted resources the node has, in millionths.
    pub fn utilisation(&self, allocatable: &Resources, used: &Resources) -> u64 {
        let (mut sum, mut weight) = (0u128, 0u128);
        for (id, alloc) in allocatable.iter() {
            let w = self.weights.get(id.0 as usize).copied().unwrap_or(0) as u128;
            if w == 0 || alloc <= 0 {
                continue;
            }
            let u = used.get(id).clamp(0, alloc) as u64;
            // The same quotient in 64 bits when the product fits (it nearly always does):
            // 128-bit division is the slow part of scoring every node every cycle.
            sum += match (w as u64)
                .checked_mul(u)
                .and_then(|x| x.checked_mul(SCALE as u64))
            {
                Some(x) => (x / alloc as u64) as u128,
                None => w * u as u128 * SCALE / alloc as u128,
            };
            weight += w;
        }
        sum.checked_div(weight).unwrap_or(0) as u64
    }
}

impl NodeOrder for Utilisation {
    fn name(&self) -> &str {
        match self.policy {
            NodeOrderPolicy::Binpack => "binpack",
            NodeOrderPolicy::Spread => "spread",
        }
    }
    fn key(&self, allocatable: &Resources, used: &Resources) -> u64 {
        let u = self.utilisation(allocatable, used);
        match self.policy {
            NodeOrderPolicy::Binpack => SCALE as u64 - u,
            NodeOrderPolicy::Spread => u,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 64-bit fast path gives the exact 128-bit quotient, and huge quantities still work.
    #[test]
    fn utilisation_is_exact_for_any_size() {
        let names = ResourceNames::new("nvidia.com/gpu", ["example.com/huge"]);
        let mut args = NodeOrderArgs::default();
        args.weights.insert("example.com/huge".into(), 7);
        let u = Utilisation::new(&args, &names);
        let huge = names.id("example.com/huge").unwrap();
        let cases = [
            (3i64, 7i64),
            (1 << 40, 3 << 40),
            (i64::MAX / 3, i64::MAX - 1),
        ];
        for (used, alloc) in cases {
            let mut a = Resources::zero(names.len());
            let mut b = Resources::zero(names.len());
            a.set(huge, alloc);
            b.set(huge, used);
            let want = (7u128 * used as u128 * SCALE / alloc as u128) / 7;
            assert_eq!(u.utilisation(&a, &b), want as u64, "{used}/{alloc}");
        }
    }
}

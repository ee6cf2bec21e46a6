//! The device search: kube-scheduler's allocator over the matching sets, with the shared
//! counters of partitionable devices checked at each pick.

use super::{
    Alternative, ClaimNeed, ClaimPick, ClaimRefusal, ClaimShort, ClaimState, ConstraintAsk, Count,
    DraTable, RequestAsk, SEARCH_STEPS,
};

/// The devices for a pod's pending claims on one node, claim by claim (`None` for a claim
/// allocated already, or by another pod this cycle: `taken` gives those devices, which the
/// node must reach). `free` says whether a device is unused, `counters` what the devices in
/// use take of the shared counters ([`DraTable::counters_held`]).
pub fn search<'t>(
    table: &DraTable,
    need: &ClaimNeed,
    node: usize,
    (free, counters): (&dyn Fn(u32) -> bool, &[i64]),
    taken: &dyn Fn(&str) -> Option<&'t [u32]>,
) -> Result<Vec<Option<ClaimPick>>, ClaimRefusal> {
    let reach = table.reach.get(node).map_or(&[][..], Vec::as_slice);
    let mut out = Vec::with_capacity(need.claims.len());
    let mut s = Search {
        table,
        reach,
        free,
        counters,
        picked: Vec::new(),
        steps: 0,
    };
    for (claim, c) in (0..).zip(&need.claims) {
        let refusal = |why| ClaimRefusal { claim, why };
        let ClaimState::Pending {
            requests,
            constraints,
        } = &c.state
        else {
            out.push(None);
            continue;
        };
        if let Some(devices) = c.shared.as_deref().and_then(taken) {
            if !devices.iter().all(|d| reach.binary_search(d).is_ok()) {
                return Err(refusal(ClaimShort::SharedElsewhere));
            }
            out.push(None);
            continue;
        }
        // Devices picked for earlier claims of the pod stay picked.
        let base = s.picked.len();
        let mut results = Vec::new();
        if !s.requests(requests, constraints, 0, base, &mut results) {
            return Err(refusal(if s.steps > SEARCH_STEPS {
                ClaimShort::SearchGaveUp
            } else {
                ClaimShort::TooFewFreeDevices
            }));
        }
        out.push(Some(ClaimPick { results }));
    }
    Ok(out)
}

struct Search<'t> {
    table: &'t DraTable,
    reach: &'t [u32],
    free: &'t dyn Fn(u32) -> bool,
    counters: &'t [i64],
    /// Devices picked so far, with their request (`r`, or `r/sub` for an alternative) and
    /// whether for admin access (which holds nothing).
    picked: Vec<(u32, String, bool)>,
    steps: u32,
}

impl Search<'_> {
    /// Requests `i..` of one claim; `base` is where its picks start in `picked`.
    fn requests(
        &mut self,
        requests: &[RequestAsk],
        constraints: &[ConstraintAsk],
        i: usize,
        base: usize,
        results: &mut Vec<(String, u32, bool)>,
    ) -> bool {
        let Some(r) = requests.get(i) else {
            return true;
        };
        for alt in &r.alternatives {
            let set = self.table.set(alt.eligible);
            let picked_before = self.picked.len();
            let results_before = results.len();
            let candidates: Vec<u32> = (self.reach.iter().copied())
                .filter(|&d| set.contains(d))
                .filter(|&d| alt.admin_access || (self.free)(d))
                .filter(|d| !self.picked.iter().any(|(p, ..)| p == d))
                .collect();
            let ok = match alt.count {
                Count::All => {
                    !candidates.is_empty()
                        // Every matching device the node reaches, none in use.
                        && (alt.admin_access
                            || self.reach.iter().filter(|&&d| set.contains(d)).count()
                                == candidates.len())
                        && candidates.iter().all(|&d| {
                            let fits = self.allowed(d, alt, constraints, base);
                            if fits {
                                self.picked.push((d, alt.name.clone(), alt.admin_access));
                                results.push((alt.name.clone(), d, alt.admin_access));
                            }
                            fits
                        })
                        && self.requests(requests, constraints, i + 1, base, results)
                }
                Count::Exactly(k) => self.slots(
                    requests,
                    constraints,
                    (i, alt, k),
                    &candidates,
                    0,
                    base,
                    results,
                ),
            };
            if ok {
                return true;
            }
            self.picked.truncate(picked_before);
            results.truncate(results_before);
            if self.steps > SEARCH_STEPS {
                return false;
            }
        }
        false
    }

    /// `left` more devices for request `i` from `candidates[from..]`, then the requests after.
    #[allow(clippy::too_many_arguments)]
    fn slots(
        &mut self,
        requests: &[RequestAsk],
        constraints: &[ConstraintAsk],
        (i, alt, left): (usize, &Alternative, u32),
        candidates: &[u32],
        from: usize,
        base: usize,
        results: &mut Vec<(String, u32, bool)>,
    ) -> bool {
        if left == 0 {
            return self.requests(requests, constraints, i + 1, base, results);
        }
        for (k, &d) in candidates.iter().enumerate().skip(from) {
            self.steps += 1;
            if self.steps > SEARCH_STEPS || candidates.len() - k < left as usize {
                return false;
            }
            if !self.allowed(d, alt, constraints, base) {
                continue;
            }
            self.picked.push((d, alt.name.clone(), alt.admin_access));
            results.push((alt.name.clone(), d, alt.admin_access));
            let next = (i, alt, left - 1);
            if self.slots(
                requests,
                constraints,
                next,
                candidates,
                k + 1,
                base,
                results,
            ) {
                return true;
            }
            self.picked.pop();
            results.pop();
        }
        false
    }

    /// Whether device `d` for `alt` keeps every constraint with the claim's picks so far, and
    /// (unless for admin access) the shared counters it consumes have room for it.
    fn allowed(
        &self,
        d: u32,
        alt: &Alternative,
        constraints: &[ConstraintAsk],
        base: usize,
    ) -> bool {
        (alt.admin_access || self.counters_allow(d))
            && self.constrained(d, &alt.name, constraints, base)
    }

    /// Whether every counter `d` consumes has room for it beside the devices in use and the
    /// ones picked so far (of every claim of the pod).
    fn counters_allow(&self, d: u32) -> bool {
        let devices = &self.table.devices;
        (devices[d as usize].consumes.iter()).all(|&(c, amount)| {
            let picked: i64 = (self.picked.iter())
                .filter(|(_, _, admin)| !admin)
                .flat_map(|(p, ..)| &devices[*p as usize].consumes)
                .filter(|(pc, _)| *pc == c)
                .map(|(_, a)| a)
                .sum();
            let capacity = self.table.counters.get(c as usize).copied().unwrap_or(0);
            let used = self.counters.get(c as usize).copied().unwrap_or(0);
            used + picked + amount <= capacity
        })
    }

    /// Whether device `d` for `request` keeps every constraint with the claim's picks so far.
    fn constrained(
        &self,
        d: u32,
        request: &str,
        constraints: &[ConstraintAsk],
        base: usize,
    ) -> bool {
        let attrs = &self.table.devices[d as usize].attributes;
        constraints.iter().filter(|c| c.covers(request)).all(|c| {
            let Some(value) = attrs.get(&c.attribute) else {
                // matchAttribute needs the attribute; distinctAttribute too (kube-scheduler's
                // allocator refuses a device without it).
                return false;
            };
            let others = (self.picked[base..].iter())
                .filter(|(_, r, _)| c.covers(r))
                .map(|(p, ..)| self.table.devices[*p as usize].attributes.get(&c.attribute));
            if c.distinct {
                others.into_iter().all(|v| v != Some(value))
            } else {
                others.into_iter().all(|v| v == Some(value))
            }
        })
    }
}

//! Shared counters of partitionable devices (KEP-4815): a pool's counter sets
//! (`spec.sharedCounters`, in the devices' slice under Kubernetes 1.34 and in a slice of their
//! own from 1.35) and what each device consumes of them (`spec.devices[].consumesCounters`).
//! Every (driver, pool, counter set, counter) becomes one index of the engine's
//! [`basalt_engine::dra::DraSpec::counters`], in that order, whatever order the slices came in.
//! Values are milli-units, consumption rounded up, so a device is never under-counted.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{Device, ResourceSlice};

use crate::quantity::parse_scaled;

type CounterKey = (String, String, String, String);

#[derive(Default)]
pub(super) struct Counters {
    index: BTreeMap<CounterKey, u32>,
    /// Per index, the capacity in milli-units.
    pub(super) capacities: Vec<i64>,
}

impl Counters {
    /// The counter sets of `slices` (the usable ones: their pool's newest, complete generation).
    /// A counter whose value cannot be read is left out with a warning, and so, later, is every
    /// device consuming it; a set named twice in one pool keeps its first definition.
    pub(super) fn collect<'s>(
        slices: impl Iterator<Item = (&'s str, &'s ResourceSlice)>,
        warnings: &mut Vec<String>,
    ) -> Counters {
        let mut found: BTreeMap<CounterKey, i64> = BTreeMap::new();
        let mut sets: BTreeMap<(String, String, String), String> = BTreeMap::new();
        for (origin, s) in slices {
            let spec = &s.spec;
            let slice = s.metadata.name.as_deref().unwrap_or("<unnamed>");
            for (i, set) in spec.shared_counters.iter().flatten().enumerate() {
                let at = format!("{origin}: ResourceSlice {slice}: spec.sharedCounters[{i}]");
                let key = (
                    spec.driver.clone(),
                    spec.pool.name.clone(),
                    set.name.clone(),
                );
                if let Some(first) = sets.get(&key) {
                    warnings.push(format!(
                        "{at}: counter set {} is defined again in pool {} (first in ResourceSlice {first}); this one is ignored",
                        set.name, spec.pool.name
                    ));
                    continue;
                }
                sets.insert(key, slice.to_string());
                for (name, counter) in &set.counters {
                    match parse_scaled(&counter.value.0, 1000) {
                        Ok(v) => {
                            let key = (spec.driver.clone(), spec.pool.name.clone());
                            found.insert((key.0, key.1, set.name.clone(), name.clone()), v);
                        }
                        Err(e) => warnings.push(format!("{at}.counters[{name}]: {e}; left out")),
                    }
                }
            }
        }
        let mut counters = Counters::default();
        for (i, (key, capacity)) in found.into_iter().enumerate() {
            counters.index.insert(key, i as u32);
            counters.capacities.push(capacity);
        }
        counters
    }

    /// What device `d` of a slice of `slice`'s pool consumes, as (counter index, milli-units),
    /// or why it cannot be used (a set or counter its pool does not define, a bad value).
    pub(super) fn consumption(
        &self,
        slice: &ResourceSlice,
        d: &Device,
    ) -> Result<Vec<(u32, i64)>, String> {
        let (driver, pool) = (&slice.spec.driver, &slice.spec.pool.name);
        let mut out = Vec::new();
        for (i, c) in d.consumes_counters.iter().flatten().enumerate() {
            for (name, counter) in &c.counters {
                let at = format!("consumesCounters[{i}].counters[{name}]");
                let key = (
                    driver.clone(),
                    pool.clone(),
                    c.counter_set.clone(),
                    name.clone(),
                );
                let Some(&index) = self.index.get(&key) else {
                    return Err(format!(
                        "{at}: pool {pool} has no counter {name} in a counter set {}",
                        c.counter_set
                    ));
                };
                let amount =
                    parse_scaled(&counter.value.0, 1000).map_err(|e| format!("{at}: {e}"))?;
                out.push((index, amount));
            }
        }
        Ok(out)
    }
}

//! Interned resource names and integer resource vectors.
//!
//! Every quantity is an integer in the resource's base unit: milli-CPU for `cpu`, bytes for
//! `memory`, and plain counts for `pods`, whole devices and every other extended resource.
//! No floats take part in capacity accounting.

use std::collections::BTreeMap;
use std::fmt;

/// Index of an interned resource name inside one [`ResourceNames`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId(pub u16);

/// Milli-CPU.
pub const CPU: ResourceId = ResourceId(0);
/// Bytes.
pub const MEMORY: ResourceId = ResourceId(1);
/// Pod slots (every task requests one).
pub const PODS: ResourceId = ResourceId(2);
/// Whole devices of a node that names no other device resource (`NodeSpec::device_resource`),
/// accounted per device as well. Their name is data the reader gives (`ClusterSpec::device_resource`).
pub const GPU: ResourceId = ResourceId(3);

pub const CPU_NAME: &str = "cpu";
pub const MEMORY_NAME: &str = "memory";
pub const PODS_NAME: &str = "pods";

/// A list of resources by name, as Kubernetes writes them (already converted to base units).
pub type ResourceList = BTreeMap<String, i64>;

/// The resource names known to a snapshot. The four well-known ones come first with fixed ids
/// (the whole devices' named by the caller); the others follow in sorted order so that ids do
/// not depend on input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceNames {
    names: Vec<String>,
}

impl ResourceNames {
    /// A table holding the well-known names, `devices` as [`GPU`]'s, and `extra` (sorted,
    /// de-duplicated).
    pub fn new<'a>(devices: &str, extra: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names: Vec<String> = [CPU_NAME, MEMORY_NAME, PODS_NAME, devices]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut rest: Vec<&str> = extra
            .into_iter()
            .filter(|n| !names.iter().any(|k| k == n))
            .collect();
        rest.sort_unstable();
        rest.dedup();
        names.extend(rest.into_iter().map(str::to_string));
        ResourceNames { names }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn id(&self, name: &str) -> Option<ResourceId> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| ResourceId(i as u16))
    }

    pub fn name(&self, id: ResourceId) -> &str {
        &self.names[id.0 as usize]
    }

    pub fn ids(&self) -> impl Iterator<Item = ResourceId> {
        (0..self.names.len() as u16).map(ResourceId)
    }

    /// Converts a named list; every name must already be in the table.
    pub fn resources(&self, list: &ResourceList) -> Resources {
        let mut r = Resources::zero(self.len());
        for (name, &v) in list {
            let id = self
                .id(name)
                .expect("resource names are collected before conversion");
            r.set(id, v);
        }
        r
    }

    /// A quantity as a person reads it: cores for `cpu` ("1.5", "250m"), binary units for
    /// `memory` ("64Gi"), plain counts for everything else.
    pub fn format(&self, id: ResourceId, v: i64) -> String {
        format_quantity(self.name(id), v)
    }

    /// Converts a named list whose names matter even when zero; every name must be in the table.
    pub fn limits(&self, list: &ResourceList) -> Limits {
        let mut v = vec![None; self.len()];
        for (name, &q) in list {
            let id = self
                .id(name)
                .expect("resource names are collected before conversion");
            v[id.0 as usize] = Some(q);
        }
        Limits(v)
    }

    /// Non-zero entries as Kubernetes quantity strings ("6", "64Gi"), by name.
    pub fn quantities(&self, r: &Resources) -> BTreeMap<String, String> {
        r.iter()
            .map(|(id, v)| (self.name(id).to_string(), self.format(id, v)))
            .collect()
    }

    /// Back to a named list, leaving out zeros.
    pub fn list(&self, r: &Resources) -> ResourceList {
        self.ids()
            .filter(|&id| r.get(id) != 0)
            .map(|id| (self.name(id).to_string(), r.get(id)))
            .collect()
    }
}

/// A resource list in which only the named dimensions mean something: a capability of
/// `nvidia.com/gpu: 0` caps GPUs at zero and leaves every other resource unlimited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Limits(Vec<Option<i64>>);

impl Limits {
    pub fn get(&self, id: ResourceId) -> Option<i64> {
        self.0.get(id.0 as usize).copied().flatten()
    }

    /// The named entries.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceId, i64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (ResourceId(i as u16), v)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// See [`ResourceNames::format`].
pub fn format_quantity(name: &str, v: i64) -> String {
    match name {
        CPU_NAME if v % 1000 == 0 => (v / 1000).to_string(),
        CPU_NAME => format!("{v}m"),
        MEMORY_NAME => {
            let units = [
                ("Ti", 1i64 << 40),
                ("Gi", 1 << 30),
                ("Mi", 1 << 20),
                ("Ki", 1 << 10),
            ];
            units
                .iter()
                .find(|(_, size)| v != 0 && v % size == 0)
                .map_or_else(
                    || v.to_string(),
                    |(unit, size)| format!("{}{unit}", v / size),
                )
        }
        _ => v.to_string(),
    }
}

/// A dense vector of quantities indexed by [`ResourceId`]. Missing trailing entries read as zero.
///
/// Compared, ordered and hashed as the slice of its entries (length included). Up to
/// [`INLINE_RESOURCES`] entries live inline: sessions copy these for every node and pod each
/// cycle, and a heap allocation per copy was most of a small cycle's cost.
#[derive(Clone)]
pub struct Resources(Store);

/// Resource dimensions held without a heap allocation (cpu, memory, pods, GPUs and four more).
pub const INLINE_RESOURCES: usize = 8;

#[derive(Clone)]
enum Store {
    Inline { len: u8, v: [i64; INLINE_RESOURCES] },
    Heap(Vec<i64>),
}

impl Default for Resources {
    fn default() -> Self {
        Resources::zero(0)
    }
}

impl PartialEq for Resources {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Resources {}

impl PartialOrd for Resources {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Resources {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::hash::Hash for Resources {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Resources").field(&self.as_slice()).finish()
    }
}

impl Resources {
    pub fn zero(len: usize) -> Self {
        if len <= INLINE_RESOURCES {
            Resources(Store::Inline {
                len: len as u8,
                v: [0; INLINE_RESOURCES],
            })
        } else {
            Resources(Store::Heap(vec![0; len]))
        }
    }

    fn as_slice(&self) -> &[i64] {
        match &self.0 {
            Store::Inline { len, v } => &v[..*len as usize],
            Store::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [i64] {
        match &mut self.0 {
            Store::Inline { len, v } => &mut v[..*len as usize],
            Store::Heap(v) => v,
        }
    }

    /// Grows to `len` entries (new ones zero); never shrinks.
    #[cold]
    fn grow(&mut self, new_len: usize) {
        match &mut self.0 {
            Store::Inline { len, .. } if new_len <= *len as usize => {}
            Store::Inline { len, .. } if new_len <= INLINE_RESOURCES => *len = new_len as u8,
            Store::Inline { len, v } => {
                let mut heap = v[..*len as usize].to_vec();
                heap.resize(new_len, 0);
                self.0 = Store::Heap(heap);
            }
            Store::Heap(v) => {
                if new_len > v.len() {
                    v.resize(new_len, 0);
                }
            }
        }
    }

    pub fn get(&self, id: ResourceId) -> i64 {
        self.as_slice().get(id.0 as usize).copied().unwrap_or(0)
    }

    /// An entry as a count (of GPUs, say): negatives read as zero, huge values as `u32::MAX`.
    pub fn count(&self, id: ResourceId) -> u32 {
        self.get(id).clamp(0, u32::MAX as i64) as u32
    }

    pub fn set(&mut self, id: ResourceId, v: i64) {
        let i = id.0 as usize;
        if i >= self.as_slice().len() {
            self.grow(i + 1);
        }
        self.as_mut_slice()[i] = v;
    }

    /// Non-zero entries.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceId, i64)> + '_ {
        self.as_slice()
            .iter()
            .enumerate()
            .filter(|(_, &v)| v != 0)
            .map(|(i, &v)| (ResourceId(i as u16), v))
    }

    /// Adds `other`, saturating at the ends of `i64`: a sum of external quantities never wraps.
    /// A saturated entry (`i64::MAX`) stands for "at least this much", more than any node holds.
    pub fn add(&mut self, other: &Resources) {
        let theirs = other.as_slice();
        // Vectors of one snapshot are of one length: grow only when they differ.
        if theirs.len() > self.as_slice().len() {
            self.grow(theirs.len());
        }
        for (a, b) in self.as_mut_slice().iter_mut().zip(theirs) {
            *a = a.saturating_add(*b);
        }
    }

    /// The difference `self - other` of two quantities (free = allocatable - used), saturating.
    pub fn sub(&mut self, other: &Resources) {
        let theirs = other.as_slice();
        if theirs.len() > self.as_slice().len() {
            self.grow(theirs.len());
        }
        for (a, b) in self.as_mut_slice().iter_mut().zip(theirs) {
            *a = a.saturating_sub(*b);
        }
    }

    /// Takes `part` back out of a sum it was [`add`](Self::add)ed to (usage, a queue's
    /// allocation). Exact while the sum never saturated; an entry that did saturate
    /// (`i64::MAX`) no longer knows its true value and stays saturated, so giving back a part
    /// never frees capacity that was never held.
    pub fn take_back(&mut self, part: &Resources) {
        let theirs = part.as_slice();
        if theirs.len() > self.as_slice().len() {
            self.grow(theirs.len());
        }
        for (a, b) in self.as_mut_slice().iter_mut().zip(theirs) {
            if *a != i64::MAX {
                *a = a.saturating_sub(*b);
            }
        }
    }

    /// Whether `self` fits into `free` in every dimension it requests. A saturated request
    /// (`i64::MAX`) fits nowhere: it stands for more than can be counted.
    pub fn fits_in(&self, free: &Resources) -> bool {
        self.iter().all(|(id, v)| fits(v, free.get(id)))
    }

    /// The dimensions where `self` does not fit into `free` (see [`Self::fits_in`]).
    pub fn shortfall<'a>(&'a self, free: &'a Resources) -> impl Iterator<Item = ResourceId> + 'a {
        self.iter()
            .filter(move |&(id, v)| !fits(v, free.get(id)))
            .map(|(id, _)| id)
    }

    /// Whether `self` fits on a node holding `used` of `allocatable`, in every dimension it
    /// requests: `used + self <= allocatable`, without overflow.
    pub fn fits_on(&self, used: &Resources, allocatable: &Resources) -> bool {
        self.short_on(used, allocatable).next().is_none()
    }

    /// The dimensions where `self` does not fit on a node holding `used` of `allocatable`.
    pub fn short_on<'a>(
        &'a self,
        used: &'a Resources,
        allocatable: &'a Resources,
    ) -> impl Iterator<Item = ResourceId> + 'a {
        self.iter()
            .filter(move |&(id, v)| {
                v == i64::MAX || used.get(id) as i128 + v as i128 > allocatable.get(id) as i128
            })
            .map(|(id, _)| id)
    }

    /// Scales every entry by `num / den` (`den > 0`), rounding down and saturating at the
    /// ends of `i64` (an overcommit factor above one on a huge allocatable).
    pub fn scaled(&self, num: i64, den: i64) -> Resources {
        let mut out = self.clone();
        let den = den.max(1) as i128;
        for v in out.as_mut_slice() {
            *v = saturate(*v as i128 * num as i128 / den);
        }
        out
    }

    pub fn is_zero(&self) -> bool {
        self.as_slice().iter().all(|&v| v == 0)
    }
}

/// `v` of a request fits into `free`; `i64::MAX` never does.
fn fits(v: i64, free: i64) -> bool {
    v <= free && v != i64::MAX
}

/// `v` clamped into `i64`.
fn saturate(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.iter().map(|(id, v)| format!("{}={v}", id.0)).collect();
        write!(f, "[{}]", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_do_not_depend_on_input_order() {
        let a = ResourceNames::new("nvidia.com/gpu", ["b.io/x", "a.io/y", "cpu"]);
        let b = ResourceNames::new("nvidia.com/gpu", ["a.io/y", "b.io/x"]);
        assert_eq!(a, b);
        assert_eq!(a.id("cpu"), Some(CPU));
        assert_eq!(a.id("nvidia.com/gpu"), Some(GPU));
        assert_eq!(a.name(ResourceId(4)), "a.io/y");
    }

    #[test]
    fn quantities_read_like_kubernetes() {
        assert_eq!(format_quantity("cpu", 6000), "6");
        assert_eq!(format_quantity("cpu", 1500), "1500m");
        assert_eq!(format_quantity("memory", 64 << 30), "64Gi");
        assert_eq!(format_quantity("memory", 1000), "1000");
        assert_eq!(format_quantity("nvidia.com/gpu", 8), "8");
    }

    #[test]
    fn inline_and_heap_entries_compare_as_slices() {
        let mut small = Resources::zero(2);
        small.set(ResourceId(1), 5);
        let mut big = Resources::zero(2);
        big.set(ResourceId(INLINE_RESOURCES as u16 + 3), 7);
        assert_eq!(big.get(ResourceId(1)), 0);
        assert_eq!(big.get(ResourceId(INLINE_RESOURCES as u16 + 3)), 7);
        big.add(&small);
        big.sub(&small);
        big.add(&small);
        assert_eq!(big.get(ResourceId(1)), 5);
        // Length counts, as for a Vec: zeros of different lengths differ.
        assert_ne!(Resources::zero(3), Resources::zero(4));
        assert_eq!(Resources::zero(INLINE_RESOURCES + 2), {
            let mut r = Resources::zero(1);
            r.set(ResourceId(INLINE_RESOURCES as u16 + 1), 0);
            r
        });
        assert_eq!(format!("{small:?}"), "Resources([0, 5])");
        let mut grown = small.clone();
        grown.add(&big);
        assert_eq!(grown.get(ResourceId(1)), 10);
        assert!(small < grown);
    }

    #[test]
    fn fit_and_shortfall() {
        let mut req = Resources::zero(4);
        req.set(CPU, 500);
        req.set(GPU, 2);
        let mut free = Resources::zero(4);
        free.set(CPU, 1000);
        free.set(GPU, 1);
        assert!(!req.fits_in(&free));
        assert_eq!(req.shortfall(&free).collect::<Vec<_>>(), vec![GPU]);
        free.set(GPU, 2);
        assert!(req.fits_in(&free));
    }

    fn one(id: ResourceId, v: i64) -> Resources {
        let mut r = Resources::zero(4);
        r.set(id, v);
        r
    }

    /// Sums of external quantities saturate instead of wrapping (2 × 2^62 GPUs once read as
    /// zero and bound to a 1-GPU node), in release and without an overflow panic in debug.
    #[test]
    fn sums_saturate_and_never_wrap() {
        let mut sum = one(GPU, 1 << 62);
        sum.add(&one(GPU, 1 << 62));
        assert_eq!(sum.get(GPU), i64::MAX);
        let mut low = one(CPU, i64::MIN + 1);
        low.add(&one(CPU, -5));
        assert_eq!(low.get(CPU), i64::MIN);
        let mut free = one(MEMORY, 10);
        free.sub(&one(MEMORY, i64::MAX));
        assert_eq!(free.get(MEMORY), 10 - i64::MAX);
        free.sub(&one(MEMORY, i64::MAX));
        assert_eq!(free.get(MEMORY), i64::MIN);
    }

    /// Giving back a request is exact until a sum saturates; a saturated sum stays saturated,
    /// so releasing never frees capacity that was never held.
    #[test]
    fn taking_back_from_a_saturated_sum_frees_nothing() {
        let mut used = one(MEMORY, 1 << 30);
        used.add(&one(MEMORY, 5));
        used.take_back(&one(MEMORY, 5));
        assert_eq!(used.get(MEMORY), 1 << 30);
        let held = i64::MAX - 1;
        let mut used = one(MEMORY, held);
        used.add(&one(MEMORY, 10));
        used.take_back(&one(MEMORY, 10));
        assert!(
            used.get(MEMORY) >= held,
            "{} freed",
            held - used.get(MEMORY)
        );
        used.take_back(&one(MEMORY, i64::MAX));
        assert_eq!(used.get(MEMORY), i64::MAX);
    }

    /// A saturated request fits nowhere, not even on a node of `i64::MAX`; the fit of a
    /// request on a node's usage never overflows.
    #[test]
    fn saturated_requests_fit_nowhere() {
        let max = one(MEMORY, i64::MAX);
        assert!(!max.fits_in(&max));
        assert_eq!(max.shortfall(&max).collect::<Vec<_>>(), vec![MEMORY]);
        assert!(!max.fits_on(&Resources::zero(4), &max));
        let big = one(MEMORY, i64::MAX - 1);
        assert!(big.fits_in(&max));
        assert!(big.fits_on(&one(MEMORY, 1), &max));
        assert!(!big.fits_on(&one(MEMORY, 2), &max));
        assert!(!one(MEMORY, 1).fits_on(&max, &max));
    }

    #[test]
    fn scaling_and_counts_saturate() {
        let r = one(CPU, i64::MAX / 2 + 1).scaled(3000, 1000);
        assert_eq!(r.get(CPU), i64::MAX);
        assert_eq!(one(CPU, 4000).scaled(1500, 1000).get(CPU), 6000);
        assert_eq!(
            one(CPU, 7).scaled(1, 0).get(CPU),
            7,
            "a zero denominator reads as one"
        );
        assert_eq!(one(GPU, (1 << 32) + 1).count(GPU), u32::MAX);
        assert_eq!(one(GPU, -3).count(GPU), 0);
    }
}

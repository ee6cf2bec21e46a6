//! The engine's hash maps: foldhash, several times faster than SipHash on the short keys hashed
//! every cycle (ids, names, resource vectors), and still seeded per process. Nothing iterates
//! them where order could leak into a plan.

pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

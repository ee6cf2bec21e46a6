//! A small cluster in which every metric the dashboards and alerts read has a series: three
//! 8-GPU nodes in two racks, a gang of two bound in queue `research` and a gang too large to
//! place waiting there.

use serde_json::json;

use super::{group, node, pod, queue, Cluster};

/// GPUs the bound gang takes (two pods of four).
pub const BOUND_GPUS: u32 = 8;
/// What the waiting gang asks for: four pods of eight GPUs, more than the cluster has.
pub const WAITING_GPUS: u32 = 32;

pub fn create(c: &Cluster) {
    for (name, rack) in [("n1", "r1"), ("n2", "r1"), ("n3", "r2")] {
        let mut n = node(name, 8);
        n["metadata"]["labels"] = json!({"topology.basalt.dev/rack": rack});
        c.create(n);
    }
    c.create(queue("research"));
    c.create(group("g", 2, "research"));
    for i in 0..2 {
        c.create(pod(&format!("g-{i}"), "g", 4));
    }
    c.create(group("big", 4, "research"));
    for i in 0..4 {
        c.create(pod(&format!("big-{i}"), "big", 8));
    }
}

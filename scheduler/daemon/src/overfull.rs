//! Nodes whose bound pods hold more than the node has, from any cause: two leaders' binds
//! (which leadership is built to rule out, see `leader.rs`), another scheduler, a kubelet that
//! admitted more, an allocatable that shrank under running pods.
//!
//! Rules:
//! - a node is over capacity when, for some resource, what its live pods request exceeds its
//!   allocatable (the snapshot's usage: bound pods, this scheduler's assumed binds included);
//! - such a node gets one Warning Event (`OverCapacity`) while it lasts, a log line, and
//!   counts in `basalt_scheduler_nodes_over_capacity`;
//! - nothing more is bound there until it is back under capacity, and a gang with a member
//!   planned there is held whole (its binds wait), so it never starts in part.

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{JobId, Plan, Snapshot};

/// The nodes over capacity in one snapshot, each with what is over (`nvidia.com/gpu 16 of 8`).
#[derive(Default)]
pub struct Overfull(BTreeMap<String, String>);

impl Overfull {
    pub fn of(snapshot: &Snapshot) -> Overfull {
        let names = &snapshot.resources;
        let mut over = BTreeMap::new();
        for (node, used) in snapshot.nodes.iter().zip(&snapshot.node_used) {
            let what: Vec<String> = (used.iter())
                .filter(|&(id, v)| v > node.allocatable.get(id))
                .map(|(id, v)| {
                    let has = names.format(id, node.allocatable.get(id));
                    format!("{} {} of {has}", names.name(id), names.format(id, v))
                })
                .collect();
            if !what.is_empty() {
                over.insert(node.name.clone(), what.join(", "));
            }
        }
        Overfull(over)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Each node over capacity and what is over, by name.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, w)| (n.as_str(), w.as_str()))
    }

    /// The pods of `plan` whose binds must wait: those planned on a node over capacity and
    /// every pod of their jobs (`ns/name` keys), each with why.
    pub fn held(&self, plan: &Plan, snapshot: &Snapshot) -> BTreeMap<String, String> {
        if self.is_empty() {
            return BTreeMap::new();
        }
        let job_of: HashMap<&str, JobId> =
            (snapshot.tasks.iter()).map(|t| (&*t.name, t.job)).collect();
        let job = |pod: &str| job_of.get(pod).copied();
        // Each held job with the first node over capacity it was planned on.
        let mut jobs: HashMap<JobId, &str> = HashMap::new();
        for b in plan
            .bindings
            .iter()
            .filter(|b| self.0.contains_key(&b.node))
        {
            if let Some(j) = job(&b.pod) {
                jobs.entry(j).or_insert(&b.node);
            }
        }
        (plan.bindings.iter())
            .filter_map(|b| {
                let node = match self.0.contains_key(&b.node) {
                    true => b.node.as_str(),
                    false => jobs.get(&job(&b.pod)?)?,
                };
                Some((b.pod.clone(), self.reason(node)))
            })
            .collect()
    }

    /// Why a bind there is not sent.
    pub fn reason(&self, node: &str) -> String {
        let what = self.0.get(node).map_or("", String::as_str);
        format!("not sent: node {node} holds more than it has ({what}); nothing more is bound there until it is back under capacity")
    }
}

/// The Event reason on a node over capacity.
pub const OVER_CAPACITY: &str = "OverCapacity";

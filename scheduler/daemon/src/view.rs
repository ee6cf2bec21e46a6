//! The PodGroups and Queues that went into this cycle's snapshot, Basalt's and its peers',
//! each with the API it was read from (where its status is written) and the queue a group goes
//! to. Built by the cycle as it collects the objects; read by what applies the plan.

use std::collections::HashMap;
use std::sync::Arc;

use basalt_crds::{PodGroup, QueueStatus};
use basalt_engine::DEFAULT_QUEUE;

use crate::scheduler_plugins;
use crate::volcano;

/// The API a PodGroup or Queue of this cycle was read from, where its status is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Basalt,
    Volcano,
    /// scheduler-plugins' coscheduling PodGroup: read, its status never written.
    SchedulerPlugins,
}

impl Origin {
    /// The API an object of `api_version` was read from (the inverse of [`Self::api_version`]).
    pub fn of(api_version: &str) -> Origin {
        match api_version {
            basalt_crds::types::API_VERSION => Origin::Basalt,
            volcano::API_VERSION => Origin::Volcano,
            _ => Origin::SchedulerPlugins,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Origin::Basalt => basalt_crds::types::API_VERSION,
            Origin::Volcano => volcano::API_VERSION,
            Origin::SchedulerPlugins => scheduler_plugins::API_VERSION,
        }
    }
}

pub struct GroupEntry {
    pub group: Arc<PodGroup>,
    pub origin: Origin,
    /// The queue it goes to: its own, else its namespace's, else `default`.
    pub queue: String,
}

pub struct QueueEntry {
    /// The status as it stands (only what the scheduler writes).
    pub status: Option<QueueStatus>,
    pub origin: Origin,
}

/// The PodGroups and Queues that went into this cycle's snapshot, Basalt's and Volcano's, by
/// `ns/name` and name.
#[derive(Default)]
pub struct View {
    groups: HashMap<String, GroupEntry>,
    queues: HashMap<String, QueueEntry>,
    /// Per namespace, the queue it names for its jobs (`scheduling.basalt.dev/queue`).
    namespace_queues: HashMap<String, String>,
}

impl View {
    /// An empty view of a cycle whose namespaces name these queues for their jobs.
    pub fn new(namespace_queues: HashMap<String, String>) -> Self {
        View {
            namespace_queues,
            ..View::default()
        }
    }

    /// The PodGroup `ns/name`.
    pub fn group(&self, key: &str) -> Option<&GroupEntry> {
        self.groups.get(key)
    }

    pub fn has_group(&self, key: &str) -> bool {
        self.groups.contains_key(key)
    }

    pub fn queue(&self, name: &str) -> Option<&QueueEntry> {
        self.queues.get(name)
    }

    pub fn has_queue(&self, name: &str) -> bool {
        self.queues.contains_key(name)
    }

    /// The queue namespace `ns` names for its jobs.
    pub fn namespace_queue(&self, ns: &str) -> Option<&str> {
        self.namespace_queues.get(ns).map(String::as_str)
    }

    /// The queue a PodGroup goes to: its own, else its namespace's, else `default`.
    pub fn queue_of(&self, g: &PodGroup) -> String {
        let ns = g.metadata.namespace.as_deref().unwrap_or("default");
        (g.spec.queue.clone().filter(|q| !q.is_empty()))
            .or_else(|| self.namespace_queues.get(ns).cloned())
            .unwrap_or_else(|| DEFAULT_QUEUE.to_string())
    }

    /// Adds (or replaces) the Queue `name`.
    pub fn add_queue(&mut self, name: String, status: Option<QueueStatus>, origin: Origin) {
        self.queues.insert(name, QueueEntry { status, origin });
    }

    /// Whether `other` holds Queues of the same names.
    pub fn same_queues(&self, other: &View) -> bool {
        self.queues.len() == other.queues.len()
            && (self.queues.keys()).all(|q| other.queues.contains_key(q))
    }

    /// Takes the PodGroups of `last`, a view of the same queues and namespaces.
    pub fn keep_groups(&mut self, last: View) {
        self.groups = last.groups;
    }

    pub fn remove_group(&mut self, key: &str) {
        self.groups.remove(key);
    }

    /// Adds (or replaces) the PodGroup `key` (`ns/name`), going to [`Self::queue_of`] it.
    pub fn add_group(&mut self, key: String, group: Arc<PodGroup>, origin: Origin) {
        let queue = self.queue_of(&group);
        let entry = GroupEntry {
            group,
            origin,
            queue,
        };
        self.groups.insert(key, entry);
    }
}

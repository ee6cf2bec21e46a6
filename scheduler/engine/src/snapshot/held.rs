//! What a [`SnapshotBuilder`] counts over the specs it holds, kept in step as they come and
//! go: the resource names they state, who uses the default queue, each job's members and
//! what changed since the last snapshot.

use std::collections::btree_map::Entry;

use super::*;

/// A spec and, once converted under the builder's current resource names, its facts.
#[derive(Debug)]
pub(super) struct Converted<S, F> {
    pub(super) spec: S,
    pub(super) facts: Option<F>,
}

/// Specs by (namespace, name), each boxed: a B-tree keeps its values in its nodes, and a
/// node of eleven pod specs with their facts is tens of kilobytes, half of it empty after
/// a split; boxed, a node is small and each spec takes what it needs.
pub(super) type ConvertedMap<S, F> = BTreeMap<(String, String), Box<Converted<S, F>>>;

impl Converted<Arc<PodSpec>, PodFacts> {
    /// The pod with its facts, converted under `names` unless kept.
    pub(super) fn convert(
        &mut self,
        names: &ResourceNames,
        node_id: &dyn Fn(&str) -> Option<NodeId>,
        metas: &mut MetaInterner,
    ) -> (&PodSpec, &PodFacts) {
        let facts =
            (self.facts).get_or_insert_with(|| PodFacts::of(names, &self.spec, node_id, metas));
        (&*self.spec, facts)
    }
}

impl Converted<GroupSpec, GroupFacts> {
    /// The group with its facts, converted under `names` unless kept.
    pub(super) fn convert(&mut self, names: &ResourceNames) -> (&GroupSpec, &GroupFacts) {
        let facts = (self.facts).get_or_insert_with(|| GroupFacts::of(names, &self.spec));
        (&self.spec, facts)
    }
}

/// What the builder counts of each spec it holds: the resource names it states and whether
/// its job goes to the default queue.
pub(super) trait Held: PartialEq {
    fn resource_list(&self) -> Option<&ResourceList>;
    fn uses_default_queue(&self) -> bool;
    fn namespace(&self) -> &str;
    /// The name of the job the spec is part of (in its namespace); `None` for a pod of another
    /// scheduler.
    fn job_name(&self) -> Option<&str>;
    /// The pod's name, for a pod of ours (a member of its job).
    fn member_name(&self) -> Option<&str>;
    /// The pod's name, for a pinned pod.
    fn pinned_name(&self) -> Option<&str>;
}

/// A spec shared with whoever else holds it (the pods: see [`SnapshotBuilder::set_pod`]).
impl<T: Held> Held for Arc<T> {
    fn resource_list(&self) -> Option<&ResourceList> {
        (**self).resource_list()
    }
    fn uses_default_queue(&self) -> bool {
        (**self).uses_default_queue()
    }
    fn namespace(&self) -> &str {
        (**self).namespace()
    }
    fn job_name(&self) -> Option<&str> {
        (**self).job_name()
    }
    fn member_name(&self) -> Option<&str> {
        (**self).member_name()
    }
    fn pinned_name(&self) -> Option<&str> {
        (**self).pinned_name()
    }
}

impl Held for PodSpec {
    fn resource_list(&self) -> Option<&ResourceList> {
        Some(&self.request)
    }
    /// A pod of ours without a PodGroup is a job of its own, in its queue.
    fn uses_default_queue(&self) -> bool {
        self.is_member() && self.group.is_none() && self.queue.is_none()
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn job_name(&self) -> Option<&str> {
        (self.is_member()).then(|| self.group.as_deref().unwrap_or(&self.name))
    }
    fn member_name(&self) -> Option<&str> {
        (self.is_member()).then_some(self.name.as_str())
    }
    fn pinned_name(&self) -> Option<&str> {
        self.pinned_queue.as_ref().map(|_| self.name.as_str())
    }
}

impl Held for GroupSpec {
    fn resource_list(&self) -> Option<&ResourceList> {
        self.min_resources.as_ref()
    }
    fn uses_default_queue(&self) -> bool {
        self.queue.is_none()
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn job_name(&self) -> Option<&str> {
        Some(&self.name)
    }
    fn member_name(&self) -> Option<&str> {
        None
    }
    fn pinned_name(&self) -> Option<&str> {
        None
    }
}

/// The builder's counts over the specs it holds, kept in step as specs come and go, and what
/// changed since the last snapshot (what [`patch`] needs to bring it up to date).
#[derive(Debug, Default)]
pub(super) struct HeldCounts {
    /// Resource name → how many pod requests and group minResources state it.
    pub(super) names: BTreeMap<String, usize>,
    /// Jobs that go to the default queue: groups without a queue, pods of ours without a group.
    pub(super) default_queue_users: usize,
    /// Per namespace and job: the names of its pods of ours (by namespace first, so that a
    /// pod of a job already known is looked up without making its key).
    pub(super) members: HashMap<String, HashMap<String, BTreeSet<String>>>,
    /// Some spec's namespace held a `/` (not a Kubernetes namespace): in a task's name
    /// `namespace/name` the parts are no longer told apart, so the builder stops patching.
    pub(super) slashed: bool,
    /// Jobs (namespace, name) whose group or pods changed since the last snapshot.
    pub(super) changed_jobs: BTreeSet<(String, String)>,
    /// Pinned pods (namespace, name) that changed since the last snapshot.
    pub(super) changed_pinned: BTreeSet<(String, String)>,
    /// Changes the patch cannot follow happened since the last snapshot: a pod of another
    /// scheduler changed, or more changed than are worth tracking (a builder seldom built).
    /// The next snapshot is assembled anew.
    pub(super) untracked: bool,
}

/// Changes tracked between snapshots at most; past this, the next one is assembled anew.
pub(super) const MAX_TRACKED_CHANGES: usize = 1 << 16;

impl HeldCounts {
    /// The counts of a builder that has built nothing yet: its first snapshot is assembled
    /// whole, so no change is tracked until then (a first sync tells 100,000 pods).
    pub(super) fn untracked() -> HeldCounts {
        HeldCounts {
            untracked: true,
            ..HeldCounts::default()
        }
    }

    fn count(&mut self, spec: &impl Held, add: bool) {
        count_names(&mut self.names, spec.resource_list(), add);
        let users = spec.uses_default_queue() as usize;
        self.slashed |= spec.namespace().contains('/');
        if add {
            self.default_queue_users += users;
        } else {
            self.default_queue_users -= users;
        }
        if self.changed_jobs.len() + self.changed_pinned.len() >= MAX_TRACKED_CHANGES {
            self.changed_jobs.clear();
            self.changed_pinned.clear();
            self.untracked = true;
        }
        if let Some(pod) = spec.pinned_name() {
            if !self.untracked {
                (self.changed_pinned).insert((spec.namespace().to_string(), pod.to_string()));
            }
            return;
        }
        let Some(job) = spec.job_name() else {
            self.untracked = true;
            return;
        };
        if let Some(pod) = spec.member_name() {
            let namespace = spec.namespace();
            if add && !self.members.contains_key(namespace) {
                self.members.insert(namespace.to_string(), HashMap::new());
            }
            if let Some(jobs) = self.members.get_mut(namespace) {
                count_member(jobs, job, pod, add);
                if jobs.is_empty() {
                    self.members.remove(namespace);
                }
            }
        }
        if !self.untracked {
            let key = (spec.namespace().to_string(), job.to_string());
            self.changed_jobs.insert(key);
        }
    }

    /// The names of the pods of ours of `job` in `namespace`.
    pub(super) fn members_of(&self, namespace: &str, job: &str) -> impl Iterator<Item = &String> {
        (self.members.get(namespace))
            .and_then(|jobs| jobs.get(job))
            .into_iter()
            .flatten()
    }

    /// The snapshot is built: from here on, changes count from it.
    pub(super) fn built(&mut self) {
        self.changed_jobs.clear();
        self.changed_pinned.clear();
        self.untracked = false;
    }
}

/// Adds `pod` to (or takes it from) `job`'s members, forgetting a job left without any.
fn count_member(jobs: &mut HashMap<String, BTreeSet<String>>, job: &str, pod: &str, add: bool) {
    match jobs.get_mut(job) {
        Some(members) if add => {
            members.insert(pod.to_string());
        }
        Some(members) => {
            members.remove(pod);
            if members.is_empty() {
                jobs.remove(job);
            }
        }
        None if add => {
            jobs.insert(job.to_string(), [pod.to_string()].into());
        }
        None => {}
    }
}

/// Puts `spec` under `key` (to be converted again) unless an equal spec is there, keeping the
/// counts in step; whether it changed anything.
pub(super) fn upsert<S: Held, F>(
    map: &mut ConvertedMap<S, F>,
    counts: &mut HeldCounts,
    key: (String, String),
    spec: S,
) -> bool {
    let fresh = |spec| Box::new(Converted { spec, facts: None });
    // One search of the map per spec told (a daemon's first sync tells 100,000).
    match map.entry(key) {
        Entry::Occupied(held) if held.get().spec == spec => return false,
        Entry::Occupied(mut held) => {
            // The old spec leaves before the new one comes (both may name the same job).
            counts.count(&held.get().spec, false);
            counts.count(&spec, true);
            held.insert(fresh(spec));
        }
        Entry::Vacant(place) => {
            counts.count(&spec, true);
            place.insert(fresh(spec));
        }
    }
    true
}

/// Takes the spec under (`namespace`, `name`) out, keeping the counts in step.
pub(super) fn take<S: Held, F>(
    map: &mut ConvertedMap<S, F>,
    counts: &mut HeldCounts,
    namespace: &str,
    name: &str,
) -> Option<S> {
    let old = *map.remove(&(namespace.to_string(), name.to_string()))?;
    counts.count(&old.spec, false);
    Some(old.spec)
}

pub(super) fn count_names(
    counts: &mut BTreeMap<String, usize>,
    list: Option<&ResourceList>,
    add: bool,
) {
    for k in list.into_iter().flat_map(|l| l.keys()) {
        if add {
            // A name is new rarely: no key is copied for the others.
            match counts.get_mut(k) {
                Some(c) => *c += 1,
                None => {
                    counts.insert(k.clone(), 1);
                }
            }
        } else if let Some(c) = counts.get_mut(k) {
            *c -= 1;
            if *c == 0 {
                counts.remove(k);
            }
        }
    }
}

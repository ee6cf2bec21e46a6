//! What the snapshot takes from each pod's and PodGroup's spec alone, and the order specs
//! come in.

use super::*;

pub(super) fn sorted_pods<'a>(pods: impl IntoIterator<Item = &'a PodSpec>) -> Vec<&'a PodSpec> {
    let mut pods: Vec<&PodSpec> = pods.into_iter().collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}

pub(super) fn sorted_groups<'a>(
    groups: impl IntoIterator<Item = &'a GroupSpec>,
) -> Vec<&'a GroupSpec> {
    let mut groups: Vec<&GroupSpec> = groups.into_iter().collect();
    groups.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    groups
}

/// `namespace/name`, without the formatting machinery (made for every pod of every snapshot).
pub(super) fn object_key(namespace: &str, name: &str) -> Arc<str> {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key.into()
}

/// What the snapshot takes from one pod's spec alone, under one table of resource names (a
/// [`SnapshotBuilder`] keeps it while the spec and the names stay the same).
#[derive(Clone, Debug)]
pub(super) struct PodFacts {
    /// `namespace/name`, how the snapshot and its messages name the pod.
    pub(super) key: Arc<str>,
    /// The request with the pod slot.
    pub(super) request: Resources,
    /// `spec.nodeName` and `status.nominatedNodeName` resolved (`None` also for a node that
    /// does not exist).
    pub(super) node: Option<NodeId>,
    pub(super) nominated: Option<NodeId>,
    /// [`JobKey::hash`] of its job: its PodGroup, or itself without one.
    pub(super) job_hash: u64,
    /// Its task's position in the builder's last snapshot (see [`Buffers`]).
    pub(super) slot: std::cell::Cell<u32>,
    pub(super) meta: Arc<PodMeta>,
    /// What it takes of each device it shares (see [`Task::share`]).
    pub(super) share: Option<crate::devices::ShareAsk>,
    /// Its containers' asks (see [`Task::containers`]).
    pub(super) containers: Option<Arc<[crate::devices::ContainerAsk]>>,
    /// Its devices hold different amounts (see [`Task::held`]): snapshot patching declines.
    pub(super) held_differs: bool,
}

impl PodFacts {
    pub(super) fn of(
        names: &ResourceNames,
        p: &PodSpec,
        node_id: &dyn Fn(&str) -> Option<NodeId>,
        metas: &mut MetaInterner,
    ) -> Self {
        let mut request = names.resources(&p.request);
        // A pod takes one pod slot; a pinned pod as many as it says it stands for.
        if p.pinned_queue.is_none() || !p.request.contains_key("pods") {
            request.set(PODS, 1);
        }
        // A share without a device count takes one device (see `DeviceAsk::implied_counts`).
        for name in &p.devices.implied_counts {
            if let Some(id) = names.id(name).filter(|&id| request.get(id) <= 0) {
                request.set(id, 1);
            }
        }
        let share = devices::held_share(&p.held_devices, p.devices.share);
        let containers = devices::container_asks(&p.devices.containers);
        PodFacts {
            key: object_key(&p.namespace, &p.name),
            request,
            node: p.node.as_deref().and_then(node_id),
            nominated: p.nominated_node.as_deref().and_then(node_id),
            job_hash: JobKey(&p.namespace, p.group.as_deref().unwrap_or(&p.name)).hash(),
            slot: std::cell::Cell::new(u32::MAX),
            meta: metas.intern(&p.namespace, &p.labels, p.terminating),
            share,
            containers,
            held_differs: devices::held_differs(&p.held_devices),
        }
    }
}

/// The same for a PodGroup.
#[derive(Clone, Debug)]
pub(super) struct GroupFacts {
    pub(super) key: Arc<str>,
    pub(super) min_resources: Option<Resources>,
    /// [`JobKey::hash`] of the group.
    pub(super) hash: u64,
}

impl GroupFacts {
    pub(super) fn of(names: &ResourceNames, g: &GroupSpec) -> Self {
        GroupFacts {
            key: object_key(&g.namespace, &g.name),
            min_resources: g.min_resources.as_ref().map(|r| names.resources(r)),
            hash: JobKey(&g.namespace, &g.name).hash(),
        }
    }
}

/// A job's key, ordered as the string `namespace/name` it names (the order job ids follow)
/// without building that string.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct JobKey<'a>(pub(super) &'a str, pub(super) &'a str);

impl JobKey<'_> {
    /// A hash fixed for the process, computed once per spec and kept with its facts, so that a
    /// cycle finds each pod's job without hashing names again.
    fn hash(&self) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::default().hash_one(self)
    }

    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        (self.0.bytes())
            .chain(std::iter::once(b'/'))
            .chain(self.1.bytes())
    }
}

impl Ord for JobKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.0 == other.0 {
            self.1.cmp(other.1)
        } else {
            self.bytes().cmp(other.bytes())
        }
    }
}

impl PartialOrd for JobKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Namespaces sorted by name, the last of a duplicate kept.
pub(super) fn sorted_namespaces(mut list: Vec<NamespaceSpec>) -> Arc<Vec<NamespaceSpec>> {
    list.reverse();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    list.dedup_by(|a, b| a.name == b.name);
    Arc::new(list)
}

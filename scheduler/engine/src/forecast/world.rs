//! The cluster a forecast moves forward: the builder holding every spec, what the forecast
//! reads of them (where each pod is, each group's bound members), and the ends still to come.

use super::*;

/// A pod's or group's `namespace/name`, made once and shared by every table that names it.
pub(super) type Key = Arc<str>;

/// The world's tables by key, read per pod of every binding, eviction and end: foldhash (fixed,
/// so nothing here depends on a seed) instead of SipHash.
type Fast<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
type FastSet<K> = HashSet<K, foldhash::fast::FixedState>;

/// The cluster as the forecast moves it: the builder holds every spec (told of each change),
/// the world what it reads of them and the pending ends.
pub(super) struct World {
    pub(super) builder: SnapshotBuilder,
    /// Per pod by `namespace/name`: where the builder holds it, its group, whether it is bound.
    pub(super) pods: Fast<Key, PodAt>,
    /// Per group by `namespace/name`: what its start depends on.
    pub(super) groups: BTreeMap<Key, GroupAt>,
    /// Per group its pods' keys.
    pub(super) members: Fast<Key, Vec<Key>>,
    /// Per group how many of its pods hold a node (what [`World::started`] counts).
    pub(super) bound: Fast<Key, u32>,
    /// Known ends of running pods: (instant, pod, the pod's epoch when pushed, method).
    pub(super) heap: BinaryHeap<Reverse<(i64, Key, u32, Method)>>,
    /// Per pod, how often it was evicted: an end pushed before is void.
    pub(super) epochs: Fast<Key, u32>,
    /// Running pods whose end nobody knows.
    pub(super) unknown: FastSet<Key>,
    /// Per pod running at the start with an end at an instant, its run time from its start:
    /// evicted and started again, it runs that long again (its deadline restarts too).
    pub(super) runs: Fast<Key, i64>,
    /// How each node shares its devices (what a binding's devices mean).
    pub(super) sharing: HashMap<String, Sharing>,
    /// The worst method of the ends applied so far.
    pub(super) applied: Method,
    pub(super) ends_applied: u32,
}

/// What the forecast reads of a pod; its spec is the builder's alone (one copy of 100,000
/// pods, not two).
pub(super) struct PodAt {
    /// Its `namespace/name` (the same as the world's key).
    key: Key,
    /// Where the namespace ends in `key`.
    slash: usize,
    /// Its group's `namespace/name`.
    pub(super) group: Option<Key>,
    /// It holds a node.
    pub(super) bound: bool,
}

impl PodAt {
    fn namespace(&self) -> &str {
        &self.key[..self.slash]
    }

    fn name(&self) -> &str {
        &self.key[self.slash + 1..]
    }
}

/// What the forecast reads of a PodGroup; its spec is the builder's alone.
pub(super) struct GroupAt {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) min_member: i64,
    pub(super) phase: JobPhase,
}

impl World {
    pub(super) fn new(
        device_resource: &str,
        nodes: Vec<crate::NodeSpec>,
        pods: Vec<Arc<PodSpec>>,
        groups: Vec<GroupSpec>,
        ends: &HashMap<String, End>,
        now: i64,
    ) -> Result<World, SnapshotError> {
        let sharing = (nodes.iter())
            .map(|n| (n.name.clone(), n.sharing))
            .collect();
        let mut world = World {
            builder: SnapshotBuilder::new(device_resource, nodes)?,
            pods: Fast::with_capacity_and_hasher(pods.len(), Default::default()),
            groups: BTreeMap::new(),
            members: Default::default(),
            bound: Default::default(),
            heap: BinaryHeap::new(),
            epochs: Default::default(),
            unknown: Default::default(),
            runs: Default::default(),
            sharing,
            applied: Method::Exact,
            ends_applied: 0,
        };
        for g in groups {
            let at = GroupAt {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                min_member: g.min_member,
                phase: g.phase,
            };
            let key: Key = format!("{}/{}", g.namespace, g.name).into();
            world.groups.insert(key, at);
            world.builder.set_group(g);
        }
        let mut group_key = String::new();
        for p in pods {
            let key: Key = format!("{}/{}", p.namespace, p.name).into();
            // The group's shared key, found by its name (a pod's group that has no PodGroup
            // gets a key of its own).
            let group = (p.group.as_ref()).map(|g| {
                group_key.clear();
                group_key.push_str(&p.namespace);
                group_key.push('/');
                group_key.push_str(g);
                match world.groups.get_key_value(group_key.as_str()) {
                    Some((k, _)) => k.clone(),
                    None => Key::from(group_key.as_str()),
                }
            });
            if let Some(group) = &group {
                world
                    .members
                    .entry(group.clone())
                    .or_default()
                    .push(key.clone());
                if p.node.is_some() {
                    *world.bound.entry(group.clone()).or_default() += 1;
                }
            }
            if holds_node(&p) {
                match ends.get(&*key) {
                    // An end already past (a deadline not yet enforced) is taken as now.
                    Some(&End::At { ms, method }) => {
                        if let Some(started) = p.started_ms {
                            world
                                .runs
                                .insert(key.clone(), ms.saturating_sub(started).max(0));
                        }
                        world.push_end(&key, ms.max(now), method)
                    }
                    // A run time without a start: from the pod's start, when known.
                    Some(&End::After { ms, method }) if p.started_ms.is_some() => {
                        let at = p.started_ms.unwrap_or(now).saturating_add(ms);
                        world.push_end(&key, at.max(now), method)
                    }
                    _ => {
                        world.unknown.insert(key.clone());
                    }
                }
            }
            let at = PodAt {
                key: key.clone(),
                slash: p.namespace.len(),
                group,
                bound: p.node.is_some(),
            };
            world.builder.set_pod(p);
            world.pods.insert(key, at);
        }
        Ok(world)
    }

    pub(super) fn push_end(&mut self, pod: &Key, at: i64, method: Method) {
        let epoch = self.epochs.get(pod).copied().unwrap_or(0);
        self.heap.push(Reverse((at, pod.clone(), epoch, method)));
    }

    /// Whether a group's gang is complete: at least `minMember` of its pods hold a node.
    pub(super) fn started(&self, group: &str) -> bool {
        let Some(g) = self.groups.get(group) else {
            return false;
        };
        let bound = self.bound.get(group).copied().unwrap_or(0);
        gang_complete(g.phase, g.min_member, bound as i64)
    }

    /// Takes the pod's spec out of the builder, changes it with `change` and hands it back:
    /// the builder sees one changed pod. Marks it bound or not.
    pub(super) fn change_pod(&mut self, key: &str, bound: bool, change: impl FnOnce(&mut PodSpec)) {
        let Some(at) = self.pods.get_mut(key) else {
            return;
        };
        if at.bound != bound {
            at.bound = bound;
            if let Some(group) = &at.group {
                let count = self.bound.entry(group.clone()).or_default();
                match bound {
                    true => *count += 1,
                    false => *count = count.saturating_sub(1),
                }
            }
        }
        if let Some(mut spec) = self.builder.remove_pod(at.namespace(), at.name()) {
            // A spec shared with the caller is copied here, once, when the run first changes it.
            change(Arc::make_mut(&mut spec));
            self.builder.set_pod(spec);
        }
    }

    /// Sets a group's phase, here and in the builder.
    pub(super) fn set_phase(&mut self, group: &str, phase: JobPhase) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.phase = phase;
        let spec = self.builder.group(&g.namespace, &g.name);
        if let Some(mut spec) = spec.filter(|s| s.phase != phase).cloned() {
            spec.phase = phase;
            self.builder.set_group(spec);
        }
    }

    /// Carries a plan out as the daemon would: evictions (the whole gang back to waiting),
    /// nominations onto freed capacity, bindings (each starting its pod's run time), phases.
    /// Says whether anything changed.
    pub(super) fn apply(&mut self, plan: &Plan, t: i64, ends: &HashMap<String, End>) -> bool {
        let mut changed = false;
        let mut touched = Vec::new();
        for e in &plan.evictions {
            let Some((key, pod)) = self.pods.get_key_value(e.pod.as_str()) else {
                continue;
            };
            let group = pod.group.clone();
            let keys = match &group {
                Some(g) => self.members.get(g).cloned().unwrap_or_default(),
                None => vec![key.clone()],
            };
            for key in keys {
                changed |= self.unbind(&key);
            }
            if let Some(g) = group {
                self.set_phase(&g, JobPhase::Pending);
            }
        }
        for n in plan
            .nominations
            .iter()
            .filter(|n| n.reason == NominationReason::Evictions)
        {
            let Some(p) = self.pods.get(n.pod.as_str()).filter(|p| !p.bound) else {
                continue;
            };
            let spec = self.builder.pod(p.namespace(), p.name());
            if spec.is_some_and(|s| s.nominated_node.as_deref() != Some(n.node.as_str())) {
                self.change_pod(n.pod.as_str(), false, |p| {
                    p.nominated_node = Some(n.node.clone())
                });
                changed = true;
            }
        }
        for b in &plan.bindings {
            let Some(p) = self.pods.get(b.pod.as_str()).filter(|p| !p.bound) else {
                continue;
            };
            let key = p.key.clone();
            if let Some(g) = &p.group {
                touched.push(g.clone());
            }
            let shares = self
                .sharing
                .get(&b.node)
                .is_some_and(|s| *s != Sharing::Exclusive);
            let named = !b.devices.is_empty() && b.devices.iter().all(|d| d.uuid.is_some());
            self.change_pod(&key, true, |p| {
                p.node = Some(b.node.clone());
                p.phase = PodPhase::Running;
                p.gpu_ids = b.gpus.clone();
                p.started_ms = Some(t);
                p.nominated_node = None;
                if shares && named {
                    p.held_devices = (b.devices.iter())
                        .map(|d| HeldDevice {
                            uuid: d.uuid.clone().unwrap_or_default(),
                            memory_mib: d.memory_mib.unwrap_or(0),
                            cores: d.cores.unwrap_or(0),
                        })
                        .collect();
                }
            });
            match ends.get(&*key) {
                Some(&End::After { ms, method }) => {
                    self.push_end(&key, t.saturating_add(ms), method)
                }
                // Started again after an eviction: its whole run time again, when known.
                Some(&End::At { ms, method }) => {
                    let at = match self.runs.get(&key) {
                        Some(&run) => t.saturating_add(run),
                        None => ms.max(t),
                    };
                    self.push_end(&key, at, method)
                }
                None => {
                    self.unknown.insert(key);
                }
            }
            changed = true;
        }
        for s in &plan.pod_groups {
            if (self.groups.get(&*s.name)).is_some_and(|g| g.phase != s.phase) {
                self.set_phase(&s.name, s.phase);
                changed = true;
            }
        }
        // A gang whose minimum is bound is running (the daemon's status writer says so).
        for name in touched {
            if self.started(&name) {
                self.set_phase(&name, JobPhase::Running);
            }
        }
        changed
    }

    /// Takes a pod off its node (evicted): it waits again, and its pending end is void.
    pub(super) fn unbind(&mut self, key: &Key) -> bool {
        if !self.pods.get(key).is_some_and(|p| p.bound) {
            return false;
        }
        self.change_pod(key, false, |p| {
            p.node = None;
            p.phase = PodPhase::Pending;
            p.gpu_ids.clear();
            p.held_devices.clear();
            p.nominated_node = None;
            p.started_ms = None;
        });
        *self.epochs.entry(key.clone()).or_default() += 1;
        self.unknown.remove(key);
        true
    }

    /// The next known end still standing (stale ones dropped on the way).
    pub(super) fn next_end(&mut self) -> Option<i64> {
        while let Some(Reverse((at, pod, epoch, _))) = self.heap.peek() {
            if self.current(pod, *epoch) {
                return Some(*at);
            }
            self.heap.pop();
        }
        None
    }

    pub(super) fn current(&self, pod: &str, epoch: u32) -> bool {
        self.epochs.get(pod).copied().unwrap_or(0) == epoch
            && self.pods.get(pod).is_some_and(|p| p.bound)
    }

    /// Ends every pod whose end is at or before `t`: it leaves the cluster, and its group with
    /// its last pod (as a finished job's do).
    pub(super) fn end_until(&mut self, t: i64) {
        while let Some(Reverse((at, pod, epoch, method))) = self.heap.peek().cloned() {
            if at > t {
                break;
            }
            self.heap.pop();
            if !self.current(&pod, epoch) {
                continue;
            }
            let gone = self.pods.remove(&pod).expect("current pods exist");
            self.builder.remove_pod(gone.namespace(), gone.name());
            self.applied = self.applied.max(method);
            self.ends_applied += 1;
            let Some(group) = gone.group else {
                continue;
            };
            if let Some(count) = self.bound.get_mut(&group) {
                *count = count.saturating_sub(1);
            }
            let members = self.members.get_mut(&group);
            let left = members.map(|m| {
                m.retain(|k| *k != pod);
                m.len()
            });
            if left == Some(0) {
                self.members.remove(&group);
                self.bound.remove(&group);
                if let Some(g) = self.groups.remove(&group) {
                    self.builder.remove_group(&g.namespace, &g.name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> PodSpec {
        PodSpec {
            namespace: "ml".into(),
            name: name.into(),
            ours: true,
            group: Some("g".into()),
            node: node.map(Into::into),
            phase: PodPhase::Running,
            ..Default::default()
        }
    }

    /// The builder holds the only copy of each spec: a binding, an eviction and an end change
    /// the builder's pod, and the group's bound count follows them.
    #[test]
    fn the_builder_holds_the_specs_and_the_world_counts_bound_members() {
        let node = crate::NodeSpec {
            name: "n".into(),
            allocatable: [("cpu".to_string(), 8)].into(),
            ..Default::default()
        };
        let g = GroupSpec::new("ml", "g", 2);
        let pods = vec![pod("a", Some("n")).into(), pod("b", None).into()];
        let mut world =
            World::new("", vec![node], pods, vec![g], &HashMap::new(), 0).expect("valid");
        assert!(!world.started("ml/g"), "one of two bound");
        let plan = Plan {
            bindings: vec![crate::Binding {
                pod: "ml/b".into(),
                node: "n".into(),
                gpus: Vec::new(),
                devices: Vec::new(),
            }],
            ..Default::default()
        };
        assert!(world.apply(&plan, 5, &HashMap::new()));
        let b = world.builder.pod("ml", "b").expect("held by the builder");
        assert_eq!((b.node.as_deref(), b.started_ms), (Some("n"), Some(5)));
        assert!(world.started("ml/g"), "both bound");
        let phase = world.builder.group("ml", "g").map(|g| g.phase);
        assert_eq!(phase, Some(JobPhase::Running));
        assert!(world.unbind(&Key::from("ml/a")));
        assert_eq!(
            world.builder.pod("ml", "a").and_then(|a| a.node.clone()),
            None
        );
        assert!(!world.started("ml/g"));
    }
}

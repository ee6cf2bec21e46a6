//! A task's devices on a node: whether the node has them, which ones it takes, and their
//! accounting. Whole devices on unshared nodes are bits of the free-device mask; on a node that
//! shares its devices each device also has a [`DeviceUse`], and the mask holds the devices no
//! pod can join any more, so the free-device counts (index buckets, domain counts, islands)
//! stay necessary conditions for every request and exact for whole devices.

use super::Session;
use crate::devices::{
    ContainerAsk, DeviceFilters, DevicePolicy, DeviceUse, ShareAsk, ShareMemory, Sharing, Take,
};
use crate::model::{NodeId, TaskId};
use crate::plan::BoundDevice;
use crate::refusal::{DeviceShort, Refusal};
use crate::snapshot::ask_on;

/// Free memory levels a shared node is indexed by: tenths of a device.
const LEVELS: u32 = 10;
/// Packs a level above a device count (at most 64) in a bucket coordinate.
const LEVEL_UNIT: u32 = 128;

/// What a task asks of a node's devices, read once per search rather than once per node.
#[derive(Clone, Copy)]
pub(crate) struct DeviceNeed<'s> {
    pub(crate) want: u32,
    /// Its [`Session::bucket_need`].
    bucket: u32,
    share: Option<ShareAsk>,
    filters: Option<&'s DeviceFilters>,
    /// What its DRA claims ask.
    claims: Option<&'s crate::dra::ClaimNeed>,
    /// Its containers' asks, when they ask separately (see [`crate::Task::containers`]).
    containers: Option<&'s [ContainerAsk]>,
    /// The pod's `hami.io/gpu-scheduler-policy`, for the containers' cards.
    policy: DevicePolicy,
}

impl DeviceNeed<'_> {
    /// The least bucket coordinate of a node that can take it.
    pub(crate) fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Whether its containers ask for devices apart, on a node that shares them (see
    /// [`Session::container_takes`]).
    pub(crate) fn per_container(&self, sharing: Sharing) -> bool {
        self.containers.is_some() && sharing.shares()
    }

    /// Whether it depends on which node it is beyond the node's state: device filters (by
    /// UUID, for one) or DRA claims.
    pub(crate) fn per_node(&self) -> bool {
        self.filters.is_some() || self.claims.is_some()
    }
}

impl<'a> Session<'a> {
    /// What the task asks of a node's devices.
    pub(crate) fn device_need(&self, task: TaskId) -> DeviceNeed<'a> {
        let snap: &'a crate::Snapshot = self.snapshot;
        let t = snap.task(task);
        DeviceNeed {
            want: self.devices_wanted(task),
            bucket: self.bucket_need(task),
            share: t.share,
            // Filters that only order devices (HAMi's policies) refuse none.
            filters: (snap.rules[t.rules.0 as usize].devices.as_deref()).filter(|f| f.restricts()),
            claims: self.claim_need(task),
            containers: t.containers.as_deref(),
            policy: (snap.rules[t.rules.0 as usize].devices.as_deref())
                .map_or(DevicePolicy::default(), |f| f.policy),
        }
    }

    /// The node's bucket coordinate in the free index: its free devices, under the level of its
    /// roomiest open device, in tenths of a device (memory and compute, whichever is less; a
    /// free whole device or replica is a whole tenth). A task's [`Self::bucket_need`] is at most
    /// this on any node that can take it, so buckets below are skipped: without the level, a
    /// cluster packed with shares is walked node by node for each pod that needs more room.
    pub(crate) fn bucket_devices(&self, node: NodeId) -> u32 {
        let free = self.free_gpus(node);
        let n = self.snapshot.node(node);
        let level = match n.sharing {
            Sharing::Exclusive | Sharing::TimeSliced | Sharing::Mps => LEVELS * (free > 0) as u32,
            Sharing::Hami | Sharing::VolcanoVgpu => {
                let closed = self.capacity.closed(node);
                (n.gpus.iter().zip(self.usage(node)).enumerate())
                    .filter(|(p, _)| closed & (1 << p) == 0)
                    .map(|(_, (g, u))| {
                        let total = g.memory_mib.unwrap_or(0);
                        let left = total.saturating_sub(u.memory_mib as u64);
                        let memory = (left * LEVELS as u64).checked_div(total).unwrap_or(0);
                        let cores = g.cores.saturating_sub(u.cores).min(100) * LEVELS / 100;
                        (memory as u32).min(cores)
                    })
                    .max()
                    .unwrap_or(0)
            }
        };
        level * LEVEL_UNIT + free
    }

    /// The least bucket coordinate of a node that can take the task: its device count, under
    /// the level its share needs (its memory on the largest shared device, a MiB share being
    /// a larger part of a smaller one; its compute), or a whole tenth for whole devices or
    /// replicas.
    pub(crate) fn bucket_need(&self, task: TaskId) -> u32 {
        let want = self.devices_wanted(task);
        if want == 0 {
            return 0;
        }
        let t = self.snapshot.task(task);
        if t.containers.is_some() {
            // Containers ask apart: the pod-level share overstates what one device needs.
            return want;
        }
        let level = match t.share {
            None => LEVELS,
            Some(ask) => {
                let memory = match ask.memory {
                    ShareMemory::Percent(p) => p.min(100) * LEVELS / 100,
                    ShareMemory::Mib(m) => {
                        let largest = self.snapshot.largest_shared_device_mib;
                        let level = (m as u64 * LEVELS as u64).checked_div(largest);
                        level.unwrap_or(0).min(LEVELS as u64) as u32
                    }
                };
                memory.min(ask.cores.min(100) * LEVELS / 100)
            }
        };
        (level * LEVEL_UNIT).saturating_add(want)
    }

    /// Devices the task asks for (see [`crate::Snapshot::devices_asked`]).
    pub(super) fn devices_wanted(&self, task: TaskId) -> u32 {
        self.snapshot
            .devices_asked(&self.snapshot.task(task).request)
    }

    fn filters(&self, task: TaskId) -> Option<&DeviceFilters> {
        let t = self.snapshot.task(task);
        self.snapshot.rules[t.rules.0 as usize].devices.as_deref()
    }

    /// What is in use on each device of a node that shares them (empty for one that does not).
    pub(crate) fn usage(&self, node: NodeId) -> &[DeviceUse] {
        let n = self.snapshot.node(node);
        match n.sharing.shares() {
            true => self.capacity.shared_use(n),
            false => &[],
        }
    }

    /// Positions of the node's devices the task could take one of now (inside `island` when
    /// given): free whole devices on an unshared node; on a shared one, devices with room for
    /// its share. Both only among the devices its filters accept.
    fn open_devices(&self, need: &DeviceNeed, node: NodeId, island: Option<u32>) -> u64 {
        self.open_devices_with(need, node, island, self.usage(node))
    }

    /// [`Self::open_devices`] with the node's shared devices in use as `usage` says (what the
    /// victim search frees).
    pub(crate) fn open_devices_with(
        &self,
        need: &DeviceNeed,
        node: NodeId,
        island: Option<u32>,
        usage: &[DeviceUse],
    ) -> u64 {
        let n = self.snapshot.node(node);
        let used = self.capacity.closed(node);
        let filters = need.filters;
        let ask = ask_on(n.sharing, need.share);
        let mut open = 0u64;
        for (p, g) in n.gpus.iter().enumerate() {
            let fits = match n.sharing.shares() {
                false => used & (1 << p) == 0,
                true => usage[p].fits(g, ask.map(|a| (a, a.memory_on(g)))),
            };
            if fits
                && island.is_none_or(|i| g.nvlink_domain == i)
                && filters.is_none_or(|f| f.accepts(g))
            {
                open |= 1 << p;
            }
        }
        open
    }

    /// Whether the node has the devices the task asks for now (inside NVLink island `island`,
    /// when given). Unshared nodes without device filters need only the free-device count.
    pub fn has_devices(&self, task: TaskId, node: NodeId, island: Option<u32>) -> bool {
        self.has_devices_for(&self.device_need(task), node, island)
    }

    /// [`Self::has_devices`] for a need read before.
    pub(crate) fn has_devices_for(
        &self,
        need: &DeviceNeed,
        node: NodeId,
        island: Option<u32>,
    ) -> bool {
        self.has_gpus_for(need, node, island)
            && need.claims.is_none_or(|c| self.claims_fit(c, node))
    }

    /// The GPU part of [`Self::has_devices_for`].
    fn has_gpus_for(&self, need: &DeviceNeed, node: NodeId, island: Option<u32>) -> bool {
        let want = need.want;
        if want == 0 {
            return true;
        }
        if self.free_gpus(node) < want || island.is_some_and(|i| self.island_free(node, i) < want) {
            return false;
        }
        let n = self.snapshot.node(node);
        if !n.sharing.shares() && need.filters.is_none() {
            return true;
        }
        if n.sharing == Sharing::Mps && want > 1 {
            return false;
        }
        // The node's indexed level first: most shared nodes without room stop here.
        if n.sharing.shares() && self.index.key[node.index()].0 < need.bucket {
            return false;
        }
        if need.per_container(n.sharing) {
            return (self.container_takes(need, node, island, self.usage(node))).is_some();
        }
        self.open_devices(need, node, island).count_ones() >= want
    }

    /// Why the node lacks the devices the task asks for, if it does: the reason most of its
    /// cards give, named and checked in the order of HAMi's device fit (health, type, UUID,
    /// slots, memory, compute, exclusive use, compute exhausted), or too few free whole
    /// devices. The share totals Basalt gives HAMi nodes as allocatable (`nvidia.com/gpumem`
    /// and the others, which no node advertises) are never the reason: a node short of them
    /// is a HAMi node whose cards lack room, or a node without HAMi's devices.
    pub(super) fn devices_short(&self, task: TaskId, node: NodeId) -> Result<(), Refusal> {
        let shares_short = self.share_totals_short(task, node);
        if !shares_short && self.has_gpus_for(&self.device_need(task), node, None) {
            return Ok(());
        }
        let n = self.snapshot.node(node);
        let short = |why| Err(Refusal::Devices(why));
        if !n.sharing.shares() {
            return short(match shares_short {
                true => DeviceShort::NodeInsufficientDevice,
                false => DeviceShort::TooFewFree,
            });
        }
        if n.sharing == Sharing::Mps && self.devices_wanted(task) > 1 {
            return short(DeviceShort::MpsOneReplica);
        }
        // A pod whose containers ask apart: the reasons of the first container without its
        // cards, beside what the containers before it took.
        let need = self.device_need(task);
        let pod_share = self.snapshot.task(task).share;
        let (ask, usage) = match need.per_container(n.sharing) {
            true => match self.allocate_containers(&need, node, None, self.usage(node)) {
                Err((c, usage)) => (ask_on(n.sharing, c.share), usage),
                Ok(_) => (ask_on(n.sharing, pod_share), self.usage(node).to_vec()),
            },
            false => (ask_on(n.sharing, pod_share), Vec::new()),
        };
        let usage = if usage.is_empty() {
            self.usage(node)
        } else {
            &usage[..]
        };
        let filters = self.filters(task);
        // Per reason, in HAMi's order: how many cards give it.
        const WHY: [DeviceShort; 8] = [
            DeviceShort::CardNotHealth,
            DeviceShort::CardTypeMismatch,
            DeviceShort::CardUuidMismatch,
            DeviceShort::CardTimeSlicingExhausted,
            DeviceShort::CardInsufficientMemory,
            DeviceShort::CardInsufficientCore,
            DeviceShort::ExclusiveDeviceAllocateConflict,
            DeviceShort::CardComputeUnitsExhausted,
        ];
        let mut counts = [0usize; WHY.len()];
        for (g, u) in n.gpus.iter().zip(usage) {
            let (memory, cores) = ask.map_or((0, 0), |a| (a.memory_on(g), a.cores));
            let why = if !g.healthy {
                0
            } else if filters.is_some_and(|f| !f.accepts_type(g)) {
                1
            } else if filters.is_some_and(|f| !f.accepts(g)) {
                2
            } else if u.slots >= g.slots {
                3
            } else if u.memory_mib as u64 + memory as u64 > g.memory_mib.unwrap_or(0) {
                4
            } else if u.cores.saturating_add(cores) > g.cores {
                5
            } else if cores == 100 && u.slots > 0 {
                6
            } else if u.cores >= g.cores && g.cores > 0 {
                7
            } else {
                continue;
            };
            counts[why] += 1;
        }
        let most = (0..WHY.len()).max_by_key(|&i| (counts[i], std::cmp::Reverse(i)));
        short(match most.filter(|&i| counts[i] > 0) {
            Some(i) => WHY[i],
            None => DeviceShort::AllocatedCardsInsufficientRequest,
        })
    }

    /// Whether the node lacks room, by the capacity check, for the task's HAMi share totals
    /// (see [`crate::devices::ShareNames::totals`]).
    fn share_totals_short(&self, task: TaskId, node: NodeId) -> bool {
        let totals = self.snapshot.share_names.totals();
        let request = &self.snapshot.task(task).request;
        let alloc = &self.snapshot.node(node).allocatable;
        (request.short_on(self.capacity.used(node), alloc)).any(|id| totals.contains(&Some(id)))
    }

    /// The devices a task takes on a node: among those it could take (inside `island` when
    /// given), the ones the framework's [`crate::DevicePick`] chooses.
    pub(super) fn pick_devices(&mut self, task: TaskId, node: NodeId, island: Option<u32>) -> u64 {
        let count = self.devices_wanted(task);
        if count == 0 {
            return 0;
        }
        let need = self.device_need(task);
        if need.per_container(self.snapshot.node(node).sharing) {
            let takes = self.container_takes(&need, node, island, self.usage(node));
            debug_assert!(takes.is_some(), "a task is placed without its devices");
            // (Never without: the pod-level pick below is the fallback.)
            if let Some(takes) = takes {
                let picked = takes.iter().fold(0u64, |m, t| m | 1 << t.position);
                self.capacity.keep_takes(task, takes);
                return picked;
            }
        }
        let open = self.open_devices(&need, node, island);
        debug_assert!(
            open.count_ones() >= count,
            "a task is placed without its devices"
        );
        let mut chooser = self.chooser.take().expect("device choices do not nest");
        let picked = chooser.pick(&self.view(), task, node, open, count);
        self.chooser = Some(chooser);
        debug_assert!(
            picked & !open == 0 && picked.count_ones() == count,
            "the device pick took devices the task cannot have"
        );
        picked
    }

    /// The cards each container of a multi-container task takes on a node that shares its
    /// devices, as HAMi allocates them: container after container, each taking its count of
    /// distinct cards with room for its share beside what is in use and what the containers
    /// before it took (two containers may share a card), among the cards its filters accept
    /// (inside `island` when given), the least used first (`spread`, HAMi's default) or the
    /// most used (`binpack`), equally used ones in index order. `None` when some container
    /// finds too few. Only multi-container tasks come here: a pod of one container allocates
    /// nothing. The node's shared devices are in use as `usage` says (the session's, or what
    /// the victim search frees).
    pub(crate) fn container_takes(
        &self,
        need: &DeviceNeed,
        node: NodeId,
        island: Option<u32>,
        usage: &[DeviceUse],
    ) -> Option<Vec<Take>> {
        self.allocate_containers(need, node, island, usage).ok()
    }

    /// [`Self::container_takes`], or the first container without its cards and the usage the
    /// containers before it left (for the refusal's reasons).
    fn allocate_containers(
        &self,
        need: &DeviceNeed,
        node: NodeId,
        island: Option<u32>,
        usage: &[DeviceUse],
    ) -> Result<Vec<Take>, (ContainerAsk, Vec<DeviceUse>)> {
        let n = self.snapshot.node(node);
        let mut usage = usage.to_vec();
        let mut takes = Vec::new();
        let mut open = Vec::with_capacity(n.gpus.len());
        for c in need.containers.unwrap_or_default() {
            let ask = ask_on(n.sharing, c.share);
            open.clear();
            open.extend((n.gpus.iter().enumerate()).filter_map(|(p, g)| {
                let fits = usage[p].fits(g, ask.map(|a| (a, a.memory_on(g))))
                    && island.is_none_or(|i| g.nvlink_domain == i)
                    && need.filters.is_none_or(|f| f.accepts(g));
                fits.then_some(p)
            }));
            if open.len() < c.count as usize {
                return Err((*c, usage));
            }
            open.sort_by_key(|&p| match need.policy {
                DevicePolicy::Spread => usage[p].slots as i64,
                DevicePolicy::Binpack => -(usage[p].slots as i64),
            });
            for &p in &open[..c.count as usize] {
                let g = &n.gpus[p];
                let (memory_mib, cores) = ask.map_or((0, 0), |a| (a.memory_on(g), a.cores));
                usage[p].charge(memory_mib, cores, true);
                let position = p as u8;
                takes.push(Take {
                    position,
                    memory_mib,
                    cores,
                });
            }
        }
        Ok(takes)
    }

    /// What is in use on each device of a node that shares them (empty for one that does
    /// not), for the policies choosing among them.
    pub fn device_use(&self, node: NodeId) -> &[DeviceUse] {
        self.usage(node)
    }

    /// The device filters (and HAMi device policy) the task's placement rules state.
    pub fn device_filters(&self, task: TaskId) -> Option<&DeviceFilters> {
        self.filters(task)
    }

    /// Positions of the node's devices the task could take one of now (see
    /// [`Self::open_devices`]).
    pub fn open_devices_for(&self, task: TaskId, node: NodeId) -> u64 {
        self.open_devices(&self.device_need(task), node, None)
    }

    /// The devices of a binding, with what the task takes of each: its GPUs, then its MIG
    /// slices (each with its parent GPU's index and UUID).
    pub(super) fn bound_devices(&self, task: TaskId, node: NodeId, gpus: u64) -> Vec<BoundDevice> {
        let mut devices = self.bound_gpus(task, node, gpus);
        let n = self.snapshot.node(node);
        let slices = self.capacity.slices_of(self.snapshot, task);
        for (_, s) in (n.slices.iter().enumerate()).filter(|(p, _)| slices & (1 << p) != 0) {
            let parent = n.gpus.iter().find(|g| g.index == s.mig.gpu);
            devices.push(BoundDevice {
                index: s.mig.gpu,
                uuid: parent.and_then(|g| g.uuid.clone()),
                memory_mib: s.mig.memory_mib.map(|m| m.min(u32::MAX as u64) as u32),
                cores: None,
                mig: Some(crate::plan::BoundMig {
                    profile: s.mig.profile.clone(),
                    gpu_instance_id: s.mig.gpu_instance_id,
                }),
            });
        }
        devices
    }

    fn bound_gpus(&self, task: TaskId, node: NodeId, gpus: u64) -> Vec<BoundDevice> {
        let n = self.snapshot.node(node);
        // Per container, in container order: the handoff lists each container's cards.
        if let Some(takes) = self.capacity.takes(task) {
            return (takes.iter())
                .map(|t| {
                    let g = &n.gpus[t.position as usize];
                    BoundDevice {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        memory_mib: Some(t.memory_mib),
                        cores: Some(t.cores),
                        mig: None,
                    }
                })
                .collect();
        }
        let ask: Option<ShareAsk> = ask_on(n.sharing, self.snapshot.task(task).share);
        (n.gpus.iter().enumerate())
            .filter(|(p, _)| gpus & (1 << p) != 0)
            .map(|(_, g)| {
                let (memory_mib, cores) = match (n.sharing.shares(), ask) {
                    (true, Some(a)) => (Some(a.memory_on(g)), Some(a.cores)),
                    // An MPS client gets its share of the memory.
                    (true, None) if n.sharing == Sharing::Mps => {
                        let share = g.memory_mib.map(|m| m / g.slots.max(1) as u64);
                        (share.map(|m| m.min(u32::MAX as u64) as u32), None)
                    }
                    (true, None) => (None, None),
                    (false, _) => (
                        g.memory_mib.map(|m| m.min(u32::MAX as u64) as u32),
                        Some(g.cores),
                    ),
                };
                BoundDevice {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    memory_mib,
                    cores,
                    mig: None,
                }
            })
            .collect()
    }
}

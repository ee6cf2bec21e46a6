//! The discrete-event replay. Simulated time only (milliseconds); events sit in a binary heap
//! ordered by (time, kind, sequence number), a total order, so a run is a pure function of its
//! inputs.
//!
//! Each scheduling cycle takes a snapshot of the simulated cluster (from a [`SnapshotBuilder`]
//! told of the jobs that changed, or with `--full-rebuild` from [`Snapshot::build`] of the whole
//! [`ClusterSpec`]), schedules it with `basalt_engine::schedule` and the framework
//! `basalt_plugins::framework` builds from the config — the daemon's code — and applies the
//! plan's evictions and bindings. The framework is kept from cycle to cycle with a
//! `basalt_engine::Warm` per builder, so each session starts from the last one's node index.
//! Two things keep cycles cheap without changing any decision:
//!
//! - a cycle runs only when something changed since the last one (an arrival, a completion or
//!   eviction while jobs wait, or a previous cycle that bound, evicted or admitted something);
//!   between such events the state is a fixed point of the scheduler;
//! - the pods of fully placed jobs are folded into one pinned pod per (queue, node)
//!   ([`PodSpec::pinned_queue`]) holding their summed requests, pod slots and GPU ids: node
//!   usage, GPU masks and queue allocations are the same, so `enqueue` and `allocate` decide
//!   the same, while the snapshot holds only the jobs that wait (whole or for members), pod by
//!   pod. On a node that shares its devices a pod holding a share (or a time-sliced replica)
//!   is pinned on its own, with the devices it holds (`held_devices`): a device's slots count
//!   pods, so shares cannot be summed into one pod; whole devices on a HAMi node still fold.
//!   Nothing folds while `nodeOrder.fragmentation` is on and devices are shared: it learns the
//!   workload's shapes from every pod of the snapshot, and pinned pods are no tasks.
//!   When the config can evict (`reclaim`, `preempt`), whose victims are single pods, the
//!   folded cycle stands only when it provably equals the whole one — no gang has waited long
//!   enough to reserve nodes, and every waiting pod was placed, so no job is left for reclaim
//!   or preempt to act for — and otherwise the cycle is run again on the whole cluster, pod by
//!   pod, from a second builder kept up to date beside the first.
//!
//! With `--dra` (`sim/dra.rs`) the GPUs are DRA devices and GPU pods ask through claims. The
//! replay keeps which devices each placed pod's claim holds (from the plan's
//! `claimAllocations`) and hands them to the next cycles as `DraSpec::allocated`; a
//! `SnapshotBuilder` carries no devices, so its snapshot is copied with the DRA table attached
//! (what `Snapshot::build` gives for the same specs; `--full-rebuild` builds it so). Folding
//! stays exact: a folded pod's devices are in `allocated`, so its pinned pod needs no GPU.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};

use basalt_crds::convert::device_names::{
    GPU_CORES_NAME, GPU_MEMORY_NAME, GPU_MEMORY_PERCENT_NAME,
};
use basalt_engine::devices::{HeldDevice, Sharing};
use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSelectorTerm, NodeSpec, PlacementRules, PodPhase,
    PodSpec, QueueSpec, RequiredNodeAffinity, ResourceList, SelectorOperator, SelectorRequirement,
    Snapshot, SnapshotBuilder,
};
use basalt_plugins::config::ActionName;
use basalt_plugins::Config;
use serde::Serialize;

use super::readers::{GpuShare, FOREVER};
use super::shares::{self, DeviceTable, Held};
use super::workload::*;

mod apply;
mod cycle;
mod dra;
mod forecast;
mod setup;
mod specs;
mod usage;
use cycle::CycleStats;
pub use dra::DRIVER as DRA_DRIVER;
pub use forecast::job_name;
use specs::{holder_name, parse_pod, pinned_pod};
pub use specs::{queue_specs, request};
pub use usage::UsagePoint;

const NS: &str = "sim";
/// The namespace of the pinned pods that stand for folded jobs.
const HOLDER_NS: &str = "sim-bound";

/// How queues limit what they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quota {
    /// Each queue's capability is its weight's share of the cluster's GPUs: no borrowing.
    Static,
    /// No capability: idle quota goes to whoever has demand.
    #[default]
    Borrow,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Scheduling period in simulated milliseconds.
    pub period_ms: i64,
    pub quota: Quota,
    pub gpu_share: GpuShare,
    /// Fold fully placed jobs into per-(queue, node) pinned pods (`None`: yes); without, every
    /// cycle sees every pod. Never folded while `nodeOrder.fragmentation` is on and devices are
    /// shared (`--gpu-share hami`): it learns its shapes from every pod of the snapshot.
    pub fold_bound: Option<bool>,
    /// Rebuild the whole `ClusterSpec` and call `Snapshot::build` every cycle instead of keeping
    /// the specs and the node table between cycles: the reference the fast path is tested against.
    pub full_rebuild: bool,
    /// The GPUs as DRA devices and GPU pods asking through ResourceClaims (`--dra`; see
    /// `sim/dra.rs`): whole GPUs only.
    pub dra: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            period_ms: 1000,
            quota: Quota::Borrow,
            gpu_share: GpuShare::RoundUp,
            fold_bound: None,
            full_rebuild: false,
            dra: false,
        }
    }
}

/// Whether a config has an action that can take capacity away from running pods. Exhaustive on
/// purpose: a new action must decide here whether a folded cycle needs checking.
pub fn can_evict(config: &Config) -> bool {
    config.actions.iter().any(|a| match a {
        ActionName::Enqueue | ActionName::Allocate => false,
        ActionName::Reclaim | ActionName::Preempt => true,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    // Order at equal times: capacity comes back first, then jobs arrive, then the cycle runs.
    Completion,
    Arrival,
    Cycle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    time: i64,
    kind: Kind,
    seq: u64,
    job: u32,
    epoch: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    NotArrived,
    Pending,
    Running,
    Done,
}

/// What happened to one job.
#[derive(Clone, Debug)]
pub struct JobRecord {
    pub status: Status,
    /// The last start (after an eviction the job starts again).
    pub start_ms: Option<i64>,
    pub first_start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    pub evictions: u32,
    /// GPU-milliseconds of work lost to evictions.
    pub lost_gpu_ms: i64,
    /// At the (last) start: every pod on one rack, TP groups inside one node / NVLink domain.
    pub one_rack: Option<bool>,
    pub tp_groups: u32,
    pub tp_in_node: u32,
    pub tp_in_nvlink: u32,
}

#[derive(Clone, Debug, Default)]
struct Placement {
    node: u32,
    gpu_ids: Vec<u32>,
    /// The devices it holds and the compute each gave it, for the device table.
    held: Vec<Held>,
    /// On a node that shares its devices (and names them by UUID): what the plan gave it of
    /// each, carried into later cycles as `PodSpec::held_devices` so usage is exact.
    held_devices: Vec<HeldDevice>,
}

/// A pinned pod: every folded pod of one queue on one node (`pod: None`), or one folded pod
/// (job, index) that holds a share of a device, pinned on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PinKey {
    queue: u32,
    node: u32,
    pod: Option<(u32, u32)>,
}

/// What a pinned pod holds: summed requests, GPU mask, pods it stands for, shared devices.
#[derive(Clone, Debug, Default)]
struct Pinned {
    request: ResourceList,
    mask: u64,
    count: i64,
    held_devices: Vec<HeldDevice>,
}

struct JobState {
    phase: JobPhase,
    pods: Vec<Option<Placement>>,
    /// Nodes the plan nominated pending pods to (capacity that evictions freed for them), as a
    /// pod's `status.nominatedNodeName` would carry it into the next cycle.
    nominated: Vec<Option<u32>>,
    bound: u32,
    epoch: u32,
    folded: bool,
}

/// The specs one job contributes to the snapshot, kept between cycles.
struct LiveJob {
    group: GroupSpec,
    pods: Vec<PodSpec>,
}

/// A point of the cluster's state, recorded whenever it changes.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub t_ms: i64,
    /// Whole GPUs held by placed pods.
    pub gpus_allocated: u32,
    /// GPU demand of placed pods in milli as the trace states it (fractions count as fractions).
    pub gpu_milli_used: i64,
    /// GPUs asked for by jobs that have arrived and not finished (placed or waiting).
    pub gpus_demanded: u32,
    pub pending_jobs: u32,
    pub running_jobs: u32,
    /// Idle GPUs on nodes that have at least one GPU in use.
    pub fragmented_gpus: u32,
    /// Compute free on devices some pod holds (fragmented), in percent of one device (HAMi's
    /// cores: 100 = one whole GPU).
    pub fragmented_gpu_cores: u64,
    /// Compute of devices no pod holds, in the same unit.
    pub free_gpu_cores: u64,
    /// Devices some pod holds that still have compute left.
    pub partial_gpus: u32,
    /// Per queue (in [`Outcome::queues`] order): GPUs held, GPUs demanded.
    pub queue_gpus: Vec<u32>,
    pub queue_demand: Vec<u32>,
}

/// Everything a run measured.
pub struct Outcome {
    pub complete: bool,
    pub end_ms: i64,
    pub cycles: u64,
    pub events: u64,
    pub bindings: u64,
    pub total_gpus: u32,
    /// Compute of all devices, in percent of one device (100 per GPU).
    pub total_gpu_cores: u64,
    /// The most devices at once whose pods were given more compute than the device has (a
    /// check: the engine's per-device fit keeps it 0).
    pub overcommitted_gpus_peak: u32,
    pub queues: Vec<QueueDef>,
    pub jobs: Vec<JobRecord>,
    /// Per job, in workload order: queue index, submit time, pods, GPUs.
    pub job_queue: Vec<u32>,
    pub job_submit_ms: Vec<i64>,
    pub job_pods: Vec<u32>,
    pub job_gpus: Vec<u32>,
    pub samples: Vec<Sample>,
    pub has_racks: bool,
    /// Seconds of wall time spent in the run, and in building snapshots / scheduling.
    pub wall_s: f64,
    pub snapshot_s: f64,
    pub schedule_s: f64,
    /// Tasks and jobs summed over the snapshots of every cycle (the per-cycle work's size).
    pub snapshot_tasks: u64,
    pub snapshot_jobs: u64,
    /// Folded cycles run again on the whole cluster.
    pub redone: u64,
    /// With `--dra`: claims allocated, and the most devices held at once.
    pub dra_claims: u64,
    pub dra_peak_devices: u32,
    /// Each queue's usage at every applied plan, with a usage half-life (else empty).
    pub usage: Vec<UsagePoint>,
}

/// Per-job data prepared once.
struct Prepared {
    requests: Vec<ResourceList>,
    rules: PlacementRules,
    gpus: Vec<u32>,
    /// Per pod: it asks a share of a device (HAMi's compute or memory names).
    shared: Vec<bool>,
    min_member: u32,
    queue: u32,
    total_gpus: u32,
    min_resources: ResourceList,
}

pub struct Simulator<'a> {
    config: &'a Config,
    opts: Options,
    workload: &'a Workload,
    nodes: Vec<NodeSpec>,
    node_ids: HashMap<String, u32>,
    node_gpus: Vec<u32>,
    node_used: Vec<u32>,
    node_rack: Vec<Option<u32>>,
    node_clique: Vec<Option<u32>>,
    queues: Vec<QueueSpec>,
    prepared: Vec<Prepared>,
    state: Vec<JobState>,
    records: Vec<JobRecord>,
    /// Jobs that wait (whole or for members): given pod by pod.
    active: BTreeSet<u32>,
    /// Folded pods, by pinned pod.
    pinned: BTreeMap<PinKey, Pinned>,
    /// Every device and what it holds (per-device fragmentation; devices in use on nodes that
    /// share them).
    devices: DeviceTable,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    cycle_queued: bool,
    now: i64,
    // Running totals.
    gpus_allocated: u32,
    milli_used: i64,
    demand: u32,
    pending: u32,
    running: u32,
    fragmented: u32,
    queue_gpus: Vec<u32>,
    queue_demand: Vec<u32>,
    samples: Vec<Sample>,
    cycles: u64,
    events: u64,
    bindings: u64,
    stats: CycleStats,
    framework: Option<cycle::KeptFramework>,
    // The fast path: specs kept between cycles, refreshed where something changed.
    /// Waiting jobs pod by pod and folded jobs as pinned pods (when folding).
    quick: Option<SnapshotBuilder>,
    /// Every live job pod by pod (when not folding, or when the config can evict).
    whole: Option<SnapshotBuilder>,
    /// Folded cycles run again on the whole cluster (see the module docs).
    redone: u64,
    /// While work queues up most folded cycles would be run again: after one is, the next
    /// `quick_backoff` cycles go straight to the whole cluster (doubling while they keep
    /// failing). Speed only: either way the plan is the whole cluster's.
    quick_backoff: u32,
    quick_skip: u32,
    dirty_jobs: BTreeSet<u32>,
    dirty_pinned: BTreeSet<PinKey>,
    /// With `--dra`: the devices and which claim holds each.
    dra: Option<dra::DraGpus>,
    /// Each queue's usage as the last applied plan returned it (with a usage half-life), for
    /// the next snapshot, as the daemon keeps it in Queue status.
    usage: Vec<basalt_engine::QueueUsage>,
    /// What the plans said of each queue's usage, for the report (see `sim/usage.rs`).
    usage_points: Vec<UsagePoint>,
}

impl<'a> Simulator<'a> {
    /// Number of events a full run processes at least (arrivals and completions), for progress.
    pub fn expected_events(&self) -> u64 {
        2 * self.workload.jobs.len() as u64
    }

    fn push(&mut self, time: i64, kind: Kind, job: u32, epoch: u32) {
        self.seq += 1;
        self.heap.push(Reverse(Event {
            time,
            kind,
            seq: self.seq,
            job,
            epoch,
        }));
    }

    /// Queues a cycle at the next period boundary (now, when on one).
    fn want_cycle(&mut self, after: bool) {
        if self.cycle_queued {
            return;
        }
        let p = self.opts.period_ms;
        let t = if after {
            (self.now / p + 1) * p
        } else {
            (self.now + p - 1).div_euclid(p) * p
        };
        self.cycle_queued = true;
        self.push(t, Kind::Cycle, 0, 0);
    }

    /// Takes one event off the heap's top: the clock moves to it, it acts, the state is sampled.
    fn handle(&mut self, ev: Event) -> anyhow::Result<()> {
        self.now = ev.time;
        self.events += 1;
        match ev.kind {
            Kind::Arrival => self.arrive(ev.job),
            Kind::Completion => self.complete(ev.job, ev.epoch),
            Kind::Cycle => {
                self.cycle_queued = false;
                self.cycle()?;
            }
        }
        self.sample();
        Ok(())
    }

    /// Runs to the end or until `stop` is set; `tick` is called after every event.
    pub fn run(mut self, stop: &AtomicBool, mut tick: impl FnMut(u64)) -> anyhow::Result<Outcome> {
        let start = std::time::Instant::now();
        let mut complete = true;
        while let Some(Reverse(ev)) = self.heap.pop() {
            if stop.load(Ordering::Relaxed) {
                complete = false;
                break;
            }
            self.handle(ev)?;
            tick(self.events);
        }
        let end_ms = self.now;
        Ok(Outcome {
            complete,
            end_ms,
            cycles: self.cycles,
            events: self.events,
            bindings: self.bindings,
            total_gpus: self.node_gpus.iter().sum(),
            total_gpu_cores: self.devices.total_cores,
            overcommitted_gpus_peak: self.devices.overcommitted_peak,
            queues: self.workload.queues.clone(),
            jobs: self.records,
            job_queue: self.prepared.iter().map(|p| p.queue).collect(),
            job_submit_ms: self.workload.jobs.iter().map(|j| j.submit_ms).collect(),
            job_pods: self
                .workload
                .jobs
                .iter()
                .map(|j| j.pods.len() as u32)
                .collect(),
            job_gpus: self.prepared.iter().map(|p| p.total_gpus).collect(),
            samples: self.samples,
            has_racks: self.node_rack.iter().any(Option::is_some),
            wall_s: start.elapsed().as_secs_f64(),
            snapshot_s: self.stats.snapshot_s,
            schedule_s: self.stats.schedule_s,
            snapshot_tasks: self.stats.tasks,
            snapshot_jobs: self.stats.jobs,
            redone: self.redone,
            dra_claims: self.dra.as_ref().map_or(0, |d| d.claims),
            dra_peak_devices: self.dra.as_ref().map_or(0, |d| d.peak),
            usage: self.usage_points,
        })
    }

    fn sample(&mut self) {
        let s = Sample {
            t_ms: self.now,
            gpus_allocated: self.gpus_allocated,
            gpu_milli_used: self.milli_used,
            gpus_demanded: self.demand,
            pending_jobs: self.pending,
            running_jobs: self.running,
            fragmented_gpus: self.fragmented,
            fragmented_gpu_cores: self.devices.fragmented_cores,
            free_gpu_cores: self.devices.free_cores,
            partial_gpus: self.devices.partial,
            queue_gpus: self.queue_gpus.clone(),
            queue_demand: self.queue_demand.clone(),
        };
        match self.samples.last_mut() {
            Some(last) if last.t_ms == s.t_ms => *last = s,
            Some(last) if same_state(last, &s) => {}
            _ => self.samples.push(s),
        }
    }

    fn arrive(&mut self, job: u32) {
        let p = &self.prepared[job as usize];
        self.records[job as usize].status = Status::Pending;
        self.demand += p.total_gpus;
        self.queue_demand[p.queue as usize] += p.total_gpus;
        self.pending += 1;
        self.active.insert(job);
        self.dirty_jobs.insert(job);
        self.want_cycle(false);
    }

    fn complete(&mut self, job: u32, epoch: u32) {
        if self.state[job as usize].epoch != epoch
            || self.records[job as usize].status != Status::Running
        {
            return; // evicted since; a later start scheduled its own completion
        }
        self.usage_at_completion(job);
        let p = &self.prepared[job as usize];
        let (total, queue) = (p.total_gpus, p.queue);
        self.release(job);
        self.active.remove(&job);
        self.dirty_jobs.insert(job);
        let r = &mut self.records[job as usize];
        r.status = Status::Done;
        r.end_ms = Some(self.now);
        self.running -= 1;
        self.demand -= total;
        self.queue_demand[queue as usize] -= total;
        if !self.active.is_empty() {
            self.want_cycle(false);
        }
    }

    /// Gives back every placed pod of a job.
    fn release(&mut self, job: u32) {
        let j = job as usize;
        let folded = std::mem::replace(&mut self.state[j].folded, false);
        let queue = self.prepared[j].queue;
        let pods = std::mem::take(&mut self.state[j].pods);
        for (k, pl) in pods.iter().enumerate() {
            let Some(pl) = pl else { continue };
            let g = self.prepared[j].gpus[k];
            if let Some(dra) = &mut self.dra {
                dra.free(job, k as u32);
            }
            let in_use = self.devices.charge(pl.node, &pl.held, false);
            let shares = self.devices.shares(pl.node);
            self.take_gpus(pl.node, if shares { in_use } else { -(g as i64) });
            self.queue_gpus[queue as usize] -= g;
            if folded {
                let key = self.pin_key(queue, j, k, pl.node);
                let entry = self.pinned.get_mut(&key).expect("folded pods are tracked");
                for (r, v) in &self.prepared[j].requests[k] {
                    *entry.request.get_mut(r).expect("summed before") -= v;
                }
                for &i in &pl.gpu_ids {
                    entry.mask &= !(1u64 << i);
                }
                entry.count -= 1;
                if entry.count == 0 {
                    self.pinned.remove(&key);
                }
                self.dirty_pinned.insert(key);
            }
        }
        self.milli_used -= self.placed_milli(j, &pods);
        self.state[j].pods = vec![None; pods.len()];
        self.state[j].bound = 0;
    }

    fn placed_milli(&self, j: usize, pods: &[Option<Placement>]) -> i64 {
        pods.iter()
            .zip(&self.workload.jobs[j].pods)
            .filter(|(p, _)| p.is_some())
            .map(|(_, s)| s.gpu_demand_milli())
            .sum()
    }

    fn take_gpus(&mut self, node: u32, delta: i64) {
        let n = node as usize;
        let cap = self.node_gpus[n];
        let frag = |used: u32| {
            if used > 0 && used < cap {
                cap - used
            } else {
                0
            }
        };
        self.fragmented -= frag(self.node_used[n]);
        self.node_used[n] = (self.node_used[n] as i64 + delta) as u32;
        self.fragmented += frag(self.node_used[n]);
        self.gpus_allocated = (self.gpus_allocated as i64 + delta) as u32;
    }
}

fn same_state(a: &Sample, b: &Sample) -> bool {
    a.gpus_allocated == b.gpus_allocated
        && a.gpu_milli_used == b.gpu_milli_used
        && a.gpus_demanded == b.gpus_demanded
        && a.pending_jobs == b.pending_jobs
        && a.running_jobs == b.running_jobs
        && a.fragmented_gpus == b.fragmented_gpus
        && a.fragmented_gpu_cores == b.fragmented_gpu_cores
        && a.free_gpu_cores == b.free_gpu_cores
        && a.partial_gpus == b.partial_gpus
        && a.queue_gpus == b.queue_gpus
        && a.queue_demand == b.queue_demand
}

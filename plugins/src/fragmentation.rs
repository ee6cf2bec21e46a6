//! GPU fragmentation, as "Beware of Fragmentation" (Weng et al., USENIX ATC'23) measures it,
//! and the node scores built on it: the paper's FGD and Basalt's default for clusters whose
//! devices are shared.
//!
//! **The measure.** The workload is a set of *typical pod shapes* (CPU, per-device share in
//! milli, device count, allowed device models), counted over the pods seen and taken most
//! frequent first until they cover `coverage` % of them (ties in count to the smaller shape, so
//! the cut does not depend on pod order); their counts, renormalised, are their weights. A
//! node's fragment for one shape, in milli-device: all of its idle share when the shape cannot
//! run there at all (too little free CPU, a model it does not allow, fewer than `count` devices
//! with room for the share) or needs no device; otherwise the idle share of the devices whose
//! free share is below the shape's. A node's fragmentation is the weighted sum over the shapes.
//!
//! **The policies.** `fgd` scores a node ⌊100·sigmoid((F_before − F_after)/1000)⌋ and takes,
//! for a pod sharing one device, the device with the best such score (lowest position on ties).
//! `basalt` scores minus the growth of fragmentation in steps of 20 milli-device (without the
//! sigmoid's saturation, which ties every large cut with every other), and takes the device
//! with the best such score (lowest position on ties). A pod with devices is also charged, as
//! fragmentation, for the devices it takes of a model that pods bound to models need more of
//! than the cluster has to spare ([`scarcity`], issue 38), and for the growth of the idle
//! share its node's free CPU can no longer feed at the CPU per GPU of the workload's pods
//! with devices ([`stranded`], [`stranding_cost`]; a cut is a credit, except on a scarce
//! model). Equal steps are broken first: a pod with devices goes to a model few typical pods
//! need, then where the free CPU stays nearest the workload's CPU per GPU times the idle GPU
//! ([`device_tie`]); a pod without devices, which takes CPU alone, where the fewest whole
//! GPUs stay idle ([`cpu_only_tie`], key (b)); both issue 38. Remaining ties go to the
//! framework's order. Measured on the openb lists (docs/simulations.md): the exact growth, or
//! a packing order (fuller node first) or a spreading one breaking ties, all leave more GPUs
//! unallocated than random ties; the CPU balance leaves fewer from 100 % load on, but refuses
//! some 8-GPU pods from 85 %.
//!
//! **In the engine.** Pods are tasks: CPU from their request, share from their HAMi compute
//! share (`cores` percent × 10; a whole device is 1000), count from their device request. A
//! device's free share is its compute left (0 when no pod can join it). Models are the
//! devices' `model`; a pod's allowed models are those whose first node passes its static
//! filters. Shapes are learned from the snapshot's tasks (the newest `window` by creation), or
//! given (an experiment hands the trace's). Both policies stay out of sessions on clusters
//! without shared devices (see docs/plugins.md): binpack's bucketed order decides there.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::{
    DeviceChooser, DevicePick, NodeId, NodeScorer, Score, SessionView, TaskId, CPU,
};

use crate::devicepick::KeepIslandsWhole;

mod models;
mod rules;
pub use models::{Models, NodeFree};
pub use rules::{
    balance_off, basalt_score, cpu_only_tie, device_tie, fgd_score, scarcity, scarcity_cost,
    stranded, stranding_cost, TIE_SCALE,
};

/// A whole device, in milli.
pub const FULL: u16 = 1000;

/// Allowed device models as a bit set over the session's model ids; [`ModelSet::ANY`] when
/// the pod names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelSet(pub u64);

impl ModelSet {
    pub const ANY: ModelSet = ModelSet(u64::MAX);

    /// Whether a node of this model (`None`: it names none) may run the pod.
    pub fn allows(self, model: Option<u8>) -> bool {
        self == ModelSet::ANY || model.is_some_and(|m| self.0 & (1u64 << m) != 0)
    }
}

/// One pod shape of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub cpu_milli: i64,
    /// Per-device share in milli (1000: whole devices).
    pub gpu_milli: u16,
    pub num_gpu: u32,
    pub models: ModelSet,
}

impl Shape {
    /// Whether pods of this shape ask devices, name device models, and allow `model`: the
    /// workload that must run on nodes of that model.
    pub fn bound_to(&self, model: Option<u8>) -> bool {
        self.num_gpu > 0 && self.models != ModelSet::ANY && self.models.allows(model)
    }
}

/// A node's fragment for one shape, in milli-device (the definition, written plainly;
/// [`TypicalShapes::fragmentation`] is checked against it).
pub fn shape_fragment(shape: &Shape, model: Option<u8>, cpu_free: i64, gpu_free: &[u16]) -> u64 {
    let idle: u64 = gpu_free.iter().map(|&f| f as u64).sum();
    if shape.num_gpu == 0 || !shape.models.allows(model) || cpu_free < shape.cpu_milli {
        return idle;
    }
    let room = gpu_free.iter().filter(|&&f| f >= shape.gpu_milli).count();
    if room < shape.num_gpu as usize {
        return idle;
    }
    (gpu_free.iter())
        .filter(|&&f| f < shape.gpu_milli)
        .map(|&f| f as u64)
        .sum()
}

/// The typical shapes with their weights.
#[derive(Clone, Debug, Default)]
pub struct TypicalShapes {
    /// Sorted by (count, share) so that device statistics are computed once per pair.
    shapes: Vec<Shape>,
    weights: Vec<f64>,
}

impl TypicalShapes {
    /// The most frequent shapes until `coverage_pct` % of the pods are covered.
    pub fn from_pods(shapes: impl IntoIterator<Item = Shape>, coverage_pct: u64) -> Self {
        let mut counts: BTreeMap<Shape, u64> = BTreeMap::new();
        for s in shapes {
            *counts.entry(s).or_default() += 1;
        }
        Self::from_counts(counts, coverage_pct)
    }

    /// [`Self::from_pods`] from shapes already counted.
    pub fn from_counts(counts: BTreeMap<Shape, u64>, coverage_pct: u64) -> Self {
        let total: u64 = counts.values().sum();
        let mut ranked: Vec<(Shape, u64)> = counts.into_iter().collect();
        // Stable: equal counts keep the map's shape order.
        ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
        let mut taken = Vec::new();
        let mut covered = 0u64;
        for (s, c) in ranked {
            if covered * 100 >= coverage_pct * total {
                break;
            }
            covered += c;
            taken.push((s, c));
        }
        TypicalShapes::new(taken)
    }

    /// From shapes and their (unnormalised) weights.
    pub fn new(mut shapes: Vec<(Shape, u64)>) -> Self {
        let sum: u64 = shapes.iter().map(|(_, c)| c).sum();
        shapes.sort_by_key(|(s, _)| (s.num_gpu, s.gpu_milli, s.cpu_milli, s.models));
        TypicalShapes {
            weights: (shapes.iter())
                .map(|&(_, c)| c as f64 / sum.max(1) as f64)
                .collect(),
            shapes: shapes.into_iter().map(|(s, _)| s).collect(),
        }
    }

    pub fn shapes(&self) -> impl Iterator<Item = (&Shape, f64)> {
        self.shapes.iter().zip(self.weights.iter().copied())
    }

    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// The workload's CPU per device share, in milli-CPU per milli-device: Σ weight × CPU over
    /// Σ weight × count × share. Shapes without devices count their CPU (it is taken from the
    /// same nodes); 0 when no shape asks for a device.
    pub fn cpu_per_gpu(&self) -> f64 {
        self.cpu_over_share(|_| true)
    }

    /// The CPU that the pods with devices take per device share, in milli-CPU per
    /// milli-device: [`TypicalShapes::cpu_per_gpu`] over the shapes that ask devices alone,
    /// what an idle device needs beside it to be used ([`stranded`]).
    pub fn device_cpu_per_gpu(&self) -> f64 {
        self.cpu_over_share(|s| s.num_gpu > 0)
    }

    fn cpu_over_share(&self, counted: impl Fn(&Shape) -> bool) -> f64 {
        let (mut cpu, mut gpu) = (0.0, 0.0);
        for (s, w) in self.shapes().filter(|(s, _)| counted(s)) {
            cpu += w * s.cpu_milli as f64;
            gpu += w * (s.num_gpu as f64 * s.gpu_milli as f64);
        }
        if gpu > 0.0 {
            cpu / gpu
        } else {
            0.0
        }
    }

    /// The weight, per mille, of the shapes that name device models and allow `model`: how
    /// much of the workload must have nodes like this one.
    pub fn reserved_for(&self, model: Option<u8>) -> i64 {
        let w: f64 = (self.shapes())
            .filter(|(s, _)| s.bound_to(model))
            .map(|(_, w)| w)
            .sum();
        (w * 1000.0).round() as i64
    }

    /// The share of the workload's device demand (Σ weight × count × share) from shapes that
    /// name device models and allow `model`: what must run on nodes like this one.
    pub fn bound_demand(&self, model: Option<u8>) -> f64 {
        let demand = |s: &Shape| s.num_gpu as f64 * s.gpu_milli as f64;
        let total: f64 = self.shapes().map(|(s, w)| w * demand(s)).sum();
        let bound: f64 = (self.shapes())
            .filter(|(s, _)| s.bound_to(model))
            .map(|(s, w)| w * demand(s))
            .sum();
        if total > 0.0 {
            bound / total
        } else {
            0.0
        }
    }

    /// The node's fragmentation in milli-device: Σ weight × [`shape_fragment`].
    pub fn fragmentation(&self, model: Option<u8>, cpu_free: i64, gpu_free: &[u16]) -> f64 {
        let idle: u64 = gpu_free.iter().map(|&f| f as u64).sum();
        if idle == 0 {
            return 0.0;
        }
        let mut f = 0.0;
        // Device statistics of the last (count, share) pair: devices with room, idle below.
        let mut last: Option<(u32, u16)> = None;
        let (mut room, mut below) = (0u32, 0u64);
        for (s, &w) in self.shapes.iter().zip(&self.weights) {
            let frag = if s.num_gpu == 0 || cpu_free < s.cpu_milli || !s.models.allows(model) {
                idle
            } else {
                if last != Some((s.num_gpu, s.gpu_milli)) {
                    last = Some((s.num_gpu, s.gpu_milli));
                    (room, below) = (0, 0);
                    for &g in gpu_free {
                        if g >= s.gpu_milli {
                            room += 1;
                        } else {
                            below += g as u64;
                        }
                    }
                }
                if room < s.num_gpu {
                    idle
                } else {
                    below
                }
            };
            f += w * frag as f64;
        }
        f
    }
}

/// A pod as the measure reads it: (CPU milli, per-device share in milli, device count).
pub fn task_shape(session: &SessionView, task: TaskId) -> (i64, u16, u32) {
    let snap = session.snapshot;
    let t = snap.task(task);
    let count = snap.devices_asked(&t.request);
    let share = match (count, t.share) {
        (0, _) => 0,
        (_, Some(ask)) => (ask.cores.min(100) * 10) as u16,
        (_, None) => FULL,
    };
    (t.request.get(CPU), share.max((count > 0) as u16), count)
}

/// Takes `share` of each device in `devices` (a whole device is left with nothing).
pub fn take(gpus: &mut [u16], devices: u64, share: u16) {
    for (p, g) in gpus.iter_mut().enumerate() {
        if devices & (1 << p) != 0 {
            *g = if share >= FULL {
                0
            } else {
                g.saturating_sub(share)
            };
        }
    }
}

/// The device with the least free share that still holds `share`, lowest position on ties.
pub fn tightest(gpus: &[u16], open: u64, share: u16) -> Option<usize> {
    (0..gpus.len())
        .filter(|&p| open & (1 << p) != 0 && gpus[p] >= share)
        .min_by_key(|&p| (gpus[p], p))
}

/// `count` devices of `open` for a share each, the tightest fit one after another.
pub fn tightest_each(gpus: &[u16], open: u64, share: u16, count: u32) -> u64 {
    let mut gpus = gpus.to_vec();
    let mut picked = 0u64;
    for _ in 0..count {
        let Some(p) = tightest(&gpus, open & !picked, share) else {
            break;
        };
        picked |= 1 << p;
        gpus[p] -= share;
    }
    picked
}

/// Where typical shapes come from.
#[derive(Clone, Debug)]
pub enum Workload {
    /// The snapshot's tasks, the newest `window` by their job's creation.
    Seen { window: usize, coverage_pct: u64 },
    /// Given shapes with their counts (an experiment's trace); models by name.
    Given {
        shapes: Arc<Vec<(GivenShape, u64)>>,
        coverage_pct: u64,
    },
}

/// A shape with its models by name (`None`: any).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GivenShape {
    pub cpu_milli: i64,
    pub gpu_milli: u16,
    pub num_gpu: u32,
    pub models: Option<Vec<String>>,
}

impl Workload {
    fn shapes(&self, session: &SessionView, models: &Models) -> TypicalShapes {
        let mut counts: BTreeMap<Shape, u64> = BTreeMap::new();
        let coverage = match self {
            Workload::Given {
                shapes,
                coverage_pct,
            } => {
                for (g, c) in shapes.iter() {
                    let models = match &g.models {
                        None => ModelSet::ANY,
                        Some(names) => ModelSet(
                            (names.iter().filter_map(|m| models.id(m))).fold(0, |a, i| a | 1 << i),
                        ),
                    };
                    let s = Shape {
                        cpu_milli: g.cpu_milli,
                        gpu_milli: g.gpu_milli,
                        num_gpu: g.num_gpu,
                        models,
                    };
                    *counts.entry(s).or_default() += c;
                }
                *coverage_pct
            }
            Workload::Seen {
                window,
                coverage_pct,
            } => {
                let snap = session.snapshot;
                let mut tasks: Vec<&basalt_engine::Task> = snap.tasks.iter().collect();
                if tasks.len() > *window {
                    let newest = |t: &&basalt_engine::Task| {
                        std::cmp::Reverse((snap.job(t.job).created_ms, t.id))
                    };
                    tasks.select_nth_unstable_by_key(*window, newest);
                    tasks.truncate(*window);
                }
                let mut allowed: BTreeMap<u32, ModelSet> = BTreeMap::new();
                for t in tasks {
                    let (cpu_milli, gpu_milli, num_gpu) = task_shape(session, t.id);
                    let models = *(allowed.entry(t.rules.0))
                        .or_insert_with(|| models.allowed(session, t.id));
                    let s = Shape {
                        cpu_milli,
                        gpu_milli,
                        num_gpu,
                        models,
                    };
                    *counts.entry(s).or_default() += 1;
                }
                *coverage_pct
            }
        };
        TypicalShapes::from_counts(counts, coverage)
    }
}

/// Which policy the scores follow (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Fgd,
    Basalt,
}

/// The fragmentation policies as a [`Score`] and a [`DevicePick`].
#[derive(Clone, Debug)]
pub struct Fragmentation {
    pub workload: Workload,
    pub rule: Rule,
    /// Stay out of sessions on clusters without shared devices.
    pub shared_only: bool,
}

/// A [`Fragmentation`] prepared for one session.
pub struct Measure {
    rule: Rule,
    models: Models,
    shapes: TypicalShapes,
    free: NodeFree,
    /// The free shares after a placement (kept to spare an allocation per node scored).
    after: Vec<u16>,
    /// [`TypicalShapes::cpu_per_gpu`] of `shapes`, for [`balance_off`].
    cpu_per_gpu: f64,
    /// [`TypicalShapes::device_cpu_per_gpu`] of `shapes`, for [`stranded`].
    device_cpu_per_gpu: f64,
    /// [`TypicalShapes::reserved_for`] each model id, then for nodes of none.
    reserved: Vec<i64>,
    /// [`scarcity`] of each model id, then of nodes of none.
    scarcity: Vec<f64>,
}

impl Fragmentation {
    fn measure(&self, session: &SessionView) -> Measure {
        let models = Models::of(session);
        let shapes = self.workload.shapes(session, &models);
        let reserved = models.all().map(|m| shapes.reserved_for(m)).collect();
        let scarcity = (models.all())
            .map(|m| scarcity(shapes.bound_demand(m), models.capacity_share(m)))
            .collect();
        Measure {
            rule: self.rule,
            reserved,
            scarcity,
            cpu_per_gpu: shapes.cpu_per_gpu(),
            device_cpu_per_gpu: shapes.device_cpu_per_gpu(),
            shapes,
            models,
            free: NodeFree::default(),
            after: Vec::new(),
        }
    }
}

impl Score for Fragmentation {
    fn name(&self) -> &str {
        match self.rule {
            Rule::Fgd => "fgd",
            Rule::Basalt => "fragmentation",
        }
    }

    fn prepare<'s>(&'s self, session: &SessionView) -> Option<Box<dyn NodeScorer + 's>> {
        if self.shared_only && session.snapshot.device_use.is_empty() {
            return None;
        }
        Some(Box::new(self.measure(session)))
    }
}

impl DevicePick for Fragmentation {
    fn name(&self) -> &str {
        Score::name(self)
    }

    fn prepare<'s>(&'s self, session: &SessionView) -> Box<dyn DeviceChooser + 's> {
        if self.shared_only && session.snapshot.device_use.is_empty() {
            return Box::new(KeepIslandsWhole);
        }
        Box::new(self.measure(session))
    }
}

impl Measure {
    fn read(&mut self, session: &SessionView, node: NodeId) -> f64 {
        let mut free = std::mem::take(&mut self.free);
        self.models.node_free(session, node, &mut free);
        let before = self.shapes.fragmentation(free.model, free.cpu, &free.gpus);
        self.free = free;
        before
    }

    /// [`stranded`] share of a node with `cpu` free and devices `gpus` free.
    fn stranded(&self, cpu: i64, gpus: &[u16]) -> f64 {
        let idle = gpus.iter().map(|&g| g as u64).sum();
        stranded(cpu, idle, self.device_cpu_per_gpu)
    }

    fn after(&mut self, cpu: i64, devices: u64, share: u16) -> f64 {
        self.after.clone_from(&self.free.gpus);
        take(&mut self.after, devices, share);
        (self.shapes).fragmentation(self.free.model, self.free.cpu - cpu, &self.after)
    }
}

impl NodeScorer for Measure {
    fn score(&mut self, session: &SessionView, task: TaskId, node: NodeId, devices: u64) -> i64 {
        // A pod stating HAMi's node policy is placed by it (`hami_nodes`).
        if crate::hami_nodes::node_policy(session, task).is_some() {
            return 0;
        }
        let (cpu, share, count) = task_shape(session, task);
        let before = self.read(session, node);
        let after = self.after(cpu, devices, share);
        match self.rule {
            Rule::Fgd => fgd_score(before, after) as i64,
            Rule::Basalt if count == 0 => {
                let tie = cpu_only_tie(&self.after);
                basalt_score(before, after) * TIE_SCALE + tie
            }
            Rule::Basalt => {
                let model = self.models.index(self.free.model);
                let off = balance_off(self.free.cpu - cpu, &self.after, self.cpu_per_gpu);
                let tie = device_tie(self.reserved[model], off);
                let taken = count as f64 * share as f64;
                let scarce = self.scarcity[model];
                let stranding = stranding_cost(
                    self.stranded(self.free.cpu, &self.free.gpus),
                    self.stranded(self.free.cpu - cpu, &self.after),
                    scarce > 0.0,
                );
                let charged = after + scarcity_cost(scarce, taken) + stranding;
                basalt_score(before, charged) * TIE_SCALE + tie
            }
        }
    }

    /// Free CPU, the devices' model and free shares: the node's state alone.
    fn by_state(&self) -> bool {
        true
    }

    /// The pod's CPU request, device count and share, and its node policy (a placement rule).
    fn by_shape(&self) -> bool {
        true
    }
}

impl DeviceChooser for Measure {
    fn pick(
        &mut self,
        session: &SessionView,
        task: TaskId,
        node: NodeId,
        open: u64,
        count: u32,
    ) -> u64 {
        let (cpu, share, _) = task_shape(session, task);
        let before = self.read(session, node);
        if count != 1 || share >= FULL {
            // Whole devices: the lowest open ones; several shares: the tightest each.
            if share >= FULL {
                return basalt_engine::lowest_bits(open, count);
            }
            return tightest_each(&self.free.gpus, open, share, count);
        }
        let mut best: Option<(i64, usize)> = None;
        for p in (0..self.free.gpus.len()).filter(|&p| open & (1 << p) != 0) {
            let f = self.free.gpus[p];
            // Devices with equal free share give equal results: the first one stands for all.
            if (0..p).any(|q| open & (1 << q) != 0 && self.free.gpus[q] == f) {
                continue;
            }
            let after = self.after(cpu, 1 << p, share);
            let key = match self.rule {
                Rule::Fgd => fgd_score(before, after) as i64,
                Rule::Basalt => basalt_score(before, after),
            };
            if best.is_none_or(|(b, _)| key > b) {
                best = Some((key, p));
            }
        }
        best.map_or(0, |(_, p)| 1 << p)
    }

    fn by_state(&self) -> bool {
        true
    }

    fn by_shape(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;

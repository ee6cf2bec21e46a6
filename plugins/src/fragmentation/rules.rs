//! The rules' node scores: the paper's sigmoid of the cut in fragmentation, Basalt's steps of
//! its growth, its charges for devices of a scarce model and for GPUs stranded behind spent
//! CPU, and the keys that order nodes of equal steps (issue 38).

use super::FULL;

/// The paper's node score: ⌊100 · sigmoid((F_before − F_after) / 1000)⌋.
pub fn fgd_score(f_before: f64, f_after: f64) -> i32 {
    let s = 1.0 / (1.0 + (-(f_before - f_after) / 1000.0).exp());
    ((100.0 * s).floor() as i32).clamp(0, 100)
}

/// Steps of Basalt's score, in micro-device: 20 milli-device. Measured with the ties below,
/// before the stranding charge (docs/simulations.md, issue 38): openb default list 4.30 %
/// unallocated at 100 % load, 4.45 at 40 milli (the paper's resolution where fragmentation
/// barely moves, kept before the ties existed), 4.65 at 10.
const STEP: i64 = 20_000;

/// Basalt's score: minus the growth of fragmentation in steps of `STEP` (rounded down), a
/// whole number without the sigmoid's saturation, so a large cut still beats a smaller one;
/// equal steps go to the framework's tie order.
pub fn basalt_score(before: f64, after: f64) -> i64 {
    let growth = ((after - before) * 1000.0).round() as i64;
    -growth.div_euclid(STEP)
}

/// Room kept below each step of [`basalt_score`] for [`device_tie`] and [`cpu_only_tie`]:
/// the node score is `steps × TIE_SCALE + tie`, so the tie orders nodes only within a step.
pub const TIE_SCALE: i64 = 1 << 20;

/// Among nodes of one step, where a pod without devices goes (higher first): the node left
/// with the fewest idle whole GPUs (key (b) in docs/simulations.md). Such a pod takes only
/// CPU; taken where few GPUs are idle it strands the fewest with the CPU it uses. The idle
/// shares are summed and counted in whole GPUs, rounded down (two half-idle GPUs are one).
/// Equal values go to the ranking.
pub fn cpu_only_tie(idle_after: &[u16]) -> i64 {
    let idle: i64 = idle_after.iter().map(|&g| g as i64).sum();
    // Whole idle GPUs are at most a node's device count, far below the room of a step.
    TIE_BASE - idle / FULL as i64
}

/// Among nodes of one step, where a pod with devices goes (higher first, issue 38): first the
/// node whose model the fewest typical pods need (`reserved`,
/// [`super::TypicalShapes::reserved_for`]: a pod that may run anywhere leaves the models some
/// pods must have to them), then the node left with its free CPU nearest the workload's CPU
/// per GPU times its idle share (`off`, [`balance_off`]). Equal values go to the ranking.
pub fn device_tie(reserved: i64, off: i64) -> i64 {
    // At most 1000 × 512 + 511: within `TIE_BASE`, so ties never reach a step; nodes over 511
    // cores off tie on that part.
    (1000 - reserved.clamp(0, 1000)) * 512 + 511 - off.clamp(0, 511)
}

/// How far, in whole cores, the node's free CPU is from `cpu_per_gpu` × its idle share. CPU
/// short of that strands the node's GPUs behind spent CPU; CPU beyond it is what the GPUs'
/// pods will not take; a node kept in the workload's proportion leaves room for the typical
/// pod on both (openb default list: 4.45 % of GPUs unallocated at 100 % load instead of 4.77,
/// docs/simulations.md).
pub fn balance_off(cpu_after: i64, idle_after: &[u16], cpu_per_gpu: f64) -> i64 {
    let idle: u64 = idle_after.iter().map(|&g| g as u64).sum();
    // `as` saturates, and maps NaN to 0.
    ((cpu_after as f64 - cpu_per_gpu * idle as f64).abs() / 1000.0) as i64
}

/// The tie of a node with no idle GPU; half of [`TIE_SCALE`], so ties never reach a step.
const TIE_BASE: i64 = 1 << 19;

/// Bound demand up to this share of a model's capacity leaves the model plentiful.
const SCARCE_FROM: f64 = 0.5;

/// Fragmentation charged per milli-device taken on a model, per unit of its [`scarcity`].
const SCARCITY_COST: f64 = 0.5;

/// How scarce a device model is for the pods that must have it (issue 38): the share of the
/// workload's device demand that names models and allows this one (`bound_demand`), over the
/// model's share of the cluster's devices (`capacity_share`), beyond [`SCARCE_FROM`]. The
/// fragmentation measure cannot see it: a pod that may run anywhere cuts fragmentation as
/// much on a small node of a scarce model as on any other, and takes the devices that bound
/// pods will find nowhere else (openb `gpuspec33`: 12.51 % unallocated at 100 % load without
/// it, 8.29 with it). 0 for a model without devices.
pub fn scarcity(bound_demand: f64, capacity_share: f64) -> f64 {
    if capacity_share <= 0.0 {
        return 0.0;
    }
    (bound_demand / capacity_share - SCARCE_FROM).max(0.0)
}

/// The fragmentation, in milli-device, a placement is charged for taking `taken` milli-device
/// of a model of `scarcity`: added to the node's fragmentation after the placement.
pub fn scarcity_cost(scarcity: f64, taken: f64) -> f64 {
    SCARCITY_COST * scarcity * taken
}

/// The idle device share, in milli-device, that a node's free CPU cannot feed (issue 38):
/// what its idle share exceeds `cpu_free` over the CPU the pods with devices take per device
/// share (`cpu_per_gpu`, [`super::TypicalShapes::device_cpu_per_gpu`]). FGD's measure sees a
/// node's CPU only through whether one typical pod still fits, so it lets a pod heavy on CPU
/// leave idle GPUs that the CPU left can feed one but not all of, and gives nothing for a
/// light pod that uses a GPU where CPU is short. 0 when no shape asks devices.
pub fn stranded(cpu_free: i64, idle: u64, cpu_per_gpu: f64) -> f64 {
    if cpu_per_gpu <= 0.0 {
        return 0.0;
    }
    (idle as f64 - cpu_free.max(0) as f64 / cpu_per_gpu).max(0.0)
}

/// The fragmentation, in milli-device, a placement with devices is charged for changing the
/// node's [`stranded`] share from `before` to `after`: the growth, a cut counting as a credit
/// (openb `cpu300`: 13.55 % unallocated at 100 % load with it, 14.19 with growth alone).
/// On a `scarce` model only growth counts: the pods bound to it will feed its idle GPUs, and
/// a credit there draws the pods that may run anywhere onto it (`gpuspec20`: 5.44 with the
/// credit, 4.64 without).
pub fn stranding_cost(before: f64, after: f64, scarce: bool) -> f64 {
    let growth = after - before;
    if scarce {
        growth.max(0.0)
    } else {
        growth
    }
}

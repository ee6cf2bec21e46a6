//! The measure on hand-worked examples.

use super::*;

/// A tiny deterministic generator for the property-style check below.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const T4: Option<u8> = Some(0);
const V100: Option<u8> = Some(1);

fn shape(cpu: i64, share: u16, count: u32) -> Shape {
    Shape {
        cpu_milli: cpu,
        gpu_milli: share,
        num_gpu: count,
        models: ModelSet::ANY,
    }
}

#[test]
fn fragment_of_one_shape_by_hand() {
    // A node with GPUs free 1000, 600, 300, 0 (idle share 1900) and 8 free CPUs.
    let gpus = [1000, 600, 300, 0];
    // Half-GPU pod: GPUs with < 500 free are fragments: 300 + 0 = 300.
    assert_eq!(shape_fragment(&shape(1000, 500, 1), T4, 8000, &gpus), 300);
    // Whole-GPU pod: GPUs with < 1000 free: 600 + 300 + 0 = 900.
    assert_eq!(shape_fragment(&shape(1000, 1000, 1), T4, 8000, &gpus), 900);
    // Two whole GPUs: only one GPU has room, so the pod cannot run: all idle, 1900.
    assert_eq!(shape_fragment(&shape(1000, 1000, 2), T4, 8000, &gpus), 1900);
    // CPU-only pod: all idle share, 1900.
    assert_eq!(shape_fragment(&shape(1000, 0, 0), T4, 8000, &gpus), 1900);
    // Too little CPU: 9000 > 8000 free, all idle, 1900.
    assert_eq!(shape_fragment(&shape(9000, 100, 1), T4, 8000, &gpus), 1900);
    // A 300 milli pod fits on GPU 2 exactly: nothing below 300 but the full GPU: 0.
    assert_eq!(shape_fragment(&shape(1000, 300, 1), T4, 8000, &gpus), 0);
    // Model not allowed: V100-only pod on a T4 node: all idle, 1900.
    let v100_only = named(0b10, shape(1000, 500, 1));
    assert_eq!(shape_fragment(&v100_only, T4, 8000, &gpus), 1900);
    assert_eq!(shape_fragment(&v100_only, V100, 8000, &gpus), 300);
    // A node with no model in the list: only pods without a model constraint run there.
    assert_eq!(shape_fragment(&v100_only, None, 8000, &gpus), 1900);
    assert_eq!(shape_fragment(&shape(1000, 500, 1), None, 8000, &gpus), 300);
}

#[test]
fn weighted_fragmentation_by_hand() {
    // Shapes A (half GPU) seen 3 times, B (whole GPU) twice, C (CPU only) 5 times:
    // weights 0.3, 0.2, 0.5.
    let f = TypicalShapes::new(vec![
        (shape(1000, 500, 1), 3),
        (shape(1000, 1000, 1), 2),
        (shape(1000, 0, 0), 5),
    ]);
    let gpus = [1000, 600, 300, 0];
    // 0.3·300 + 0.2·900 + 0.5·1900 = 90 + 180 + 950 = 1220.
    assert!((f.fragmentation(T4, 8000, &gpus) - 1220.0).abs() < 1e-9);
    // With only 500 free CPU nobody fits: all idle, 1900.
    assert!((f.fragmentation(T4, 500, &gpus) - 1900.0).abs() < 1e-9);
    // A fully used node has nothing to fragment.
    assert_eq!(f.fragmentation(T4, 8000, &[0, 0]), 0.0);
}

#[test]
fn typical_shapes_cover_95_percent_most_frequent_first() {
    // 100 pods: A×60, B×30, C×6, D×4. A+B = 90 % < 95 %, A+B+C = 96 % ≥ 95 %: D is dropped,
    // weights 60/96, 30/96, 6/96.
    let (a, b, c, d) = (
        shape(1000, 500, 1),
        shape(2000, 1000, 1),
        shape(1000, 0, 0),
        shape(4000, 1000, 8),
    );
    let trace = std::iter::repeat_n(a, 60)
        .chain(std::iter::repeat_n(b, 30))
        .chain(std::iter::repeat_n(c, 6))
        .chain(std::iter::repeat_n(d, 4));
    let f = TypicalShapes::from_pods(trace, 95);
    let got: Vec<(Shape, f64)> = f.shapes().map(|(s, w)| (*s, w)).collect();
    assert_eq!(got.len(), 3);
    let weight = |s: Shape| got.iter().find(|(x, _)| *x == s).map(|(_, w)| *w);
    assert!((weight(a).unwrap() - 60.0 / 96.0).abs() < 1e-12);
    assert!((weight(b).unwrap() - 30.0 / 96.0).abs() < 1e-12);
    assert!((weight(c).unwrap() - 6.0 / 96.0).abs() < 1e-12);
    assert_eq!(weight(d), None);
}

#[test]
fn fast_fragmentation_matches_the_definition() {
    // Deterministic pseudo-random nodes and shapes; the fast path must equal the plain sum.
    let mut rng = Lcg(3);
    let mut shapes = Vec::new();
    for _ in 0..40 {
        let count = rng.below(4) as u32;
        let share = if count == 0 {
            0
        } else if count > 1 {
            1000
        } else {
            [100u16, 250, 500, 1000][rng.below(4) as usize]
        };
        let models = ModelSet([ModelSet::ANY.0, 0b01, 0b10, 0b11][rng.below(4) as usize]);
        shapes.push((
            Shape {
                cpu_milli: rng.below(5) as i64 * 2000,
                gpu_milli: share,
                num_gpu: count,
                models,
            },
            1 + rng.below(9),
        ));
    }
    let f = TypicalShapes::new(shapes);
    for _ in 0..500 {
        let n = 1 + rng.below(8) as usize;
        let gpus: Vec<u16> = (0..n).map(|_| rng.below(11) as u16 * 100).collect();
        let cpu = rng.below(10) as i64 * 1000;
        let model = [None, Some(0), Some(1)][rng.below(3) as usize];
        let plain: f64 = f
            .shapes()
            .map(|(s, w)| w * shape_fragment(s, model, cpu, &gpus) as f64)
            .sum();
        assert!((f.fragmentation(model, cpu, &gpus) - plain).abs() < 1e-6);
    }
}

#[test]
fn fgd_score_by_hand() {
    // No change: sigmoid(0) = 0.5 → 50.
    assert_eq!(fgd_score(1000.0, 1000.0), 50);
    // Fragmentation drops by 1000: sigmoid(1) = 0.7311 → 73.
    assert_eq!(fgd_score(1500.0, 500.0), 73);
    // Rises by 1000: sigmoid(−1) = 0.2689 → 26.
    assert_eq!(fgd_score(500.0, 1500.0), 26);
    // Rises by 300: sigmoid(−0.3) = 0.4256 → 42.
    assert_eq!(fgd_score(0.0, 300.0), 42);
}

#[test]
fn taking_devices_and_the_tightest_fit() {
    let mut gpus = [1000, 600, 300, 0];
    // A 300 share fits on 0, 1, 2: the tightest is 2 (300 free), then 1.
    assert_eq!(tightest(&gpus, 0b1111, 300), Some(2));
    assert_eq!(tightest(&gpus, 0b0011, 300), Some(1));
    assert_eq!(tightest(&gpus, 0b1111, 700), Some(0));
    take(&mut gpus, 0b0110, 300);
    assert_eq!(gpus, [1000, 300, 0, 0]);
    // A whole device leaves nothing.
    take(&mut gpus, 0b0001, FULL);
    assert_eq!(gpus, [0, 300, 0, 0]);
}

#[test]
fn basalt_score_counts_growth_in_steps_of_20_milli() {
    // Growth 218.18 milli-device = 218,182 micro: ⌊218,182 / 20,000⌋ = 10 steps → −10.
    assert_eq!(basalt_score(54.545_454, 272.727_273), -10);
    // A cut of 110 milli: ⌊−110,000 / 20,000⌋ = −6 steps → 6; no change → 0.
    assert_eq!(basalt_score(300.0, 190.0), 6);
    assert_eq!(basalt_score(300.0, 300.0), 0);
    // Steps round down: a growth of 1 micro-device is still step 0, a cut of 1 is step −1.
    assert_eq!(basalt_score(0.0, 0.001), 0);
    assert_eq!(basalt_score(0.001, 0.0), 1);
    // No saturation: a cut of 5 devices beats a cut of 4 (the paper's score ties them at 99).
    assert!(basalt_score(5000.0, 0.0) > basalt_score(4000.0, 0.0));
    assert_eq!(fgd_score(5000.0, 0.0), fgd_score(4600.0, 0.0));
}

#[test]
fn model_sets() {
    assert!(ModelSet::ANY.allows(None) && ModelSet::ANY.allows(Some(5)));
    assert!(ModelSet(0b10).allows(Some(1)) && !ModelSet(0b10).allows(Some(0)));
    assert!(!ModelSet(0b10).allows(None));
}

#[test]
fn cpu_only_tie_by_hand() {
    // Key (b): the fewer idle whole GPUs left, the higher; none idle is highest.
    assert_eq!(cpu_only_tie(&[0, 0]), 1 << 19);
    assert_eq!(cpu_only_tie(&[1000, 0]), (1 << 19) - 1);
    assert_eq!(cpu_only_tie(&[1000, 1000]), (1 << 19) - 2);
    // Idle shares summed, in whole GPUs rounded down: 1.5 idle is 1, half a GPU is none.
    assert_eq!(cpu_only_tie(&[1000, 500]), (1 << 19) - 1);
    assert_eq!(cpu_only_tie(&[0, 500]), 1 << 19);
    // Never reaches the next step, never negative, even with 8 idle GPUs.
    assert!((0..TIE_SCALE).contains(&cpu_only_tie(&[1000; 8])));
}

#[test]
fn balance_off_by_hand() {
    // 14 cores a GPU: two idle GPUs want 28 cores; each core off either way counts one.
    assert_eq!(balance_off(28_000, &[1000, 1000], 14.0), 0);
    assert_eq!(balance_off(30_000, &[1000, 1000], 14.0), 2);
    assert_eq!(balance_off(26_000, &[1000, 1000], 14.0), 2);
    // Idle shares count as parts of a GPU: half a GPU wants 7 cores.
    assert_eq!(balance_off(7_000, &[500, 0], 14.0), 0);
    // No idle GPU: every free core is off.
    assert_eq!(balance_off(5_000, &[0, 0], 14.0), 5);
    assert_eq!(balance_off(0, &[1000; 8], f64::NAN), 0);
}

#[test]
fn device_tie_by_hand() {
    // The model first: a node no typical pod needs beats any balance elsewhere.
    assert!(device_tie(0, 100) > device_tie(1, 0));
    // Then the balance: fewer cores off is higher.
    assert!(device_tie(10, 3) > device_tie(10, 4));
    // Within a step whatever the inputs, and above the CPU-only tie's floor of none.
    for (r, off) in [(0, 0), (1000, 511), (-5, -5), (5000, i64::MAX)] {
        assert!((0..TIE_SCALE / 2 + 1).contains(&device_tie(r, off)));
    }
    assert_eq!(device_tie(1000, 600), device_tie(1000, 511));
}

/// `shape` bound to the models of the bit set `models` (bit 0: T4, bit 1: V100).
fn named(models: u64, shape: Shape) -> Shape {
    Shape {
        models: ModelSet(models),
        ..shape
    }
}

#[test]
fn reserved_for_counts_the_shapes_that_name_models() {
    let t4_only = named(0b01, shape(4000, 1000, 1));
    let either = named(0b11, shape(4000, 500, 1));
    let shapes = TypicalShapes::new(vec![(t4_only, 1), (either, 1), (shape(4000, 1000, 1), 2)]);
    assert_eq!(shapes.reserved_for(T4), 500);
    assert_eq!(shapes.reserved_for(V100), 250);
    assert_eq!(shapes.reserved_for(None), 0);
}

#[test]
fn cpu_per_gpu_weighs_every_shape_and_device_cpu_per_gpu_those_with_devices() {
    let shapes = TypicalShapes::new(vec![
        (shape(4000, 500, 1), 1),
        (shape(12_000, 1000, 1), 1),
        (shape(8000, 0, 0), 2),
    ]);
    // CPU: (4 + 12 + 2 × 8) / 4 = 8 cores; GPU: (0.5 + 1) / 4 = 0.375.
    assert!((shapes.cpu_per_gpu() - 8000.0 / 375.0).abs() < 1e-9);
    // The shapes with devices alone: CPU (4 + 12) / 2 = 8 cores; GPU (0.5 + 1) / 2 = 0.75.
    assert!((shapes.device_cpu_per_gpu() - 8000.0 / 750.0).abs() < 1e-9);
    let cpu_only = TypicalShapes::new(vec![(shape(8000, 0, 0), 1)]);
    assert_eq!(cpu_only.cpu_per_gpu(), 0.0);
    assert_eq!(cpu_only.device_cpu_per_gpu(), 0.0);
}

#[test]
fn stranded_by_hand() {
    // 10 cores a GPU: 3 idle GPUs and 24 cores feed 2.4 of them.
    assert!((stranded(24_000, 3000, 10.0) - 600.0).abs() < 1e-9);
    // CPU enough for all, or to spare: nothing stranded; no CPU left: all of it.
    assert_eq!(stranded(30_000, 3000, 10.0), 0.0);
    assert_eq!(stranded(64_000, 3000, 10.0), 0.0);
    assert_eq!(stranded(-1000, 3000, 10.0), 3000.0);
    // No idle share, or a workload without devices: nothing to strand.
    assert_eq!(stranded(0, 0, 10.0), 0.0);
    assert_eq!(stranded(0, 3000, 0.0), 0.0);
}

#[test]
fn stranding_cost_credits_a_cut_except_on_a_scarce_model() {
    assert_eq!(stranding_cost(0.0, 600.0, false), 600.0);
    assert_eq!(stranding_cost(1500.0, 700.0, false), -800.0);
    assert_eq!(stranding_cost(0.0, 600.0, true), 600.0);
    assert_eq!(stranding_cost(1500.0, 700.0, true), 0.0);
}

#[test]
fn scarcity_by_hand() {
    // Bound pods ask 60 % of the demand of a model holding 25 % of the devices: 2.4 times its
    // share, 1.9 beyond the half that leaves it plentiful.
    assert!((scarcity(0.6, 0.25) - 1.9).abs() < 1e-9);
    // At most half its share: plentiful; a model without devices is never scarce.
    assert_eq!(scarcity(0.1, 0.25), 0.0);
    assert_eq!(scarcity(0.125, 0.25), 0.0);
    assert_eq!(scarcity(0.6, 0.0), 0.0);
    // Half a milli-device charged per milli-device taken per unit: a whole device at 1.9.
    assert!((scarcity_cost(1.9, 1000.0) - 950.0).abs() < 1e-9);
    assert_eq!(scarcity_cost(0.0, 1000.0), 0.0);
}

#[test]
fn bound_demand_counts_devices_of_the_shapes_that_name_models() {
    let t4_only = named(0b01, shape(4000, 1000, 1));
    let either_two_halves = named(0b11, shape(4000, 500, 2));
    let shapes = TypicalShapes::new(vec![
        (t4_only, 1),
        (either_two_halves, 1),
        (shape(4000, 1000, 1), 1),
        (shape(8000, 0, 0), 1),
    ]);
    // Demand 1000 + 2 × 500 + 1000 (the CPU-only shape asks none): T4 has 2000 of 3000,
    // V100 the 1000 of the shape allowing either.
    assert!((shapes.bound_demand(T4) - 2.0 / 3.0).abs() < 1e-9);
    assert!((shapes.bound_demand(V100) - 1.0 / 3.0).abs() < 1e-9);
    assert_eq!(shapes.bound_demand(None), 0.0);
    assert_eq!(TypicalShapes::default().bound_demand(T4), 0.0);
}

/// The framework's plan for `pods` on `nodes`, the ranking preferring the nodes in `rank`
/// order (lower first): (pod, node) per binding.
fn plan(
    nodes: Vec<basalt_engine::NodeSpec>,
    pods: Vec<basalt_engine::PodSpec>,
    rank: Vec<u32>,
) -> Vec<(String, String)> {
    use basalt_engine::{ClusterSpec, Snapshot};
    let spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes,
        pods,
        ..Default::default()
    };
    let snap = Snapshot::build(spec).unwrap();
    let mut fw = crate::framework(&crate::Config::default(), &snap.resources);
    fw.node_rank = Some(rank.into());
    let plan = basalt_engine::schedule(&snap, &fw, &mut basalt_engine::Warm::default());
    (plan.bindings.iter())
        .map(|b| (b.pod.clone(), b.node.clone()))
        .collect()
}

fn list(items: &[(&str, i64)]) -> basalt_engine::ResourceList {
    items.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// A HAMi node of `gpus` devices (100 slots each) and `cpu` milli-CPU.
fn hami_node(name: &str, cpu: i64, gpus: u32) -> basalt_engine::NodeSpec {
    use basalt_engine::{devices::Sharing, Gpu};
    basalt_engine::NodeSpec {
        name: name.into(),
        allocatable: list(&[("cpu", cpu), ("nvidia.com/gpu", 100 * gpus as i64)]),
        gpus: Some(
            (0..gpus)
                .map(|d| Gpu {
                    uuid: Some(format!("{name}-{d}")),
                    memory_mib: Some(1000),
                    slots: 100,
                    ..Gpu::new(d)
                })
                .collect(),
        ),
        sharing: Sharing::Hami,
        shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
        ..Default::default()
    }
}

/// A pending pod of ours asking `request`.
fn pending(name: &str, request: basalt_engine::ResourceList) -> basalt_engine::PodSpec {
    basalt_engine::PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        devices: basalt_crds::device_ask(&request),
        request,
        created_ms: 1,
        ..Default::default()
    }
}

/// `pod` running on `node`, holding the whole of its devices `0..gpus`.
fn running_on(pod: basalt_engine::PodSpec, node: &str, gpus: u32) -> basalt_engine::PodSpec {
    use basalt_engine::devices::HeldDevice;
    basalt_engine::PodSpec {
        phase: basalt_engine::PodPhase::Running,
        node: Some(node.into()),
        held_devices: (0..gpus)
            .map(|d| HeldDevice {
                uuid: format!("{node}-{d}"),
                memory_mib: 1000,
                cores: 100,
            })
            .collect(),
        ..pod
    }
}

/// Two HAMi nodes of 2 GPUs and 32 CPUs: `a`'s GPUs are taken whole by a bound pod, `b` is
/// idle and first in the ranking. A CPU-only pod grows fragmentation by nothing on either,
/// so the ranking used to take `b`; key (b) sends it to `a`, the node left with the fewest
/// idle GPUs (none), where its CPU strands no GPU.
#[test]
fn a_pod_without_devices_goes_where_no_gpu_is_idle() {
    let busy = pending("busy", list(&[("cpu", 1000), ("nvidia.com/gpu", 2)]));
    let placed = plan(
        vec![hami_node("a", 32_000, 2), hami_node("b", 32_000, 2)],
        vec![
            running_on(busy, "a", 2),
            pending("cpu-only", list(&[("cpu", 2000)])),
        ],
        vec![1, 0],
    );
    assert_eq!(placed, [("ns/cpu-only".to_string(), "a".to_string())]);
}

/// Every pod asks one whole GPU and 4 CPUs (the workload: 4 cores a GPU). Nodes `a` (32 CPUs)
/// and `b` (8 CPUs) have 2 idle GPUs each, so the pod fits either with nothing fragmented and
/// the ranking prefers `a`; the balance tie sends it to `b`, left with 4 cores for its idle
/// GPU where `a` would keep 28. (`c`, full, only makes the devices shared.)
#[test]
fn a_pod_with_devices_goes_where_cpu_stays_in_proportion() {
    let one = || list(&[("cpu", 4000), ("nvidia.com/gpu", 1)]);
    let placed = plan(
        vec![
            hami_node("a", 32_000, 2),
            hami_node("b", 8000, 2),
            hami_node("c", 4000, 1),
        ],
        vec![
            running_on(pending("busy", one()), "c", 1),
            pending("new", one()),
        ],
        vec![0, 1, 2],
    );
    assert_eq!(placed, [("ns/new".to_string(), "b".to_string())]);
}

/// Three pods of one GPU and 8 CPUs run on `c`; the new one asks one GPU and 16 CPUs, so the
/// pods with devices take 10 cores a GPU. Nodes `a` (40 CPUs) and `b` (96 CPUs) have 4 idle
/// GPUs each and fit every typical pod after the new one, so fragmentation grows by nothing
/// on either, and the ranking and the balance tie both prefer `a` (24 cores left for 3 idle
/// GPUs, 6 from the proportion, against 50). But 24 cores feed 2.4 GPUs at 10 a GPU: `a`
/// would strand 0.6 GPU that no pod could use; the charge sends the pod to `b`.
#[test]
fn a_pod_with_devices_leaves_cpu_for_the_idle_gpus_beside_it() {
    let ask = |cpu| list(&[("cpu", cpu), ("nvidia.com/gpu", 1)]);
    let mut pods: Vec<_> = (0..3)
        .map(|i| running_on(pending(&format!("busy-{i}"), ask(8000)), "c", 1))
        .collect();
    for (i, p) in pods.iter_mut().enumerate() {
        // Each busy pod holds its own device of `c`.
        p.held_devices[0].uuid = format!("c-{i}");
    }
    pods.push(pending("new", ask(16_000)));
    let placed = plan(
        vec![
            hami_node("a", 40_000, 4),
            hami_node("b", 96_000, 4),
            hami_node("c", 24_000, 3),
        ],
        pods,
        vec![0, 1, 2],
    );
    assert_eq!(placed, [("ns/new".to_string(), "b".to_string())]);
}

/// A HAMi node of `model` labelled as such.
fn model_node(name: &str, model: &str, gpus: u32) -> basalt_engine::NodeSpec {
    let mut node = hami_node(name, 64_000, gpus);
    node.labels.insert(MODEL.into(), model.into());
    for g in node.gpus.iter_mut().flatten() {
        g.model = Some(model.into());
    }
    node
}

const MODEL: &str = "nvidia.com/gpu.product";

/// A pod of one whole GPU and one CPU, bound to `model` when given, running on device `d` of
/// `node` when given.
fn one_gpu(name: &str, model: Option<&str>, on: Option<(&str, u32)>) -> basalt_engine::PodSpec {
    use basalt_engine::{devices::HeldDevice, NodeSelectorTerm, SelectorOperator};
    use basalt_engine::{RequiredNodeAffinity, SelectorRequirement};
    let mut pod = pending(name, list(&[("cpu", 1000), ("nvidia.com/gpu", 1)]));
    pod.rules.affinity = model.map(|m| RequiredNodeAffinity {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![SelectorRequirement {
                key: MODEL.into(),
                operator: SelectorOperator::In,
                values: vec![m.into()],
            }],
            match_fields: Vec::new(),
        }],
    });
    if let Some((node, d)) = on {
        pod.phase = basalt_engine::PodPhase::Running;
        pod.node = Some(node.into());
        pod.held_devices = vec![HeldDevice {
            uuid: format!("{node}-{d}"),
            memory_mib: 1000,
            cores: 100,
        }];
    }
    pod
}

/// `v` (V100, 4 GPUs: a third of the cluster's) runs three V100-bound pods, one GPU idle; `g`
/// (G2, 8 GPUs) runs four G2-bound pods and two that may run anywhere, two GPUs idle. The
/// workload: 30 % bound to V100, 40 % to G2, 30 % anywhere. A new pod that may run anywhere cuts
/// fragmentation more on `v` (its idle GPU is a fragment for the 40 % bound to G2: 400
/// milli-device) than on `g` (300), the ranking prefers `v` too; but V100-bound pods ask 0.9
/// of V100's share (scarcity 0.4, 200 milli charged) and G2-bound ones 0.6 of G2's (0.1, 50),
/// so it goes to `g` and leaves `v`'s last GPU to the pods that can run nowhere else.
#[test]
fn a_pod_that_may_run_anywhere_leaves_a_scarce_model_to_the_pods_bound_to_it() {
    let mut pods = Vec::new();
    for d in 0..3 {
        pods.push(one_gpu(&format!("v{d}"), Some("V100"), Some(("v", d))));
    }
    for d in 0..4 {
        pods.push(one_gpu(&format!("g{d}"), Some("G2"), Some(("g", d))));
    }
    for d in 4..6 {
        pods.push(one_gpu(&format!("any{d}"), None, Some(("g", d))));
    }
    pods.push(one_gpu("new", None, None));
    let nodes = vec![model_node("v", "V100", 4), model_node("g", "G2", 8)];
    let placed = plan(nodes, pods, vec![0, 1]);
    assert_eq!(placed, [("ns/new".to_string(), "g".to_string())]);
}

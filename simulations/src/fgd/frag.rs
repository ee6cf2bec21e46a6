//! GPU fragmentation as the FGD paper measures it.
//!
//! The target workload is a set of *typical pod shapes* (CPU, per-GPU share, GPU count, allowed
//! models), counted over the original trace (memory ignored) and taken most frequent first until
//! they cover 95 % of its pods; their weights are their counts, renormalised over the shapes
//! taken. Ties in count go to the smaller shape in `(cpu, share, count, models)` order, so the cut
//! at 95 % does not depend on the trace's row order.
//!
//! A node's fragment for one shape, in milli-GPU: all of its idle GPU share when the shape cannot
//! run there at all (not enough free CPU, a model it does not allow, fewer than `count` GPUs with
//! room for the share) or when the shape needs no GPU; otherwise the idle share on those GPUs
//! whose free share is below the shape's per-GPU share. A node's fragmentation is the weighted sum
//! over the typical shapes.

use std::collections::BTreeMap;

/// Allowed GPU models as a bit set over the cluster's model ids; [`ModelSet::ANY`] when the pod
/// names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelSet(pub u64);

impl ModelSet {
    pub const ANY: ModelSet = ModelSet(u64::MAX);

    /// Whether a node of this model (`None`: the node list names no model) may run the pod.
    pub fn allows(self, model: Option<u8>) -> bool {
        if self == ModelSet::ANY {
            return true;
        }
        match model {
            Some(m) => self.0 & (1u64 << m) != 0,
            None => false,
        }
    }
}

/// One pod shape of the target workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub cpu_milli: i64,
    /// Per-GPU share in milli.
    pub gpu_milli: u16,
    pub num_gpu: u32,
    pub models: ModelSet,
}

/// A node's fragment for one shape, in milli-GPU (the definition, written plainly; the simulator
/// uses [`Fragmenter::fragmentation`], which is checked against this).
pub fn shape_fragment(shape: &Shape, model: Option<u8>, cpu_free: i64, gpu_free: &[u16]) -> u64 {
    let idle: u64 = gpu_free.iter().map(|&f| f as u64).sum();
    if shape.num_gpu == 0 || !shape.models.allows(model) || cpu_free < shape.cpu_milli {
        return idle;
    }
    let room = gpu_free.iter().filter(|&&f| f >= shape.gpu_milli).count();
    if room < shape.num_gpu as usize {
        return idle;
    }
    gpu_free
        .iter()
        .filter(|&&f| f < shape.gpu_milli)
        .map(|&f| f as u64)
        .sum()
}

/// The typical shapes with their weights, ready to score nodes quickly.
#[derive(Clone, Debug)]
pub struct Fragmenter {
    /// Sorted by (count, share) so that GPU statistics are computed once per distinct pair.
    shapes: Vec<Shape>,
    weights: Vec<f64>,
}

impl Fragmenter {
    /// Typical shapes of a trace: most frequent first until `coverage_pct` % of pods are covered.
    pub fn from_trace(shapes: impl IntoIterator<Item = Shape>, coverage_pct: u64) -> Self {
        let mut counts: BTreeMap<Shape, u64> = BTreeMap::new();
        let mut total = 0u64;
        for s in shapes {
            *counts.entry(s).or_default() += 1;
            total += 1;
        }
        let mut ranked: Vec<(Shape, u64)> = counts.into_iter().collect();
        // Stable sort keeps the BTreeMap's shape order among equal counts.
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
        Fragmenter::new(taken)
    }

    /// From shapes and their (unnormalised) weights.
    pub fn new(mut shapes: Vec<(Shape, u64)>) -> Self {
        let sum: u64 = shapes.iter().map(|(_, c)| c).sum();
        shapes.sort_by_key(|(s, _)| (s.num_gpu, s.gpu_milli, s.cpu_milli, s.models));
        Fragmenter {
            weights: shapes
                .iter()
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

    /// The node's fragmentation in milli-GPU: Σ weight × [`shape_fragment`].
    pub fn fragmentation(&self, model: Option<u8>, cpu_free: i64, gpu_free: &[u16]) -> f64 {
        let idle: u64 = gpu_free.iter().map(|&f| f as u64).sum();
        if idle == 0 {
            return 0.0;
        }
        let mut f = 0.0;
        // GPU statistics for the last (count, share) pair seen: GPUs with room, idle share below.
        let mut last: Option<(u32, u16)> = None;
        let (mut room, mut below) = (0u32, 0u64);
        for (s, &w) in self.shapes.iter().zip(&self.weights) {
            let frag = if s.num_gpu == 0 || cpu_free < s.cpu_milli || !s.models.allows(model) {
                idle
            } else {
                if last != Some((s.num_gpu, s.gpu_milli)) {
                    last = Some((s.num_gpu, s.gpu_milli));
                    room = 0;
                    below = 0;
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

/// The `fgd` score: ⌊100 · sigmoid((F_before − F_after) / 1000)⌋.
pub fn fgd_score(f_before: f64, f_after: f64) -> i32 {
    let s = 1.0 / (1.0 + (-(f_before - f_after) / 1000.0).exp());
    ((100.0 * s).floor() as i32).clamp(0, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let v100_only = Shape {
            models: ModelSet(0b10),
            ..shape(1000, 500, 1)
        };
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
        let f = Fragmenter::new(vec![
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
        let f = Fragmenter::from_trace(trace, 95);
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
        let mut rng = super::super::rng::Rng::from_seed(3);
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
        let f = Fragmenter::new(shapes);
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
}

//! The LP relaxation of "the most GPU any subset of these pods can hold at once on the cluster",
//! on aggregated node types and pod shapes, solved through its dual so the answer is a proven
//! upper bound whatever the solver's round-off.
//!
//! Variables `y[s,t] ≥ 0`: pods of shape `s` on nodes of type `t`, present only where `s` fits an
//! empty node of type `t` (CPU, memory, GPU count, model: the engine's feasibility rule). Rows,
//! each scaled to a right-hand side of `N_t` (nodes of the type) or of the shape's count:
//! - per shape: `Σ_t y[s,t] ≤` the pods of `s` among the arrivals so far;
//! - per type and resource (CPU, memory, GPU share, GPU count), `Σ_s f(size_s) · y[s,t] ≤ N_t ·
//!   capacity` for `f` the identity and the dual feasible functions [`dff`] `u^(k)`: on one node
//!   (or one GPU) the pods' sizes sum to at most the capacity, so their `u^(k)` sizes do too
//!   (Fekete and Schepers), and summing over the type's nodes (GPUs) gives the row. With `k = 1`
//!   a pod of more than half a GPU takes the whole GPU and a pod of `n` GPUs on an `n`-GPU node
//!   takes the node; with larger `k`, three pods of 0.4 take more than one GPU, and so on.
//!
//! Pods without GPUs are left out: they add nothing to the objective, and a subset may omit them.
//! The objective is GPUs held, `Σ y[s,t] · num_gpu_s · share_s / 1000`.

use std::collections::BTreeMap;

use basalt_plugins::fragmentation::ModelSet;
use microlp::{ComparisonOp, OptimizationDirection, Problem};

use crate::fgd::Experiment;
use crate::openb::GPU_MILLI;

/// The `k` of the dual feasible functions each resource's rows use (0: the plain sum).
const CPU_MEM_KS: [i64; 4] = [0, 1, 2, 3];
const SHARE_KS: [i64; 5] = [0, 1, 2, 3, 4];
const GPU_COUNT_KS: [i64; 3] = [1, 2, 3];

/// Room left in every dual row before the bound is taken: far above the round-off of summing a
/// few dozen products of numbers no larger than one in f64 (about 1e-15).
const SLACK: f64 = 1e-9;

/// Nodes alike in everything the feasibility rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NodeType {
    cpu: i64,
    mem: i64,
    gpus: u32,
    model: Option<u8>,
}

/// Pods alike in everything the feasibility rule and the objective look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PodShape {
    cpu: i64,
    mem: i64,
    num_gpu: u32,
    share: u32,
    models: u64,
}

impl PodShape {
    fn fits(&self, t: &NodeType) -> bool {
        self.cpu <= t.cpu
            && self.mem <= t.mem
            && self.num_gpu <= t.gpus
            && ModelSet(self.models).allows(t.model)
    }

    /// GPUs held by one pod of the shape.
    fn gpus(&self) -> f64 {
        (self.num_gpu as u64 * self.share as u64) as f64 / GPU_MILLI as f64
    }
}

/// One row of a node type: `Σ_s coef[s] · y[s,t] ≤ N_t`.
#[derive(Clone, Debug)]
struct TypeRow {
    node_type: usize,
    coef: Vec<f64>,
}

/// The relaxation of one experiment; only the shape counts change from one solve to the next.
#[derive(Clone, Debug)]
pub struct Relaxation {
    /// Node types and how many nodes each has.
    types: Vec<(NodeType, u32)>,
    shapes: Vec<PodShape>,
    /// Shape of each trace pod; `None` for a pod without GPUs.
    shape_of: Vec<Option<u32>>,
    rows: Vec<TypeRow>,
    /// Shapes fitting each type, by type.
    fits: Vec<Vec<usize>>,
}

/// Fekete–Schepers' dual feasible function `u^(k)` for a bin of size `c`, `0 ≤ x ≤ c`: `x` when
/// `(k+1)·x` is a multiple of `c`, else `⌊(k+1)·x / c⌋ · c / k`; `k = 0` is the identity. Items
/// that fit a bin together keep fitting under it: `Σ x ≤ c` implies `Σ u(x) ≤ c`.
pub fn dff(k: i64, x: i64, c: i64) -> f64 {
    let scaled = (k + 1) * x;
    if k == 0 || scaled % c == 0 {
        x as f64
    } else {
        (scaled / c) as f64 * c as f64 / k as f64
    }
}

impl Relaxation {
    pub fn new(exp: &Experiment) -> Self {
        let mut type_count: BTreeMap<NodeType, u32> = BTreeMap::new();
        for n in &exp.nodes {
            let t = NodeType {
                cpu: n.cpu,
                mem: n.mem,
                gpus: n.gpus,
                model: n.model,
            };
            *type_count.entry(t).or_default() += 1;
        }
        let types: Vec<(NodeType, u32)> = type_count.into_iter().collect();
        let mut shape_ids: BTreeMap<PodShape, u32> = BTreeMap::new();
        let pod_shapes: Vec<Option<PodShape>> = (exp.pods.iter())
            .map(|p| {
                (p.request > 0).then_some(PodShape {
                    cpu: p.cpu,
                    mem: p.mem,
                    num_gpu: p.num_gpu,
                    share: p.share as u32,
                    models: p.models.0,
                })
            })
            .collect();
        for s in pod_shapes.iter().flatten() {
            shape_ids.insert(*s, 0);
        }
        for (i, id) in shape_ids.values_mut().enumerate() {
            *id = i as u32;
        }
        let shape_of = (pod_shapes.iter())
            .map(|s| s.map(|s| shape_ids[&s]))
            .collect();
        let shapes: Vec<PodShape> = shape_ids.into_keys().collect();
        let fits: Vec<Vec<usize>> = (types.iter())
            .map(|(t, _)| (0..shapes.len()).filter(|&s| shapes[s].fits(t)).collect())
            .collect();
        let mut rows = Vec::new();
        for (ti, (t, _)) in types.iter().enumerate() {
            let mut add = |size: &dyn Fn(&PodShape) -> f64| {
                let mut coef = vec![0.0; shapes.len()];
                for &s in &fits[ti] {
                    coef[s] = size(&shapes[s]);
                }
                if coef.iter().any(|&c| c > 0.0) {
                    rows.push(TypeRow {
                        node_type: ti,
                        coef,
                    });
                }
            };
            // Per node: the pods' CPU (memory) sums to at most the node's.
            for k in CPU_MEM_KS {
                if t.cpu > 0 {
                    add(&|s| dff(k, s.cpu, t.cpu) / t.cpu as f64);
                }
                if t.mem > 0 {
                    add(&|s| dff(k, s.mem, t.mem) / t.mem as f64);
                }
            }
            if t.gpus == 0 {
                continue;
            }
            let milli = GPU_MILLI as i64;
            // Per GPU: the shares on it sum to at most 1000 (a whole-GPU pod's is 1000 on each
            // of its GPUs, and u(1000) = 1000).
            for k in SHARE_KS {
                add(&|s| {
                    s.num_gpu as f64 * dff(k, s.share as i64, milli)
                        / (milli as f64 * t.gpus as f64)
                });
            }
            // Per node: whole-GPU pods' GPU counts sum to at most the node's; GPUs that sharing
            // pods use are items too, left out (u ≥ 0, so leaving items out keeps the row valid).
            for k in GPU_COUNT_KS {
                add(&|s| {
                    if s.share == GPU_MILLI {
                        dff(k, s.num_gpu as i64, t.gpus as i64) / t.gpus as f64
                    } else {
                        0.0
                    }
                });
            }
        }
        Relaxation {
            types,
            shapes,
            shape_of,
            rows,
            fits,
        }
    }

    pub fn shapes(&self) -> usize {
        self.shapes.len()
    }

    pub fn node_types(&self) -> usize {
        self.types.len()
    }

    /// Shape of trace pod `pod`; `None` for a pod without GPUs.
    pub fn shape_of(&self, pod: u32) -> Option<u32> {
        self.shape_of[pod as usize]
    }

    /// An upper bound, in milli-GPU (not rounded: a whole milli is 0.1 % of a one-GPU cluster), on the GPU any subset of `counts[s]` pods of each shape can
    /// hold at once. Solves the dual (minimise `Σ N_t·u_r + Σ counts_s·v_s` subject to
    /// `Σ_r coef_r[s]·u_r + v_s ≥ gpus_s` for every `(s, t)` that fits, `u, v ≥ 0`), then raises
    /// `v_s` wherever the solver's answer falls short of a row: any dual-feasible point's objective
    /// bounds the primal optimum from above, so the result is valid even if the solve is not exact.
    pub fn upper_bound(&self, counts: &[u32]) -> Result<f64, String> {
        let mut problem = Problem::new(OptimizationDirection::Minimize);
        let u: Vec<_> = (self.rows.iter())
            .map(|r| problem.add_var(self.types[r.node_type].1 as f64, (0.0, f64::INFINITY)))
            .collect();
        let v: Vec<_> = (counts.iter())
            .map(|&c| problem.add_var(c as f64, (0.0, f64::INFINITY)))
            .collect();
        let rows_of_type =
            |ti: usize| (0..self.rows.len()).filter(move |&r| self.rows[r].node_type == ti);
        for (ti, fits) in self.fits.iter().enumerate() {
            for &s in fits.iter().filter(|&&s| counts[s] > 0) {
                let mut expr: Vec<_> = rows_of_type(ti)
                    .filter(|&r| self.rows[r].coef[s] > 0.0)
                    .map(|r| (u[r], self.rows[r].coef[s]))
                    .collect();
                expr.push((v[s], 1.0));
                problem.add_constraint(expr, ComparisonOp::Ge, self.shapes[s].gpus());
            }
        }
        let solution = (problem.solve())
            .map_err(|e| e.to_string())?
            .into_solution()
            .map_err(|_| "the LP solve stopped without an answer")?;
        let du: Vec<f64> = u.iter().map(|&x| solution.var_value(x).max(0.0)).collect();
        let mut dv: Vec<f64> = v.iter().map(|&x| solution.var_value(x).max(0.0)).collect();
        for (ti, fits) in self.fits.iter().enumerate() {
            for &s in fits.iter().filter(|&&s| counts[s] > 0) {
                let covered: f64 = rows_of_type(ti).map(|r| self.rows[r].coef[s] * du[r]).sum();
                let short = self.shapes[s].gpus() + SLACK - covered - dv[s];
                if short > 0.0 {
                    dv[s] += short;
                }
            }
        }
        let bound: f64 = (self.rows.iter().zip(&du))
            .map(|(r, x)| self.types[r.node_type].1 as f64 * x)
            .chain(counts.iter().zip(&dv).map(|(&c, x)| c as f64 * x))
            .sum();
        Ok((bound + SLACK) * GPU_MILLI as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dff_values_worked_by_hand() {
        // k = 1: more than half a bin takes the bin, less takes nothing, exactly half stays.
        assert_eq!(dff(1, 600, 1000), 1000.0);
        assert_eq!(dff(1, 400, 1000), 0.0);
        assert_eq!(dff(1, 500, 1000), 500.0);
        // k = 2: 0.4 → 0.5, 0.7 → 1, 0.2 → 0; 0.4 + 0.4 + 0.2 still sums to at most 1.
        assert_eq!(dff(2, 400, 1000), 500.0);
        assert_eq!(dff(2, 700, 1000), 1000.0);
        assert_eq!(dff(2, 200, 1000), 0.0);
        // GPU counts: 5 GPUs of an 8-GPU node take the node.
        assert_eq!(dff(1, 5, 8), 8.0);
        assert_eq!(dff(0, 5, 8), 5.0);
    }

    #[test]
    fn dff_keeps_every_packing_of_a_small_bin_within_the_bin() {
        // Every multiset of up to four items of size 1..=12 that fits a bin of 12.
        let c = 12;
        for k in 1..=4 {
            for a in 0..=c {
                for b in 0..=c - a {
                    for d in 0..=c - a - b {
                        let e = c - a - b - d;
                        let sum: f64 = [a, b, d, e].iter().map(|&x| dff(k, x, c)).sum();
                        assert!(sum <= c as f64 + 1e-9, "k {k}: {a} {b} {d} {e}: {sum}");
                    }
                }
            }
        }
    }
}

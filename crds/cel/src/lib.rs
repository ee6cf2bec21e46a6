//! Kubernetes DRA device selectors: the CEL expressions of `DeviceClass` and `ResourceClaim`
//! selectors (`resource.k8s.io/v1`), compiled and evaluated against a device as kube-scheduler
//! does (`k8s.io/dynamic-resource-allocation/cel`).
//!
//! ```
//! use basalt_cel::{AttributeValue, DeviceView, Quantity, Selector};
//! use std::collections::BTreeMap;
//!
//! let attributes = BTreeMap::from([(
//!     "gpu.nvidia.com/productName".to_owned(),
//!     AttributeValue::String("NVIDIA H100 80GB HBM3".to_owned()),
//! )]);
//! let capacity = BTreeMap::from([(
//!     "gpu.nvidia.com/memory".to_owned(),
//!     Quantity::parse("80Gi").unwrap(),
//! )]);
//! let device = DeviceView { driver: "gpu.nvidia.com", attributes: &attributes, capacity: &capacity };
//!
//! let selector = Selector::compile(
//!     r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100") &&
//!        device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))"#,
//! ).unwrap();
//! assert!(selector.matches(&device).unwrap());
//! ```
//!
//! Pure: no I/O, no clock, no randomness. The same expression and device always give the same
//! answer. Every expression's cost is bounded before it runs (see the crate's README), so no
//! selector can hang an evaluation.

mod cost;
mod decimal;
mod functions;
mod patterns;
mod quantity;
mod semver;
mod values;

pub use quantity::{Quantity, QuantityFormat};
pub use semver::Semver;

use cel::common::types::CelBool;
use cel::{Context, IdedExpr, Value};
use cost::Bounds;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Kubernetes' `CELSelectorExpressionMaxCost`: the most an expression may cost.
pub const COST_LIMIT: u64 = 1_000_000;

/// Kubernetes' `CELSelectorExpressionMaxLength`: the longest expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;

/// Why an expression can't be compiled, or can't be evaluated against a device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The expression is longer than [`MAX_EXPRESSION_BYTES`].
    #[error("CEL expression is {bytes} bytes long, more than the limit of {limit}")]
    TooLong { bytes: usize, limit: usize },
    /// The expression doesn't parse, or uses a name, field or function the DRA environment
    /// doesn't have.
    #[error("CEL expression does not compile: {0}")]
    Compile(String),
    /// Evaluating the expression could cost more than [`COST_LIMIT`].
    #[error("CEL expression cost exceeds the limit of {limit} (estimated {cost})")]
    CostExceeded { cost: u64, limit: u64 },
    /// Evaluation failed, e.g. on an attribute the device lacks.
    #[error("CEL expression failed on this device: {0}")]
    Evaluation(String),
    /// The expression evaluated to something other than a bool; the type it gave.
    #[error("CEL expression must evaluate to a bool, not {0}")]
    NotBool(String),
}

/// A device attribute's value, as `ResourceSlice` devices declare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    Int(i64),
    Bool(bool),
    String(String),
    /// Semantic-version text, such as `"560.35.3"`; CEL sees it as a `semver` value.
    Version(String),
}

/// What a selector sees of a device: `device.driver`, `device.attributes` and `device.capacity`.
#[derive(Clone, Copy, Debug)]
pub struct DeviceView<'a> {
    pub driver: &'a str,
    /// Fully qualified names "domain/id" (the caller qualifies unqualified names with the driver's
    /// domain).
    pub attributes: &'a BTreeMap<String, AttributeValue>,
    /// Fully qualified names "domain/id", as for `attributes`.
    pub capacity: &'a BTreeMap<String, Quantity>,
}

impl DeviceView<'_> {
    /// The bounds this device stays within: DRA's own, unless it is larger than validation allows.
    fn bounds(&self) -> Bounds {
        let entries = self.attributes.len().max(self.capacity.len()) as u64;
        let keys = self.attributes.keys().chain(self.capacity.keys());
        let values = self.attributes.values().map(|v| match v {
            AttributeValue::String(s) | AttributeValue::Version(s) => s.len(),
            AttributeValue::Int(_) | AttributeValue::Bool(_) => 0,
        });
        let string = keys
            .map(String::len)
            .chain(values)
            .chain([self.driver.len()])
            .max()
            .unwrap_or(0) as u64;
        Bounds {
            entries: entries.max(cost::DRA_BOUNDS.entries),
            string: string.max(cost::DRA_BOUNDS.string),
        }
    }
}

/// A compiled selector expression. `Send + Sync`: compile once, match from any thread.
#[derive(Debug)]
pub struct Selector {
    expression: String,
    expr: IdedExpr,
    cost: u64,
    /// Levels in the expression tree.
    depth: usize,
    /// The literal regular expressions, compiled, that `expr` refers to by variable.
    patterns: Vec<patterns::Compiled>,
}

fn check_cost(cost: u64) -> Result<u64, CelError> {
    if cost > COST_LIMIT {
        Err(CelError::CostExceeded {
            cost,
            limit: COST_LIMIT,
        })
    } else {
        Ok(cost)
    }
}

/// How deeply parentheses, brackets and calls may nest in an expression.
const MAX_NESTING: u16 = 48;

/// The stack of the threads that parse, and that evaluate deep expressions. The parser recurses
/// through a dozen grammar rules per level of nesting, about 10 KiB of stack per level in release
/// builds and 250 KiB in debug ones; the evaluator takes about 2 KiB per level of the expression
/// tree in release builds and 50 KiB in debug ones.
const BIG_STACK_BYTES: usize = 64 << 20;

/// Expressions at most this deep are evaluated on the caller's thread; deeper ones on a thread of
/// their own with [`BIG_STACK_BYTES`] (slower, but no caller's stack can overflow). Only speed
/// depends on the build; which expressions are accepted does not.
const INLINE_DEPTH: usize = if cfg!(debug_assertions) { 16 } else { 48 };

/// Runs `f` on a thread with a large stack, waiting for it.
fn on_big_stack<T: Send>(f: impl FnOnce() -> Result<T, CelError> + Send) -> Result<T, CelError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("basalt-cel".to_owned())
            .stack_size(BIG_STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(|e| CelError::Evaluation(format!("cannot start a CEL thread: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(CelError::Evaluation("the CEL evaluator failed".to_owned())))
    })
}

impl Selector {
    /// Parses and checks `expression`: its length, its names and functions, and its worst-case
    /// cost for a device within DRA's limits.
    ///
    /// Parsing runs on a thread of its own with a large stack, so that no nesting the parser
    /// accepts can overflow the caller's stack.
    pub fn compile(expression: &str) -> Result<Selector, CelError> {
        if expression.len() > MAX_EXPRESSION_BYTES {
            return Err(CelError::TooLong {
                bytes: expression.len(),
                limit: MAX_EXPRESSION_BYTES,
            });
        }
        on_big_stack(|| {
            let expr = functions::ENV
                .parser()
                .max_recursion_depth(MAX_NESTING)
                .parse(expression)
                .map_err(|e| {
                    let message = e.to_string();
                    CelError::Compile(if message.contains("Recursion limit") {
                        format!(
                            "expression nested too deeply (more than {MAX_NESTING} levels of \
                             parentheses, brackets or calls)"
                        )
                    } else {
                        message.trim().to_owned()
                    })
                })?;
            // A tree too deep is refused here, and dropped on this thread's stack.
            let depth = cost::depth(&expr);
            let cost = cost::estimate(&expr, cost::DRA_BOUNDS, &[]).map_err(CelError::Compile)?;
            let cost = check_cost(cost)?;
            let mut expr = expr;
            let patterns = patterns::precompile(&mut expr).map_err(CelError::Compile)?;
            Ok(Selector {
                expression: expression.to_owned(),
                expr,
                cost,
                depth,
                patterns,
            })
        })
    }

    /// The expression this was compiled from.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The worst-case cost of one evaluation, for a device within DRA's limits.
    pub fn estimated_cost(&self) -> u64 {
        self.cost
    }

    /// Evaluates the selector against `device`: `Ok(true)` when it selects the device.
    ///
    /// A device larger than DRA's validation allows (more than 32 attributes or capacities, or
    /// longer strings) has the cost bound recomputed for its actual size first, so it too can
    /// fail with [`CelError::CostExceeded`] rather than run long.
    pub fn matches(&self, device: &DeviceView) -> Result<bool, CelError> {
        if self.depth <= INLINE_DEPTH {
            self.evaluate(device)
        } else {
            on_big_stack(|| self.evaluate(device))
        }
    }

    fn evaluate(&self, device: &DeviceView) -> Result<bool, CelError> {
        let bounds = device.bounds();
        if bounds != cost::DRA_BOUNDS {
            let lengths: Vec<usize> = self.patterns.iter().map(|p| p.pattern.len()).collect();
            let cost = cost::estimate(&self.expr, bounds, &lengths).map_err(CelError::Compile)?;
            check_cost(cost)?;
        }
        let mut context = Context::with_env(Arc::clone(&functions::ENV));
        context.add_variable_as_val("device", Box::new(values::DeviceVal::new(device)));
        for (i, compiled) in self.patterns.iter().enumerate() {
            let regex = patterns::RegexVal(Arc::clone(&compiled.regex));
            context.add_variable_as_val(patterns::variable_name(i), Box::new(regex));
        }
        let result = Value::resolve_val(&self.expr, &context)
            .map_err(|e| CelError::Evaluation(e.to_string()))?;
        match result.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            None => Err(CelError::NotBool(result.get_type().name().to_owned())),
        }
    }
}

/// Compiles each distinct expression once and shares the result, errors included.
///
/// `get` takes `&self`: the cache is behind a mutex, held only to look up and to insert, never
/// while compiling, so it can be shared across threads (`Send + Sync`). It holds at most
/// `capacity` expressions; when full, it is emptied and starts over, which bounds its memory in a
/// long-running scheduler at the price of recompiling.
#[derive(Debug)]
pub struct SelectorCache {
    entries: Mutex<HashMap<String, Result<Arc<Selector>, CelError>>>,
    capacity: usize,
}

impl Default for SelectorCache {
    fn default() -> Self {
        SelectorCache::new()
    }
}

impl SelectorCache {
    /// A cache of up to 1024 expressions.
    pub fn new() -> Self {
        SelectorCache::with_capacity(1024)
    }

    /// A cache of up to `capacity` expressions (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        SelectorCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Result<Arc<Selector>, CelError>>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The compiled selector for `expression`, compiling it on first use.
    pub fn get(&self, expression: &str) -> Result<Arc<Selector>, CelError> {
        if let Some(found) = self.lock().get(expression) {
            return found.clone();
        }
        let compiled = Selector::compile(expression).map(Arc::new);
        let mut entries = self.lock();
        if entries.len() >= self.capacity {
            entries.clear();
        }
        // Another thread may have compiled it meanwhile: keep the first, so all share one.
        entries
            .entry(expression.to_owned())
            .or_insert(compiled)
            .clone()
    }

    /// How many expressions are cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no expression is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Selector>();
        assert_send_sync::<SelectorCache>();
        assert_send_sync::<CelError>();
    }
}

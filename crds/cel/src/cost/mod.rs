//! The static check of a parsed selector: names, functions and a worst-case cost.
//!
//! cel has no cost tracking, so a selector is bounded before it ever runs. One walk over the
//! expression tree checks that every identifier, `device` field and function exists in the DRA
//! environment (as Kubernetes' type checker would), and computes an upper bound on the work
//! evaluating it can do, in Kubernetes-like cost units: about one per node evaluated, one per ten
//! bytes a string function reads or writes, one per element a list operation touches.
//!
//! To bound loops, the walk tracks the largest size each value can have (the [`Shape`]): a
//! string's length, a list's or map's length and the shape of its elements. Literals give exact
//! sizes, operations derive them (`a + b` is as long as both, `split` yields one more piece than
//! the string has bytes), and the device contributes what DRA's validation allows ([`Bounds`]): at
//! most 32 attributes and capacities, strings of at most 64 bytes. A comprehension (`all`,
//! `exists`, `exists_one`, `map`, `filter`) costs its range's size times its body, so nested
//! loops multiply.
//!
//! The walk is linear in the size of the expression: no part of it is walked twice.

mod calls;

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::rc::Rc;

/// The largest a device can make the values it brings: entries per map, bytes per string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) entries: u64,
    pub(crate) string: u64,
}

/// What DRA's API validation allows a device: attributes plus capacities at most 32, attribute
/// strings and versions at most 64 bytes (driver names and qualified names are shorter).
pub(crate) const DRA_BOUNDS: Bounds = Bounds {
    entries: 32,
    string: 64,
};

/// The deepest expression tree accepted: deeper ones could exhaust even a large stack.
pub(crate) const MAX_DEPTH: usize = 100;

/// What one unit of quantity or semver arithmetic may cost: their digits are bounded too.
const NUMBER_OP: u64 = 1 + crate::decimal::MAX_DIGITS as u64 / 64;

/// Where a value comes from: the device's structure, or anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Value,
    Device,
    AttrDomains,
    CapDomains,
    AttrDomain,
    CapDomain,
}

/// The most a value can hold.
#[derive(Clone, Debug)]
struct Shape {
    origin: Origin,
    /// Bytes of a string, elements of a list, entries of a map; 1 for anything else.
    size: u64,
    /// The elements of a list, or the keys and values of a map.
    elem: Option<Rc<Shape>>,
    /// A map literal, whose iteration order is unspecified.
    unordered: bool,
}

impl Shape {
    fn value(size: u64, elem: Option<Shape>) -> Shape {
        Shape {
            origin: Origin::Value,
            size,
            elem: elem.map(Rc::new),
            unordered: false,
        }
    }

    fn scalar() -> Shape {
        Shape::value(1, None)
    }

    fn device(origin: Origin, bounds: Bounds) -> Shape {
        let size = if origin == Origin::Device {
            3
        } else {
            bounds.entries
        };
        Shape {
            origin,
            size,
            elem: Some(Rc::new(Shape::value(bounds.string, None))),
            unordered: false,
        }
    }

    /// Leaf units in the value: what copying or comparing it touches.
    fn weight(&self) -> u64 {
        let inner = self.elem.as_ref().map_or(0, |e| e.weight());
        self.size.saturating_mul(inner.saturating_add(1))
    }

    fn elem(&self) -> Option<Shape> {
        self.elem.as_deref().cloned()
    }
}

/// The shape of whichever of two values an expression yields: the larger of each.
fn merge(a: &Shape, b: &Shape) -> Shape {
    let origin = match (a.origin, b.origin) {
        (x, y) if x == y => x,
        (Origin::Value, other) | (other, Origin::Value) => other,
        (x, _) => x,
    };
    let elem = match (&a.elem, &b.elem) {
        (Some(x), Some(y)) => Some(Rc::new(merge(x, y))),
        (Some(x), None) | (None, Some(x)) => Some(Rc::clone(x)),
        (None, None) => None,
    };
    Shape {
        origin,
        size: a.size.max(b.size),
        elem,
        unordered: a.unordered || b.unordered,
    }
}

fn merge_all<'s>(shapes: impl IntoIterator<Item = &'s Shape>) -> Option<Shape> {
    shapes.into_iter().fold(None, |acc, s| {
        Some(match acc {
            None => s.clone(),
            Some(a) => merge(&a, s),
        })
    })
}

fn tenth(units: u64) -> u64 {
    units.div_ceil(10)
}

/// A checked node: its worst-case cost, and the most its value can hold.
struct Est {
    cost: u64,
    shape: Shape,
}

/// The names CEL resolves as types rather than variables.
const TYPE_NAMES: [&str; 10] = [
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// The namespaces of global functions written as `ns.f(..)`.
const NAMESPACES: [&str; 3] = ["optional", "strings", "sets"];

/// What compiling a regular expression computed at evaluation time may cost: a pattern's
/// compiled size is bounded, not its compile time by its length (see [`crate::patterns`]).
const DYNAMIC_REGEX: u64 = 20_000;

/// Checks `expr` and returns its worst-case cost, or why it can't be used. `patterns` are the
/// lengths of the literal patterns [`crate::patterns::precompile`] took out of it, if it did.
pub(crate) fn estimate(expr: &IdedExpr, bounds: Bounds, patterns: &[usize]) -> Result<u64, String> {
    let depth = depth(expr);
    if depth > MAX_DEPTH {
        return Err(format!(
            "expression nested too deeply ({depth} levels, at most {MAX_DEPTH})"
        ));
    }
    let mut walker = Walker {
        bounds,
        patterns,
        scopes: Vec::new(),
    };
    walker.walk(expr).map(|est| est.cost)
}

fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(c) => c.target.as_deref().into_iter().chain(&c.args).collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Select(s) => vec![&s.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// The depth of the tree, found without recursion.
pub(crate) fn depth(expr: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(expr, 1usize)];
    while let Some((node, d)) = stack.pop() {
        deepest = deepest.max(d);
        stack.extend(children(node).into_iter().map(|c| (c, d + 1)));
    }
    deepest
}

struct Walker<'e> {
    bounds: Bounds,
    patterns: &'e [usize],
    /// Variables in scope, innermost last.
    scopes: Vec<(&'e str, Shape)>,
}

impl<'e> Walker<'e> {
    fn lookup(&self, name: &str) -> Option<&Shape> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
    }

    /// A value nothing more is known about: as large as anything a device brings.
    fn unknown(&self) -> Shape {
        Shape::value(self.bounds.string.max(self.bounds.entries), None)
    }

    fn walk(&mut self, expr: &'e IdedExpr) -> Result<Est, String> {
        match &expr.expr {
            Expr::Literal(lit) => Ok(Est {
                cost: 0,
                shape: match lit {
                    LiteralValue::String(s) => Shape::value(s.inner().len() as u64, None),
                    LiteralValue::Bytes(b) => Shape::value(b.inner().len() as u64, None),
                    _ => Shape::scalar(),
                },
            }),
            Expr::Ident(name) => {
                let shape = if let Some(shape) = self.lookup(name) {
                    shape.clone()
                } else if name == "device" {
                    Shape::device(Origin::Device, self.bounds)
                } else if TYPE_NAMES.contains(&name.as_str()) {
                    Shape::scalar()
                } else if let Some(&len) =
                    crate::patterns::variable_index(name).and_then(|i| self.patterns.get(i))
                {
                    Shape::value(len as u64, None)
                } else {
                    return Err(format!("undeclared reference to '{name}'"));
                };
                Ok(Est { cost: 1, shape })
            }
            Expr::Select(select) => {
                let operand = self.walk(&select.operand)?;
                let shape = if select.test {
                    self.select(&operand.shape, &select.field)?;
                    Shape::scalar()
                } else {
                    self.select(&operand.shape, &select.field)?
                };
                Ok(Est {
                    cost: operand.cost.saturating_add(1),
                    shape,
                })
            }
            Expr::Call(call) => {
                let namespace = match call.target.as_deref() {
                    Some(IdedExpr {
                        expr: Expr::Ident(ns),
                        ..
                    }) if NAMESPACES.contains(&ns.as_str()) && self.lookup(ns).is_none() => {
                        Some(ns)
                    }
                    _ => None,
                };
                let target = match (namespace, call.target.as_deref()) {
                    (None, Some(t)) => Some(self.walk(t)?),
                    _ => None,
                };
                let args = call
                    .args
                    .iter()
                    .map(|a| self.walk(a))
                    .collect::<Result<Vec<_>, _>>()?;
                let name = match namespace {
                    Some(ns) => format!("{ns}.{}", call.func_name),
                    None => call.func_name.clone(),
                };
                let (own, shape) = self.call(&name, target.as_ref(), &args, call)?;
                let cost = target
                    .iter()
                    .chain(&args)
                    .fold(own, |sum, e| sum.saturating_add(e.cost));
                Ok(Est { cost, shape })
            }
            Expr::List(list) => {
                let items = list
                    .elements
                    .iter()
                    .map(|e| self.walk(e))
                    .collect::<Result<Vec<_>, _>>()?;
                let n = items.len() as u64;
                let cost = items
                    .iter()
                    .fold(n.saturating_add(1), |sum, e| sum.saturating_add(e.cost));
                let elem = merge_all(items.iter().map(|e| &e.shape));
                Ok(Est {
                    cost,
                    shape: Shape::value(n, elem),
                })
            }
            Expr::Map(map) => {
                let mut cost = 1u64;
                let mut parts = Vec::new();
                for entry in &map.entries {
                    let EntryExpr::MapEntry(e) = &entry.expr else {
                        return Err("struct fields are not allowed in a map".to_owned());
                    };
                    for part in [&e.key, &e.value] {
                        let est = self.walk(part)?;
                        cost = cost.saturating_add(est.cost).saturating_add(1);
                        parts.push(est.shape);
                    }
                }
                let mut shape = Shape::value(map.entries.len() as u64, merge_all(&parts));
                shape.unordered = true;
                Ok(Est { cost, shape })
            }
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Struct(s) => Err(format!(
                "message construction ({}{{..}}) is not supported",
                s.type_name
            )),
            Expr::Unspecified => Err("incomplete expression".to_owned()),
        }
    }

    /// The shape of `field` of a value of shape `of` (also used for `of[index]`).
    fn select(&self, of: &Shape, field: &str) -> Result<Shape, String> {
        let b = self.bounds;
        Ok(match of.origin {
            Origin::Device => match field {
                "driver" => Shape::value(b.string, None),
                "attributes" => Shape::device(Origin::AttrDomains, b),
                "capacity" => Shape::device(Origin::CapDomains, b),
                other => {
                    return Err(format!(
                    "undefined field '{other}' of device (it has driver, attributes and capacity)"
                ))
                }
            },
            Origin::AttrDomains => Shape::device(Origin::AttrDomain, b),
            Origin::CapDomains => Shape::device(Origin::CapDomain, b),
            Origin::AttrDomain => Shape::value(b.string, None),
            Origin::CapDomain => Shape::scalar(),
            Origin::Value => of.elem().unwrap_or_else(|| self.unknown()),
        })
    }

    fn comprehension(&mut self, c: &'e ComprehensionExpr) -> Result<Est, String> {
        if c.iter_var2.is_some() {
            return Err("two-variable comprehensions are not supported".to_owned());
        }
        let range = self.walk(&c.iter_range)?;
        if range.shape.unordered {
            return Err(
                "iterating over a map literal is not supported: its order is unspecified, so \
                 the result would not be deterministic"
                    .to_owned(),
            );
        }
        let (count, item) = match range.shape.origin {
            Origin::Device => return Err("the device itself cannot be iterated".to_owned()),
            Origin::Value => (
                range.shape.size,
                range.shape.elem().unwrap_or_else(|| self.unknown()),
            ),
            _ => (self.bounds.entries, Shape::value(self.bounds.string, None)),
        };
        let init = self.walk(&c.accu_init)?;
        self.scopes.push((&c.iter_var, item));
        self.scopes.push((&c.accu_var, init.shape.clone()));
        let cond = self.walk(&c.loop_cond)?;
        let step = self.walk(&c.loop_step)?;
        // An accumulator that grows per step (map, filter) ends up `count` steps larger.
        let accu = if step.shape.size > init.shape.size {
            let growth = step.shape.size - init.shape.size;
            let mut grown = merge(&init.shape, &step.shape);
            grown.size = init.shape.size.saturating_add(count.saturating_mul(growth));
            grown
        } else {
            merge(&init.shape, &step.shape)
        };
        if let Some(slot) = self.scopes.last_mut() {
            slot.1 = accu;
        }
        let result = self.walk(&c.result)?;
        self.scopes.truncate(self.scopes.len() - 2);
        let per_item = cond.cost.saturating_add(step.cost).saturating_add(1);
        let cost = range
            .cost
            .saturating_add(init.cost)
            .saturating_add(count.saturating_mul(per_item))
            .saturating_add(result.cost)
            .saturating_add(1);
        Ok(Est {
            cost,
            shape: result.shape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(source: &str) -> Result<u64, String> {
        let expr = crate::functions::ENV
            .parser()
            .parse(source)
            .map_err(|e| e.to_string())?;
        estimate(&expr, DRA_BOUNDS, &[])
    }

    #[test]
    fn ordinary_selectors_are_cheap() {
        for source in [
            r#"device.driver == "gpu.nvidia.com""#,
            r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#,
            r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
            r#"device.attributes["gpu.nvidia.com"].all(k, k.size() < 64)"#,
        ] {
            let c = cost(source).unwrap();
            assert!(c < 2_000, "{source}: {c}");
        }
    }

    #[test]
    fn nested_loops_multiply() {
        let one = cost("[1, 2, 3].all(x, x > 0)").unwrap();
        let nested = cost("[1, 2, 3].all(x, [1, 2, 3].all(y, x != y))").unwrap();
        assert!(nested > 3 * one, "{one} {nested}");
    }

    #[test]
    fn growth_is_tracked() {
        // Each bind doubles the string, 16 bytes to 2^20: building it reads and writes about
        // 2 × 2^20 bytes, comparing it 2^20 more, at one unit per ten bytes.
        let mut source = r#""aaaaaaaaaaaaaaaa""#.to_owned();
        for i in 0..16 {
            source = format!("cel.bind(s{i}, {source}, s{i} + s{i})");
        }
        let c = cost(&format!("{source} == \"\"")).unwrap();
        assert!(c > 3 * (1 << 20) / 10, "{c}");
    }

    #[test]
    fn rejects_what_kubernetes_would_not_compile() {
        for (source, message) in [
            ("foo == 1", "undeclared reference to 'foo'"),
            ("device.name == 'x'", "undefined field 'name'"),
            (
                "'abc'.reverse() == 'cba'",
                "undeclared reference to 'reverse'",
            ),
            ("{'a': 1}.all(k, k != '')", "map literal"),
            ("size('a', 'b') == 1", "no matching overload"),
        ] {
            let err = cost(source).unwrap_err();
            assert!(err.contains(message), "{source}: {err}");
        }
    }
}

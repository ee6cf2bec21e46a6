//! The cost and result shape of each function and operator of the DRA environment.

use super::{merge, tenth, Est, Origin, Shape, Walker, DYNAMIC_REGEX, NUMBER_OP};
use cel::common::ast::{operators, CallExpr, Expr, LiteralValue};

impl Walker<'_> {
    /// The cost of a call itself (its operands apart) and the shape of its result.
    pub(super) fn call(
        &self,
        name: &str,
        target: Option<&Est>,
        args: &[Est],
        call: &CallExpr,
    ) -> Result<(u64, Shape), String> {
        let t = target.map(|t| &t.shape);
        let a: Vec<&Shape> = args.iter().map(|e| &e.shape).collect();
        let size = |i: usize| a.get(i).map_or(0, |s| s.size);
        let tsize = t.map_or(0, |s| s.size);
        let str_of = |n: u64| Shape::value(n, None);
        let scalar = Shape::scalar;
        let member = t.is_some();
        let argc = a.len();
        let regex_cost = |text: u64, pattern: u64| {
            let dynamic = crate::patterns::pattern_argument(call)
                .is_some_and(|i| !crate::patterns::is_precompiled(&call.args[i]));
            let compile = if dynamic { DYNAMIC_REGEX } else { 0 };
            compile + 1 + tenth(text.saturating_mul(pattern.max(10)))
        };
        use operators as op;
        Ok(match (name, member, argc) {
            (op::LOGICAL_AND | op::LOGICAL_OR, false, 2) => (1, scalar()),
            (op::CONDITIONAL, false, 3) => (1, merge(a[1], a[2])),
            (op::LOGICAL_NOT | op::NEGATE | op::NOT_STRICTLY_FALSE, false, 1) => (1, scalar()),
            (op::EQUALS | op::NOT_EQUALS, false, 2) => (
                1 + tenth(a[0].weight().saturating_add(a[1].weight())),
                scalar(),
            ),
            (op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS, false, 2) => {
                (1 + tenth(size(0).max(size(1))), scalar())
            }
            (op::ADD, false, 2) => {
                let appending = matches!(&call.args[0].expr, Expr::Ident(n) if n == "@result");
                let copied = if appending {
                    a[1].weight()
                } else {
                    a[0].weight().saturating_add(a[1].weight())
                };
                let elem = match (a[0].elem(), a[1].elem()) {
                    (Some(x), Some(y)) => Some(merge(&x, &y)),
                    (x, y) => x.or(y),
                };
                (
                    1 + tenth(copied),
                    Shape::value(size(0).saturating_add(size(1)), elem),
                )
            }
            (op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO, false, 2) => (1, scalar()),
            (op::INDEX | op::OPT_INDEX, false, 2) => {
                let field = match &call.args[1].expr {
                    Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
                    _ => None,
                };
                if a[0].origin == Origin::Device && field.is_none() {
                    return Err("device fields must be selected by name".to_owned());
                }
                (1, self.select(a[0], field.unwrap_or(""))?)
            }
            (op::OPT_SELECT, false, 2) => {
                let Expr::Literal(LiteralValue::String(field)) = &call.args[1].expr else {
                    return Err("invalid optional field selection".to_owned());
                };
                (1, self.select(a[0], field.inner())?)
            }
            (op::IN, false, 2) => (1 + a[1].size, scalar()),
            ("size", false, 1) => (1 + tenth(size(0)), scalar()),
            ("size", true, 0) => (1 + tenth(tsize), scalar()),
            ("dyn", false, 1) => (1, a[0].clone()),
            ("type" | "int" | "uint" | "double" | "bool", false, 1) => {
                (1 + tenth(size(0)), scalar())
            }
            ("string" | "bytes", false, 1) => (1 + tenth(size(0)), str_of(size(0).max(32))),
            ("contains" | "startsWith" | "endsWith", true, 1) => {
                (1 + tenth(tsize.saturating_add(size(0))), scalar())
            }
            ("matches", false, 2) => (regex_cost(size(0), size(1)), scalar()),
            ("matches", true, 1) => (regex_cost(tsize, size(0)), scalar()),
            ("find", true, 1) => (regex_cost(tsize, size(0)), str_of(tsize)),
            ("findAll", true, 1 | 2) => (
                regex_cost(tsize, size(0)).saturating_add(tsize),
                Shape::value(tsize.saturating_add(1), Some(str_of(tsize))),
            ),
            ("lowerAscii" | "upperAscii" | "trim", true, 0) | ("substring", true, 1 | 2) => {
                (1 + tenth(tsize), str_of(tsize))
            }
            ("charAt", true, 1) => (1 + tenth(tsize), str_of(4)),
            ("indexOf" | "lastIndexOf", true, 1 | 2) => {
                let t = t.map_or(0, |t| t.weight());
                let scan = t.saturating_mul(a[0].weight().max(1));
                (1 + tenth(t) + tenth(scan), scalar())
            }
            ("replace", true, 2 | 3) => {
                let out = tsize.saturating_add(tsize.saturating_add(1).saturating_mul(size(1)));
                let scan = tsize.saturating_mul(size(0).max(1));
                (1 + tenth(scan) + tenth(out), str_of(out))
            }
            ("split", true, 1 | 2) => (
                2 + tenth(tsize) + tsize,
                Shape::value(tsize.saturating_add(1), Some(str_of(tsize))),
            ),
            ("join", true, 0 | 1) => {
                let piece = t.and_then(|t| t.elem()).map_or(0, |e| e.size);
                let out = tsize.saturating_mul(piece.saturating_add(size(0)));
                (1 + tsize + tenth(out), str_of(out))
            }
            ("strings.quote", false, 1) => {
                let out = size(0).saturating_mul(10).saturating_add(2);
                (1 + tenth(out), str_of(out))
            }
            ("quantity" | "isQuantity", false, 1) => (NUMBER_OP + tenth(size(0)), scalar()),
            ("semver" | "isSemver", false, 1 | 2) => (1 + tenth(size(0)), scalar()),
            ("sign" | "isInteger" | "asInteger" | "asApproximateFloat", true, 0) => {
                (NUMBER_OP, scalar())
            }
            ("add" | "sub" | "compareTo" | "isGreaterThan" | "isLessThan", true, 1) => {
                (NUMBER_OP, scalar())
            }
            ("major" | "minor" | "patch", true, 0) => (1, scalar()),
            ("optional.of" | "optional.ofNonZeroValue", false, 1) => (1, a[0].clone()),
            ("optional.none", false, 0) => (1, scalar()),
            ("hasValue", true, 0) => (1, scalar()),
            ("value", true, 0) => (1, t.cloned().unwrap_or_else(scalar)),
            ("orValue" | "or", true, 1) => (1, t.map_or_else(scalar, |t| merge(t, a[0]))),
            ("sets.contains" | "sets.equivalent" | "sets.intersects", false, 2) => {
                let pairs = a[0].weight().saturating_mul(a[1].weight());
                (1u64.saturating_add(pairs).saturating_add(pairs), scalar())
            }
            ("isSorted" | "sum" | "min" | "max", true, 0) => {
                let t = t.cloned().unwrap_or_else(scalar);
                let elem = t.elem().unwrap_or_else(scalar);
                (1 + t.weight(), elem)
            }
            _ => return Err(unknown_call(name, member, argc)),
        })
    }
}

const KNOWN: &[&str] = &[
    "size",
    "dyn",
    "type",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "find",
    "findAll",
    "lowerAscii",
    "upperAscii",
    "trim",
    "substring",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "replace",
    "split",
    "join",
    "strings.quote",
    "quantity",
    "isQuantity",
    "semver",
    "isSemver",
    "sign",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "add",
    "sub",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    "major",
    "minor",
    "patch",
    "sets.contains",
    "isSorted",
];

fn unknown_call(name: &str, member: bool, argc: usize) -> String {
    let known = KNOWN.contains(&name)
        || name.starts_with('_')
        || matches!(
            name,
            "sum"
                | "min"
                | "max"
                | "optional.of"
                | "optional.none"
                | "optional.ofNonZeroValue"
                | "hasValue"
                | "value"
                | "orValue"
                | "or"
                | "sets.equivalent"
                | "sets.intersects"
        );
    match (known, member) {
        (true, true) => {
            format!("found no matching overload for '{name}' as a method with {argc} argument(s)")
        }
        (true, false) => format!("found no matching overload for '{name}' with {argc} argument(s)"),
        (false, _)
            if matches!(
                name,
                "all" | "exists" | "exists_one" | "existsOne" | "map" | "filter"
            ) =>
        {
            format!("'{name}' with these arguments is not supported (two-variable comprehensions are not)")
        }
        (false, _) => format!("undeclared reference to '{name}'"),
    }
}

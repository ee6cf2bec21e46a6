//! The CEL environment of DRA selectors: cel's standard library and strings extension, plus what
//! Kubernetes adds and cel lacks: `cel.bind`, the `quantity` and `semver` libraries, the regex
//! library (in [`patterns`](crate::patterns)), `sets` and the list functions of Kubernetes'
//! `lists` library.

use crate::quantity::Quantity;
use crate::semver::Semver;
use crate::values::{QuantityVal, SemverVal, QUANTITY_TYPE, SEMVER_TYPE};
use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::common::types::{CelBool, CelInt, CelString, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{DeclarationError, Env, ExecutionError};
use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

/// The one environment every selector is compiled and evaluated in.
pub(crate) static ENV: LazyLock<Arc<Env>> =
    LazyLock::new(|| Arc::new(build_env().expect("each DRA CEL overload is declared once")));

fn build_env() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_macro(Macro::receiver("bind", 3, bind_macro))?;
    env.add_type(QUANTITY_TYPE.to_owned())?;
    env.add_type(SEMVER_TYPE.to_owned())?;
    crate::patterns::register(&mut env)?;
    quantity_lib::register(&mut env)?;
    semver_lib::register(&mut env)?;
    lists_lib::register(&mut env)?;
    Ok(env)
}

/// `cel.bind(name, init, body)`: `body` with `name` bound to `init`, evaluated once. Expanded, as
/// in cel-go, into a comprehension over an empty list whose accumulator is the variable.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    if !matches!(target, Some(IdedExpr { expr: Expr::Ident(ns), .. }) if ns == "cel") {
        return Ok(None);
    }
    let Expr::Ident(name) = &args[0].expr else {
        return Err(helper.new_error(
            args[0].id,
            "cel.bind() variable name must be a simple identifier",
        ));
    };
    let name = name.clone();
    let (Some(body), Some(init)) = (args.pop(), args.pop()) else {
        unreachable!("the macro is only expanded for calls with three arguments");
    };
    args.clear();
    target.take();
    let iter_range = helper.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let loop_cond = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
    let loop_step = helper.next_expr(Expr::Ident(name.clone()));
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(
        ComprehensionExpr {
            iter_range,
            iter_var: "#unused".to_owned(),
            iter_var2: None,
            accu_var: name,
            accu_init: init,
            loop_cond,
            loop_step,
            result: body,
        },
    )))))
}

/// Kubernetes' quantity library: `quantity()`, `isQuantity()` and the methods of `Quantity`.
mod quantity_lib {
    use super::*;

    fn parse(s: &CelString<'_>) -> Result<QuantityVal, ExecutionError> {
        Quantity::parse(s.inner()).map(QuantityVal).map_err(|e| {
            ExecutionError::function_error("quantity", format!("{:?}: {e}", s.inner()))
        })
    }

    fn is_quantity(s: &CelString<'_>) -> CelBool {
        CelBool::from(Quantity::parse(s.inner()).is_ok())
    }

    fn sign(q: &QuantityVal) -> CelInt {
        CelInt::from(i64::from(q.0.sign()))
    }

    fn is_integer(q: &QuantityVal) -> CelBool {
        CelBool::from(q.0.is_integer())
    }

    fn as_integer(q: &QuantityVal) -> Result<CelInt, ExecutionError> {
        q.0.as_i64().map(CelInt::from).ok_or_else(|| {
            ExecutionError::function_error("asInteger", "cannot convert value to integer")
        })
    }

    fn as_approximate_float(q: &QuantityVal) -> cel::common::types::CelDouble {
        q.0.as_approximate_f64().into()
    }

    fn arithmetic(
        function: &str,
        result: Result<Quantity, String>,
    ) -> Result<QuantityVal, ExecutionError> {
        result
            .map(QuantityVal)
            .map_err(|e| ExecutionError::function_error(function, e))
    }

    fn add(q: &QuantityVal, other: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
        arithmetic("add", q.0.checked_add(&other.0))
    }

    fn add_int(q: &QuantityVal, n: &CelInt) -> Result<QuantityVal, ExecutionError> {
        arithmetic("add", q.0.checked_add(&Quantity::from_i64(*n.inner())))
    }

    fn sub(q: &QuantityVal, other: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
        arithmetic("sub", q.0.checked_sub(&other.0))
    }

    fn sub_int(q: &QuantityVal, n: &CelInt) -> Result<QuantityVal, ExecutionError> {
        arithmetic("sub", q.0.checked_sub(&Quantity::from_i64(*n.inner())))
    }

    fn compare_to(q: &QuantityVal, other: &QuantityVal) -> CelInt {
        CelInt::from(q.0.cmp(&other.0) as i64)
    }

    fn is_greater_than(q: &QuantityVal, other: &QuantityVal) -> CelBool {
        CelBool::from(q.0 > other.0)
    }

    fn is_less_than(q: &QuantityVal, other: &QuantityVal) -> CelBool {
        CelBool::from(q.0 < other.0)
    }

    pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
        cel::add_overload!(env, fn parse: (CelString) -> Result<QuantityVal>, name = "quantity")?;
        cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
        cel::add_member_overload!(env, fn sign: (QuantityVal) -> CelInt)?;
        cel::add_member_overload!(env, fn is_integer: (QuantityVal) -> CelBool)?;
        cel::add_member_overload!(env, fn as_integer: (QuantityVal) -> Result<CelInt>)?;
        cel::add_member_overload!(env, fn as_approximate_float: (QuantityVal) -> cel::common::types::CelDouble)?;
        cel::add_member_overload!(env, fn add: (QuantityVal, QuantityVal) -> Result<QuantityVal>)?;
        cel::add_member_overload!(env, fn add_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "add")?;
        cel::add_member_overload!(env, fn sub: (QuantityVal, QuantityVal) -> Result<QuantityVal>)?;
        cel::add_member_overload!(env, fn sub_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "sub")?;
        cel::add_member_overload!(env, fn compare_to: (QuantityVal, QuantityVal) -> CelInt)?;
        cel::add_member_overload!(env, fn is_greater_than: (QuantityVal, QuantityVal) -> CelBool)?;
        cel::add_member_overload!(env, fn is_less_than: (QuantityVal, QuantityVal) -> CelBool)?;
        Ok(())
    }
}

/// Kubernetes' semver library: `semver()`, `isSemver()` and the methods of `Semver`.
mod semver_lib {
    use super::*;

    fn parse_with(s: &CelString<'_>, normalize: bool) -> Result<SemverVal, ExecutionError> {
        let parsed = if normalize {
            Semver::parse_normalized(s.inner())
        } else {
            Semver::parse(s.inner())
        };
        parsed
            .map(SemverVal)
            .map_err(|e| ExecutionError::function_error("semver", format!("{:?}: {e}", s.inner())))
    }

    fn parse(s: &CelString<'_>) -> Result<SemverVal, ExecutionError> {
        parse_with(s, false)
    }

    fn parse_normalized(
        s: &CelString<'_>,
        normalize: &CelBool,
    ) -> Result<SemverVal, ExecutionError> {
        parse_with(s, *normalize.inner())
    }

    fn is_semver(s: &CelString<'_>) -> CelBool {
        CelBool::from(parse_with(s, false).is_ok())
    }

    fn is_semver_normalized(s: &CelString<'_>, normalize: &CelBool) -> CelBool {
        CelBool::from(parse_with(s, *normalize.inner()).is_ok())
    }

    fn major(v: &SemverVal) -> CelInt {
        CelInt::from(v.0.major() as i64)
    }

    fn minor(v: &SemverVal) -> CelInt {
        CelInt::from(v.0.minor() as i64)
    }

    fn patch(v: &SemverVal) -> CelInt {
        CelInt::from(v.0.patch() as i64)
    }

    fn compare_to(v: &SemverVal, other: &SemverVal) -> CelInt {
        CelInt::from(v.0.cmp(&other.0) as i64)
    }

    fn is_greater_than(v: &SemverVal, other: &SemverVal) -> CelBool {
        CelBool::from(v.0 > other.0)
    }

    fn is_less_than(v: &SemverVal, other: &SemverVal) -> CelBool {
        CelBool::from(v.0 < other.0)
    }

    pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
        cel::add_overload!(env, fn parse: (CelString) -> Result<SemverVal>, name = "semver")?;
        cel::add_overload!(env, fn parse_normalized: (CelString, CelBool) -> Result<SemverVal>,
            name = "semver")?;
        cel::add_overload!(env, fn is_semver: (CelString) -> CelBool)?;
        cel::add_overload!(env, fn is_semver_normalized: (CelString, CelBool) -> CelBool,
            name = "isSemver")?;
        cel::add_member_overload!(env, fn major: (SemverVal) -> CelInt)?;
        cel::add_member_overload!(env, fn minor: (SemverVal) -> CelInt)?;
        cel::add_member_overload!(env, fn patch: (SemverVal) -> CelInt)?;
        cel::add_member_overload!(env, fn compare_to: (SemverVal, SemverVal) -> CelInt)?;
        cel::add_member_overload!(env, fn is_greater_than: (SemverVal, SemverVal) -> CelBool)?;
        cel::add_member_overload!(env, fn is_less_than: (SemverVal, SemverVal) -> CelBool)?;
        Ok(())
    }
}

/// `sets.contains`, `sets.equivalent`, `sets.intersects` (cel-go's sets extension) and the list
/// functions of Kubernetes' `lists` library: `isSorted`, `sum`, `min`, `max`, `indexOf`,
/// `lastIndexOf`.
mod lists_lib {
    use super::*;

    type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
    type Out<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

    fn elements<'b, 'v>(
        function: &str,
        list: &'b (dyn Val + 'v),
    ) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
        let iterable = list
            .as_iterable()
            .ok_or_else(|| ExecutionError::function_error(function, "expects a list"))?;
        let mut out = Vec::new();
        let mut items = iterable.iter();
        while let Some(item) = items.next() {
            out.push(item);
        }
        Ok(out)
    }

    fn bool_out<'b, 'v>(b: bool) -> Out<'b, 'v> {
        Ok(CowVal::owned(CelBool::from(b)))
    }

    fn contains_all(haystack: &[&dyn Val], needles: &[&dyn Val]) -> bool {
        needles
            .iter()
            .all(|n| haystack.iter().any(|h| h.equals(*n)))
    }

    fn sets_contains<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        let a = elements("sets.contains", args[0].as_ref())?;
        let b = elements("sets.contains", args[1].as_ref())?;
        bool_out(contains_all(&a, &b))
    }

    fn sets_equivalent<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        let a = elements("sets.equivalent", args[0].as_ref())?;
        let b = elements("sets.equivalent", args[1].as_ref())?;
        bool_out(contains_all(&a, &b) && contains_all(&b, &a))
    }

    fn sets_intersects<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        let a = elements("sets.intersects", args[0].as_ref())?;
        let b = elements("sets.intersects", args[1].as_ref())?;
        bool_out(a.iter().any(|x| b.iter().any(|y| x.equals(*y))))
    }

    fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
        a.as_comparer()
            .ok_or_else(|| ExecutionError::function_error(function, "elements are not comparable"))?
            .compare(b)
    }

    fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        let items = elements("isSorted", args[0].as_ref())?;
        for pair in items.windows(2) {
            if compare("isSorted", pair[0], pair[1])?.is_gt() {
                return bool_out(false);
            }
        }
        bool_out(true)
    }

    fn extreme<'b, 'v>(function: &str, args: Args<'b, 'v>, keep: Ordering) -> Out<'b, 'v> {
        let items = elements(function, args[0].as_ref())?;
        let mut best = *items
            .first()
            .ok_or_else(|| ExecutionError::function_error(function, "called on an empty list"))?;
        for item in &items[1..] {
            if compare(function, *item, best)? == keep {
                best = *item;
            }
        }
        Ok(CowVal::Owned(best.clone_as_boxed()))
    }

    fn min<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        extreme("min", args, Ordering::Less)
    }

    fn max<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        extreme("max", args, Ordering::Greater)
    }

    fn sum<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        let items = elements("sum", args[0].as_ref())?;
        let Some((first, rest)) = items.split_first() else {
            return Ok(CowVal::owned(CelInt::from(0)));
        };
        let mut total: Box<dyn Val + 'v> = first.clone_as_boxed();
        for item in rest {
            let adder = total
                .as_adder()
                .ok_or_else(|| ExecutionError::function_error("sum", "elements cannot be added"))?;
            let next = adder.add(*item)?.into_owned();
            total = next;
        }
        Ok(CowVal::Owned(total))
    }

    fn position<'b, 'v>(args: Args<'b, 'v>, last: bool) -> Out<'b, 'v> {
        let items = elements("indexOf", args[0].as_ref())?;
        let found = if last {
            items.iter().rposition(|x| x.equals(args[1].as_ref()))
        } else {
            items.iter().position(|x| x.equals(args[1].as_ref()))
        };
        Ok(CowVal::owned(CelInt::from(found.map_or(-1, |i| i as i64))))
    }

    fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        position(args, false)
    }

    fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
        position(args, true)
    }

    pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
        let two_lists = || vec![LIST_TYPE, LIST_TYPE];
        env.add_overload(
            "sets.contains",
            "list_sets_contains_list",
            two_lists(),
            sets_contains,
        )?;
        env.add_overload(
            "sets.equivalent",
            "list_sets_equivalent_list",
            two_lists(),
            sets_equivalent,
        )?;
        env.add_overload(
            "sets.intersects",
            "list_sets_intersects_list",
            two_lists(),
            sets_intersects,
        )?;
        env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
        env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
        env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
        env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
        let any = cel::common::types::DYN_TYPE;
        env.add_member_overload(
            "indexOf",
            "list_index_of",
            LIST_TYPE,
            vec![any.to_owned()],
            index_of,
        )?;
        env.add_member_overload(
            "lastIndexOf",
            "list_last_index_of",
            LIST_TYPE,
            vec![any],
            last_index_of,
        )?;
        Ok(())
    }
}

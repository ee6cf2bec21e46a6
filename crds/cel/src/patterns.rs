//! Kubernetes' regex library (`matches`, `find`, `findAll`) on the `regex` crate: RE2 syntax,
//! matching linear in the text.
//!
//! Compiling a pattern can cost far more than its length suggests (`\pL{60}` is a few bytes but a
//! large automaton), so patterns are bounded and compiled ahead where possible:
//!
//! - every compiled program is limited to [`SIZE_LIMIT`] bytes, which caps a compile at a few
//!   milliseconds; larger patterns are errors;
//! - a pattern written as a string literal is compiled once, with the selector, where an invalid
//!   one is a compile error as in Kubernetes. The selector holds it and binds it to a hidden
//!   variable that replaces the literal, so evaluation never compiles it again;
//! - a pattern computed at evaluation time is compiled then, through a small per-thread cache
//!   that remembers failures too, and the cost model charges each such call for a compile.

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelInt, CelList, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use regex::{Regex, RegexBuilder};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// The largest compiled program a pattern may have.
pub(crate) const SIZE_LIMIT: usize = 512 << 10;

/// The most distinct literal patterns one expression may have.
pub(crate) const MAX_PATTERNS: usize = 16;

/// The name of the hidden variable holding the `i`-th literal pattern, compiled.
const VARIABLE_PREFIX: &str = "@re";

/// Patterns computed at evaluation time that each thread keeps compiled.
const CACHED_PATTERNS: usize = 64;

pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regular expression {pattern:?}: {e}"))
}

pub(crate) fn variable_name(index: usize) -> String {
    format!("{VARIABLE_PREFIX}{index}")
}

/// The index of a hidden pattern variable, for the cost model.
pub(crate) fn variable_index(name: &str) -> Option<usize> {
    name.strip_prefix(VARIABLE_PREFIX)?.parse().ok()
}

/// Which argument of `call` (its target not counted) is a pattern, if it is a regex function.
pub(crate) fn pattern_argument(call: &CallExpr) -> Option<usize> {
    match (
        call.func_name.as_str(),
        call.target.is_some(),
        call.args.len(),
    ) {
        ("matches", false, 2) => Some(1),
        ("matches" | "find" | "findAll", true, 1) | ("findAll", true, 2) => Some(0),
        _ => None,
    }
}

/// Whether a pattern argument is compiled ahead: a string literal, or the variable one became.
pub(crate) fn is_precompiled(arg: &IdedExpr) -> bool {
    match &arg.expr {
        Expr::Literal(LiteralValue::String(_)) => true,
        Expr::Ident(name) => variable_index(name).is_some(),
        _ => false,
    }
}

/// A literal pattern, compiled.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    pub(crate) pattern: String,
    pub(crate) regex: Arc<Regex>,
}

/// Compiles each distinct literal pattern of `expr` and replaces it by the variable that will hold
/// it, `@re0`, `@re1`, ...; returns them in that order.
pub(crate) fn precompile(expr: &mut IdedExpr) -> Result<Vec<Compiled>, String> {
    let mut found = Vec::new();
    rewrite(expr, &mut found)?;
    Ok(found)
}

fn rewrite(expr: &mut IdedExpr, found: &mut Vec<Compiled>) -> Result<(), String> {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(i) = pattern_argument(call) {
                if let Expr::Literal(LiteralValue::String(p)) = &call.args[i].expr {
                    let pattern = p.inner();
                    let index = match found.iter().position(|c| c.pattern == pattern) {
                        Some(index) => index,
                        None if found.len() == MAX_PATTERNS => {
                            return Err(format!(
                                "more than {MAX_PATTERNS} distinct regular expressions"
                            ))
                        }
                        None => {
                            let regex = Arc::new(compile(pattern)?);
                            let pattern = pattern.to_owned();
                            found.push(Compiled { pattern, regex });
                            found.len() - 1
                        }
                    };
                    call.args[i].expr = Expr::Ident(variable_name(index));
                }
            }
            if let Some(target) = call.target.as_deref_mut() {
                rewrite(target, found)?;
            }
            for arg in &mut call.args {
                rewrite(arg, found)?;
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                rewrite(part, found)?;
            }
        }
        Expr::List(list) => {
            for e in &mut list.elements {
                rewrite(e, found)?;
            }
        }
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(e) = &mut entry.expr {
                    rewrite(&mut e.key, found)?;
                    rewrite(&mut e.value, found)?;
                }
            }
        }
        Expr::Select(select) => rewrite(&mut select.operand, found)?,
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    Ok(())
}

static REGEX_TYPE: Type = Type::new_unspecified_type("basalt.Regex");

/// A compiled pattern as a CEL value: what a literal pattern becomes.
#[derive(Clone, Debug)]
pub(crate) struct RegexVal(pub(crate) Arc<Regex>);

impl Val for RegexVal {
    fn get_type(&self) -> &Type {
        &REGEX_TYPE
    }

    fn cel_type() -> &'static Type {
        &REGEX_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<RegexVal>()
            .is_some_and(|o| o.0.as_str() == self.0.as_str())
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for RegexVal {}

thread_local! {
    static CACHE: RefCell<HashMap<String, Result<Regex, String>>> = RefCell::new(HashMap::new());
}

/// Runs `f` with `pattern`, computed at evaluation time, compiled.
fn with_dynamic<T>(
    function: &str,
    pattern: &str,
    f: impl FnOnce(&Regex) -> T,
) -> Result<T, ExecutionError> {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if !cache.contains_key(pattern) {
            if cache.len() >= CACHED_PATTERNS {
                cache.clear();
            }
            cache.insert(pattern.to_owned(), compile(pattern));
        }
        match &cache[pattern] {
            Ok(regex) => Ok(f(regex)),
            Err(e) => Err(ExecutionError::function_error(function, e)),
        }
    })
}

fn find_all_in(regex: &Regex, text: &str, limit: i64) -> CelList<'static> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    regex
        .find_iter(text)
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn Val>)
        .collect::<Vec<_>>()
        .into()
}

fn first_in(regex: &Regex, text: &str) -> CelString<'static> {
    regex
        .find(text)
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default()
        .into()
}

mod dynamic {
    use super::*;

    pub(super) fn matches(
        this: &CelString<'_>,
        re: &CelString<'_>,
    ) -> Result<CelBool, ExecutionError> {
        with_dynamic("matches", re.inner(), |r| r.is_match(this.inner())).map(CelBool::from)
    }

    pub(super) fn find(
        this: &CelString<'_>,
        re: &CelString<'_>,
    ) -> Result<CelString<'static>, ExecutionError> {
        with_dynamic("find", re.inner(), |r| first_in(r, this.inner()))
    }

    pub(super) fn find_all(
        this: &CelString<'_>,
        re: &CelString<'_>,
    ) -> Result<CelList<'static>, ExecutionError> {
        with_dynamic("findAll", re.inner(), |r| find_all_in(r, this.inner(), -1))
    }

    pub(super) fn find_all_n(
        this: &CelString<'_>,
        re: &CelString<'_>,
        n: &CelInt,
    ) -> Result<CelList<'static>, ExecutionError> {
        with_dynamic("findAll", re.inner(), |r| {
            find_all_in(r, this.inner(), *n.inner())
        })
    }

    pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
        cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)?;
        cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)?;
        cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
        cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
        cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
            name = "findAll")?;
        Ok(())
    }
}

mod compiled {
    use super::*;

    pub(super) fn matches(this: &CelString<'_>, re: &RegexVal) -> CelBool {
        CelBool::from(re.0.is_match(this.inner()))
    }

    pub(super) fn find(this: &CelString<'_>, re: &RegexVal) -> CelString<'static> {
        first_in(&re.0, this.inner())
    }

    pub(super) fn find_all(this: &CelString<'_>, re: &RegexVal) -> CelList<'static> {
        find_all_in(&re.0, this.inner(), -1)
    }

    pub(super) fn find_all_n(this: &CelString<'_>, re: &RegexVal, n: &CelInt) -> CelList<'static> {
        find_all_in(&re.0, this.inner(), *n.inner())
    }

    pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
        cel::add_overload!(env, fn matches: (CelString, RegexVal) -> CelBool)?;
        cel::add_member_overload!(env, fn matches: (CelString, RegexVal) -> CelBool)?;
        cel::add_member_overload!(env, fn find: (CelString, RegexVal) -> CelString)?;
        cel::add_member_overload!(env, fn find_all: (CelString, RegexVal) -> CelList)?;
        cel::add_member_overload!(env, fn find_all_n: (CelString, RegexVal, CelInt) -> CelList,
            name = "findAll")?;
        Ok(())
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    dynamic::register(env)?;
    compiled::register(env)
}

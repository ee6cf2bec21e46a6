//! Running deploy/'s admission policies' CEL in tests: the `cel` crate stands in for the API
//! server's CEL (same syntax and macros, no type check). Shared by `admission.rs` and
//! `opt_in.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Context, Env, Value};

/// `expr` evaluated with `vars`; a compile or runtime error fails the test, naming `expr`.
pub fn run(env: &Arc<Env>, expr: &str, vars: &HashMap<&str, Value>) -> Value {
    let program = env.compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut context = Context::with_env(env.clone());
    for (name, value) in vars {
        context.add_variable_from_value(*name, value.clone());
    }
    program
        .execute(&context)
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
}

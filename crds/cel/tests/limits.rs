//! What a selector may not do: be too long, not compile, nest too deeply, cost too much; and the
//! guarantees around it: determinism, the shared cache.

mod common;

use basalt_cel::{
    AttributeValue, CelError, Selector, SelectorCache, COST_LIMIT, MAX_EXPRESSION_BYTES,
};
use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn too_long() {
    let e = format!("device.driver == \"{}\"", "x".repeat(MAX_EXPRESSION_BYTES));
    assert_eq!(
        Selector::compile(&e).unwrap_err(),
        CelError::TooLong {
            bytes: e.len(),
            limit: MAX_EXPRESSION_BYTES
        }
    );
    // Just under the limit compiles.
    let fits = format!(
        "device.driver != \"{}\"",
        "x".repeat(MAX_EXPRESSION_BYTES - 20)
    );
    assert!(Selector::compile(&fits).is_ok());
}

#[test]
fn compile_errors() {
    for (e, needle) in [
        ("device.driver ==", ""),
        ("device.driver == 'a' &&", ""),
        ("gpu.type == 'gpu'", "undeclared reference to 'gpu'"),
        ("device.name == 'gpu-0'", "undefined field 'name'"),
        (
            "device.driver.reverse() == 'x'",
            "undeclared reference to 'reverse'",
        ),
        (
            "frobnicate(device.driver)",
            "undeclared reference to 'frobnicate'",
        ),
        ("{'a': 1}.exists(k, true)", "map literal"),
        ("cel.bind(1, 2, true)", "simple identifier"),
    ] {
        let err = Selector::compile(e).unwrap_err();
        let CelError::Compile(message) = &err else {
            panic!("{e}: {err:?}");
        };
        assert!(message.contains(needle), "{e}: {message}");
        assert!(err
            .to_string()
            .starts_with("CEL expression does not compile"));
    }
}

#[test]
fn deep_nesting_is_refused_not_a_crash() {
    for e in [
        format!("{}true{}", "(".repeat(2000), ")".repeat(2000)),
        format!("{}1]].size() > 0", "[".repeat(2000)),
        format!("{}true{}", "[1].all(x, ".repeat(60), ")".repeat(60)),
        format!("{} > 0", vec!["1"; 150].join(" + ")),
    ] {
        let err = Selector::compile(&e).unwrap_err();
        assert!(
            matches!(&err, CelError::Compile(m) if m.contains("nested too deeply")),
            "{}: {err}",
            &e[..20]
        );
    }
    // Unary chains fold; long `&&` chains are balanced: neither is deep.
    yes(&format!("{}true", "!".repeat(3000)), &h100());
    let chain = vec!["device.driver != 'x'"; 300].join(" && ");
    yes(&chain, &h100());
    // Deep but allowed expressions evaluate, on a thread with a large stack.
    let sum = format!("{} > 0", vec!["1"; 90].join(" + "));
    yes(&sum, &h100());
    let nested = format!("{}true{}", "[1].all(x, ".repeat(40), ")".repeat(40));
    yes(&nested, &h100());
}

#[test]
fn cost_overrun_is_refused_quickly() {
    let list = format!(
        "[{}]",
        (0..1000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let e = format!("{list}.all(x, {list}.all(y, x != y || x == y))");
    assert!(e.len() < MAX_EXPRESSION_BYTES);
    let start = Instant::now();
    let err = Selector::compile(&e).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let CelError::CostExceeded { cost, limit } = err else {
        panic!("{err:?}");
    };
    assert_eq!(limit, COST_LIMIT);
    assert!(cost > COST_LIMIT);
    assert!(err
        .to_string()
        .starts_with("CEL expression cost exceeds the limit of 1000000 (estimated "));

    // A single pass over the same list is fine, and runs.
    yes(&format!("{list}.all(x, x >= 0)"), &h100());

    // Strings doubled by nested binds are caught by size, not by node count.
    let mut doubled = r#""0123456789abcdef""#.to_owned();
    for i in 0..24 {
        doubled = format!("cel.bind(s{i}, {doubled}, s{i} + s{i})");
    }
    assert!(matches!(
        Selector::compile(&format!("{doubled}.size() > 0")),
        Err(CelError::CostExceeded { .. })
    ));
}

#[test]
fn an_oversized_device_is_bounded_at_match_time() {
    let e =
        r#"device.attributes["x.io"].all(a, device.attributes["x.io"].all(b, a != b || a == b))"#;
    let selector = Selector::compile(e).unwrap();
    // Within DRA's limits (32 entries): compiles and runs.
    let small = Device {
        driver: "x.io",
        attributes: (0..32)
            .map(|i| (format!("x.io/a{i}"), AttributeValue::Int(i)))
            .collect(),
        capacity: BTreeMap::new(),
    };
    assert_eq!(selector.matches(&small.view()), Ok(true));
    // Far beyond them, the same selector is refused rather than run for long.
    let huge = Device {
        driver: "x.io",
        attributes: (0..2000)
            .map(|i| (format!("x.io/a{i}"), AttributeValue::Int(i)))
            .collect(),
        capacity: BTreeMap::new(),
    };
    let start = Instant::now();
    assert!(matches!(
        selector.matches(&huge.view()),
        Err(CelError::CostExceeded { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn deterministic() {
    let dev = mig();
    let e = r#"device.capacity["gpu.nvidia.com"].map(k, k).join(",") == "copyEngines,memory,multiprocessors"
        && device.attributes.map(d, d) == ["gpu.nvidia.com"]"#;
    let selector = Selector::compile(e).unwrap();
    for _ in 0..50 {
        assert_eq!(selector.matches(&dev.view()), Ok(true));
    }
}

#[test]
fn cache_compiles_once_and_shares() {
    let cache = SelectorCache::new();
    let a = cache.get("device.driver == 'gpu.nvidia.com'").unwrap();
    let b = cache.get("device.driver == 'gpu.nvidia.com'").unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let e1 = cache.get("device.nope").unwrap_err();
    let e2 = cache.get("device.nope").unwrap_err();
    assert_eq!(e1, e2);
    assert_eq!(cache.len(), 2);

    let small = SelectorCache::with_capacity(2);
    for e in ["true", "false", "1 == 1"] {
        small.get(e).unwrap();
    }
    assert!(small.len() <= 2);

    let shared = Arc::new(SelectorCache::new());
    let dev = Arc::new(h100());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (cache, dev) = (Arc::clone(&shared), Arc::clone(&dev));
            std::thread::spawn(move || {
                let sel = cache
                    .get(r#"device.attributes["gpu.nvidia.com"].productName.matches("H100")"#)
                    .unwrap();
                (0..100).all(|_| sel.matches(&dev.view()) == Ok(true))
            })
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join().unwrap()));
    assert_eq!(shared.len(), 1);
}

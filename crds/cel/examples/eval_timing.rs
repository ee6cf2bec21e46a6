//! Rough timing of selector compilation and evaluation on an NVIDIA-like GPU device.
//!
//! `cargo run --release -p basalt-cel --example eval_timing`

use basalt_cel::{AttributeValue, DeviceView, Quantity, Selector};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let nv = |id: &str| format!("gpu.nvidia.com/{id}");
    let string = |v: &str| AttributeValue::String(v.to_owned());
    let attributes = BTreeMap::from([
        (nv("type"), string("gpu")),
        (nv("productName"), string("NVIDIA H100 80GB HBM3")),
        (nv("architecture"), string("Hopper")),
        (nv("brand"), string("Nvidia")),
        (
            nv("uuid"),
            string("GPU-4d3b4b5e-6f4b-2a3c-9e1d-0c7a8b9f1e2d"),
        ),
        (
            nv("driverVersion"),
            AttributeValue::Version("560.35.3".to_owned()),
        ),
        (
            nv("cudaComputeCapability"),
            AttributeValue::Version("9.0.0".to_owned()),
        ),
        (
            "resource.kubernetes.io/pciBusID".to_owned(),
            string("0000:87:00.0"),
        ),
    ]);
    let capacity = BTreeMap::from([(nv("memory"), Quantity::parse("80Gi").unwrap())]);
    let device = DeviceView {
        driver: "gpu.nvidia.com",
        attributes: &attributes,
        capacity: &capacity,
    };

    for expression in [
        r#"device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu""#,
        r#"device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#,
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
        r#"device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))"#,
        r#"device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA H(100|200)")"#,
        r#"device.attributes["gpu.nvidia.com"].exists(k, k == "architecture")"#,
    ] {
        let start = Instant::now();
        let compiles = 200;
        for _ in 0..compiles {
            black_box(Selector::compile(expression).unwrap());
        }
        let compile_us = start.elapsed().as_secs_f64() * 1e6 / compiles as f64;

        let selector = Selector::compile(expression).unwrap();
        assert_eq!(selector.matches(&device), Ok(true), "{expression}");
        let runs = 200_000;
        let start = Instant::now();
        for _ in 0..runs {
            black_box(selector.matches(black_box(&device)).unwrap());
        }
        let eval_us = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
        println!(
            "{eval_us:6.2} µs/eval  {compile_us:7.1} µs/compile  cost {:4}  {expression}",
            selector.estimated_cost()
        );
    }

    // Refusing an expression whose nested loops would cost too much.
    let list = (0..1000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let overrun = format!("[{list}].all(x, [{list}].all(y, x != y || x == y))");
    let start = Instant::now();
    let refused = Selector::compile(&overrun).unwrap_err();
    println!(
        "refused in {:.2} ms: {refused}",
        start.elapsed().as_secs_f64() * 1e3
    );
}

//! Selectors as DRA users write them, against devices shaped like those NVIDIA's DRA driver
//! publishes (`gpu.nvidia.com`: GPUs and MIG slices).

mod common;

use basalt_cel::{CelError, Selector};
use common::*;
use std::time::{Duration, Instant};

#[test]
fn product_name_lower_ascii() {
    let e = r#"device.driver == "gpu.nvidia.com" &&
        device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#;
    yes(e, &h100());
    yes(e, &mig());
    no(e, &a100());
}

#[test]
fn memory_capacity_compare() {
    let e = r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#;
    yes(e, &h100());
    yes(e, &a100());
    no(e, &mig());
    yes(
        r#"device.capacity["gpu.nvidia.com"].memory == quantity("81920Mi")"#,
        &h100(),
    );
    yes(
        r#"device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("16G"))"#,
        &mig(),
    );
}

#[test]
fn driver_version_semver() {
    let e = r#"device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))"#;
    yes(e, &h100());
    no(e, &a100());
    yes(
        r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0"#,
        &h100(),
    );
    yes(
        r#"device.attributes["gpu.nvidia.com"].driverVersion == semver("560.35.3")"#,
        &h100(),
    );
    yes(
        r#"device.attributes["gpu.nvidia.com"].driverVersion.major() == 560"#,
        &h100(),
    );
}

#[test]
fn selectors_from_nvidia_device_classes() {
    // The DeviceClasses NVIDIA's helm chart installs.
    yes(
        r#"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"#,
        &h100(),
    );
    no(
        r#"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"#,
        &mig(),
    );
    yes(
        r#"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"#,
        &mig(),
    );
    yes(
        r#"device.attributes["gpu.nvidia.com"].profile in ["1g.10gb", "2g.20gb"]"#,
        &mig(),
    );
    yes(
        r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:80""#,
        &h100(),
    );
}

#[test]
fn both_access_forms_and_has() {
    yes(
        r#"device.attributes["gpu.nvidia.com"]["productName"] == device.attributes["gpu.nvidia.com"].productName"#,
        &h100(),
    );
    yes(
        r#"has(device.attributes["gpu.nvidia.com"].productName)"#,
        &h100(),
    );
    no(
        r#"has(device.attributes["gpu.nvidia.com"].profile)"#,
        &h100(),
    );
    yes(r#"has(device.driver)"#, &h100());
    yes(
        r#""productName" in device.attributes["gpu.nvidia.com"]"#,
        &h100(),
    );
    yes(
        r#"!("profile" in device.attributes["gpu.nvidia.com"])"#,
        &h100(),
    );
}

#[test]
fn unknown_domain_is_an_empty_map() {
    let dev = h100();
    yes(r#"size(device.attributes["dra.example.com"]) == 0"#, &dev);
    yes(r#"device.capacity["dra.example.com"].size() == 0"#, &dev);
    no(r#"has(device.attributes["dra.example.com"].model)"#, &dev);
    yes(
        r#"device.attributes["dra.example.com"].all(k, false)"#,
        &dev,
    );
    no(
        r#"device.capacity["dra.example.com"].exists(k, true)"#,
        &dev,
    );
    yes(r#""gpu.nvidia.com" in device.attributes"#, &dev);
    no(r#""dra.example.com" in device.attributes"#, &dev);
}

#[test]
fn unknown_attribute_is_an_error() {
    let err = eval(
        r#"device.attributes["gpu.nvidia.com"].model == "x""#,
        &h100(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, CelError::Evaluation(m) if m.contains("model")),
        "{err}"
    );
    // Short-circuiting still protects a guarded access.
    no(
        r#"has(device.attributes["gpu.nvidia.com"].profile) && device.attributes["gpu.nvidia.com"].profile == "1g.10gb""#,
        &h100(),
    );
    // An unparsable version attribute fails when used.
    let bad = nvidia(&[("driverVersion", version("560.35"))], &[]);
    assert!(matches!(
        eval(
            r#"device.attributes["gpu.nvidia.com"].driverVersion.major() == 560"#,
            &bad
        ),
        Err(CelError::Evaluation(_))
    ));
}

#[test]
fn cel_bind() {
    yes(
        r#"cel.bind(gpu, device.attributes["gpu.nvidia.com"],
            gpu.type == "gpu" && gpu.architecture == "Hopper" && gpu.brand == "Nvidia")"#,
        &h100(),
    );
    yes(
        r#"cel.bind(mem, device.capacity["gpu.nvidia.com"].memory,
            mem.isGreaterThan(quantity("8Gi")) && mem.isLessThan(quantity("12Gi")))"#,
        &mig(),
    );
    yes("cel.bind(x, 2, cel.bind(y, x * 3, x + y == 8))", &h100());
}

#[test]
fn quantity_library() {
    let dev = h100();
    for e in [
        r#"isQuantity("80Gi") && !isQuantity("80 Gi")"#,
        r#"quantity("1Gi") == quantity("1024Mi")"#,
        r#"quantity("1.5").isGreaterThan(quantity("1"))"#,
        r#"quantity("100m").isLessThan(quantity("1"))"#,
        r#"quantity("1e3") == quantity("1k")"#,
        r#"quantity("1k").compareTo(quantity("1Ki")) == -1"#,
        r#"quantity("2Gi").asInteger() == 2147483648"#,
        r#"quantity("2Gi").isInteger() && !quantity("1500m").isInteger()"#,
        r#"quantity("1500m").asApproximateFloat() == 1.5"#,
        r#"quantity("-5").sign() == -1 && quantity("0").sign() == 0"#,
        r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")"#,
        r#"quantity("1Gi").add(1) == quantity("1073741825")"#,
        r#"quantity("1").sub(quantity("1500m")) == quantity("-500m")"#,
        r#"quantity("10").sub(3).asInteger() == 7"#,
        r#"device.capacity["gpu.nvidia.com"].memory.sub(quantity("80Gi")).sign() == 0"#,
    ] {
        yes(e, &dev);
    }
    assert!(matches!(
        eval(r#"quantity("lots").sign() == 1"#, &dev),
        Err(CelError::Evaluation(_))
    ));
    assert!(matches!(
        eval(r#"quantity("1.5").asInteger() == 1"#, &dev),
        Err(CelError::Evaluation(m)) if m.contains("cannot convert value to integer")
    ));
}

#[test]
fn semver_library() {
    let dev = h100();
    for e in [
        r#"isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true)"#,
        r#"semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3"#,
        r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#,
        r#"semver("1.2.3+build") == semver("1.2.3")"#,
        r#"semver("v2", true) == semver("2.0.0")"#,
        r#"semver("10.0.0").compareTo(semver("9.9.9")) == 1"#,
    ] {
        yes(e, &dev);
    }
}

#[test]
fn string_extensions() {
    let dev = h100();
    for e in [
        r#"device.attributes["gpu.nvidia.com"].productName.upperAscii() == "NVIDIA H100 80GB HBM3""#,
        r#"device.attributes["gpu.nvidia.com"].productName.split(" ")[1] == "H100""#,
        r#"device.attributes["gpu.nvidia.com"].productName.split(" ").size() == 4"#,
        r#"["a", "b"].join("-") == "a-b" && ["x"].join() == "x""#,
        r#"device.attributes["gpu.nvidia.com"].productName.replace("NVIDIA ", "") == "H100 80GB HBM3""#,
        r#"device.attributes["gpu.nvidia.com"].productName.substring(7, 11) == "H100""#,
        r#"device.attributes["gpu.nvidia.com"].productName.indexOf("H100") == 7"#,
        r#"device.attributes["gpu.nvidia.com"].productName.lastIndexOf("H") == 17"#,
        r#""  x ".trim() == "x" && "abc".charAt(1) == "b""#,
        r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")"#,
        r#"device.attributes["gpu.nvidia.com"].productName.endsWith("HBM3")"#,
        r#"device.attributes["gpu.nvidia.com"].productName.size() == 21"#,
        r#"strings.quote("a\"b") == "\"a\\\"b\"""#,
    ] {
        yes(e, &dev);
    }
}

#[test]
fn regular_expressions() {
    let dev = h100();
    for e in [
        r#"device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (H|A)100")"#,
        r#"matches(device.attributes["gpu.nvidia.com"].productName, "80GB")"#,
        r#"!device.attributes["gpu.nvidia.com"].productName.matches("^A100")"#,
        r#"device.attributes["gpu.nvidia.com"].productName.find("[0-9]+GB") == "80GB""#,
        r#"device.attributes["gpu.nvidia.com"].productName.findAll("[0-9]+") == ["100", "80", "3"]"#,
        r#""a1b2c3".findAll("[0-9]", 2) == ["1", "2"]"#,
    ] {
        yes(e, &dev);
    }
    // A literal pattern is compiled with the selector: an invalid one does not compile.
    assert!(matches!(
        Selector::compile(r#"device.driver.matches("(")"#),
        Err(CelError::Compile(m)) if m.contains("regular expression")
    ));
    // Nor does one whose automaton would be huge, however short; and quickly.
    let start = Instant::now();
    assert!(matches!(
        Selector::compile(r#"device.driver.matches("\pL{1000}")"#),
        Err(CelError::Compile(_))
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
    // A pattern computed at run time fails at run time.
    assert!(matches!(
        eval(r#"device.driver.matches(device.driver + "(")"#, &dev),
        Err(CelError::Evaluation(m)) if m.contains("regular expression")
    ));
    yes(
        r#"device.driver.matches("^" + device.driver.split(".")[0])"#,
        &dev,
    );
    // Compiling patterns at run time is charged: many of them in a loop are refused.
    let list = (0..100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    assert!(matches!(
        Selector::compile(&format!(
            "[{list}].all(x, device.driver.matches(string(x)))"
        )),
        Err(CelError::CostExceeded { .. })
    ));
    // The same literal pattern in a loop is compiled once, and cheap.
    yes(
        &format!(r#"[{list}].all(x, !string(x).matches("[a-z]"))"#),
        &dev,
    );
    // At most 16 distinct literal patterns.
    let many = |n: usize| {
        (0..n)
            .map(|i| format!(r#"!device.driver.matches("x{i}")"#))
            .collect::<Vec<_>>()
            .join(" && ")
    };
    yes(&many(16), &dev);
    assert!(matches!(
        Selector::compile(&many(17)),
        Err(CelError::Compile(m)) if m.contains("distinct regular expressions")
    ));
}

#[test]
fn list_macros_and_libraries() {
    let dev = mig();
    for e in [
        r#"device.attributes["gpu.nvidia.com"].exists(k, k == "profile")"#,
        r#"device.attributes["gpu.nvidia.com"].exists_one(k, k.startsWith("prof"))"#,
        r#"device.capacity["gpu.nvidia.com"].all(k, device.capacity["gpu.nvidia.com"][k].sign() > 0)"#,
        r#"device.capacity["gpu.nvidia.com"].map(k, k) == ["copyEngines", "memory", "multiprocessors"]"#,
        r#"device.capacity["gpu.nvidia.com"].filter(k, k.contains("y")).size() == 2"#,
        r#"[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x > 1) == [2, 3]"#,
        r#"[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]"#,
        r#"2 in [1, 2, 3] && !(4 in [1, 2, 3])"#,
        r#"sets.contains([1, 2, 3], [2, 3]) && sets.intersects([1], [1, 5]) && sets.equivalent([1, 1], [1])"#,
        r#"[3, 1, 2].max() == 3 && [3, 1, 2].min() == 1 && [1, 2, 3].sum() == 6 && [1, 2, 3].isSorted()"#,
        r#"[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2"#,
        r#"device.attributes["gpu.nvidia.com"].?profile.orValue("none") == "1g.10gb""#,
        r#"!device.attributes["gpu.nvidia.com"].?nothing.hasValue()"#,
        r#"optional.of(1).value() == 1"#,
    ] {
        yes(e, &dev);
    }
}

#[test]
fn result_must_be_bool() {
    let dev = h100();
    assert_eq!(
        eval("device.driver", &dev),
        Err(CelError::NotBool("string".to_owned()))
    );
    assert_eq!(
        eval("1 + 1", &dev),
        Err(CelError::NotBool("int".to_owned()))
    );
    assert!(matches!(
        eval(r#"device.capacity["gpu.nvidia.com"].memory"#, &dev),
        Err(CelError::NotBool(t)) if t == "kubernetes.Quantity"
    ));
}

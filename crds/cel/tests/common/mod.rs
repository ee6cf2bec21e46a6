//! Devices shaped like those NVIDIA's DRA driver publishes (`gpu.nvidia.com`: GPUs and MIG
//! slices), and shorthands to evaluate selectors against them.

#![allow(dead_code)]

use basalt_cel::{AttributeValue, CelError, DeviceView, Quantity, Selector};
use std::collections::BTreeMap;

pub const NV: &str = "gpu.nvidia.com";

/// A device's owned data; `view()` lends it as the selector sees it.
pub struct Device {
    pub driver: &'static str,
    pub attributes: BTreeMap<String, AttributeValue>,
    pub capacity: BTreeMap<String, Quantity>,
}

impl Device {
    pub fn view(&self) -> DeviceView<'_> {
        DeviceView {
            driver: self.driver,
            attributes: &self.attributes,
            capacity: &self.capacity,
        }
    }
}

pub fn s(v: &str) -> AttributeValue {
    AttributeValue::String(v.to_owned())
}

pub fn version(v: &str) -> AttributeValue {
    AttributeValue::Version(v.to_owned())
}

pub fn q(v: &str) -> Quantity {
    Quantity::parse(v).unwrap()
}

pub fn nvidia(attributes: &[(&str, AttributeValue)], capacity: &[(&str, &str)]) -> Device {
    let qualify = |name: &str| {
        if name.contains('/') {
            name.to_owned()
        } else {
            format!("{NV}/{name}")
        }
    };
    Device {
        driver: NV,
        attributes: attributes
            .iter()
            .map(|(k, v)| (qualify(k), v.clone()))
            .collect(),
        capacity: capacity.iter().map(|(k, v)| (qualify(k), q(v))).collect(),
    }
}

pub fn h100() -> Device {
    nvidia(
        &[
            ("type", s("gpu")),
            ("uuid", s("GPU-4d3b4b5e-6f4b-2a3c-9e1d-0c7a8b9f1e2d")),
            ("productName", s("NVIDIA H100 80GB HBM3")),
            ("brand", s("Nvidia")),
            ("architecture", s("Hopper")),
            ("cudaComputeCapability", version("9.0.0")),
            ("driverVersion", version("560.35.3")),
            ("cudaDriverVersion", version("12.6.0")),
            ("addressingMode", s("None")),
            ("resource.kubernetes.io/pciBusID", s("0000:87:00.0")),
            ("resource.kubernetes.io/pcieRoot", s("pci0000:80")),
        ],
        &[("memory", "80Gi")],
    )
}

pub fn a100() -> Device {
    nvidia(
        &[
            ("type", s("gpu")),
            ("productName", s("NVIDIA A100-SXM4-40GB")),
            ("architecture", s("Ampere")),
            ("cudaComputeCapability", version("8.0.0")),
            ("driverVersion", version("535.104.5")),
        ],
        &[("memory", "40Gi")],
    )
}

pub fn mig() -> Device {
    nvidia(
        &[
            ("type", s("mig")),
            ("profile", s("1g.10gb")),
            ("parentUUID", s("GPU-4d3b4b5e-6f4b-2a3c-9e1d-0c7a8b9f1e2d")),
            ("productName", s("NVIDIA H100 80GB HBM3")),
            ("architecture", s("Hopper")),
            ("driverVersion", version("560.35.3")),
        ],
        &[
            ("memory", "10Gi"),
            ("multiprocessors", "16"),
            ("copyEngines", "1"),
        ],
    )
}

pub fn eval(expression: &str, device: &Device) -> Result<bool, CelError> {
    Selector::compile(expression)?.matches(&device.view())
}

pub fn yes(expression: &str, device: &Device) {
    assert_eq!(eval(expression, device), Ok(true), "{expression}");
}

pub fn no(expression: &str, device: &Device) {
    assert_eq!(eval(expression, device), Ok(false), "{expression}");
}

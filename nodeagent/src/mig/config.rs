//! NVIDIA mig-parted's config format, as the GPU operator keeps it in a ConfigMap and selects it
//! per node with the `nvidia.com/mig.config` label:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-3g.40gb:
//!     - devices: all            # or [0, 1]
//!       mig-enabled: true
//!       mig-devices: {"3g.40gb": 2}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::planner::Wanted;
use crate::raw::RawGpu;

/// The node label that names the wanted layout.
pub const MIG_CONFIG_LABEL: &str = "nvidia.com/mig.config";

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MigPartedConfig {
    #[serde(default)]
    pub version: Option<String>,
    pub mig_configs: BTreeMap<String, Vec<MigConfigEntry>>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MigConfigEntry {
    pub devices: Devices,
    /// PCI device ids (`0x20B010DE`) the entry is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_filter: Option<OneOrMany>,
    pub mig_enabled: bool,
    #[serde(default)]
    pub mig_devices: BTreeMap<String, u32>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum Devices {
    /// Only the word `all` is accepted.
    All(AllWord),
    List(Vec<u32>),
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum AllWord {
    All,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn matches(&self, id: Option<&str>) -> bool {
        let Some(id) = id else { return false };
        match self {
            OneOrMany::One(f) => f.eq_ignore_ascii_case(id),
            OneOrMany::Many(fs) => fs.iter().any(|f| f.eq_ignore_ascii_case(id)),
        }
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{source_name}: {message}")]
    Parse {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: no layout {name:?} in mig-configs; layouts: {}", known.join(", "))]
    UnknownLayout {
        source_name: String,
        name: String,
        known: Vec<String>,
    },
    #[error("{source_name}: mig-configs.{name}[{entry}].devices: {message}")]
    Devices {
        source_name: String,
        name: String,
        entry: usize,
        message: String,
    },
    #[error("{source_name}: mig-configs.{name}[{entry}].mig-devices.{profile:?}: {count} instances; no GPU holds more than {max} of one profile")]
    TooMany {
        source_name: String,
        name: String,
        entry: usize,
        profile: String,
        count: u32,
        max: u32,
    },
}

/// What one GPU should look like.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuWant {
    pub mig_enabled: bool,
    pub wanted: Wanted,
}

/// Parses a mig-parted config; `source_name` names it in errors (`ConfigMap gpu-operator/x`).
pub fn parse(source_name: &str, text: &str) -> Result<MigPartedConfig, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| ConfigError::Parse {
        source_name: source_name.to_string(),
        message: crate::fake::with_path(&e.path().to_string(), e.inner().to_string()),
    })
}

/// The wanted state of each of `gpus` under layout `name`. GPUs no entry selects are absent
/// (left alone). Only layout `name` is checked: a bad layout elsewhere in the config does not
/// stop nodes that use another one.
pub fn wanted_for_gpus(
    source_name: &str,
    config: &MigPartedConfig,
    name: &str,
    gpus: &[RawGpu],
) -> Result<BTreeMap<u32, GpuWant>, ConfigError> {
    let entries = config
        .mig_configs
        .get(name)
        .ok_or_else(|| ConfigError::UnknownLayout {
            source_name: source_name.to_string(),
            name: name.to_string(),
            known: config.mig_configs.keys().cloned().collect(),
        })?;
    let max = super::profiles::max_instances_of_any_profile();
    for (i, entry) in entries.iter().enumerate() {
        if let Some((profile, &count)) = entry.mig_devices.iter().find(|(_, &c)| c > max) {
            return Err(ConfigError::TooMany {
                source_name: source_name.to_string(),
                name: name.to_string(),
                entry: i,
                profile: profile.clone(),
                count,
                max,
            });
        }
    }
    let mut out = BTreeMap::new();
    let mut chosen_by: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let err = |message: String| ConfigError::Devices {
            source_name: source_name.to_string(),
            name: name.to_string(),
            entry: i,
            message,
        };
        let selected: Vec<&RawGpu> = match &entry.devices {
            Devices::All(_) => gpus.iter().collect(),
            Devices::List(list) => {
                let mut v = Vec::new();
                for &index in list {
                    let g = gpus.iter().find(|g| g.index == index).ok_or_else(|| {
                        err(format!(
                            "GPU {index} does not exist on this node ({} GPUs)",
                            gpus.len()
                        ))
                    })?;
                    v.push(g);
                }
                v
            }
        };
        for g in selected {
            if let Some(filter) = &entry.device_filter {
                if !filter.matches(g.pci_device_id.as_deref()) {
                    continue;
                }
            }
            if let Some(prev) = chosen_by.insert(g.index, i) {
                return Err(err(format!(
                    "GPU {} is already selected by entry {prev}",
                    g.index
                )));
            }
            let mut wanted = Wanted::default();
            for (p, &c) in &entry.mig_devices {
                if c > 0 {
                    wanted.0.insert(p.clone(), c);
                }
            }
            out.insert(
                g.index,
                GpuWant {
                    mig_enabled: entry.mig_enabled,
                    wanted,
                },
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [2]
      device-filter: ["0x233010DE"]
      mig-enabled: false
"#;

    fn gpus(n: u32) -> Vec<RawGpu> {
        (0..n)
            .map(|index| RawGpu {
                index,
                pci_device_id: Some("0x233010de".into()),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn selects_per_device() {
        let c = parse("cm", TEXT).unwrap();
        let w = wanted_for_gpus("cm", &c, "mixed", &gpus(4)).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w[&0].wanted.to_string(), "1g.10gb=7");
        assert!(!w[&2].mig_enabled);
        let all = wanted_for_gpus("cm", &c, "all-3g.40gb", &gpus(8)).unwrap();
        assert_eq!(all.len(), 8);
    }

    #[test]
    fn errors_name_the_place() {
        let c = parse("cm", TEXT).unwrap();
        let e = wanted_for_gpus("cm", &c, "nope", &gpus(1)).unwrap_err();
        assert!(e.to_string().contains("no layout \"nope\""), "{e}");
        assert!(e.to_string().contains("all-disabled"), "{e}");
        let e = wanted_for_gpus("cm", &c, "mixed", &gpus(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cm: mig-configs.mixed[1].devices: GPU 2 does not exist on this node (2 GPUs)"
        );
        let e = parse(
            "cm",
            "mig-configs:\n  a:\n    - devices: some\n      mig-enabled: true\n",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("cm: mig-configs.a[0]"), "{e}");
    }
}

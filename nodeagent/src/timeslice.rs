//! Time-slicing: the NVIDIA device plugin advertises each GPU as N `nvidia.com/gpu` replicas when
//! its config says so. The wanted N comes from the node label [`REPLICAS_LABEL`]; the agent
//! writes the plugin's config under its node's key [`config_name`]`(node)` of the ConfigMap the
//! plugin reads (the GPU operator's `devicePlugin.config.name`), and points the node at that key
//! with the plugin's [`DEVICE_PLUGIN_CONFIG_LABEL`]. Keys are per node, not per replica count, so
//! an admission policy can hold each agent to its own key: an agent cannot change another
//! node's config (deploy/README.md).

use std::collections::BTreeMap;

use serde::Serialize;

/// Wanted replicas per GPU: an integer of at least 2 turns time-slicing on, `1` or `0` off.
pub const REPLICAS_LABEL: &str = "scheduling.basalt.dev/time-slicing-replicas";
/// The device plugin's per-node config selector.
pub const DEVICE_PLUGIN_CONFIG_LABEL: &str = "nvidia.com/device-plugin.config";
/// Prefix of the config keys this agent writes; the node label is removed only when it has it.
/// Short, as the key is also a label value (63 characters at most) with the node name in it.
pub const CONFIG_PREFIX: &str = "basalt-ts-";
/// A label value holds at most 63 characters.
const LABEL_VALUE_MAX: usize = 63;
/// Above this, a replica count is surely a typo (the plugin itself sets no limit).
pub const MAX_REPLICAS: u32 = 1024;

/// What the label asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Wanted {
    /// No label, or `0`/`1`.
    Off,
    Replicas(u32),
}

/// Reads [`REPLICAS_LABEL`] from the node's labels. An unreadable value is an error naming the
/// label; the caller then leaves time-slicing as it is.
pub fn wanted(labels: &BTreeMap<String, String>) -> Result<Wanted, String> {
    let Some(value) = labels.get(REPLICAS_LABEL) else {
        return Ok(Wanted::Off);
    };
    match value.trim().parse::<u32>() {
        Ok(0 | 1) => Ok(Wanted::Off),
        Ok(n) if n <= MAX_REPLICAS => Ok(Wanted::Replicas(n)),
        _ => Err(format!(
            "node label {REPLICAS_LABEL}={value:?}: want a whole number of replicas per GPU, 2..={MAX_REPLICAS} (0 or 1 for off)"
        )),
    }
}

/// The config key (and node label value) of `node`; an error for a node name too long to fit
/// a label value.
pub fn config_name(node: &str) -> Result<String, String> {
    let key = format!("{CONFIG_PREFIX}{node}");
    match key.len() <= LABEL_VALUE_MAX {
        true => Ok(key),
        false => Err(format!(
            "time-slicing: the device plugin's config key {key:?} (the value of node label \
             {DEVICE_PLUGIN_CONFIG_LABEL}) is over {LABEL_VALUE_MAX} characters: node names of \
             at most {} characters only",
            LABEL_VALUE_MAX - CONFIG_PREFIX.len()
        )),
    }
}

/// The device plugin's config file for `replicas` per GPU (its `version: v1` format).
pub fn render_config(replicas: u32) -> String {
    // Written by hand rather than through a serializer: the format is fixed and small, and this
    // keeps the key order the plugin's documentation uses.
    format!(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )
}

/// What the device-plugin label should become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelChange {
    Set(String),
    Remove,
    Leave,
}

/// The change to [`DEVICE_PLUGIN_CONFIG_LABEL`] for `wanted`, given the node's labels and its
/// config key. Turning time-slicing off removes only a value this agent wrote.
pub fn label_change(labels: &BTreeMap<String, String>, wanted: Wanted, key: &str) -> LabelChange {
    let current = labels.get(DEVICE_PLUGIN_CONFIG_LABEL);
    match wanted {
        Wanted::Replicas(_) => {
            let name = key.to_string();
            if current == Some(&name) {
                LabelChange::Leave
            } else {
                LabelChange::Set(name)
            }
        }
        Wanted::Off => match current {
            Some(v) if v.starts_with(CONFIG_PREFIX) => LabelChange::Remove,
            _ => LabelChange::Leave,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn renders_the_device_plugin_format() {
        let text = render_config(4);
        let v: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["version"], "v1");
        let r = &v["sharing"]["timeSlicing"]["resources"][0];
        assert_eq!(r["name"], "nvidia.com/gpu");
        assert_eq!(r["replicas"], 4);
    }

    #[test]
    fn reads_the_label() {
        assert_eq!(wanted(&labels(&[])), Ok(Wanted::Off));
        assert_eq!(
            wanted(&labels(&[(REPLICAS_LABEL, "4")])),
            Ok(Wanted::Replicas(4))
        );
        assert_eq!(wanted(&labels(&[(REPLICAS_LABEL, "1")])), Ok(Wanted::Off));
        let e = wanted(&labels(&[(REPLICAS_LABEL, "four")])).unwrap_err();
        assert!(e.contains("time-slicing-replicas=\"four\""), "{e}");
        assert!(wanted(&labels(&[(REPLICAS_LABEL, "5000")])).is_err());
    }

    #[test]
    fn label_changes_touch_only_our_values() {
        let key = config_name("gpu-7").unwrap();
        assert_eq!(key, "basalt-ts-gpu-7");
        let none = labels(&[]);
        assert_eq!(
            label_change(&none, Wanted::Replicas(4), &key),
            LabelChange::Set(key.clone())
        );
        let ours = labels(&[(DEVICE_PLUGIN_CONFIG_LABEL, "basalt-ts-gpu-7")]);
        assert_eq!(
            label_change(&ours, Wanted::Replicas(4), &key),
            LabelChange::Leave
        );
        assert_eq!(label_change(&ours, Wanted::Off, &key), LabelChange::Remove);
        let theirs = labels(&[(DEVICE_PLUGIN_CONFIG_LABEL, "a100-mixed")]);
        assert_eq!(label_change(&theirs, Wanted::Off, &key), LabelChange::Leave);
        assert_eq!(
            label_change(&theirs, Wanted::Replicas(2), &key),
            LabelChange::Set(key)
        );
    }

    #[test]
    fn keys_fit_a_label_value() {
        assert_eq!(config_name(&"n".repeat(53)).unwrap().len(), 63);
        let e = config_name(&"n".repeat(54)).unwrap_err();
        assert!(e.contains("at most 53 characters"), "{e}");
    }
}

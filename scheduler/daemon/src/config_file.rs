//! The scheduler config file (`--config`, in a cluster the mounted ConfigMap): read at start,
//! where an invalid one stops the scheduler, and read again whenever it changes, where an
//! invalid one is reported (a log line and `basalt_scheduler_config_reload_errors`) and the
//! config before is kept.

use std::path::PathBuf;

use anyhow::Context;
use basalt_plugins::Config;

fn parse(label: &str, text: &str) -> anyhow::Result<Config> {
    basalt_crds::limits::check(label, text)?;
    Config::from_yaml(label, text).map_err(anyhow::Error::msg)
}

/// The config file as last read, to notice when it changes. A ConfigMap volume swaps its
/// files by symlink, so the text is compared, not the file's identity.
pub struct ConfigFile {
    path: Option<PathBuf>,
    text: Option<String>,
}

impl ConfigFile {
    /// Reads and validates the config at start (errors name the file and the field; no file,
    /// or an empty one, is the default config), and keeps the file to watch.
    pub fn open(path: Option<PathBuf>) -> anyhow::Result<(Config, ConfigFile)> {
        let Some(p) = path else {
            let none = ConfigFile {
                path: None,
                text: None,
            };
            return Ok((Config::default(), none));
        };
        let label = p.display().to_string();
        let text = std::fs::read_to_string(&p).with_context(|| format!("{label}: cannot read"))?;
        let config = parse(&label, &text)?;
        let file = ConfigFile {
            path: Some(p),
            text: Some(text),
        };
        Ok((config, file))
    }

    /// The new config when the file changed since it was last read: `Ok` to take, `Err`
    /// saying why it is refused. A file that cannot be read (being replaced, say) is not a
    /// change: it is tried again next time.
    pub fn poll(&mut self) -> Option<anyhow::Result<Config>> {
        let path = self.path.as_deref()?;
        let text = std::fs::read_to_string(path).ok()?;
        if self.text.as_deref() == Some(text.as_str()) {
            return None;
        }
        let parsed = parse(&path.display().to_string(), &text);
        self.text = Some(text);
        Some(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_read_again_and_a_bad_one_is_refused_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "schedulerNames: [basalt]\n").unwrap();
        let (_, mut file) = ConfigFile::open(Some(path.clone())).unwrap();
        assert!(file.poll().is_none(), "unchanged");
        std::fs::write(&path, "schedulerNames: [basalt, gang]\n").unwrap();
        let config = file.poll().unwrap().unwrap();
        assert_eq!(config.scheduler_names, ["basalt", "gang"]);
        std::fs::write(&path, "frobnicate: 1\n").unwrap();
        let e = file.poll().unwrap().unwrap_err().to_string();
        assert!(e.contains("frobnicate") && e.contains("config.yaml"), "{e}");
        assert!(file.poll().is_none(), "a refused file is reported once");
        assert!(ConfigFile::open(None).unwrap().1.poll().is_none());
    }
}

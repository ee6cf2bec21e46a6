//! The engine's framework, built once per config and set of resource names rather than every
//! cycle. A session ends by leaving its node state (usage, the free-capacity index, static filter
//! results) in the snapshot's node cache, tagged with the framework it ran under; the next
//! session under the same framework takes it over and re-indexes only the nodes whose usage
//! differs, instead of indexing every node again (see the engine's README). A framework built
//! anew each cycle has a new tag, so that state was never reused.

use basalt_engine::{Framework, ResourceNames};
use basalt_plugins::Config;

#[derive(Default)]
pub struct KeptFramework {
    kept: Option<(Config, ResourceNames, Framework)>,
}

impl KeptFramework {
    /// The framework of `config` over `names`: the kept one while both are the same.
    pub fn get(&mut self, config: &Config, names: &ResourceNames) -> &Framework {
        let same = (self.kept.as_ref()).is_some_and(|(c, n, _)| c == config && n == names);
        if !same {
            let fw = basalt_plugins::framework(config, names);
            self.kept = Some((config.clone(), names.clone(), fw));
        }
        &self.kept.as_ref().expect("kept above").2
    }
}

//! The engine's framework, built once per config and set of resource names rather than every
//! cycle, and the [`Warm`] its cycles carry: a session ends by leaving its node state (usage,
//! the free-capacity index, static filter results) there, and the next takes it over and
//! re-indexes only the nodes whose usage differs, instead of indexing every node again (see
//! the engine's README). A Warm belongs to one framework, so a framework built anew (a config
//! reload, new resource names) comes with a fresh one.

use basalt_engine::{Framework, ResourceNames, Warm};
use basalt_plugins::Config;

#[derive(Default)]
pub struct KeptFramework {
    kept: Option<Kept>,
}

struct Kept {
    config: Config,
    names: ResourceNames,
    framework: Framework,
    warm: Warm,
}

impl KeptFramework {
    /// The framework of `config` over `names` (the kept one while both are the same) and the
    /// Warm of its cycles.
    pub fn get(&mut self, config: &Config, names: &ResourceNames) -> (&Framework, &mut Warm) {
        let same = (self.kept.as_ref()).is_some_and(|k| k.config == *config && k.names == *names);
        if !same {
            self.kept = Some(Kept {
                config: config.clone(),
                names: names.clone(),
                framework: basalt_plugins::framework(config, names),
                warm: Warm::default(),
            });
        }
        let kept = self.kept.as_mut().expect("kept above");
        (&kept.framework, &mut kept.warm)
    }
}

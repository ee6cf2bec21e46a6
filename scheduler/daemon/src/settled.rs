//! The PodGroups whose status was last found to say what the plan said, with what it was
//! compared from: a group the next plan says the same of, its object unchanged since, needs no
//! comparison, so a cycle compares (and writes) the status of the groups whose state moved
//! only, not of every planned group.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use basalt_crds::PodGroup;
use basalt_engine::PodGroupStatus as PlannedGroup;

use crate::forecast::Results;

/// What a settled group's status was compared from.
struct Settled {
    planned: PlannedGroup,
    /// The object as the watch had it (held, so its address is not another's meanwhile).
    group: Arc<PodGroup>,
    /// The forecasts it was compared with.
    forecasts: Option<Arc<Results>>,
    /// Nothing to report of it either: not unschedulable, and what was said of it forgotten.
    quiet: bool,
}

#[derive(Default)]
pub struct SettledGroups(HashMap<String, Settled>);

impl SettledGroups {
    /// Whether `planned`'s status needs no comparison: it, the group's object and the
    /// forecasts are those it was last found settled with. `Some(true)`: quiet, nothing to
    /// report of it either.
    pub fn holds(
        &self,
        planned: &PlannedGroup,
        group: &Arc<PodGroup>,
        forecasts: &Option<Arc<Results>>,
    ) -> Option<bool> {
        let s = self.0.get(&*planned.name)?;
        let holds = Arc::ptr_eq(&s.group, group)
            && same_forecasts(&s.forecasts, forecasts)
            && s.planned == *planned;
        holds.then_some(s.quiet)
    }

    /// The group's status says what `planned` does; `quiet` when nothing is to be reported
    /// of it while that holds.
    pub fn settle(
        &mut self,
        planned: &PlannedGroup,
        group: &Arc<PodGroup>,
        forecasts: &Option<Arc<Results>>,
        quiet: bool,
    ) {
        let settled = Settled {
            planned: planned.clone(),
            group: group.clone(),
            forecasts: forecasts.clone(),
            quiet,
        };
        self.0.insert(planned.name.to_string(), settled);
    }

    /// The group's status is to be written, or depends on more than the plan and the object.
    pub fn unsettle(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// Keeps the groups of `planned` alone, once the others are as many: not every cycle, as
    /// an entry stays right while its group is not planned (should it come back with the same
    /// object and plan, its status still says what the plan says); they are dropped to free
    /// the objects they hold.
    pub fn prune<'a>(&mut self, planned: impl ExactSizeIterator<Item = &'a str>) {
        if self.0.len() <= 2 * planned.len() + 64 {
            return;
        }
        let live: HashSet<&str> = planned.collect();
        self.0.retain(|name, _| live.contains(name.as_str()));
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn same_forecasts(a: &Option<Arc<Results>>, b: &Option<Arc<Results>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> Arc<PodGroup> {
        let g = serde_json::json!({"apiVersion": "scheduling.basalt.dev/v1alpha1",
            "kind": "PodGroup", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minMember": 2}});
        Arc::new(serde_json::from_value(g).unwrap())
    }

    fn planned(name: &str, running: u32) -> PlannedGroup {
        PlannedGroup {
            name: name.into(),
            phase: basalt_engine::JobPhase::Pending,
            conditions: Vec::new(),
            running,
            succeeded: 0,
            failed: 0,
            pending: 2 - running,
            min_member: 2,
            explanation: None,
        }
    }

    #[test]
    fn a_group_settled_needs_no_comparison_until_its_plan_or_object_moves() {
        let mut settled = SettledGroups::default();
        let (g, none) = (group("g"), None);
        let p = planned("ml/g", 0);
        assert_eq!(settled.holds(&p, &g, &none), None, "never compared");
        settled.settle(&p, &g, &none, true);
        assert_eq!(settled.holds(&p, &g, &none), Some(true));
        assert_eq!(
            settled.holds(&planned("ml/g", 2), &g, &none),
            None,
            "the plan moved"
        );
        let moved = settled.holds(&p, &group("g"), &none);
        assert_eq!(moved, None, "the object moved");
        settled.unsettle("ml/g");
        assert_eq!(settled.holds(&p, &g, &none), None, "written since");
        settled.settle(&p, &g, &none, false);
        assert_eq!(settled.holds(&p, &g, &none), Some(false), "not quiet");
        settled.settle(&planned("ml/h", 0), &group("h"), &none, true);
        settled.prune(["ml/h"].into_iter());
        assert_eq!(settled.len(), 2, "kept while the others are few");
        let many: Vec<String> = (0..100).map(|i| format!("ml/m{i}")).collect();
        for name in &many {
            settled.settle(&planned(name, 0), &group(name), &none, true);
        }
        settled.prune(["ml/h"].into_iter());
        assert_eq!(settled.len(), 1, "the groups no longer planned dropped");
        assert_eq!(settled.holds(&p, &g, &none), None);
    }
}

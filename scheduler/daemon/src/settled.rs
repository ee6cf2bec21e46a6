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
}

#[derive(Default)]
pub struct SettledGroups(HashMap<String, Settled>);

impl SettledGroups {
    /// Whether `planned`'s status needs no comparison: it, the group's object and the
    /// forecasts are those it was last found settled with.
    pub fn holds(
        &self,
        planned: &PlannedGroup,
        group: &Arc<PodGroup>,
        forecasts: &Option<Arc<Results>>,
    ) -> bool {
        self.0.get(&*planned.name).is_some_and(|s| {
            Arc::ptr_eq(&s.group, group)
                && same_forecasts(&s.forecasts, forecasts)
                && s.planned == *planned
        })
    }

    /// The group's status says what `planned` does.
    pub fn settle(
        &mut self,
        planned: &PlannedGroup,
        group: &Arc<PodGroup>,
        forecasts: &Option<Arc<Results>>,
    ) {
        let settled = Settled {
            planned: planned.clone(),
            group: group.clone(),
            forecasts: forecasts.clone(),
        };
        self.0.insert(planned.name.to_string(), settled);
    }

    /// The group's status is to be written, or depends on more than the plan and the object.
    pub fn unsettle(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// Keeps the groups of `planned` alone.
    pub fn retain<'a>(&mut self, planned: impl Iterator<Item = &'a str>) {
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
        assert!(!settled.holds(&p, &g, &none), "never compared");
        settled.settle(&p, &g, &none);
        assert!(settled.holds(&p, &g, &none));
        assert!(
            !settled.holds(&planned("ml/g", 2), &g, &none),
            "the plan moved"
        );
        assert!(!settled.holds(&p, &group("g"), &none), "the object moved");
        settled.unsettle("ml/g");
        assert!(!settled.holds(&p, &g, &none), "written since");
        settled.settle(&p, &g, &none);
        settled.settle(&planned("ml/h", 0), &group("h"), &none);
        settled.retain(["ml/h"].into_iter());
        assert_eq!(settled.len(), 1, "a group no longer planned is dropped");
        assert!(!settled.holds(&p, &g, &none));
    }
}

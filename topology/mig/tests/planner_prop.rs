//! Planner properties: every plan is valid, and on small inputs the planner finds a layout
//! exactly when brute force does.

use basalt_mig::planner::{plan, validate, Placement, Wanted};
use basalt_mig::profiles::{GpuModel, MigProfile, MODELS};
use proptest::prelude::*;

/// Every assignment of allowed starts to the wanted instances, checked by `validate`.
fn brute_force(model: &GpuModel, items: &[&'static MigProfile]) -> bool {
    fn go(model: &GpuModel, items: &[&'static MigProfile], chosen: &mut Vec<Placement>) -> bool {
        let Some((first, rest)) = items.split_first() else {
            return validate(model, chosen).is_none();
        };
        for &start in first.starts {
            chosen.push(Placement {
                profile: first,
                start,
            });
            let ok = go(model, rest, chosen);
            chosen.pop();
            if ok {
                return true;
            }
        }
        false
    }
    go(model, items, &mut Vec::new())
}

fn request() -> impl Strategy<Value = (usize, Vec<(usize, u32)>)> {
    (0..MODELS.len()).prop_flat_map(|m| {
        let n = MODELS[m].profiles.len();
        (Just(m), prop::collection::vec((0..n, 1u32..=3), 0..4))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn plans_are_valid_and_complete((m, picks) in request()) {
        let model = MODELS[m];
        let mut wanted = Wanted::default();
        for (p, c) in picks {
            *wanted.0.entry(model.profiles[p].name.to_string()).or_insert(0) += c;
        }
        let items: Vec<&'static MigProfile> = wanted
            .0
            .iter()
            .flat_map(|(n, &c)| std::iter::repeat_n(model.profile(n).unwrap(), c as usize))
            .collect();
        // Brute force is exponential: keep it to small requests.
        prop_assume!(items.len() <= 6);
        let feasible = brute_force(model, &items);
        match plan(model, &wanted) {
            Ok(p) => {
                prop_assert!(feasible, "planner found {:?}, brute force found nothing", p);
                prop_assert_eq!(validate(model, &p.placements), None);
                prop_assert_eq!(p.placements.len(), items.len());
                prop_assert!(p.memory_slices_used <= model.memory_slices);
                prop_assert!(p.compute_slices_used <= model.compute_slices);
                for (name, &count) in &wanted.0 {
                    let got = p.placements.iter().filter(|x| x.profile.name == name).count() as u32;
                    prop_assert_eq!(got, count);
                }
            }
            Err(e) => {
                prop_assert!(e.is_impossible(), "{}", e);
                prop_assert!(!feasible, "brute force found a layout for {} but the planner said: {}", wanted, e);
            }
        }
    }
}

//! The MIG planner: which placement gives a wanted set of profiles on one GPU, or exactly why
//! none does. The search is complete (it tries every start of every instance, skipping only
//! orderings of identical profiles), so "impossible" means impossible.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use thiserror::Error;

use crate::profiles::{self, GpuModel, MigProfile, MODELS};

/// Profiles and counts wanted on one GPU, by profile name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Wanted(pub BTreeMap<String, u32>);

impl Wanted {
    /// Parses `3g.40gb=2,1g.10gb=1` (a profile without `=N` counts once; repeats add up). A
    /// count no GPU could hold (over [`profiles::max_instances_of_any_profile`]) is refused here
    /// as impossible, so nothing is ever sized by it.
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        let max = profiles::max_instances_of_any_profile();
        let mut out = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, count) = match part.split_once('=') {
                Some((n, c)) => (n.trim(), c.trim()),
                None => (part, "1"),
            };
            if name.is_empty() {
                return Err(PlanError::Syntax {
                    text: text.to_string(),
                    reason: format!("{part:?}: missing profile name"),
                });
            }
            if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                return Err(PlanError::Syntax {
                    text: text.to_string(),
                    reason: format!("{part:?}: the count after '=' must be a whole number"),
                });
            }
            let too_many = |count: String| PlanError::TooMany {
                profile: name.to_string(),
                count,
                max,
            };
            // Digits only: a parse failure is a number beyond u32.
            let count: u32 = count.parse().map_err(|_| too_many(count.to_string()))?;
            let sum = out
                .get(name)
                .map_or(Some(count), |&c: &u32| c.checked_add(count));
            match sum {
                Some(sum) if sum <= max => out.insert(name.to_string(), sum),
                Some(sum) => return Err(too_many(sum.to_string())),
                None => return Err(too_many(format!("more than {}", u32::MAX))),
            };
        }
        out.retain(|_, c| *c > 0);
        Ok(Wanted(out))
    }

    pub fn total(&self) -> u32 {
        self.0.values().fold(0, |sum, &c| sum.saturating_add(c))
    }
}

impl fmt::Display for Wanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no instances");
        }
        let parts: Vec<String> = self.0.iter().map(|(p, c)| format!("{p}={c}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// One GPU instance of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Placement {
    #[serde(serialize_with = "profile_name")]
    pub profile: &'static MigProfile,
    /// First memory slice.
    pub start: u32,
}

fn profile_name<S: serde::Serializer>(p: &&'static MigProfile, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name)
}

impl Placement {
    pub fn end(&self) -> u32 {
        self.start + self.profile.memory_slices
    }
    fn mask(&self) -> u32 {
        slice_mask(self.start, self.profile.memory_slices)
    }
}

fn slice_mask(start: u32, size: u32) -> u32 {
    ((1u32 << size) - 1) << start
}

/// A valid layout for one GPU, by start slice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub model: &'static str,
    pub placements: Vec<Placement>,
    /// Compute and memory slices used, of the GPU's.
    pub compute_slices_used: u32,
    pub compute_slices: u32,
    pub memory_slices_used: u32,
    pub memory_slices: u32,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} GPU instance(s)",
            self.model,
            self.placements.len()
        )?;
        for p in &self.placements {
            let slices = if p.profile.memory_slices == 1 {
                format!("slice {}", p.start)
            } else {
                format!("slices {}-{}", p.start, p.end() - 1)
            };
            writeln!(f, "  {:<12} {slices}", p.profile.name)?;
        }
        write!(
            f,
            "compute slices {}/{}, memory slices {}/{}",
            self.compute_slices_used,
            self.compute_slices,
            self.memory_slices_used,
            self.memory_slices
        )
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PlanError {
    #[error("unknown GPU model {model:?}; known models: {}", known_models())]
    UnknownModel { model: String },
    #[error("{model} has no MIG profile {profile:?}; its profiles: {}", known.join(", "))]
    UnknownProfile {
        model: &'static str,
        profile: String,
        known: Vec<&'static str>,
    },
    #[error("bad profile list {text:?}: {reason}")]
    Syntax { text: String, reason: String },
    #[error("{profile}: {count} instances wanted; no GPU holds more than {max} of one profile")]
    TooMany {
        profile: String,
        /// As written (it may not fit a u32).
        count: String,
        max: u32,
    },
    #[error("no MIG layout on {model} gives {wanted}: {reason}")]
    Impossible {
        model: &'static str,
        wanted: String,
        reason: String,
    },
}

impl PlanError {
    /// Whether the request was well-formed but cannot be met: a count no GPU holds is as
    /// impossible as a set that does not fit (`mig-plan` exits 2 for both).
    pub fn is_impossible(&self) -> bool {
        matches!(
            self,
            PlanError::Impossible { .. } | PlanError::TooMany { .. }
        )
    }
}

fn known_models() -> String {
    MODELS.iter().map(|m| m.key).collect::<Vec<_>>().join(", ")
}

/// Plans `profiles` (`3g.40gb=2,1g.10gb=1`) on model `model_key` (`H100-80GB`).
pub fn plan_text(model_key: &str, profiles: &str) -> Result<Plan, PlanError> {
    let model = profiles::model_by_key(model_key).ok_or_else(|| PlanError::UnknownModel {
        model: model_key.to_string(),
    })?;
    plan(model, &Wanted::parse(profiles)?)
}

/// Plans `wanted` on an empty GPU of `model`.
pub fn plan(model: &'static GpuModel, wanted: &Wanted) -> Result<Plan, PlanError> {
    plan_around(model, wanted, &[], |_, _| 0)
}

/// Plans `wanted` on a GPU where the `fixed` placements stay as they are, preferring the layout
/// with the highest total `score(profile, start)` (the applier scores existing instances it can
/// keep). Ties go to the first layout in search order (larger profiles first, lower starts first),
/// so the result is deterministic.
pub fn plan_around(
    model: &'static GpuModel,
    wanted: &Wanted,
    fixed: &[Placement],
    score: impl Fn(&MigProfile, u32) -> u32,
) -> Result<Plan, PlanError> {
    let impossible = |reason: String| PlanError::Impossible {
        model: model.key,
        wanted: wanted.to_string(),
        reason,
    };
    let fixed_names = || {
        fixed
            .iter()
            .map(|f| {
                format!(
                    "{} at {}:{}",
                    f.profile.name, f.start, f.profile.memory_slices
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Counts are checked against the table before anything is sized by them: a wanted count
    // comes from a ConfigMap or the command line and can be anything up to u32::MAX.
    let mut items: Vec<&'static MigProfile> = Vec::new();
    for (name, &count) in &wanted.0 {
        let p = model
            .profile(name)
            .ok_or_else(|| PlanError::UnknownProfile {
                model: model.key,
                profile: name.clone(),
                known: model.profile_names(),
            })?;
        let kept = fixed.iter().filter(|f| f.profile.name == p.name).count();
        let total = u32::try_from(kept)
            .ok()
            .and_then(|kept| kept.checked_add(count));
        if total.is_none_or(|total| total > p.max_instances) {
            return Err(impossible(format!(
                "{} allows at most {} {} instance(s), {} wanted{}",
                model.key,
                p.max_instances,
                p.name,
                count,
                if kept > 0 {
                    format!(" besides {kept} that must stay")
                } else {
                    String::new()
                }
            )));
        }
        items.extend(std::iter::repeat_n(p, count as usize));
    }
    // Media extensions exist once per GPU: one `+me` instance in all.
    let me = items.iter().filter(|p| p.name.ends_with("+me")).count()
        + fixed
            .iter()
            .filter(|f| f.profile.name.ends_with("+me"))
            .count();
    if me > 1 {
        return Err(impossible(format!(
            "{} has one set of media extensions: at most one +me instance, {me} wanted",
            model.key
        )));
    }
    let compute: u32 = items.iter().map(|p| p.compute_slices).sum::<u32>()
        + fixed.iter().map(|f| f.profile.compute_slices).sum::<u32>();
    let memory: u32 = items.iter().map(|p| p.memory_slices).sum::<u32>()
        + fixed.iter().map(|f| f.profile.memory_slices).sum::<u32>();
    let around = if fixed.is_empty() {
        String::new()
    } else {
        format!(" (including {} that must stay)", fixed_names())
    };
    if compute > model.compute_slices {
        return Err(impossible(format!(
            "needs {compute} compute slices{around}, {} has {}",
            model.key, model.compute_slices
        )));
    }
    if memory > model.memory_slices {
        return Err(impossible(format!(
            "needs {memory} memory slices{around}, {} has {}",
            model.key, model.memory_slices
        )));
    }
    let mut occupied = 0u32;
    for f in fixed {
        if occupied & f.mask() != 0 {
            return Err(impossible(format!(
                "the instances that must stay overlap: {}",
                fixed_names()
            )));
        }
        occupied |= f.mask();
    }
    // Larger placements first: they have the fewest starts, so the search fails fast.
    items.sort_by(|a, b| {
        b.memory_slices
            .cmp(&a.memory_slices)
            .then(b.compute_slices.cmp(&a.compute_slices))
            .then(a.name.cmp(b.name))
    });
    let mut search = Search {
        items: &items,
        score: &score,
        best: None,
        current: Vec::with_capacity(items.len()),
        bound: items
            .iter()
            .map(|p| p.starts.iter().map(|&s| score(p, s)).max().unwrap_or(0))
            .sum(),
    };
    search.run(0, occupied, 0);
    let Some((_, starts)) = search.best else {
        let mut distinct: Vec<&MigProfile> = items.clone();
        distinct.dedup_by(|a, b| a.name == b.name);
        let allowed: Vec<String> = distinct
            .iter()
            .map(|p| format!("{} {:?}:{}", p.name, p.starts, p.memory_slices))
            .collect();
        let blocked = if fixed.is_empty() {
            String::new()
        } else {
            format!(" around {}", fixed_names())
        };
        return Err(impossible(format!(
            "their allowed placements cannot be combined without overlap{blocked} (placements as {{starts}}:size in memory slices: {})",
            allowed.join(", ")
        )));
    };
    let mut placements: Vec<Placement> = items
        .iter()
        .zip(starts)
        .map(|(&profile, start)| Placement { profile, start })
        .collect();
    placements.sort_by_key(|p| (p.start, p.profile.name));
    Ok(Plan {
        model: model.key,
        compute_slices_used: placements.iter().map(|p| p.profile.compute_slices).sum(),
        compute_slices: model.compute_slices,
        memory_slices_used: placements.iter().map(|p| p.profile.memory_slices).sum(),
        memory_slices: model.memory_slices,
        placements,
    })
}

struct Search<'a, F> {
    items: &'a [&'static MigProfile],
    score: &'a F,
    best: Option<(u32, Vec<u32>)>,
    current: Vec<u32>,
    /// The highest score any layout could reach: stop once it is reached.
    bound: u32,
}

impl<F: Fn(&MigProfile, u32) -> u32> Search<'_, F> {
    /// Returns true to stop the whole search.
    fn run(&mut self, i: usize, occupied: u32, score: u32) -> bool {
        if i == self.items.len() {
            if self.best.as_ref().is_none_or(|(b, _)| score > *b) {
                self.best = Some((score, self.current.clone()));
            }
            return score >= self.bound;
        }
        let p = self.items[i];
        // Identical profiles take non-decreasing starts: each set of starts is tried once.
        let min_start = match i {
            0 => 0,
            _ if self.items[i - 1].name == p.name => self.current[i - 1] + 1,
            _ => 0,
        };
        for &start in p.starts.iter().filter(|&&s| s >= min_start) {
            let mask = slice_mask(start, p.memory_slices);
            if occupied & mask != 0 {
                continue;
            }
            self.current.push(start);
            let stop = self.run(i + 1, occupied | mask, score + (self.score)(p, start));
            self.current.pop();
            if stop {
                return true;
            }
        }
        false
    }
}

/// Checks a plan against the model's rules; `None` when valid, else what is wrong. Used by the
/// tests and by the applier before it touches a GPU.
pub fn validate(model: &GpuModel, placements: &[Placement]) -> Option<String> {
    let mut occupied = 0u32;
    let mut compute = 0;
    for pl in placements {
        let p = pl.profile;
        if model.profile(p.name) != Some(p) {
            return Some(format!("{} is not a {} profile", p.name, model.key));
        }
        if !p.starts.contains(&pl.start) {
            return Some(format!("{} cannot start at {}", p.name, pl.start));
        }
        if pl.end() > model.memory_slices {
            return Some(format!(
                "{} at {} runs past the last slice",
                p.name, pl.start
            ));
        }
        if occupied & pl.mask() != 0 {
            return Some(format!(
                "{} at {} overlaps another instance",
                p.name, pl.start
            ));
        }
        occupied |= pl.mask();
        compute += p.compute_slices;
        let count = placements
            .iter()
            .filter(|q| q.profile.name == p.name)
            .count() as u32;
        if count > p.max_instances {
            return Some(format!("more than {} {}", p.max_instances, p.name));
        }
    }
    if compute > model.compute_slices {
        return Some(format!("{compute} compute slices used"));
    }
    if placements
        .iter()
        .filter(|p| p.profile.name.ends_with("+me"))
        .count()
        > 1
    {
        return Some("more than one +me instance".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::{A100_40GB, A30_24GB, H100_80GB};

    fn starts(p: &Plan) -> Vec<(&str, u32)> {
        p.placements
            .iter()
            .map(|p| (p.profile.name, p.start))
            .collect()
    }

    #[test]
    fn two_3g_on_h100() {
        let p = plan_text("H100-80GB", "3g.40gb=2").unwrap();
        assert_eq!(starts(&p), vec![("3g.40gb", 0), ("3g.40gb", 4)]);
        assert_eq!((p.compute_slices_used, p.memory_slices_used), (6, 8));
    }

    #[test]
    fn mixed_h100_layout_puts_big_ones_where_they_fit() {
        // 1g profiles never start at slice 7, so the 3g cannot take 0-3: it must go to 4-7.
        let p = plan_text("H100-80GB", "1g.10gb=4,3g.40gb=1").unwrap();
        assert_eq!(
            starts(&p),
            vec![
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("3g.40gb", 4)
            ]
        );
        assert!(validate(&H100_80GB, &p.placements).is_none());
    }

    #[test]
    fn placement_rule_not_only_counting() {
        // A 3g.20gb and two 2g.10gb fit only with the 3g at 4: 2g starts are 0, 2 and 4.
        let p = plan(&A100_40GB, &Wanted::parse("3g.20gb=1,2g.10gb=2").unwrap()).unwrap();
        assert_eq!(
            starts(&p),
            vec![("2g.10gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)]
        );
    }

    #[test]
    fn impossible_layouts_say_why() {
        let e = plan_text("H100-80GB", "3g.40gb=3").unwrap_err();
        assert!(e.is_impossible());
        assert!(e.to_string().contains("at most 2 3g.40gb"), "{e}");
        let e = plan_text("H100-80GB", "4g.40gb=1,3g.40gb=1,1g.10gb=1").unwrap_err();
        assert!(e.to_string().contains("needs 8 compute slices"), "{e}");
        let e = plan_text("A100-40GB", "3g.20gb=2,1g.5gb=1").unwrap_err();
        assert!(e.to_string().contains("needs 9 memory slices"), "{e}");
        let e = plan_text("A30-24GB", "1g.6gb+me=1,2g.12gb+me=1").unwrap_err();
        assert!(e.to_string().contains("one +me"), "{e}");
    }

    #[test]
    fn overlap_only_failure_names_placements() {
        // Slices and counts allow it, but a 1g.10gb kept at 5 blocks both 3g starts' partner.
        let fixed = [Placement {
            profile: H100_80GB.profile("1g.10gb").unwrap(),
            start: 5,
        }];
        let e = plan_around(
            &H100_80GB,
            &Wanted::parse("3g.40gb=1,2g.20gb=1").unwrap(),
            &fixed,
            |_, _| 0,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot be combined without overlap around 1g.10gb at 5:1"),
            "{e}"
        );
    }

    #[test]
    fn unknown_names_are_not_impossible() {
        let e = plan_text("B300", "1g.10gb").unwrap_err();
        assert!(!e.is_impossible());
        assert!(e.to_string().contains("known models: A30-24GB"), "{e}");
        let e = plan_text("H100-80GB", "3g.20gb=1").unwrap_err();
        assert!(e.to_string().contains("no MIG profile \"3g.20gb\""), "{e}");
        let e = plan_text("H100-80GB", "3g.40gb=two").unwrap_err();
        assert!(matches!(e, PlanError::Syntax { .. }), "{e}");
    }

    #[test]
    fn a30_has_four_slices() {
        let p = plan(&A30_24GB, &Wanted::parse("2g.12gb=1,1g.6gb=2").unwrap()).unwrap();
        assert_eq!(
            starts(&p),
            vec![("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)]
        );
        assert!(plan_text("A30-24GB", "4g.24gb,1g.6gb")
            .unwrap_err()
            .is_impossible());
    }

    #[test]
    fn empty_wanted_is_an_empty_plan() {
        let p = plan_text("H200-141GB", "").unwrap();
        assert!(p.placements.is_empty());
    }
}

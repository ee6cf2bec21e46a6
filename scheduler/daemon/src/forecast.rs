//! The forecast the daemon publishes: when each waiting gang is expected to start, from running
//! the engine forward (`basalt_engine::forecast`) on the cluster the last cycle saw.
//!
//! This file holds what the daemon adds to the engine's forecast, all pure (each pod's end is
//! read by `basalt_crds::ends`, shared with `basalt-sim plan --explain`):
//! - the status each waiting Basalt PodGroup gets ([`published`]), and whether it differs from
//!   what it has (written only then).

use std::collections::BTreeMap;

use basalt_crds::PodGroupForecast;
use basalt_engine::forecast::{Forecast, Method};

pub use basalt_crds::ends::{ends_paired, objects_of, BadRuntime, Learned};

/// What each waiting gang's `status.forecast` is to say, by `namespace/name`.
pub fn published(
    forecast: &Forecast,
    computed_at: jiff::Timestamp,
) -> BTreeMap<String, PodGroupForecast> {
    (forecast.jobs.iter())
        .map(|j| {
            let start = (j.start_ms)
                .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
                .map(|t| t.to_string());
            let method = match start {
                Some(_) => j.method,
                None => Method::Unknown,
            };
            let status = PodGroupForecast {
                start,
                method: method.as_str().to_string(),
                computed_at: computed_at.to_string(),
            };
            (j.job.clone(), status)
        })
        .collect()
}

/// Whether `new` says something `current` does not (the instant it was computed aside): only
/// then is it written.
pub fn differs(current: Option<&PodGroupForecast>, new: Option<&PodGroupForecast>) -> bool {
    let said = |f: Option<&PodGroupForecast>| f.map(|f| (f.start.clone(), f.method.clone()));
    said(current) != said(new)
}

/// The `status.forecast` group `name` is to have: the last forecast's where it says another
/// start or method than `current` ([`differs`]), none once the gang no longer waits, and
/// `current` until the first forecast (or while the forecast is off).
pub fn settled(
    current: Option<&PodGroupForecast>,
    forecasts: Option<&Results>,
    name: &str,
    waiting: bool,
) -> Option<PodGroupForecast> {
    let new = match forecasts {
        Some(f) if waiting => f.published.get(name),
        Some(_) => None,
        None => return current.cloned(),
    };
    match differs(current, new) {
        true => new.cloned(),
        false => current.cloned(),
    }
}

mod task;
pub use task::{Forecaster, Input, Results};

#[cfg(test)]
mod tests;

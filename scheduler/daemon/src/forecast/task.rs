//! The forecast's background task: once per interval it asks the next cycle for its objects
//! (cloned only then), runs the engine forward on them off the scheduling path, and leaves the
//! result where the status writer reads it. A cycle never waits for it, and it never wakes
//! one: while the daemon is idle nothing changes, and the last forecast stands.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use basalt_crds::{ConvertOptions, Object, PodGroupForecast};
use basalt_engine::forecast::Limits;
use basalt_engine::ClusterSpec;
use basalt_plugins::Config;
use tokio::sync::Notify;

use super::{ends, published, BadRuntime, Learned};

/// What the forecast runs on: a cycle's objects, as that cycle converted them.
pub struct Input {
    pub objects: Vec<(String, Object)>,
    pub options: ConvertOptions,
    pub config: Config,
}

/// The last forecast: each waiting gang's status by `namespace/name`, and the annotations
/// that did not read.
#[derive(Default)]
pub struct Results {
    pub published: BTreeMap<String, PodGroupForecast>,
    pub bad: Vec<BadRuntime>,
}

#[derive(Default)]
struct Shared {
    /// Set once per interval; the next cycle hands its input over and clears it.
    wanted: AtomicBool,
    input: Mutex<Option<Input>>,
    input_ready: Notify,
    results: Mutex<Option<Arc<Results>>>,
}

/// The cycle's handle on the task (cheap to hold; the task ends with the runtime).
#[derive(Clone)]
pub struct Forecaster {
    shared: Arc<Shared>,
}

impl Forecaster {
    /// Starts the task, a forecast every `interval` with cycles `period` apart; none when
    /// `interval` is zero.
    pub fn start(interval: Duration, period: Duration) -> Option<Forecaster> {
        if interval.is_zero() {
            return None;
        }
        let shared = Arc::new(Shared::default());
        let limits = Limits {
            period_ms: i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1),
            ..Limits::default()
        };
        tokio::spawn(run(shared.clone(), interval, limits));
        Some(Forecaster { shared })
    }

    /// Called by each cycle: hands `input()` to the task when it asked for one.
    pub fn offer(&self, input: impl FnOnce() -> Input) {
        if self.shared.wanted.swap(false, Ordering::AcqRel) {
            *lock(&self.shared.input) = Some(input());
            self.shared.input_ready.notify_one();
        }
    }

    /// The last forecast (`None` before the first).
    pub fn latest(&self) -> Option<Arc<Results>> {
        lock(&self.shared.results).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn run(shared: Arc<Shared>, interval: Duration, limits: Limits) {
    let mut learned = Learned::default();
    loop {
        tokio::time::sleep(interval).await;
        shared.wanted.store(true, Ordering::Release);
        let input = loop {
            shared.input_ready.notified().await;
            if let Some(input) = lock(&shared.input).take() {
                break input;
            }
        };
        let computed = tokio::task::spawn_blocking(move || {
            let results = compute(input, &mut learned, limits);
            (results, learned)
        })
        .await;
        match computed {
            Ok((results, kept)) => {
                learned = kept;
                *lock(&shared.results) = Some(Arc::new(results));
            }
            Err(e) => {
                tracing::error!(error = %e, "the forecast failed; it is tried again next interval");
                learned = Learned::default();
            }
        }
    }
}

/// One forecast of `input` (pure but for the learned history it adds to).
pub fn compute(input: Input, learned: &mut Learned, limits: Limits) -> Results {
    let Some((spec, objects)) = usable_spec(input.objects, &input.options) else {
        return Results::default();
    };
    let queue_of = pod_queues(&spec);
    let pods: Vec<&k8s_openapi::api::core::v1::Pod> = (objects.iter())
        .filter_map(|(_, o)| match o {
            Object::Pod(p) => Some(&**p),
            _ => None,
        })
        .collect();
    learned.learn(&pods, |p| {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let name = p.metadata.name.as_deref().unwrap_or_default();
        queue_of.get(&format!("{ns}/{name}")).cloned().flatten()
    });
    let (ends, bad) = ends(&objects, &spec, learned);
    let config = input.config;
    let framework = |names: &_| basalt_plugins::framework(&config, names);
    match basalt_engine::forecast::forecast(spec, framework, &ends, limits) {
        Ok(forecast) => {
            tracing::debug!(
                cycles = forecast.cycles,
                ends = forecast.ends,
                gangs = forecast.jobs.len(),
                "forecast"
            );
            Results {
                published: published(&forecast, jiff::Timestamp::now()),
                bad,
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "the forecast could not build its snapshot");
            Results {
                bad,
                ..Results::default()
            }
        }
    }
}

/// The cluster's spec from the objects that convert: one that does not is left out, as the
/// cycle leaves it out (and reports it).
fn usable_spec(
    mut objects: Vec<(String, Object)>,
    options: &ConvertOptions,
) -> Option<(ClusterSpec, Vec<(String, Object)>)> {
    loop {
        match basalt_crds::convert::cluster_spec(&objects, options) {
            Ok(spec) => return Some((spec, objects)),
            Err(e) => {
                let before = objects.len();
                objects.retain(|(_, o)| !(o.kind() == e.kind && o.key() == e.object));
                if objects.len() == before {
                    tracing::warn!(error = %e, "the forecast cannot convert the cluster");
                    return None;
                }
            }
        }
    }
}

/// Per pod (`namespace/name`) its queue: its own, else its group's.
fn pod_queues(spec: &ClusterSpec) -> std::collections::HashMap<String, Option<String>> {
    let groups: std::collections::HashMap<String, Option<&String>> = (spec.groups.iter())
        .map(|g| (format!("{}/{}", g.namespace, g.name), g.queue.as_ref()))
        .collect();
    (spec.pods.iter())
        .map(|p| {
            let group =
                (p.group.as_ref()).and_then(|g| groups.get(&format!("{}/{g}", p.namespace)));
            let queue = p
                .queue
                .clone()
                .or_else(|| group.copied().flatten().cloned());
            (format!("{}/{}", p.namespace, p.name), queue)
        })
        .collect()
}

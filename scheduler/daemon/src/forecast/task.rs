//! The forecast's background task: once per interval it asks the next cycle for its objects
//! (shared with the cycle's incremental snapshot, never copied), runs the engine forward on
//! them on a thread of its own at the lowest CPU priority, and leaves the result where the
//! status writer reads it. A cycle never waits for it, and it never wakes one: while the
//! daemon is idle nothing changes, and the last forecast stands.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use basalt_crds::{ConvertOptions, Object, PodGroupForecast};
use basalt_engine::forecast::Limits;
use basalt_engine::ClusterSpec;
use basalt_plugins::Config;

use super::{ends, published, BadRuntime, Learned};

/// What the forecast runs on: a cycle's objects, as that cycle converted them.
pub struct Input {
    pub objects: Arc<Vec<(String, Object)>>,
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
    results: Mutex<Option<Arc<Results>>>,
}

/// The cycle's handle on the task (cheap to hold; the task's thread ends with the daemon).
#[derive(Clone)]
pub struct Forecaster {
    shared: Arc<Shared>,
    input: mpsc::SyncSender<Input>,
}

impl Forecaster {
    /// Starts the task, a forecast every `interval` with cycles `period` apart; none when
    /// `interval` is zero (or when its thread cannot start: said, and the daemon goes on).
    pub fn start(interval: Duration, period: Duration) -> Option<Forecaster> {
        if interval.is_zero() {
            return None;
        }
        let shared = Arc::new(Shared::default());
        let limits = Limits {
            period_ms: i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1),
            ..Limits::default()
        };
        // One input at most in flight: the task asks for the next only once done.
        let (input, inputs) = mpsc::sync_channel(1);
        let task = shared.clone();
        let started = std::thread::Builder::new()
            .name("forecast".into())
            .spawn(move || run(task, inputs, interval, limits));
        if let Err(e) = started {
            tracing::error!(error = %e, "the forecast's thread did not start; no forecast");
            return None;
        }
        Some(Forecaster { shared, input })
    }

    /// Called by each cycle: hands `input()` to the task when it asked for one.
    pub fn offer(&self, input: impl FnOnce() -> Input) {
        if self.shared.wanted.swap(false, Ordering::AcqRel) {
            // Never blocks: the task asked, so the channel is empty.
            let _ = self.input.try_send(input());
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

/// The task's thread: below every other thread of the machine in CPU priority, so a run
/// never takes a core from the daemon's cycles (nor from the API server beside it).
fn run(shared: Arc<Shared>, inputs: mpsc::Receiver<Input>, interval: Duration, limits: Limits) {
    lowest_priority();
    let mut learned = Learned::default();
    loop {
        std::thread::sleep(interval);
        shared.wanted.store(true, Ordering::Release);
        // The daemon is gone when its handle is.
        let Ok(input) = inputs.recv() else {
            return;
        };
        let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compute(input, &mut learned, limits)
        }));
        match computed {
            Ok(results) => *lock(&shared.results) = Some(Arc::new(results)),
            Err(_) => {
                tracing::error!("the forecast failed; it is tried again next interval");
                learned = Learned::default();
            }
        }
    }
}

/// Makes the calling thread the machine's least urgent (Linux: nice 19 for this thread
/// alone; elsewhere nothing).
fn lowest_priority() {
    // `None` is the calling thread on Linux, whose nice value is per thread.
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(None, 19) {
        tracing::warn!(error = %e, "the forecast's thread keeps the daemon's priority");
    }
}

/// One forecast of `input` (pure but for the learned history it adds to).
pub fn compute(input: Input, learned: &mut Learned, limits: Limits) -> Results {
    let Some((spec, objects)) = usable_spec(&input.objects, &input.options) else {
        return Results::default();
    };
    let objects: &[(String, Object)] = &objects;
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
    let (ends, bad) = ends(objects, &spec, learned);
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

/// The objects a forecast converts: the cycle's, or a copy without those that do not convert.
type Usable<'o> = std::borrow::Cow<'o, [(String, Object)]>;

/// The cluster's spec from the objects that convert: one that does not is left out, as the
/// cycle leaves it out (and reports it). The objects are copied only then.
fn usable_spec<'o>(
    objects: &'o [(String, Object)],
    options: &ConvertOptions,
) -> Option<(ClusterSpec, Usable<'o>)> {
    let mut objects = std::borrow::Cow::Borrowed(objects);
    loop {
        match basalt_crds::convert::cluster_spec(&objects, options) {
            Ok(spec) => return Some((spec, objects)),
            Err(e) => {
                let before = objects.len();
                objects
                    .to_mut()
                    .retain(|(_, o)| !(o.kind() == e.kind && o.key() == e.object));
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

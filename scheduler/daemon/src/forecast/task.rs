//! The forecast's background task: once per interval it asks the next cycle for its objects,
//! their conversions (shared with the cycle's incremental snapshot, never copied nor
//! converted again) and its plan (the run's first cycle, not decided again), runs the engine forward on them on a thread of its own at the lowest CPU
//! priority, and leaves the result where the status writer reads it. A cycle never waits for
//! it, and it never wakes one: while the daemon is idle nothing changes, and the last forecast
//! stands.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use basalt_crds::incremental::{usable_spec, ConvertedObjects};
use basalt_crds::{ConvertOptions, Object, PodGroupForecast, SharedSpec};
use basalt_engine::forecast::Limits;
use basalt_engine::{GroupSpec, Plan, PodPhase, PodSpec};
use basalt_plugins::Config;

use super::{ends_paired, objects_of, published, BadRuntime, Learned};
use k8s_openapi::api::core::v1::Pod;

/// What the forecast runs on: a cycle's objects, as that cycle converted them, and the plan
/// it made (the forecast's first cycle).
pub struct Input {
    pub objects: Arc<ConvertedObjects>,
    pub options: ConvertOptions,
    pub config: Config,
    pub plan: Arc<Plan>,
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

    /// Called by each cycle: hands `input()` to the task when it asked for one (and the next
    /// cycle's when there is none yet).
    pub fn offer(&self, input: impl FnOnce() -> Option<Input>) {
        if self.shared.wanted.swap(false, Ordering::AcqRel) {
            match input() {
                // Never blocks: the task asked, so the channel is empty.
                Some(input) => {
                    let _ = self.input.try_send(input);
                }
                None => self.shared.wanted.store(true, Ordering::Release),
            }
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
    let clock = Clock::start();
    // The cycle's conversions, else (an object the context is read from does not convert)
    // every object converted again.
    let kept = input.objects.kept_shared_spec(&input.options);
    let reused = kept.is_some();
    let usable = match kept {
        Some(usable) => usable,
        None => match usable_spec(&input.objects.objects(), &input.options) {
            Ok((spec, objects)) => (SharedSpec::from(spec), objects),
            Err(e) => {
                tracing::warn!(error = %e, "the forecast cannot convert the cluster");
                return Results::default();
            }
        },
    };
    // The pods stay shared with the cycle's conversions: the run copies only those it moves.
    let (shared, objects) = usable;
    let SharedSpec {
        spec,
        pods,
        sources,
    } = shared;
    let converted = clock.lap();
    let objects: &[(String, Object)] = &objects;
    // Each pod beside the object it was converted from, paired by place where the spec says
    // (the kept conversions), else by name: its annotations, owner and status are read there.
    let raw: Vec<Option<&Pod>> = match sources.len() == pods.len() {
        true => sources.iter().map(pod_of).collect(),
        false => objects_of(objects, &pods.iter().map(|p| &**p).collect::<Vec<_>>()),
    };
    learn_finished(learned, &spec.groups, &pods, &raw);
    let paired = pods.iter().map(|p| &**p).zip(raw.iter().copied());
    let (ends, bad) = ends_paired(objects, &spec.groups, paired, learned);
    let read_ends = clock.lap();
    let config = input.config;
    let framework = |names: &_| basalt_plugins::framework(&config, names);
    // The cycle's plan is the run's first cycle only when the spec is the one it decided on.
    let decided = reused.then_some(&*input.plan);
    let forecast =
        basalt_engine::forecast::forecast_shared(spec, pods, decided, framework, &ends, limits);
    let engine = clock.lap();
    match forecast {
        Ok(forecast) => {
            tracing::debug!(
                convert_ms = converted.wall_ms,
                reused,
                ends_ms = read_ends.wall_ms - converted.wall_ms,
                engine_ms = engine.wall_ms - read_ends.wall_ms,
                cpu_ms = engine.cpu_ms,
                convert_cpu_ms = converted.cpu_ms,
                ends_cpu_ms = read_ends.cpu_ms - converted.cpu_ms,
                engine_cpu_ms = engine.cpu_ms - read_ends.cpu_ms,
                cycles = forecast.cycles,
                ends = forecast.ends,
                work = forecast.work,
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

/// Records the run time of each succeeded pod (read from its object) under its queue: its
/// own, else its group's.
fn learn_finished(
    learned: &mut Learned,
    groups: &[GroupSpec],
    pods: &[Arc<PodSpec>],
    raw: &[Option<&Pod>],
) {
    let mut queues: Option<HashMap<(&str, &str), Option<&str>>> = None;
    for (p, pod) in pods.iter().zip(raw) {
        let (PodPhase::Succeeded, Some(pod)) = (p.phase, pod) else {
            continue;
        };
        let queues = queues.get_or_insert_with(|| {
            (groups.iter())
                .map(|g| ((g.namespace.as_str(), g.name.as_str()), g.queue.as_deref()))
                .collect()
        });
        let group = (p.group.as_deref()).and_then(|g| queues.get(&(p.namespace.as_str(), g)));
        let queue = p.queue.as_deref().or_else(|| group.copied().flatten());
        learned.learn_pod(pod, queue);
    }
}

fn pod_of(o: &Object) -> Option<&Pod> {
    match o {
        Object::Pod(p) => Some(p),
        _ => None,
    }
}

/// Wall and thread CPU time since a run started, for its debug line.
struct Clock {
    wall: std::time::Instant,
    cpu_ns: Option<u64>,
}

struct Lap {
    wall_ms: f64,
    /// This thread's CPU time (0 where it cannot be read).
    cpu_ms: f64,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            wall: std::time::Instant::now(),
            cpu_ns: thread_cpu_ns(),
        }
    }

    fn lap(&self) -> Lap {
        let cpu = (thread_cpu_ns().zip(self.cpu_ns)).map(|(now, then)| now.saturating_sub(then));
        Lap {
            wall_ms: self.wall.elapsed().as_secs_f64() * 1e3,
            cpu_ms: cpu.unwrap_or(0) as f64 / 1e6,
        }
    }
}

/// This thread's time on a CPU in nanoseconds (Linux's schedstat; `None` elsewhere).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

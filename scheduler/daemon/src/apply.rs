//! Applying a plan through the API: binds (GPU ids on the Binding; HAMi's handoff on nodes that
//! run its device plugin, `devices.rs`; claims settled for the node first, `claims.rs`),
//! evictions (`evictions.rs`), nominated nodes, PodGroup and Queue status (`status.rs`) and
//! Events; auto PodGroups before the cycle (`auto_groups.rs`). Every API answer
//! is looked at; nothing here panics on one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_crds::convert::{GPU_IDS, POD_GROUP, SCHEDULER_PLUGINS_POD_GROUP, VOLCANO_GROUP_NAME};
use basalt_engine::Plan;
use basalt_plugins::Config;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Event, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde_json::json;

use crate::cycle::{pod_key, View};
use crate::http::Metrics;
use crate::leader::Leadership;
use crate::owners::OwnerGroup;
use crate::stores::Stores;
use crate::stranded::PartialGangs;
use crate::writer::{EventSink, Limiter};

mod auto_groups;
mod claims;
mod devices;
mod evictions;
mod status;
mod volumes;

/// PodGroup condition of a gang left partly bound.
const PARTIALLY_BOUND: &str = "PartiallyBound";
/// Event reason of the eviction of a partly bound gang's members.
const GANG_ROLLBACK: &str = "GangRollback";
/// How long an eviction refused by a disruption budget is not asked for again.
const REFUSED_EVICTION_HOLD: Duration = Duration::from_secs(30);
const COMPONENT: &str = "basalt-scheduler";
/// Annotation on a groupless pod naming the queue of its auto PodGroup.
pub const AUTO_QUEUE: &str = "scheduling.basalt.dev/queue";

/// A pod this scheduler bound whose binding the watch has not shown yet.
pub struct Assumed {
    pub node: String,
    /// The GPU ids annotation value (`0,1`), empty when none.
    pub gpus: String,
    pub uid: Option<String>,
}

pub struct Scheduler {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub assumed: HashMap<String, Assumed>,
    concurrency: usize,
    /// Every write takes a token (`--kube-api-qps`, `--kube-api-burst`).
    pub limiter: Arc<Limiter>,
    events: EventSink,
    /// Consecutive cycles whose binds failed with a retryable error.
    retry_streak: u32,
    refused_evictions: HashMap<String, Instant>,
    /// Last FailedScheduling message per object, so an unchanged reason is not repeated.
    reported_unschedulable: HashMap<String, String>,
    pub(crate) reported_convert_errors: HashSet<String>,
    /// This replica's name in Events.
    identity: String,
    /// Auto PodGroups made for groupless pods (pod key → group name) whose group the watch
    /// may not show yet.
    pub auto_groups: HashMap<String, String>,
    /// Pods joined to their owner's PodGroup (pod key → `ns/group`): kept out of the snapshot
    /// until the watches show both the group and the pod naming it, so a gang member is never
    /// scheduled alone in the meantime.
    pub owner_members: HashMap<String, String>,
    /// Pods whose owner could not be read this cycle (transient error): not scheduled yet.
    pub hold: HashSet<String>,
    /// What each owner (by uid) says about grouping, and when it was read: re-read once older
    /// than `owner_ttl`, so an annotation changed on the owner is seen.
    owners: HashMap<String, (OwnerGroup, Instant)>,
    owner_ttl: Duration,
    /// This cycle's PodGroups and Queues, Basalt's and Volcano's.
    pub view: View,
    /// Basalt and Volcano objects sharing a name, already warned about.
    pub collisions: HashSet<String>,
    /// Conversion warnings of the last snapshot, already logged.
    pub reported_warnings: HashSet<String>,
    /// Gangs left partly bound, rolled back after `--partial-gang-timeout`.
    partial_gangs: PartialGangs,
    /// Checked right before every write: none is sent once leadership is lost.
    pub leadership: Leadership,
    /// This cycle's pending pods held for what they state or their volumes (pod key → Event
    /// reason and message), from the snapshot.
    pub held: HashMap<String, (&'static str, String)>,
    /// The last snapshot and its inputs, scheduled on again while they have not changed.
    pub last: Option<crate::cycle::LastBuild>,
}

/// How the scheduler writes: the daemon's flags.
pub struct Settings {
    /// Writes (binds, evictions, status) in flight at once, and Events.
    pub concurrency: usize,
    /// This replica's name in Events.
    pub identity: String,
    pub owner_ttl: Duration,
    pub partial_gang_timeout: Duration,
    /// Client-side rate limit on writes: tokens a second (0: none) and the burst.
    pub qps: f64,
    pub burst: u32,
}

enum BindResult {
    Bound,
    /// 409: already bound or replaced; the watch will tell.
    Conflict(String),
    /// Not found or refused for good this cycle; the next cycle plans again.
    Failed(String),
    /// 5xx, 429 or a transport error: retried with backoff.
    Retry(String),
}

impl BindResult {
    fn message(&self) -> &str {
        match self {
            BindResult::Bound => "bound",
            BindResult::Conflict(m) | BindResult::Failed(m) | BindResult::Retry(m) => m,
        }
    }
}

/// One binding of the plan to send.
struct BindJob {
    key: String,
    node: String,
    /// The GPU ids annotation value (`0,1`), empty when none.
    gpus: String,
    uid: Option<String>,
    /// On a node that runs HAMi's device plugin: the pod and its devices, handed off as HAMi
    /// expects (`devices.rs`).
    hami: Option<(Arc<Pod>, Vec<basalt_engine::plan::BoundDevice>)>,
    /// Annotations the Binding carries besides the GPU ids (Volcano vGPU's).
    annotations: BTreeMap<String, String>,
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}

pub(crate) fn classify(e: &kube::Error) -> (Option<u16>, String) {
    match e {
        kube::Error::Api(s) => (Some(s.code), format!("{} ({})", s.message, s.code)),
        other => (None, other.to_string()),
    }
}

impl Scheduler {
    /// A scheduler writing through `client`; Events go out from a task it starts on the
    /// current runtime.
    pub fn new(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        settings: Settings,
        leadership: Leadership,
    ) -> Self {
        let limiter = Limiter::new(settings.qps, settings.burst);
        let concurrency = settings.concurrency.max(1);
        let events = EventSink::spawn(
            client.clone(),
            limiter.clone(),
            leadership.clone(),
            concurrency,
            metrics.clone(),
        );
        Scheduler {
            client,
            config,
            metrics,
            assumed: HashMap::new(),
            concurrency,
            limiter,
            events,
            retry_streak: 0,
            refused_evictions: HashMap::new(),
            reported_unschedulable: HashMap::new(),
            reported_convert_errors: HashSet::new(),
            identity: settings.identity,
            auto_groups: HashMap::new(),
            owner_members: HashMap::new(),
            hold: HashSet::new(),
            owners: HashMap::new(),
            owner_ttl: settings.owner_ttl,
            view: View::default(),
            collisions: HashSet::new(),
            reported_warnings: HashSet::new(),
            partial_gangs: PartialGangs::new(settings.partial_gang_timeout),
            leadership,
            held: HashMap::new(),
            last: None,
        }
    }

    /// Drops what this replica remembered from cycles it ran before another one led.
    pub fn forget(&mut self) {
        self.assumed.clear();
        self.retry_streak = 0;
        self.refused_evictions.clear();
        self.reported_unschedulable.clear();
        self.reported_convert_errors.clear();
        self.partial_gangs.clear();
        self.last = None;
    }

    /// Applies `plan`; returns how long to back off before the next cycle.
    pub async fn apply(&mut self, plan: &Plan, stores: &Stores) -> Duration {
        let t0 = Instant::now();
        self.evict(plan, stores).await;
        let t_evict = t0.elapsed();
        let (retry, failed) = self.bind_all(plan, stores).await;
        let t_bind = t0.elapsed();
        let partial = self
            .partial_gangs
            .observe(plan, Instant::now(), jiff::Timestamp::now());
        self.roll_back(&partial, stores).await;
        self.nominate(plan, stores).await;
        let t_nominate = t0.elapsed();
        self.write_groups(plan, stores, &failed, &partial).await;
        let t_groups = t0.elapsed();
        self.report_held(stores).await;
        self.write_queues(plan).await;
        tracing::debug!(evict = ?t_evict, bind = ?(t_bind - t_evict), nominate = ?(t_nominate - t_bind), group_status = ?(t_groups - t_nominate), rest = ?(t0.elapsed() - t_groups), "plan applied");

        let pending: Vec<_> = stores
            .pods
            .state()
            .into_iter()
            .filter(|p| {
                let spec = p.spec.as_ref();
                let ours = spec
                    .and_then(|s| s.scheduler_name.as_deref())
                    .is_some_and(|n| self.config.scheduler_names.iter().any(|s| s == n));
                let unbound = spec.and_then(|s| s.node_name.as_deref()).is_none();
                ours && unbound && !self.assumed.contains_key(&pod_key(p))
            })
            .collect();
        self.metrics.pending_pods.set(pending.len() as i64);
        self.queue_metrics(plan, &pending);

        if retry {
            self.retry_streak = (self.retry_streak + 1).min(7);
            Duration::from_millis(100 << self.retry_streak)
        } else {
            self.retry_streak = 0;
            Duration::ZERO
        }
    }

    /// Per-queue gauges: pending pods and PodGroups, deserved and allocated resources. Series
    /// of queues or resources gone since the last cycle are dropped.
    fn queue_metrics(&self, plan: &Plan, pending: &[Arc<Pod>]) {
        let m = &self.metrics;
        let queue_of_group = |ns: &str, name: &str| {
            (self.view.groups.get(&format!("{ns}/{name}"))).map(|g| g.queue.clone())
        };
        let label = |q: &str| vec![("queue".to_string(), q.to_string())];
        let mut pods: BTreeMap<String, i64> = BTreeMap::new();
        let mut groups: BTreeMap<String, i64> = BTreeMap::new();
        for q in &plan.queues {
            pods.insert(q.name.clone(), 0);
            groups.insert(q.name.clone(), 0);
        }
        for p in pending {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let queue = member_of(p)
                .and_then(|g| queue_of_group(ns, g))
                .or_else(|| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(AUTO_QUEUE))
                        .cloned()
                })
                .or_else(|| self.view.namespace_queues.get(ns).cloned())
                .unwrap_or_else(|| "default".into());
            *pods.entry(queue).or_default() += 1;
        }
        for planned in &plan.pod_groups {
            if !matches!(
                planned.phase,
                basalt_engine::JobPhase::Pending | basalt_engine::JobPhase::Inqueue
            ) {
                continue;
            }
            let (ns, name) = split_key(&planned.name);
            if let Some(queue) = queue_of_group(ns, name) {
                *groups.entry(queue).or_default() += 1;
            }
        }
        m.queue_pending_pods.clear();
        for (q, n) in pods {
            m.queue_pending_pods.get_or_create(&label(&q)).set(n);
        }
        m.queue_pending_groups.clear();
        for (q, n) in groups {
            m.queue_pending_groups.get_or_create(&label(&q)).set(n);
        }
        m.queue_deserved.clear();
        m.queue_allocated.clear();
        for q in &plan.queues {
            for (family, list) in [
                (&m.queue_deserved, &q.deserved),
                (&m.queue_allocated, &q.allocated),
            ] {
                for (resource, text) in list {
                    // Thousandths, so cpu reads in cores with millicore precision.
                    let Ok(v) = basalt_crds::quantity::parse_scaled(text, 1000) else {
                        continue;
                    };
                    let mut l = label(&q.name);
                    l.push(("resource".to_string(), resource.clone()));
                    family.get_or_create(&l).set(v as f64 / 1000.0);
                }
            }
        }
    }

    /// Binds the plan's pods; returns whether a retryable error happened, and per PodGroup
    /// (`ns/name`) how many of its binds failed this cycle with the last error.
    /// The binds of gang members first, each gang's together, so gangs complete (and their
    /// Events follow) before pods of one; otherwise the plan's order.
    fn gangs_first(&self, mut jobs: Vec<BindJob>, stores: &Stores) -> Vec<BindJob> {
        let gang_of = |job: &BindJob| {
            let (ns, name) = split_key(&job.key);
            let pod = stores.pods.get(&ObjectRef::new(name).within(ns))?;
            let key = format!("{ns}/{}", member_of(&pod)?);
            let group = self.view.groups.get(&key)?;
            (group.group.spec.min_member > 1).then_some(key)
        };
        let mut keyed: Vec<(Option<String>, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (gang_of(j), i))
            .collect();
        keyed.sort_by(|a, b| {
            (a.0.is_none(), &a.0)
                .cmp(&(b.0.is_none(), &b.0))
                .then(a.1.cmp(&b.1))
        });
        let mut slots: Vec<Option<BindJob>> = jobs.drain(..).map(Some).collect();
        keyed
            .into_iter()
            .filter_map(|(_, i)| slots[i].take())
            .collect()
    }

    async fn bind_all(
        &mut self,
        plan: &Plan,
        stores: &Stores,
    ) -> (bool, HashMap<String, (u32, String)>) {
        let mut created_at = HashMap::new();
        let jobs: Vec<_> = plan
            .bindings
            .iter()
            .filter(|b| !self.assumed.contains_key(&b.pod))
            .map(|b| {
                let (ns, name) = split_key(&b.pod);
                let pod = stores.pods.get(&ObjectRef::new(name).within(ns));
                let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
                let node = stores.nodes.get(&ObjectRef::new(&b.node));
                let on_hami = node.as_ref().is_some_and(|n| devices::runs_hami(n));
                let on_vgpu = node.as_ref().is_some_and(|n| devices::runs_vgpu(n));
                let annotations = match (&pod, on_vgpu && !b.devices.is_empty()) {
                    (Some(p), true) => devices::vgpu_annotations(&b.node, p, &b.devices),
                    _ => BTreeMap::new(),
                };
                let hami = (on_hami && !b.devices.is_empty())
                    .then_some(pod)
                    .flatten()
                    .map(|p| (p, b.devices.clone()));
                let created = stores
                    .pods
                    .get(&ObjectRef::new(name).within(ns))
                    .and_then(|p| p.metadata.creation_timestamp.clone());
                if let Some(t) = created {
                    created_at.insert(b.pod.clone(), t.0);
                }
                let gpus = b
                    .gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                BindJob {
                    key: b.pod.clone(),
                    node: b.node.clone(),
                    gpus,
                    uid,
                    hami,
                    annotations,
                }
            })
            .collect();
        // Claims first (PreBind): a pod whose claim cannot point at its node is not bound.
        let (jobs, mut results) = self.select_claims(jobs, stores).await;
        let jobs = self.gangs_first(jobs, stores);
        let client = self.client.clone();
        let leadership = self.leadership.clone();
        let limiter = self.limiter.clone();
        let bound: Vec<_> = futures::stream::iter(jobs)
            .map(|job| {
                let client = client.clone();
                let leadership = leadership.clone();
                let limiter = limiter.clone();
                async move {
                    limiter.acquire().await;
                    let r = if leadership.leading() {
                        bind_with_handoff(&client, &job).await
                    } else {
                        BindResult::Failed("not sent: this replica is not the leader".into())
                    };
                    (job, r)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        results.extend(bound);

        let mut retry = false;
        let mut failed: HashMap<String, (u32, String)> = HashMap::new();
        for (job, result) in results {
            let BindJob {
                key,
                node,
                gpus,
                uid,
                ..
            } = job;
            let (ns, name) = split_key(&key);
            if let BindResult::Conflict(m) | BindResult::Failed(m) | BindResult::Retry(m) = &result
            {
                let group = stores
                    .pods
                    .get(&ObjectRef::new(name).within(ns))
                    .and_then(|p| member_of(&p).map(|g| format!("{ns}/{g}")));
                if let Some(group) = group {
                    let entry = failed.entry(group).or_default();
                    entry.0 += 1;
                    entry.1 = format!("{key} on {node}: {m}");
                }
            }
            match result {
                BindResult::Bound => {
                    self.metrics.binds.inc();
                    if let Some(t) = created_at.get(&key) {
                        let secs = jiff::Timestamp::now().duration_since(*t).as_secs_f64();
                        self.metrics.scheduling_latency.observe(secs.max(0.0));
                    }
                    let reference = pod_ref(ns, name, uid.clone());
                    self.assumed.insert(
                        key.clone(),
                        Assumed {
                            node: node.clone(),
                            gpus,
                            uid,
                        },
                    );
                    tracing::info!(pod = %key, node = %node, "bound");
                    self.reported_unschedulable.remove(&format!("Pod/{key}"));
                    self.reported_unschedulable
                        .remove(&format!("PodClaims/{key}"));
                    let msg = format!("Successfully assigned {key} to {node}");
                    self.event(reference, "Normal", "Scheduled", &msg);
                }
                BindResult::Conflict(m) => {
                    self.metrics.bind_errors.inc();
                    tracing::warn!(pod = %key, node = %node, error = %m, "bind conflict; waiting for the watch");
                }
                BindResult::Failed(m) => {
                    self.metrics.bind_errors.inc();
                    tracing::warn!(pod = %key, node = %node, error = %m, "bind failed");
                }
                BindResult::Retry(m) => {
                    self.metrics.bind_errors.inc();
                    retry = true;
                    tracing::warn!(pod = %key, node = %node, error = %m, "bind failed; retrying next cycle");
                }
            }
        }
        (retry, failed)
    }

    async fn nominate(&mut self, plan: &Plan, stores: &Stores) {
        for n in &plan.nominations {
            if n.reason != basalt_engine::NominationReason::Evictions {
                continue;
            }
            let (ns, name) = split_key(&n.pod);
            let Some(pod) = stores.pods.get(&ObjectRef::new(name).within(ns)) else {
                continue;
            };
            let current = pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref());
            if current == Some(n.node.as_str()) {
                continue;
            }
            if !self.leadership.leading() {
                return;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let patch = json!({"status": {"nominatedNodeName": n.node}});
            self.limiter.acquire().await;
            if let Err(e) = api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(pod = %n.pod, error = %classify(&e).1, "cannot set nominatedNodeName");
            }
        }
    }

    /// Writes an Event about `key` unless the last one written about it said the same.
    pub(crate) fn event_once(
        &mut self,
        key: String,
        about: ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        let said = format!("{reason}: {message}");
        if self.reported_unschedulable.get(&key) == Some(&said) {
            return;
        }
        self.event(about, type_, reason, message);
        self.reported_unschedulable.insert(key, said);
    }

    /// Queues a core/v1 Event for the writer ([`EventSink`]); never waits.
    pub(crate) fn event(&self, about: ObjectReference, type_: &str, reason: &str, message: &str) {
        if !self.leadership.leading() {
            return;
        }
        let ns = about.namespace.clone().unwrap_or_else(|| "default".into());
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", about.name.as_deref().unwrap_or("object"))),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: about,
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(type_.into()),
            count: Some(1),
            first_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
            last_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.identity.clone()),
            ..Default::default()
        };
        self.events.send(ns, event);
    }
}

pub(crate) fn pod_ref(ns: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid,
        ..Default::default()
    }
}

/// The PodGroup a pod names (Basalt's label or annotation, Volcano's annotation, or
/// scheduler-plugins' label), in the reader's order.
pub fn member_of(p: &Pod) -> Option<&str> {
    fn get<'a>(m: &'a Option<BTreeMap<String, String>>, k: &str) -> Option<&'a str> {
        m.as_ref().and_then(|m| m.get(k)).map(String::as_str)
    }
    get(&p.metadata.labels, POD_GROUP)
        .or_else(|| get(&p.metadata.annotations, POD_GROUP))
        .or_else(|| get(&p.metadata.annotations, VOLCANO_GROUP_NAME))
        .or_else(|| get(&p.metadata.labels, SCHEDULER_PLUGINS_POD_GROUP))
        .filter(|g| !g.is_empty())
}

/// Binds a pod, with HAMi's handoff around the binding on a node that runs HAMi's plugin.
async fn bind_with_handoff(client: &Client, job: &BindJob) -> BindResult {
    let Some((pod, devices)) = &job.hami else {
        return bind(client, job).await;
    };
    if let Err(refused) = devices::prepare(client, &job.key, &job.node, pod, devices).await {
        return refused;
    }
    let result = bind(client, job).await;
    if !matches!(result, BindResult::Bound) {
        devices::release(client, &job.key, &job.node).await;
    }
    result
}

async fn bind(client: &Client, job: &BindJob) -> BindResult {
    let (key, node, gpus, uid) = (&job.key, &job.node, &job.gpus, job.uid.clone());
    let (ns, name) = split_key(key);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let result_of = |e: kube::Error| match classify(&e) {
        (Some(409), m) => BindResult::Conflict(m),
        (Some(code), m) if code >= 500 || code == 429 => BindResult::Retry(m),
        (Some(_), m) => BindResult::Failed(m),
        (None, m) => BindResult::Retry(m),
    };
    // The GPU ids (and Volcano vGPU's devices) travel on the Binding: the API server copies
    // its annotations onto the pod in the same write that sets `spec.nodeName`, so the kubelet
    // never sees the pod without them and a failed bind leaves nothing behind.
    let mut annotations = job.annotations.clone();
    if !gpus.is_empty() {
        annotations.insert(GPU_IDS.to_string(), gpus.to_string());
    }
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid,
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    match api
        .create_subresource::<_, Status>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => BindResult::Bound,
        Err(e) => result_of(e),
    }
}

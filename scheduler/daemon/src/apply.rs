//! Applying a plan through the API: binds (`binds.rs`: GPU ids on the Binding; HAMi's handoff
//! on nodes that run its device plugin, `devices.rs`; claims settled for the node first,
//! `claims.rs`; DRA ResourceClaims reserved and allocated in each pod's bind job,
//! `resource_claims.rs`),
//! evictions (`evictions.rs`), nominated nodes, PodGroup status (`status.rs`), Queue status
//! and the `default` Queue (`queues.rs`) and
//! Events; auto PodGroups before the cycle (`auto_groups.rs`). Every API answer
//! is looked at; nothing here panics on one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_engine::Plan;
use basalt_plugins::Config;
use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde_json::json;

use crate::assumed_claims::AssumedClaims;
use crate::assumed_pods::AssumedPods;
use crate::cycle::pod_key;
use crate::grouping::Grouping;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::overfull::Overfull;
use crate::owners::OwnerCache;
use crate::ownership::Ownership;
use crate::report::HeldPods;
use crate::reported::Reported;
use crate::stores::Stores;
use crate::stranded::PartialGangs;
use crate::unbound_pods::UnboundPods;
use crate::view::View;
use crate::writer::{EventSink, Limiter};

pub(crate) mod auto_groups;
mod binds;
use binds::{BindJob, BindResult};
mod claims;
mod devices;
mod evictions;
use evictions::RefusedEvictions;
mod mig;
mod queues;
mod resource_claims;
mod settled;
use settled::SettledGroups;
mod status;
mod volumes;

/// PodGroup condition of a gang left partly bound.
const PARTIALLY_BOUND: &str = "PartiallyBound";
/// Event reason of the eviction of a partly bound gang's members.
const GANG_ROLLBACK: &str = "GangRollback";
const COMPONENT: &str = "basalt-scheduler";
/// Annotation on a groupless pod naming the queue of its auto PodGroup.
pub const AUTO_QUEUE: &str = "scheduling.basalt.dev/queue";

/// The daemon's writing side (client, rate limit, Events, leadership) and the parts of state
/// that live from cycle to cycle, each owning its data: the cycle (`cycle.rs`) and the apply
/// phase ask them, and they alone change what they hold.
pub struct Scheduler {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    concurrency: usize,
    /// Every write takes a token (`--kube-api-qps`, `--kube-api-burst`).
    pub limiter: Arc<Limiter>,
    events: EventSink,
    /// This replica's name in Events.
    identity: String,
    /// Checked right before every write: none is sent once leadership is lost.
    pub leadership: Leadership,
    /// Pods this scheduler bound, until the watch shows them bound.
    pub assumed: AssumedPods,
    /// DRA ResourceClaims this scheduler wrote, until the watch shows them.
    pub assumed_claims: AssumedClaims,
    /// Pods on their way into an auto or owner PodGroup, and pods held for their owner.
    pub grouping: Grouping,
    /// What each owner says about grouping, for `--owner-cache-ttl`.
    owners: OwnerCache,
    /// This cycle's PodGroups and Queues, Basalt's and Volcano's.
    pub view: View,
    /// This cycle's pending pods held for what they state or their volumes, from the snapshot.
    pub held: HeldPods,
    /// The PodGroups Basalt may write to, from their pods' scheduler names.
    pub ownership: Ownership,
    /// The pods without a node, kept from the change log.
    pub unbound: UnboundPods,
    /// This snapshot's nodes over capacity, and the binds of this cycle's plan that wait for
    /// them (`overfull.rs`).
    pub overfull: Overfull,
    pub held_binds: BTreeMap<String, String>,
    /// The snapshot, brought up to date with what changed each cycle.
    pub snapshots: basalt_crds::IncrementalSnapshot,
    /// The last plan's queue usage, for the next cycle's snapshot (`usage.rs`).
    pub usage: crate::usage::CarriedUsage,
    /// The engine's framework, kept while the config and resource names stay the same, with
    /// the Warm its cycles carry, so that each session takes over the node state the last one
    /// left.
    pub framework: crate::kept_framework::KeptFramework,
    /// What has been said already (Events, log lines), so that it is not said again.
    pub reported: Reported,
    /// The forecast's background task (`forecast/task.rs`); none when it is off.
    pub forecaster: Option<crate::forecast::Forecaster>,
    refused_evictions: RefusedEvictions,
    /// Gangs left partly bound, rolled back after `--partial-gang-timeout`.
    partial_gangs: PartialGangs,
    /// PodGroups whose status says what the plan said (`settled.rs`).
    settled_groups: SettledGroups,
    retry: RetryStreak,
}

/// Consecutive cycles whose binds failed with a retryable error: the next cycle waits the
/// longer (200 ms doubling up to 12.8 s).
#[derive(Default)]
struct RetryStreak(u32);

impl RetryStreak {
    /// How long to wait before the next cycle after one whose binds did (`retry`) or did not
    /// fail with a retryable error.
    fn backoff(&mut self, retry: bool) -> Duration {
        if retry {
            self.0 = (self.0 + 1).min(7);
            Duration::from_millis(100 << self.0)
        } else {
            self.0 = 0;
            Duration::ZERO
        }
    }
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
            concurrency,
            limiter,
            events,
            identity: settings.identity,
            leadership,
            assumed: AssumedPods::default(),
            assumed_claims: AssumedClaims::default(),
            grouping: Grouping::default(),
            owners: OwnerCache::new(settings.owner_ttl),
            view: View::default(),
            held: HeldPods::default(),
            ownership: Ownership::default(),
            unbound: UnboundPods::default(),
            overfull: Overfull::default(),
            held_binds: BTreeMap::new(),
            snapshots: basalt_crds::IncrementalSnapshot::new(),
            usage: Default::default(),
            framework: Default::default(),
            reported: Reported::default(),
            forecaster: None,
            refused_evictions: RefusedEvictions::default(),
            partial_gangs: PartialGangs::new(settings.partial_gang_timeout),
            settled_groups: SettledGroups::default(),
            retry: RetryStreak::default(),
        }
    }

    /// Drops what this replica remembered from cycles it ran before another one led.
    pub fn forget(&mut self) {
        self.assumed.clear();
        self.assumed_claims.clear();
        self.retry = RetryStreak::default();
        self.refused_evictions.clear();
        self.reported.forget_events();
        self.partial_gangs.clear();
        self.settled_groups.clear();
        self.snapshots = basalt_crds::IncrementalSnapshot::new();
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
        self.write_groups(plan, &failed, &partial).await;
        let t_groups = t0.elapsed();
        self.report_held(stores).await;
        self.write_queues(plan).await;
        self.write_mig_layouts(plan, stores).await;
        let t_rest = t0.elapsed();

        // From the pods without a node alone (kept from the change log), not every pod.
        let pending: Vec<_> = (self.unbound.iter())
            .filter(|p| {
                let spec = p.spec.as_ref();
                let ours = spec
                    .and_then(|s| s.scheduler_name.as_deref())
                    .is_some_and(|n| self.config.scheduler_names.iter().any(|s| s == n));
                let unbound = spec.and_then(|s| s.node_name.as_deref()).is_none();
                ours && unbound && !self.assumed.is_assumed(&pod_key(p))
            })
            .cloned()
            .collect();
        self.metrics.pending_pods.set(pending.len() as i64);
        self.metrics.observe_queues(plan, &pending, &self.view);
        tracing::debug!(evict = ?t_evict, bind = ?(t_bind - t_evict), nominate = ?(t_nominate - t_bind), group_status = ?(t_groups - t_nominate), rest = ?(t_rest - t_groups), pending_metrics = ?(t0.elapsed() - t_rest), "plan applied");

        self.retry.backoff(retry)
    }

    /// Writes `nominatedNodeName` on each pod the plan nominates to the room its evictions
    /// free (`NominationReason::Evictions`), where the pod does not already name that node.
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
        if self.reported.is_news(key, said) {
            self.event(about, type_, reason, message);
        }
    }

    /// Queues a core/v1 Event for the writer ([`EventSink`]); never waits. None about a
    /// PodGroup that is not Basalt's (`ownership.rs`).
    pub(crate) fn event(&self, about: ObjectReference, type_: &str, reason: &str, message: &str) {
        if about.kind.as_deref() == Some("PodGroup") {
            let ns = about.namespace.as_deref().unwrap_or("default");
            let name = about.name.as_deref().unwrap_or("");
            let origin = crate::view::Origin::of(about.api_version.as_deref().unwrap_or(""));
            if !self.ownership.allows(&format!("{ns}/{name}"), origin) {
                return;
            }
        }
        self.send_event(about, type_, reason, message);
    }

    /// [`Self::event`] without the ownership check: for what Basalt says about a PodGroup that
    /// is not its own (that it leaves it alone).
    pub(crate) fn send_event(
        &self,
        about: ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
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
/// scheduler-plugins' label), as the snapshot's reader finds it.
pub fn member_of(p: &Pod) -> Option<&str> {
    basalt_crds::convert::explicit_group(&p.metadata)
}

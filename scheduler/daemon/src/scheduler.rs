//! The scheduler's house: the writing side (client, rate limit, Events, leadership) and the
//! state that lives from cycle to cycle, one part per field, each owned by its own module.
//! The cycle (`cycle.rs`) and the apply phase (`apply.rs`, `apply/*`) add the work; this module
//! imports neither, so the layout stays one-way: watch (`stores.rs`, `changes.rs`) → cycle →
//! apply, all of them on the parts below.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use basalt_plugins::Config;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;

use crate::assumed_claims::AssumedClaims;
use crate::assumed_pods::AssumedPods;
use crate::grouping::Grouping;
use crate::held_pods::HeldPods;
use crate::kept_groups::KeptGroups;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::overfull::Overfull;
use crate::owners::OwnerCache;
use crate::ownership::Ownership;
use crate::refused_evictions::RefusedEvictions;
use crate::reported::Reported;
use crate::settled::SettledGroups;
use crate::stranded::PartialGangs;
use crate::unbound_pods::UnboundPods;
use crate::view::View;
use crate::writer::{EventSink, Limiter};

const COMPONENT: &str = "basalt-scheduler";

/// The daemon's writing side (client, rate limit, Events, leadership) and the parts of state
/// that live from cycle to cycle, each owning its data: the cycle (`cycle.rs`) and the apply
/// phase (`apply.rs`) ask them, and they alone change what they hold.
pub struct Scheduler {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub(crate) concurrency: usize,
    /// Every write takes a token (`--kube-api-qps`, `--kube-api-burst`).
    pub limiter: Arc<Limiter>,
    pub(crate) events: EventSink,
    /// This replica's name in Events.
    pub(crate) identity: String,
    /// Checked right before every write: none is sent once leadership is lost.
    pub leadership: Leadership,
    /// Pods this scheduler bound, until the watch shows them bound.
    pub assumed: AssumedPods,
    /// DRA ResourceClaims this scheduler wrote, until the watch shows them.
    pub assumed_claims: AssumedClaims,
    /// Pods on their way into an auto or owner PodGroup, and pods held for their owner.
    pub grouping: Grouping,
    /// What each owner says about grouping, for `--owner-cache-ttl`.
    pub(crate) owners: OwnerCache,
    /// This cycle's PodGroups and Queues, Basalt's and Volcano's.
    pub view: View,
    /// This cycle's pending pods held for what they state or their volumes, from the snapshot.
    pub held: HeldPods,
    /// The PodGroups Basalt may write to, from their pods' scheduler names.
    pub ownership: Ownership,
    /// The pods without a node, kept from the change log.
    pub unbound: UnboundPods,
    /// Basalt's PodGroups as the last cycle collected them (`kept_groups.rs`).
    pub kept_groups: KeptGroups,
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
    pub(crate) refused_evictions: RefusedEvictions,
    /// Gangs left partly bound, rolled back after `--partial-gang-timeout`.
    pub(crate) partial_gangs: PartialGangs,
    /// PodGroups whose status says what the plan said (`settled.rs`).
    pub(crate) settled_groups: SettledGroups,
    pub(crate) retry: RetryStreak,
}

/// Consecutive cycles whose binds failed with a retryable error: the next cycle waits the
/// longer (200 ms doubling up to 12.8 s).
#[derive(Default)]
pub(crate) struct RetryStreak(u32);

impl RetryStreak {
    /// How long to wait before the next cycle after one whose binds did (`retry`) or did not
    /// fail with a retryable error.
    pub(crate) fn backoff(&mut self, retry: bool) -> Duration {
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
            kept_groups: KeptGroups::default(),
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

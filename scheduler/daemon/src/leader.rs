//! Leader election on a coordination.k8s.io/v1 Lease, and the leadership every write checks.
//!
//! One loop, as client-go's leader election: every `grace / 2` the replica reads the Lease
//! and, when it holds it, or nobody does, or the holder's record has not changed for the
//! holder's `leaseDurationSeconds` (measured on this replica's monotonic clock from when it saw
//! the record change, so wall-clock skew does not matter), writes itself in as holder with a
//! merge patch carrying the resourceVersion it read: of two replicas writing at once, one gets
//! a 409 and stays a follower.
//!
//! The arithmetic (D = `--lease-duration`, G = grace = D/3, at least 1 s):
//! - an attempt (read + write) is bounded by `tokio::time::timeout(G / 2)`: one the API does
//!   not answer in time has failed, and this replica stops leading at once;
//! - a successful attempt that started at instant `t` makes this replica the leader until
//!   `t + D - G` ([`Term::Until`]), by time alone: [`Leadership::leading`] turns false then
//!   even if the elector is stuck. Another replica sees the written record no earlier than
//!   `t` and takes over no earlier than `D` after that, so this replica has stopped acting
//!   at least G before anyone else may start;
//! - attempts start every G / 2 and last at most G / 2, so while the API answers, each renewal
//!   lands within G of the one before, and G <= D - G: leadership does not lapse between them.
//!
//! A leader whose scheduling loop is stuck (liveness failing) stops leading and gives the lease
//! up, in that order, so a follower takes over without waiting for the kubelet's restart; it
//! campaigns again once the loop goes on.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

/// Whole seconds (the Lease API's unit): the duration, and the grace: how long before the
/// lease could expire this replica stops acting (a third, at least a second). Under 2 s is
/// refused.
pub fn lease_seconds(duration: Duration) -> Result<(u64, u64), String> {
    let d = duration.as_secs_f64().round() as u64;
    if d < 2 {
        return Err(format!(
            "--lease-duration {duration:?}: must be at least 2s (leases count whole seconds)"
        ));
    }
    Ok((d, (d / 3).max(1)))
}

/// The timings of one lease duration (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub duration: Duration,
    /// Time between attempts, and the most one attempt may take: G / 2.
    pub step: Duration,
    /// How long a successful attempt makes this replica the leader: D - G.
    pub term: Duration,
}

impl Timing {
    pub fn new(duration: Duration) -> Result<Timing, String> {
        let (d, g) = lease_seconds(duration)?;
        Ok(Timing {
            duration: Duration::from_secs(d),
            step: Duration::from_secs(g) / 2,
            term: Duration::from_secs(d - g),
        })
    }
}

/// Whether this replica may act as the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// Without leader election.
    Always,
    /// Until this instant, unless renewed.
    Until(Instant),
    Follower,
}

impl Term {
    fn leads_at(self, now: Instant) -> bool {
        match self {
            Term::Always => true,
            Term::Until(t) => now < t,
            Term::Follower => false,
        }
    }
}

/// The leadership as the elector last published it; checked before every write.
#[derive(Clone, Debug)]
pub struct Leadership(watch::Receiver<Term>);

impl Leadership {
    /// Leading for good (no leader election).
    pub fn unconditional() -> Leadership {
        Leadership(watch::channel(Term::Always).1)
    }

    /// A follower until `elector` says otherwise.
    pub fn elected() -> (watch::Sender<Term>, Leadership) {
        let (tx, rx) = watch::channel(Term::Follower);
        (tx, Leadership(rx))
    }

    /// True while this replica may act: its term has not run out, by the clock.
    pub fn leading(&self) -> bool {
        self.0.borrow().leads_at(Instant::now())
    }

    /// Waits until leading; false when the elector is gone.
    pub async fn wait_leading(&mut self) -> bool {
        self.0
            .wait_for(|t| t.leads_at(Instant::now()))
            .await
            .is_ok()
    }
}

pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    timing: Timing,
    /// False while the scheduling loop is stuck (see `http::Health`).
    live: Box<dyn Fn() -> bool + Send + Sync>,
}

/// The holder's record as last read, and when this replica saw it change.
struct Observed {
    record: (Option<String>, Option<MicroTime>, Option<i32>),
    since: Instant,
}

impl Elector {
    pub fn new(
        client: Client,
        config: LeaseConfig,
        live: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Result<Elector, String> {
        Ok(Elector {
            api: Api::namespaced(client, &config.namespace),
            timing: Timing::new(config.duration)?,
            config,
            live: Box::new(live),
        })
    }

    /// Campaigns and renews until `stop` turns true, publishing the term on `term`; then
    /// releases the lease if held.
    pub async fn run(self, term: watch::Sender<Term>, mut stop: watch::Receiver<bool>) {
        let identity = &self.config.identity;
        let publish = |next: Term| {
            term.send_modify(|t| {
                let (was, is) = (*t != Term::Follower, next != Term::Follower);
                if was != is {
                    tracing::info!(identity = %identity, leader = is, "leadership changed");
                }
                *t = next;
            });
        };
        let mut observed: Option<Observed> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            let started = Instant::now();
            if !(self.live)() {
                if *term.borrow() != Term::Follower {
                    tracing::warn!(lease = %self.config.name, "no scheduling cycle finished in time; giving the lease up");
                    // Not leading first: nothing more is written once another replica may lead.
                    publish(Term::Follower);
                    self.release_within(self.timing.step).await;
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.timing.step) => continue,
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
            let attempt = tokio::select! {
                r = tokio::time::timeout(self.timing.step, self.acquire_or_renew(&mut observed)) => r,
                _ = stop.wait_for(|s| *s) => break,
            };
            match attempt {
                Ok(Ok(true)) => publish(Term::Until(started + self.timing.term)),
                Ok(Ok(false)) => publish(Term::Follower),
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.config.name, error = %e, "lease request failed; not leading until the lease is renewed");
                    publish(Term::Follower);
                }
                Err(_) => {
                    tracing::warn!(lease = %self.config.name, timeout = ?self.timing.step, "lease request not answered in time; not leading until the lease is renewed");
                    publish(Term::Follower);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until((started + self.timing.step).into()) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        // Gives the lease up so another replica takes over at once (bounded: exiting must not
        // wait on an API that does not answer).
        publish(Term::Follower);
        self.release_within(self.timing.duration).await;
    }

    async fn release_within(&self, bound: Duration) {
        match tokio::time::timeout(bound, self.release()).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.config.name, "lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot release the lease"),
            Err(_) => tracing::warn!("cannot release the lease: no answer in time"),
        }
    }

    /// One read and, when this replica may hold the lease, one write: true when it holds it.
    async fn acquire_or_renew(&self, observed: &mut Option<Observed>) -> kube::Result<bool> {
        let me = &self.config.identity;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = self.timing.duration.as_secs() as i32;
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.clone()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_duration_seconds: Some(seconds),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return settled(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (
            holder.clone(),
            spec.renew_time.clone(),
            spec.lease_duration_seconds,
        );
        let since = match observed {
            Some(o) if o.record == record => o.since,
            _ => {
                observed
                    .insert(Observed {
                        record,
                        since: Instant::now(),
                    })
                    .since
            }
        };
        let mine = holder.as_deref() == Some(me.as_str());
        if holder.is_some() && !mine {
            // A record without a (sensible) duration is held for ours.
            let lasts = spec
                .lease_duration_seconds
                .filter(|s| *s > 0)
                .map_or(self.timing.duration, |s| Duration::from_secs(s as u64));
            if since.elapsed() < lasts {
                return Ok(false);
            }
        }
        let (acquired, transitions) = if mine {
            (spec.acquire_time, spec.lease_transitions)
        } else {
            (
                Some(now.clone()),
                Some(spec.lease_transitions.unwrap_or(0).saturating_add(1)),
            )
        };
        let patch = json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": me, "renewTime": now, "acquireTime": acquired,
                     "leaseDurationSeconds": seconds, "leaseTransitions": transitions},
        });
        self.write(&patch).await
    }

    /// Merge-patches the lease (its resourceVersion in `patch` makes a rival's write a 409).
    async fn write(&self, patch: &serde_json::Value) -> kube::Result<bool> {
        let params = PatchParams::default();
        settled(
            self.api
                .patch(&self.config.name, &params, &Patch::Merge(patch))
                .await,
        )
    }

    /// Clears the holder if it is this replica; true when it did.
    async fn release(&self) -> kube::Result<bool> {
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(false);
        };
        let holder = lease.spec.and_then(|s| s.holder_identity);
        if holder.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": null, "renewTime": null, "acquireTime": null,
                     "leaseDurationSeconds": null},
        });
        self.write(&patch).await
    }
}

/// A write that succeeded is true; a 409 (another replica wrote first) is false.
fn settled<T>(r: kube::Result<T>) -> kube::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_seconds_are_whole_with_a_third_for_grace() {
        assert_eq!(lease_seconds(Duration::from_secs(15)), Ok((15, 5)));
        assert_eq!(lease_seconds(Duration::from_secs(2)), Ok((2, 1)));
        assert_eq!(lease_seconds(Duration::from_millis(2400)), Ok((2, 1)));
        assert!(lease_seconds(Duration::from_millis(1400))
            .unwrap_err()
            .contains("--lease-duration"));
    }

    #[test]
    fn a_term_ends_a_grace_before_the_lease_could_expire_and_renewals_land_within_it() {
        for secs in [2, 3, 15, 60] {
            let t = Timing::new(Duration::from_secs(secs)).unwrap();
            let grace = t.duration - t.term;
            assert!(grace >= Duration::from_secs(1), "{secs}s: {t:?}");
            // An attempt starts within `step` of the last and takes at most `step`.
            assert!(2 * t.step <= t.term, "{secs}s: renewals would lapse: {t:?}");
        }
    }

    #[tokio::test]
    async fn leadership_ends_by_time_alone_without_a_word_from_the_elector() {
        let (tx, leadership) = Leadership::elected();
        assert!(!leadership.leading());
        tx.send(Term::Until(Instant::now() + Duration::from_secs(3600)))
            .unwrap();
        assert!(leadership.leading());
        // A renewal that hangs leaves the last term in place: it runs out on its own.
        tx.send(Term::Until(Instant::now())).unwrap();
        assert!(!leadership.leading());
        assert!(Leadership::unconditional().leading());
    }
}

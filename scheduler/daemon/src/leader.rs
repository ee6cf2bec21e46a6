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
//!   lands within G of the one before, and G <= D - G: leadership does not lapse between them;
//! - no write outlives the lease: every write goes through [`Leadership::fence`] (the write
//!   client's layer, `fence.rs`), which sends it only while leading and cuts it at `t + D`, or
//!   at once when the elector says this replica no longer leads (a failed renewal, giving the
//!   lease up). A write sent in a term has ended, answered or cut, before another replica may
//!   take over;
//! - a replica that takes the lease from another holder, or one that gave it up, writes
//!   nothing for `min(--kube-api-timeout, D)` more: a holder that released the lease with
//!   writes in flight, or one of a build without the fence, has had them answered or timed
//!   out by then. Then it re-lists (`main.rs`) and acts on what the API says.
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
    /// The longest an ordinary request may take (`--kube-api-timeout`): how long a replica
    /// that takes the lease from another holder waits before writing (at most `duration`).
    pub write_timeout: Duration,
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
    /// Elected: acting from `from` (a replica that took the lease from another holder first
    /// waits out the writes that holder may still have in flight) until `until`, unless
    /// renewed; no write of this replica outlives `lease_end`, when another replica may take
    /// over (`fence.rs`).
    Until {
        from: Instant,
        until: Instant,
        lease_end: Instant,
    },
    Follower,
}

impl Term {
    fn leads_at(self, now: Instant) -> bool {
        match self {
            Term::Always => true,
            Term::Until { from, until, .. } => from <= now && now < until,
            Term::Follower => false,
        }
    }

    fn elected(self) -> bool {
        self != Term::Follower
    }
}

/// The leadership as the elector last published it; checked before every write.
#[derive(Clone, Debug)]
pub struct Leadership(watch::Receiver<Term>);

/// A write that was not sent, or was cut, for leadership (the answer a fenced request gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    NotLeader,
    /// In flight when the elector said this replica no longer leads.
    Cut,
    LeaseEnded,
}

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fenced::NotLeader => "not sent: this replica is not the leader",
            Fenced::Cut => "cut: this replica stopped leading before an answer came",
            Fenced::LeaseEnded => {
                "cut: this replica's lease could end before an answer (another replica may lead)"
            }
        })
    }
}

impl std::error::Error for Fenced {}

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

    /// Runs a write sent now: refused unless leading, and cut (dropped, so the connection
    /// closes and an API server drops it too) once this replica stops leading by the elector's
    /// word, or at the end of the lease it last renewed, whichever comes first.
    pub async fn fence<T, E>(
        &self,
        write: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, tower::BoxError>
    where
        E: Into<tower::BoxError>,
    {
        if !self.leading() {
            return Err(Fenced::NotLeader.into());
        }
        let mut term = self.0.clone();
        tokio::pin!(write);
        loop {
            let now = *term.borrow_and_update();
            let lease_end = match now {
                Term::Always => return write.await.map_err(Into::into),
                Term::Until { lease_end, .. } if Instant::now() < lease_end => lease_end,
                Term::Until { .. } => return Err(Fenced::LeaseEnded.into()),
                Term::Follower => return Err(Fenced::Cut.into()),
            };
            tokio::select! {
                r = &mut write => return r.map_err(Into::into),
                _ = tokio::time::sleep_until(lease_end.into()) => {
                    return Err(Fenced::LeaseEnded.into())
                }
                changed = term.changed() => if changed.is_err() {
                    return Err(Fenced::Cut.into());
                },
            }
        }
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
                let (was, is) = (t.elected(), next.elected());
                if was != is {
                    tracing::info!(identity = %identity, leader = is, "leadership changed");
                }
                *t = next;
            });
        };
        let mut observed: Option<Observed> = None;
        // Since when this replica may act in its current run of terms.
        let mut acting_from: Option<Instant> = None;
        // Another holder's writes end with its lease (`fence.rs`), or when it gave the lease
        // up; one of an older build, or one that released with writes in flight, is waited
        // out for as long as a request may take.
        let settle = self.config.write_timeout.min(self.timing.duration);
        loop {
            if *stop.borrow() {
                break;
            }
            let started = Instant::now();
            if !(self.live)() {
                acting_from = None;
                if term.borrow().elected() {
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
            if !matches!(attempt, Ok(Ok(Grant::Held | Grant::TookOver))) {
                acting_from = None;
            }
            match attempt {
                Ok(Ok(grant @ (Grant::Held | Grant::TookOver))) => {
                    let from = *acting_from.get_or_insert_with(|| match grant {
                        Grant::TookOver => {
                            tracing::info!(lease = %self.config.name, wait = ?settle, "took the lease from another holder; writing nothing until its writes have ended");
                            Instant::now() + settle
                        }
                        _ => started,
                    });
                    publish(Term::Until {
                        from,
                        until: started + self.timing.term,
                        lease_end: started + self.timing.duration,
                    });
                }
                Ok(Ok(Grant::Refused)) => publish(Term::Follower),
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

    /// One read and, when this replica may hold the lease, one write.
    async fn acquire_or_renew(&self, observed: &mut Option<Observed>) -> kube::Result<Grant> {
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
            let created = settled(self.api.create(&PostParams::default(), &lease).await)?;
            return Ok(if created { Grant::Held } else { Grant::Refused });
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
                return Ok(Grant::Refused);
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
        Ok(match self.write(&patch).await? {
            false => Grant::Refused,
            true if mine => Grant::Held,
            // Held by another or given up (a released lease keeps no holder).
            true => Grant::TookOver,
        })
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

/// What one attempt got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    /// Another replica holds the lease, or wrote first.
    Refused,
    /// This replica holds it: renewed, or a new Lease created.
    Held,
    /// This replica took it from another holder, or one that gave it up.
    TookOver,
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
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        tx.send(Term::Until {
            from: now,
            until: now + hour,
            lease_end: now + hour,
        })
        .unwrap();
        assert!(leadership.leading());
        // A renewal that hangs leaves the last term in place: it runs out on its own.
        tx.send(Term::Until {
            from: now,
            until: Instant::now(),
            lease_end: now + hour,
        })
        .unwrap();
        assert!(!leadership.leading());
        assert!(Leadership::unconditional().leading());
    }
}

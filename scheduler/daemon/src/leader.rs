//! Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
//! every third of the lease duration; another replica takes the lease over once it has seen the
//! same record unchanged for a whole lease duration (its own clock, so clock skew between
//! replicas does not matter). A leader that cannot renew stops scheduling after two thirds of
//! the duration, before anyone else may take over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The other holder's record as last seen, and when it was first seen so.
    observed: Option<(String, Instant)>,
}

enum Attempt {
    Leader,
    Follower,
}

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Campaigns and renews until `stop` turns true, publishing leadership on `leader`; then
    /// releases the lease if held.
    pub async fn run(mut self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let every = (self.config.duration / 3).max(Duration::from_millis(100));
        let deadline = self.config.duration * 2 / 3;
        let mut last_renew: Option<Instant> = None;
        loop {
            let is_leader = match self.attempt().await {
                Ok(Attempt::Leader) => {
                    last_renew = Some(Instant::now());
                    true
                }
                Ok(Attempt::Follower) => {
                    last_renew = None;
                    false
                }
                Err(e) => {
                    tracing::warn!(lease = %self.config.name, error = %e, "lease request failed");
                    last_renew.is_some_and(|t| t.elapsed() < deadline)
                }
            };
            leader.send_if_modified(|l| {
                if *l != is_leader {
                    tracing::info!(identity = %self.config.identity, leader = is_leader, "leadership changed");
                    *l = is_leader;
                    true
                } else {
                    false
                }
            });
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        if *leader.borrow() {
            self.release().await;
        }
        leader.send_replace(false);
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let name = self.config.name.clone();
        let me = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leader),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Follower),
                Err(e) => Err(e),
            };
        };
        let lease_seconds = self.lease_seconds();
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if holder.as_deref() != Some(me.as_str()) {
            if let Some(holder) = holder {
                let record = format!(
                    "{holder}@{:?}",
                    spec.renew_time.as_ref().map(|t| t.0.to_string())
                );
                let held_for = Duration::from_secs(
                    u64::try_from(spec.lease_duration_seconds.unwrap_or(lease_seconds))
                        .unwrap_or(1),
                );
                match &self.observed {
                    Some((seen, at)) if *seen == record => {
                        if at.elapsed() < held_for {
                            return Ok(Attempt::Follower);
                        }
                    }
                    _ => {
                        self.observed = Some((record, Instant::now()));
                        return Ok(Attempt::Follower);
                    }
                }
                tracing::info!(%holder, "lease expired; taking it over");
            }
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(lease_seconds);
        // The resourceVersion read above makes this a compare-and-swap: a 409 means someone
        // else wrote first.
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = None;
                Ok(Attempt::Leader)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Follower),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up so another replica takes over at once.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.config.name, "lease released"),
            Err(e) => tracing::warn!(error = %e, "cannot release the lease"),
        }
    }
}

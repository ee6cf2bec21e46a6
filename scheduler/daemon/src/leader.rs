//! Leader election on a coordination.k8s.io/v1 Lease through kube-lease-manager.
//!
//! The crate's fully automated `watch()` is not used: when a renewal fails it logs and retries
//! but keeps reporting leadership, so a leader cut off from the API would go on scheduling
//! after its lease expired. The loop below drives `LeaseManager::changed()` itself and, on any
//! error, stops leading at once (the renewal runs `grace` before the lease expires, so that is
//! before anyone may take over), releases the lease as soon as the API answers again, and
//! starts over with a fresh manager, so leadership is only ever reported after a successful
//! acquisition.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

/// Whole seconds (the Lease API's unit): the duration, and the grace before expiry at which the
/// holder renews (a third, at least a second). Under 2 s is refused.
pub fn lease_seconds(duration: Duration) -> Result<(u64, u64), String> {
    let d = duration.as_secs_f64().round() as u64;
    if d < 2 {
        return Err(format!(
            "--lease-duration {duration:?}: must be at least 2s (leases count whole seconds)"
        ));
    }
    Ok((d, (d / 3).max(1)))
}

pub struct Elector {
    client: Client,
    config: LeaseConfig,
}

const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Elector {
        Elector { client, config }
    }

    async fn manager(&self) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
        // Checked at start (exit 2), so the fallback is never used.
        let (duration, grace) = lease_seconds(self.config.duration).unwrap_or((2, 1));
        LeaseManagerBuilder::new(self.client.clone(), &self.config.name)
            .with_namespace(&self.config.namespace)
            .with_identity(&self.config.identity)
            .with_duration(duration)
            .with_grace(grace)
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .build()
            .await
    }

    /// Campaigns and renews until `stop` turns true, publishing leadership on `leader`; then
    /// releases the lease if held.
    pub async fn run(self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let publish = |is_leader: bool| {
            leader.send_if_modified(|l| {
                if *l != is_leader {
                    tracing::info!(identity = %self.config.identity, leader = is_leader, "leadership changed");
                    *l = is_leader;
                    true
                } else {
                    false
                }
            });
        };
        let mut backoff = MIN_BACKOFF;
        let mut manager: Option<LeaseManager> = None;
        // After an error: the lease this replica may still hold, to be released first.
        let mut to_release: Option<LeaseManager> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            if let Some(old) = &to_release {
                let released = tokio::select! {
                    r = old.release() => r,
                    _ = stop.wait_for(|s| *s) => break,
                };
                match released {
                    Ok(()) => {
                        to_release = None;
                        backoff = MIN_BACKOFF;
                    }
                    Err(e) => {
                        tracing::warn!(lease = %self.config.name, error = %e, "cannot release the lease yet");
                        if pause(&mut stop, &mut backoff).await {
                            break;
                        }
                        continue;
                    }
                }
            }
            let m = match &manager {
                Some(m) => m,
                None => {
                    let built = tokio::select! {
                        r = self.manager() => r,
                        _ = stop.wait_for(|s| *s) => break,
                    };
                    match built {
                        Ok(m) => manager.insert(m),
                        Err(e) => {
                            tracing::warn!(lease = %self.config.name, error = %e, "lease request failed");
                            if pause(&mut stop, &mut backoff).await {
                                break;
                            }
                            continue;
                        }
                    }
                }
            };
            let changed = tokio::select! {
                r = m.changed() => r,
                _ = stop.wait_for(|s| *s) => break,
            };
            match changed {
                Ok(is_leader) => {
                    backoff = MIN_BACKOFF;
                    publish(is_leader);
                }
                Err(e) => {
                    // A renewal (or a look at the lease) failed: stop leading now, before the
                    // lease can expire; give it up once the API answers; then campaign afresh.
                    tracing::warn!(lease = %self.config.name, error = %e, "lease request failed; not leading until the lease is acquired again");
                    publish(false);
                    to_release = manager.take();
                    if pause(&mut stop, &mut backoff).await {
                        break;
                    }
                }
            }
        }
        // Called when leading (or possibly still holding after an error): gives the lease up
        // so another replica takes over at once.
        let held = *leader.borrow();
        publish(false);
        if let Some(m) = manager.filter(|_| held).or(to_release) {
            match m.release().await {
                Ok(()) => tracing::info!(lease = %self.config.name, "lease released"),
                Err(e) => tracing::warn!(error = %e, "cannot release the lease"),
            }
        }
    }
}

/// Waits out the backoff (doubling it); true when asked to stop meanwhile.
async fn pause(stop: &mut watch::Receiver<bool>, backoff: &mut Duration) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    tokio::select! {
        _ = tokio::time::sleep(wait) => false,
        _ = stop.wait_for(|s| *s) => true,
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
}

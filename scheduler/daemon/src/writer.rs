//! The scheduler's writes to the API: a client-side rate limit every write takes a token from
//! (`--kube-api-qps`, `--kube-api-burst`, as kube-scheduler's), and Events, which no decision
//! waits for, sent by a background task so that they never delay a bind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::mpsc;
// Tokio's clock: the same as the system's, and paused with it in tests.
use tokio::time::Instant;

use crate::leader::Leadership;
use crate::metrics::Metrics;

/// A token bucket: `qps` tokens a second, at most `burst` saved up. A `qps` of 0 (or less)
/// limits nothing.
pub struct Limiter {
    qps: f64,
    burst: f64,
    /// Tokens (negative: reserved ahead by waiters) and when they were counted.
    bucket: Mutex<(f64, Instant)>,
}

impl Limiter {
    pub fn new(qps: f64, burst: u32) -> Arc<Self> {
        let burst = f64::from(burst.max(1));
        Arc::new(Limiter {
            qps,
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        })
    }

    /// Tokens now, refilled since last counted.
    fn refill(&self, bucket: &mut (f64, Instant)) {
        let now = Instant::now();
        let earned = now.duration_since(bucket.1).as_secs_f64() * self.qps;
        *bucket = ((bucket.0 + earned).min(self.burst), now);
    }

    /// Takes a token, waiting for it when the bucket is empty (a token is reserved, so
    /// waiters are served in order).
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let wait = {
            let mut b = self.bucket.lock().expect("limiter lock");
            self.refill(&mut b);
            b.0 -= 1.0;
            (b.0 < 0.0).then(|| Duration::from_secs_f64(-b.0 / self.qps))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes a token only while at least half the burst is left, so writes that nothing waits
    /// for (Events) never take the tokens a bind would need.
    pub async fn acquire_spare(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let floor = self.burst / 2.0;
        loop {
            let wait = {
                let mut b = self.bucket.lock().expect("limiter lock");
                self.refill(&mut b);
                if b.0 >= floor + 1.0 {
                    b.0 -= 1.0;
                    return;
                }
                Duration::from_secs_f64((floor + 1.0 - b.0) / self.qps)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// Events queued past this are dropped (and counted): a flood of Events must not grow the
/// scheduler's memory without bound.
const EVENT_QUEUE: usize = 100_000;

/// Where the scheduler's Events go: queued, and written by a background task with at most
/// `concurrency` requests in flight. A failed write is logged, never retried.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<(String, Event)>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// Starts the writer task on the current runtime.
    pub fn spawn(
        client: Client,
        limiter: Arc<Limiter>,
        leadership: Leadership,
        concurrency: usize,
        metrics: Arc<Metrics>,
    ) -> EventSink {
        let (queue, mut rx) = mpsc::channel::<(String, Event)>(EVENT_QUEUE);
        let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        tokio::spawn(
            events.for_each_concurrent(concurrency.max(1), move |(ns, event)| {
                let (client, limiter, leadership) =
                    (client.clone(), limiter.clone(), leadership.clone());
                async move {
                    limiter.acquire_spare().await;
                    if !leadership.leading() {
                        return;
                    }
                    if let Err(e) = create_event(&client, &ns, &event).await {
                        let reason = event.reason.as_deref().unwrap_or("");
                        tracing::warn!(reason, error = %classify(&e).1, "cannot write an Event");
                    }
                }
            }),
        );
        EventSink { queue, metrics }
    }

    /// Queues an Event for namespace `ns`; never waits.
    pub fn send(&self, ns: String, event: Event) {
        if let Err(e) = self.queue.try_send((ns, event)) {
            self.metrics.events_dropped.inc();
            let reason = match &e {
                mpsc::error::TrySendError::Full((_, ev))
                | mpsc::error::TrySendError::Closed((_, ev)) => {
                    ev.reason.clone().unwrap_or_default()
                }
            };
            tracing::warn!(reason, "Event dropped: the Event queue is full");
        }
    }
}

/// Writes `event` into `ns`. The created Event the API server answers with is not decoded:
/// nothing reads it, and decoding it was about 4.5 % of the daemon's CPU while binding a backlog.
async fn create_event(client: &Client, ns: &str, event: &Event) -> kube::Result<()> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let body = serde_json::to_vec(event).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(api.resource_url())
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}

/// An API error's status code (none for a transport error) and how to say it.
pub(crate) fn classify(e: &kube::Error) -> (Option<u16>, String) {
    match e {
        kube::Error::Api(s) => (Some(s.code), format!("{} ({})", s.message, s.code)),
        other => (None, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_limiter_lets_a_burst_through_then_paces_at_qps() {
        let l = Limiter::new(10.0, 5);
        let t0 = tokio::time::Instant::now();
        for _ in 0..5 {
            l.acquire().await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO, "the burst is not paced");
        for _ in 0..10 {
            l.acquire().await;
        }
        // Ten more tokens at 10 a second: a second on the paused clock.
        assert_eq!(t0.elapsed().as_millis(), 1000);
        // No limit: never waits.
        let none = Limiter::new(0.0, 1);
        for _ in 0..100 {
            none.acquire().await;
        }
        assert_eq!(t0.elapsed().as_millis(), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn spare_tokens_leave_half_the_burst_to_binds() {
        let l = Limiter::new(100.0, 10);
        for _ in 0..4 {
            l.acquire_spare().await;
        }
        // Six left: a spare write waits until the bucket holds six again after taking one.
        let before = l.bucket.lock().unwrap().0;
        assert!((5.9..=6.1).contains(&before), "{before}");
        let t0 = tokio::time::Instant::now();
        l.acquire_spare().await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
        l.acquire_spare().await;
        assert!(
            t0.elapsed() > Duration::ZERO,
            "a spare write took a bind's token"
        );
    }
}

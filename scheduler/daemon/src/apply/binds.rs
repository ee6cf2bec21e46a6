//! Binds: one `pods/binding` per pod of the plan, at most `--bind-concurrency` in flight and
//! each behind the rate limit, gang members first; the outcome of each (assume cache, metrics,
//! Events, the group's `BindFailed`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use basalt_crds::convert::GPU_IDS;
use basalt_engine::Plan;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};

use super::{devices, resource_claims};
use crate::keys::{group_key, split_key};
use crate::scheduler::{pod_ref, Scheduler};
use crate::stores::Stores;
use crate::writer::classify;

pub(super) enum BindResult {
    Bound,
    /// 409: already bound or replaced; the watch will tell.
    Conflict(String),
    /// Not found or refused for good this cycle; the next cycle plans again.
    Failed(String),
    /// 5xx, 429 or a transport error: retried with backoff.
    Retry(String),
    /// Not sent: HAMi's node lock is held for another pod (one HAMi pod per node binds at a
    /// time). A wait, not an error: tried again with backoff.
    Wait(String),
}

/// What kept a PodGroup's planned binds from landing this cycle, by the condition it says so
/// with: `BindFailed`, `WaitingForNodeLock`, `NodeOverCapacity`.
pub type Unbound = HashMap<String, BTreeMap<&'static str, (u32, String)>>;

pub const BIND_FAILED: &str = "BindFailed";
pub const WAITING_FOR_NODE_LOCK: &str = "WaitingForNodeLock";
pub const NODE_OVER_CAPACITY: &str = "NodeOverCapacity";

/// Counts one bind of `group` that did not land, for `why`.
fn unbound(map: &mut Unbound, group: String, why: &'static str, last: String) {
    let entry = map.entry(group).or_default().entry(why).or_default();
    entry.0 += 1;
    entry.1 = last;
}

impl BindResult {
    pub(super) fn message(&self) -> &str {
        match self {
            BindResult::Bound => "bound",
            BindResult::Conflict(m)
            | BindResult::Failed(m)
            | BindResult::Retry(m)
            | BindResult::Wait(m) => m,
        }
    }
}

/// One binding of the plan to send.
pub(super) struct BindJob {
    pub(super) key: String,
    pub(super) node: String,
    /// The GPU ids annotation value (`0,1`), empty when none.
    pub(super) gpus: String,
    pub(super) uid: Option<String>,
    /// The pod's object as the cycle saw it, looked up once for every step of its bind.
    pub(super) pod: Option<Arc<Pod>>,
    /// The key of the PodGroup the pod names, read once from its object: binds are ordered
    /// and failures counted by it.
    pub(super) group: Option<String>,
    /// On a node that runs HAMi's device plugin: the pod's devices, handed off as HAMi
    /// expects (`devices.rs`).
    pub(super) hami: Option<Vec<basalt_engine::plan::BoundDevice>>,
    /// Annotations the Binding carries besides the GPU ids (Volcano vGPU's).
    pub(super) annotations: BTreeMap<String, String>,
    /// DRA ResourceClaims reserved for the pod (and allocated) before its binding.
    pub(super) claims: Vec<resource_claims::ClaimWrite>,
}

impl Scheduler {
    /// The binds of gang members first, each gang's together, so gangs complete (and their
    /// Events follow) before pods of one; otherwise the plan's order.
    fn gangs_first(&self, mut jobs: Vec<BindJob>) -> Vec<BindJob> {
        let order = self.gang_order(&jobs);
        let mut slots: Vec<Option<BindJob>> = jobs.drain(..).map(Some).collect();
        order.into_iter().filter_map(|i| slots[i].take()).collect()
    }

    /// The positions of `jobs` in bind order: gang members first, each gang's together.
    fn gang_order<'j>(&self, jobs: &'j [BindJob]) -> Vec<usize> {
        let gang_of = |job: &'j BindJob| {
            let key = job.group.as_ref()?;
            let group = self.view.group(key)?;
            (group.group.spec.min_member > 1).then_some(key)
        };
        let mut keyed: Vec<(Option<&String>, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (gang_of(j), i))
            .collect();
        keyed.sort_by(|a, b| {
            (a.0.is_none(), &a.0)
                .cmp(&(b.0.is_none(), &b.0))
                .then(a.1.cmp(&b.1))
        });
        keyed.into_iter().map(|(_, i)| i).collect()
    }

    pub(super) async fn bind_all(&mut self, plan: &Plan, stores: &Stores) -> (bool, Unbound) {
        let mut created_at = HashMap::new();
        let jobs: Vec<_> = plan
            .bindings
            .iter()
            .filter(|b| !self.assumed.is_assumed(&b.pod) && !self.held_binds.contains_key(&b.pod))
            .map(|b| {
                let (ns, name) = split_key(&b.pod);
                let pod = stores.pods.get(&ObjectRef::new(name).within(ns));
                let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
                let group = pod.as_deref().and_then(group_key);
                if let Some(t) = pod
                    .as_ref()
                    .and_then(|p| p.metadata.creation_timestamp.as_ref())
                {
                    created_at.insert(b.pod.clone(), t.0);
                }
                let node = stores.nodes.get(&ObjectRef::new(&b.node));
                let on_hami = node.as_ref().is_some_and(|n| devices::runs_hami(n));
                let on_vgpu = node.as_ref().is_some_and(|n| devices::runs_vgpu(n));
                let annotations = match (&pod, on_vgpu && !b.devices.is_empty()) {
                    (Some(p), true) => devices::vgpu_annotations(&b.node, p, &b.devices),
                    _ => BTreeMap::new(),
                };
                let hami =
                    (on_hami && !b.devices.is_empty() && pod.is_some()).then(|| b.devices.clone());
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
                    pod,
                    group,
                    hami,
                    annotations,
                    claims: Vec::new(),
                }
            })
            .collect();
        // Claims first (PreBind): a pod whose claim cannot point at its node is not bound.
        let (jobs, mut results) = self.select_claims(jobs, stores).await;
        // DRA ResourceClaims: what each pod's job reserves (and allocates) before its binding.
        let (jobs, refused) = self.prepare_resource_claims(jobs, plan, stores);
        results.extend(refused);
        let jobs = self.gangs_first(jobs);
        let writer = resource_claims::Writer {
            client: self.client.clone(),
            limiter: self.limiter.clone(),
            leadership: self.leadership.clone(),
        };
        let bound: Vec<_> = futures::stream::iter(jobs)
            .map(|job| {
                let writer = writer.clone();
                async move {
                    let mut written = Vec::new();
                    let r = bind_job(&writer, &job, &mut written).await;
                    (job, r, written)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for (job, r, written) in bound {
            for claim in written {
                self.assumed_claims.wrote(claim);
            }
            results.push((job, r));
        }

        let mut retry = false;
        let mut failed = Unbound::new();
        // Binds held for a node over capacity count as not bound, quietly: the node is
        // reported once, not each pod each cycle.
        for (key, why) in &self.held_binds {
            if let Some(group) = stores.pod(key).as_deref().and_then(group_key) {
                unbound(
                    &mut failed,
                    group,
                    NODE_OVER_CAPACITY,
                    format!("{key}: {why}"),
                );
            }
        }
        for (job, result) in results {
            let BindJob {
                key,
                node,
                gpus,
                uid,
                group,
                ..
            } = job;
            let (ns, name) = split_key(&key);
            if !matches!(result, BindResult::Bound) {
                if let Some(group) = group {
                    let why = match result {
                        BindResult::Wait(_) => WAITING_FOR_NODE_LOCK,
                        _ => BIND_FAILED,
                    };
                    let last = format!("{key} on {node}: {}", result.message());
                    unbound(&mut failed, group, why, last);
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
                    self.assumed.assume(key.clone(), node.clone(), gpus, uid);
                    tracing::info!(pod = %key, node = %node, "bound");
                    self.reported.forget(&format!("Pod/{key}"));
                    self.reported.forget(&format!("PodClaims/{key}"));
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
                BindResult::Wait(m) => {
                    retry = true;
                    tracing::debug!(pod = %key, node = %node, reason = %m, "waiting for HAMi's node lock");
                    let reference = pod_ref(ns, name, uid.clone());
                    let key = format!("Pod/{key}");
                    self.event_once(key, reference, "Normal", WAITING_FOR_NODE_LOCK, &m);
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
}

/// A pod's job: its ResourceClaims reserved first (none sent when a claim fails), then its
/// binding; the reservations released again when the binding fails. Answers to the claim
/// writes go to `written`.
async fn bind_job(
    w: &resource_claims::Writer,
    job: &BindJob,
    written: &mut Vec<Arc<ResourceClaim>>,
) -> BindResult {
    let reserved = match resource_claims::reserve_all(w, job, written).await {
        Ok(r) => r,
        Err(why) => return why,
    };
    let r = if w.may_write().await {
        bind_with_handoff(&w.client, job).await
    } else {
        BindResult::Failed(crate::leader::Fenced::NotLeader.to_string())
    };
    if !matches!(r, BindResult::Bound) && !reserved.is_empty() {
        resource_claims::unreserve_all(w, job, reserved, written).await;
    }
    r
}

/// Binds a pod, with HAMi's handoff around the binding on a node that runs HAMi's plugin.
async fn bind_with_handoff(client: &Client, job: &BindJob) -> BindResult {
    let (Some(pod), Some(devices)) = (&job.pod, &job.hami) else {
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

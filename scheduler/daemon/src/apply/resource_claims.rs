//! DRA ResourceClaims before the binding, as kube-scheduler's DynamicResources plugin does in
//! PreBind (not the PersistentVolumeClaims of `claims.rs`). In each pod's bind job, for each
//! of its claims, one after the other:
//!
//! 1. the finalizer `resource.kubernetes.io/delete-protection`, when missing, by a merge patch
//!    carrying the resourceVersion read (so a claim changed meanwhile is a 409);
//! 2. one status write (`PUT .../resourceclaims/NAME/status` with the resourceVersion): the
//!    plan's allocation when this cycle allocated the claim (devices, the `nodeSelector` naming
//!    the node, the class's and the claim's opaque config as kube-scheduler's allocator copies
//!    them), and the pod appended to `reservedFor`.
//!
//! A 409 re-reads the claim and tries again (a few times). A claim allocated meanwhile to other
//! devices (another writer's allocation), replaced (another uid), being deleted, whose
//! `reservedFor` is full, or not allocated while the plan did not allocate it fails the pod's
//! bind: the binding is not sent, the claims already reserved for the pod are released, and the
//! pod is planned again next cycle. Only when every claim is reserved is the pod bound; a bind
//! that then fails is undone as kube-scheduler's Unreserve does: the pod leaves `reservedFor`
//! and, when this cycle allocated the claim and no consumer is left, `status.allocation` is
//! cleared (the finalizer stays; the resourceclaim controller removes it once the claim is
//! unused). Every answer goes to the assume cache (`assumed_claims.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use basalt_engine::plan::ClaimAllocation;
use basalt_engine::Plan;
use k8s_openapi::api::resource::v1::{
    AllocationResult, ResourceClaim, ResourceClaimConsumerReference,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::{BindJob, BindResult};
use crate::keys::split_key;
use crate::leader::{Fenced, Leadership};
use crate::scheduler::Scheduler;
use crate::stores::Stores;
use crate::writer::classify;
use crate::writer::Limiter;

mod allocation;
use allocation::{allocation_result, controlled_by, devices_of, pod_claim_keys};

/// The finalizer that keeps an allocated claim from going away under its pods.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";
/// `ResourceClaimReservedForMaxSize`.
const RESERVED_FOR_MAX: usize = 256;
/// Tries of one claim's writes when they meet conflicts.
const ATTEMPTS: usize = 5;

/// One claim of a pod, to be reserved for it before its binding.
#[derive(Clone, Debug)]
pub(super) struct ClaimWrite {
    /// `ns/name`.
    pub(super) key: String,
    /// The allocation this cycle's plan made for the claim (for this pod or, a claim shared,
    /// for another pod of the plan: whichever writes first sets it, the other finds it set).
    pub(super) allocation: Option<AllocationResult>,
    /// The claim as last known: written by this scheduler (the assume cache), else watched.
    pub(super) known: Arc<ResourceClaim>,
}

/// A claim reserved for the pod by its job.
pub(super) struct Reserved {
    key: String,
    /// This cycle allocated it: cleared again if the bind fails and nobody else uses it.
    allocated_here: bool,
    claim: Arc<ResourceClaim>,
}

/// What a bind job writes with: every write takes a token and checks leadership first.
#[derive(Clone)]
pub(super) struct Writer {
    pub(super) client: Client,
    pub(super) limiter: Arc<Limiter>,
    pub(super) leadership: Leadership,
}

impl Writer {
    /// Takes a token; false when this replica does not lead (nothing may be sent).
    pub(super) async fn may_write(&self) -> bool {
        self.limiter.acquire().await;
        self.leadership.leading()
    }
}

fn result_of(e: &kube::Error, what: &str) -> BindResult {
    match classify(e) {
        (Some(code), m) if code >= 500 || code == 429 => BindResult::Retry(format!("{what}: {m}")),
        (None, m) => BindResult::Retry(format!("{what}: {m}")),
        (Some(_), m) => BindResult::Failed(format!("{what}: {m}")),
    }
}

/// The claim as the API has it now.
async fn read(
    api: &Api<ResourceClaim>,
    name: &str,
    what: &str,
) -> Result<Arc<ResourceClaim>, BindResult> {
    match api.get(name).await {
        Ok(mut c) => {
            c.metadata.managed_fields = None;
            Ok(Arc::new(c))
        }
        Err(e) => Err(result_of(&e, what)),
    }
}

/// Reserves each of the job's claims for its pod; on the first that fails, releases those
/// reserved and says why. Every claim the API answered with (a write's answer, a read after a
/// conflict) is added to `written`, the newest state known for the assume cache.
pub(super) async fn reserve_all(
    w: &Writer,
    job: &BindJob,
    written: &mut Vec<Arc<ResourceClaim>>,
) -> Result<Vec<Reserved>, BindResult> {
    let mut reserved = Vec::new();
    for c in &job.claims {
        match reserve(w, job, c, written).await {
            Ok(r) => reserved.push(r),
            Err(why) => {
                unreserve_all(w, job, reserved, written).await;
                return Err(why);
            }
        }
    }
    Ok(reserved)
}

async fn reserve(
    w: &Writer,
    job: &BindJob,
    c: &ClaimWrite,
    written: &mut Vec<Arc<ResourceClaim>>,
) -> Result<Reserved, BindResult> {
    let (ns, name) = split_key(&c.key);
    let what = format!("cannot reserve ResourceClaim {} for the pod", c.key);
    let fail = |m: &str| Err(BindResult::Failed(format!("{what}: {m}")));
    let Some(pod_uid) = job.uid.clone() else {
        return fail("the pod has no uid");
    };
    let (_, pod_name) = split_key(&job.key);
    let api: Api<ResourceClaim> = Api::namespaced(w.client.clone(), ns);
    let mut claim = c.known.clone();
    let uid = claim.metadata.uid.clone();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            claim = read(&api, name, &what).await?;
            written.push(claim.clone());
            if claim.metadata.uid != uid {
                return fail("the claim was replaced");
            }
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return fail("the claim is being deleted");
        }
        let status = claim.status.clone().unwrap_or_default();
        let allocate = match (&status.allocation, &c.allocation) {
            (Some(now), Some(ours)) if devices_of(now) != devices_of(ours) => {
                return fail("it was allocated by another writer meanwhile");
            }
            (Some(_), _) => false,
            (None, Some(_)) => true,
            (None, None) => return fail("it is not allocated"),
        };
        let consumers = status.reserved_for.clone().unwrap_or_default();
        let listed = consumers.iter().any(|r| r.uid == pod_uid);
        if !listed && consumers.len() >= RESERVED_FOR_MAX {
            return fail("its reservedFor already holds 256 consumers");
        }
        let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == DELETE_PROTECTION) {
            if !w.may_write().await {
                return fail(&Fenced::NotLeader.to_string());
            }
            let mut with = finalizers;
            with.push(DELETE_PROTECTION.to_string());
            let rv = claim.metadata.resource_version.clone();
            let body = json!({"metadata": {"resourceVersion": rv, "finalizers": with}});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(mut updated) => {
                    updated.metadata.managed_fields = None;
                    claim = Arc::new(updated);
                    written.push(claim.clone());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(result_of(&e, &what)),
            }
        }
        let reserved = |claim: Arc<ResourceClaim>| Reserved {
            key: c.key.clone(),
            allocated_here: c.allocation.is_some(),
            claim,
        };
        if listed && !allocate {
            return Ok(reserved(claim));
        }
        let mut next = (*claim).clone();
        let st = next.status.get_or_insert_with(Default::default);
        if allocate {
            st.allocation = c.allocation.clone();
        }
        if !listed {
            st.reserved_for
                .get_or_insert_with(Vec::new)
                .push(ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".into(),
                    name: pod_name.to_string(),
                    uid: pod_uid.clone(),
                });
        }
        if !w.may_write().await {
            return fail(&Fenced::NotLeader.to_string());
        }
        match api
            .replace_status(name, &PostParams::default(), &next)
            .await
        {
            Ok(mut updated) => {
                updated.metadata.managed_fields = None;
                let updated = Arc::new(updated);
                written.push(updated.clone());
                return Ok(reserved(updated));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(result_of(&e, &what)),
        }
    }
    Err(BindResult::Retry(format!(
        "{what}: still conflicting after {ATTEMPTS} tries"
    )))
}

/// Undoes the reservations of a pod that is not bound: the pod leaves each claim's
/// `reservedFor` and a claim this cycle allocated that nobody else uses is deallocated. A write
/// that cannot be made is logged; what the API then holds is what the next cycle sees.
pub(super) async fn unreserve_all(
    w: &Writer,
    job: &BindJob,
    reserved: Vec<Reserved>,
    written: &mut Vec<Arc<ResourceClaim>>,
) {
    for r in reserved {
        if let Err(e) = unreserve(w, job, &r, written).await {
            tracing::warn!(pod = %job.key, claim = %r.key, error = %e, "cannot release the claim's reservation for a pod not bound");
        }
    }
}

async fn unreserve(
    w: &Writer,
    job: &BindJob,
    r: &Reserved,
    written: &mut Vec<Arc<ResourceClaim>>,
) -> Result<(), String> {
    let (ns, name) = split_key(&r.key);
    let api: Api<ResourceClaim> = Api::namespaced(w.client.clone(), ns);
    let mut claim = r.claim.clone();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            claim = read(&api, name, "read")
                .await
                .map_err(|e| e.message().to_string())?;
            written.push(claim.clone());
            if claim.metadata.uid != r.claim.metadata.uid {
                return Ok(());
            }
        }
        let mut next = (*claim).clone();
        let Some(st) = next.status.as_mut() else {
            return Ok(());
        };
        let consumers = st.reserved_for.get_or_insert_with(Vec::new);
        let before = consumers.len();
        consumers.retain(|c| Some(&c.uid) != job.uid.as_ref());
        let removed = consumers.len() != before;
        let deallocate = r.allocated_here && consumers.is_empty() && st.allocation.is_some();
        if consumers.is_empty() {
            st.reserved_for = None;
        }
        if deallocate {
            st.allocation = None;
        }
        if !removed && !deallocate {
            return Ok(());
        }
        if !w.may_write().await {
            return Err(Fenced::NotLeader.to_string());
        }
        match api
            .replace_status(name, &PostParams::default(), &next)
            .await
        {
            Ok(mut updated) => {
                updated.metadata.managed_fields = None;
                written.push(Arc::new(updated));
                tracing::info!(pod = %job.key, claim = %r.key, deallocated = deallocate, "claim reservation released (the pod was not bound)");
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(classify(&e).1),
        }
    }
    Err(format!("still conflicting after {ATTEMPTS} tries"))
}

impl Scheduler {
    /// The claims each job's pod must have reserved before its binding. A pod whose claims
    /// cannot be told (a template's claim not made yet, a claim missing, not its own, or
    /// allocated by the plan on another node) is refused this cycle.
    pub(super) fn prepare_resource_claims(
        &self,
        jobs: Vec<BindJob>,
        plan: &Plan,
        stores: &Stores,
    ) -> (Vec<BindJob>, Vec<(BindJob, BindResult)>) {
        let planned: HashMap<&str, &ClaimAllocation> = (plan.claim_allocations.iter())
            .map(|a| (a.claim.as_str(), a))
            .collect();
        let dra = stores.dra.current();
        let mut ready = Vec::new();
        let mut refused = Vec::new();
        for mut job in jobs {
            let Some(pod) = job.pod.clone() else {
                ready.push(job);
                continue;
            };
            let claims = pod_claim_keys(&pod).and_then(|keys| {
                let mut out = Vec::new();
                for (key, from_template) in keys {
                    let (cns, cname) = split_key(&key);
                    let known = (self.assumed_claims.get(&key).cloned())
                        .or_else(|| dra.as_ref().and_then(|d| d.kinds.claim(cns, cname)))
                        .ok_or_else(|| format!("ResourceClaim {key} does not exist"))?;
                    if from_template && !controlled_by(&known, &pod) {
                        return Err(format!(
                            "ResourceClaim {key} was not created for pod {} (the pod is not its owner)",
                            job.key
                        ));
                    }
                    let allocation = match planned.get(key.as_str()) {
                        Some(a) if a.node != job.node => {
                            return Err(format!(
                                "ResourceClaim {key} is allocated on node {} by this cycle",
                                a.node
                            ))
                        }
                        Some(a) => Some(allocation_result(a, &known, |class| {
                            dra.as_ref().and_then(|d| d.kinds.class(class))
                        })),
                        None => None,
                    };
                    out.push(ClaimWrite {
                        key,
                        allocation,
                        known,
                    });
                }
                Ok(out)
            });
            match claims {
                Ok(list) => {
                    job.claims = list;
                    ready.push(job);
                }
                Err(m) => refused.push((job, BindResult::Failed(m))),
            }
        }
        (ready, refused)
    }
}

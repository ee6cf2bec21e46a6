//! Applying a plan through the API: binds (`binds.rs`: GPU ids on the Binding; HAMi's handoff
//! on nodes that run its device plugin, `devices.rs`; claims settled for the node first,
//! `claims.rs`; DRA ResourceClaims reserved and allocated in each pod's bind job,
//! `resource_claims.rs`),
//! evictions (`evictions.rs`), nominated nodes, PodGroup status (`status.rs`), Queue status
//! and the `default` Queue (`queues.rs`), and Events about objects (`report.rs`: invalid
//! ones, held pods, nodes over capacity, shared PodGroups); auto PodGroups before the cycle
//! (`auto_groups.rs`). Every API answer is looked at; nothing here panics on one.

use std::time::{Duration, Instant};

use basalt_engine::Plan;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use crate::keys::{pod_key, split_key};
use crate::scheduler::Scheduler;
use crate::stores::Stores;
use crate::writer::classify;

pub(crate) mod auto_groups;
mod binds;
use binds::{BindJob, BindResult};
mod claims;
mod devices;
mod evictions;
mod mig;
mod queues;
mod report;
mod resource_claims;
mod status;
mod volumes;

/// PodGroup condition of a gang left partly bound.
const PARTIALLY_BOUND: &str = "PartiallyBound";
/// Event reason of the eviction of a partly bound gang's members.
const GANG_ROLLBACK: &str = "GangRollback";

impl Scheduler {
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
            let Some(pod) = stores.pod(&n.pod) else {
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
}

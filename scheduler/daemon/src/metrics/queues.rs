//! Per-queue gauges a cycle ends with: pending pods and PodGroups, deserved and allocated
//! resources, dominant share, usage over the half-life.

use std::collections::BTreeMap;
use std::sync::Arc;

use basalt_engine::{JobPhase, Plan};
use k8s_openapi::api::core::v1::Pod;

use basalt_crds::convert::{explicit_group, QUEUE};

use super::{pairs, Metrics};
use crate::keys::split_key;
use crate::view::View;

impl Metrics {
    /// Sets the per-queue gauges from `plan` and the pods still waiting (`pending`), each
    /// counted in its PodGroup's queue, its auto group's, its namespace's or `default`. Series
    /// of queues or resources gone since the last cycle are dropped.
    pub fn observe_queues(&self, plan: &Plan, pending: &[Arc<Pod>], view: &View) {
        let queue_of_group =
            |ns: &str, name: &str| (view.group(&format!("{ns}/{name}"))).map(|g| g.queue.clone());
        let mut pods: BTreeMap<String, i64> = BTreeMap::new();
        let mut groups: BTreeMap<String, i64> = BTreeMap::new();
        for q in &plan.queues {
            pods.insert(q.name.clone(), 0);
            groups.insert(q.name.clone(), 0);
        }
        for p in pending {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let queue = explicit_group(&p.metadata)
                .and_then(|g| queue_of_group(ns, g))
                .or_else(|| {
                    (p.metadata.annotations.as_ref())
                        .and_then(|a| a.get(QUEUE))
                        .cloned()
                })
                .or_else(|| view.namespace_queue(ns).map(str::to_string))
                .unwrap_or_else(|| "default".into());
            *pods.entry(queue).or_default() += 1;
        }
        for planned in &plan.pod_groups {
            if !matches!(planned.phase, JobPhase::Pending | JobPhase::Inqueue) {
                continue;
            }
            let (ns, name) = split_key(&planned.name);
            if let Some(queue) = queue_of_group(ns, name) {
                *groups.entry(queue).or_default() += 1;
            }
        }
        let label = |q: &str| pairs(&[("queue", q)]);
        self.queue_pending_pods.clear();
        for (q, n) in pods {
            self.queue_pending_pods.get_or_create(&label(&q)).set(n);
        }
        self.queue_pending_groups.clear();
        for (q, n) in groups {
            self.queue_pending_groups.get_or_create(&label(&q)).set(n);
        }
        self.queue_deserved.clear();
        self.queue_allocated.clear();
        self.queue_share.clear();
        self.queue_usage.clear();
        for q in &plan.queues {
            for (resource, v) in &q.usage {
                let labels = pairs(&[("queue", &q.name), ("resource", resource)]);
                let v = if resource == basalt_engine::CPU_NAME {
                    v / 1000.0
                } else {
                    *v
                };
                self.queue_usage.get_or_create(&labels).set(v);
            }
            self.queue_share.get_or_create(&label(&q.name)).set(q.share);
            for (family, list) in [
                (&self.queue_deserved, &q.deserved),
                (&self.queue_allocated, &q.allocated),
            ] {
                for (resource, text) in list {
                    // Thousandths, so cpu reads in cores with millicore precision.
                    let Ok(v) = basalt_crds::quantity::parse_scaled(text, 1000) else {
                        continue;
                    };
                    let labels = pairs(&[("queue", &q.name), ("resource", resource)]);
                    family.get_or_create(&labels).set(v as f64 / 1000.0);
                }
            }
        }
    }
}

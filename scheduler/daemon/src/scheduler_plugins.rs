//! kubernetes-sigs/scheduler-plugins' PodGroups (`scheduling.x-k8s.io/v1alpha1`, the
//! coscheduling plugin's gangs), watched when the cluster serves them, so a cluster moving
//! from the coscheduling plugin keeps its objects: pods labelled
//! `scheduling.x-k8s.io/pod-group` form the gang the group describes (see the crds crate's
//! `types::scheduler_plugins` for what is read). Discovery works as for Volcano's kinds
//! ([`Optional`]). Their status belongs to scheduler-plugins' PodGroup controller, so Basalt
//! never writes it; why a gang waits (its schedule timeout too) still reaches its pods as
//! Events.

use std::borrow::Cow;
use std::sync::Arc;

use basalt_crds::types::scheduler_plugins as sp;
use basalt_crds::{ConvertError, PodGroup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::lenient::Converted;
use crate::optional_api::{Kinds, Optional};
use crate::reflect::{reflect_task, OnNotFound};

/// `scheduling.x-k8s.io/v1alpha1`.
pub const API_VERSION: &str = sp::API_VERSION;
/// The origin these objects carry in conversion errors.
pub const ORIGIN: &str = "cluster (scheduling.x-k8s.io/v1alpha1)";

/// A scheduler-plugins PodGroup as stored: its spec read per object when converted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SigsPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    /// Converted once per stored object, as Volcano's (`volcano.rs`).
    #[serde(skip)]
    converted: Converted<(Arc<PodGroup>, Vec<String>)>,
}

impl Resource for SigsPodGroup {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("PodGroup")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("scheduling.x-k8s.io")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1alpha1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("podgroups")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl SigsPodGroup {
    /// Basalt's form with warnings about fields Basalt does not honour
    /// (`ORIGIN: PodGroup ns/name: field: message`), or the field that cannot be read.
    pub fn to_basalt(&self) -> Result<(Arc<PodGroup>, Vec<String>), ConvertError> {
        self.converted.get(|| self.convert())
    }

    fn convert(&self) -> Result<(Arc<PodGroup>, Vec<String>), ConvertError> {
        let key = crate::keys::key_of(&self.metadata);
        let error = |field: &str, message: String| ConvertError {
            origin: Some(ORIGIN.to_string()),
            kind: "PodGroup".into(),
            object: key.clone(),
            field: field.into(),
            message,
        };
        let spec: sp::PodGroupSpec =
            crate::lenient::spec_of(&self.spec).map_err(|u| error(&u.field, u.message))?;
        let group = sp::PodGroup {
            metadata: self.metadata.clone(),
            spec,
            status: None,
        };
        let (group, issues) = group.into_basalt().map_err(|(field, m)| error(&field, m))?;
        let warnings = (issues.into_iter())
            .map(|(field, m)| format!("{ORIGIN}: PodGroup {key}: {field}: {m}"))
            .collect();
        Ok((Arc::new(group), warnings))
    }
}

pub struct SchedulerPluginsStores {
    pub pod_groups: Store<SigsPodGroup>,
}

impl Kinds for SchedulerPluginsStores {
    const API_VERSION: &'static str = API_VERSION;
    const PLURALS: &'static [&'static str] = &["podgroups"];
    const WHAT: &'static str = "scheduler-plugins' PodGroups";

    fn start(
        client: &Client,
        _served: &[bool],
        changed: &Arc<Notify>,
        on_404: OnNotFound,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let (pod_groups, task) = reflect_task(
            kube::Api::<SigsPodGroup>::all(client.clone()),
            "podgroups.scheduling.x-k8s.io",
            changed,
            Some(on_404),
        );
        (SchedulerPluginsStores { pod_groups }, vec![task])
    }

    async fn ready(&self) {
        let _ = self.pod_groups.wait_until_ready().await;
    }
}

pub type SchedulerPlugins = Optional<SchedulerPluginsStores>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_coscheduling_group_reads_as_basalt_s_and_a_bad_one_names_its_field() {
        let g: SigsPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"minMember": 3, "minResources": {"nvidia.com/gpu": "8"},
                     "scheduleTimeoutSeconds": 10},
            "status": {"phase": "Scheduling"},
        }))
        .unwrap();
        let (b, warnings) = g.to_basalt().unwrap();
        assert_eq!(b.spec.min_member, 3);
        assert_eq!(b.spec.schedule_timeout_seconds, Some(10));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(b.spec.queue, None, "the default queue");
        let bad: SigsPodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": "three"},
        }))
        .unwrap();
        let e = bad.to_basalt().unwrap_err();
        assert_eq!(
            (e.object.as_str(), e.field.as_str()),
            ("ml/g", "spec.minMember")
        );
    }
}

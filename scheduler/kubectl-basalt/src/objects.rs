//! Reading Basalt's objects leniently: one that does not decode is named on stderr and left
//! out, never the whole answer lost.

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// Every object of `K` (in `namespace`, or all), decoded; those that do not are reported.
pub async fn list<K>(client: &Client, namespace: Option<&str>) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let list = (api.list(&ListParams::default()).await)
        .map_err(|e| anyhow::anyhow!("cannot list {}: {e}", resource.plural))?;
    let mut out = Vec::new();
    for item in list.items {
        let name = key(
            item.metadata.namespace.as_deref(),
            item.metadata.name.as_deref(),
        );
        match serde_json::to_value(&item).and_then(serde_json::from_value::<K>) {
            Ok(k) => out.push(k),
            Err(e) => eprintln!("kubectl-basalt: {} {name}: {e} (left out)", resource.kind),
        }
    }
    Ok(out)
}

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{}", name.unwrap_or("")),
        None => name.unwrap_or("").to_string(),
    }
}

/// The explanation a PodGroup's status carries; one that does not read (written by another
/// version) is named on stderr.
pub fn explanation(g: &basalt_crds::PodGroup) -> Option<basalt_engine::Explanation> {
    let value = g.status.as_ref()?.explanation.clone()?;
    match serde_json::from_value(value) {
        Ok(e) => Some(e),
        Err(e) => {
            let name = key(g.metadata.namespace.as_deref(), g.metadata.name.as_deref());
            eprintln!("kubectl-basalt: PodGroup {name}: status.explanation: {e} (left out)");
            None
        }
    }
}

/// The reason and message of a PodGroup's `Unschedulable` condition.
pub fn unschedulable(g: &basalt_crds::PodGroup) -> Option<(String, String)> {
    let s = g.status.as_ref()?;
    let c = s.conditions.iter().find(|c| c.type_ == "Unschedulable")?;
    Some((
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// The queue a PodGroup names (`default` when none).
pub fn queue_of(g: &basalt_crds::PodGroup) -> String {
    (g.spec.queue.clone().filter(|q| !q.is_empty()))
        .unwrap_or_else(|| basalt_engine::DEFAULT_QUEUE.to_string())
}

//! Dynamic Resource Allocation's objects (`resource.k8s.io/v1`, GA in Kubernetes 1.34),
//! watched when the cluster serves them: DeviceClasses, ResourceSlices (the devices drivers
//! publish) and ResourceClaims. They go into conversion as they are (the crds crate reads
//! pools, devices, CEL selectors and claims); the claims this scheduler allocated are written
//! before their pods' bindings (`apply/resource_claims.rs`) and assumed meanwhile
//! (`assumed_claims.rs`).
//!
//! Discovery decides whether they are watched, as for Volcano's kinds ([`Optional`]): a cluster
//! without the group logs nothing about it, and a pod with claims waits there (its claims do
//! not exist) with the reason `ResourceClaimNotReady`.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Client;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::optional_api::{watch, Kinds, Optional};
use crate::reflect::OnNotFound;

/// `resource.k8s.io/v1`.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// The DRA kinds the cluster serves (each `None` when its plural is not).
pub struct DraStores {
    pub classes: Option<Store<DeviceClass>>,
    pub slices: Option<Store<ResourceSlice>>,
    pub claims: Option<Store<ResourceClaim>>,
}

impl DraStores {
    /// Every claim the watch holds.
    pub fn claims(&self) -> Vec<Arc<ResourceClaim>> {
        self.claims.iter().flat_map(|s| s.state()).collect()
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        (self.claims.as_ref()).and_then(|s| s.get(&ObjectRef::new(name).within(namespace)))
    }

    pub fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        (self.classes.as_ref()).and_then(|s| s.get(&ObjectRef::new(name)))
    }
}

impl Kinds for DraStores {
    const API_VERSION: &'static str = API_VERSION;
    const PLURALS: &'static [&'static str] = &["deviceclasses", "resourceslices", "resourceclaims"];
    const WHAT: &'static str = "DeviceClasses, ResourceSlices and ResourceClaims";

    fn start(
        client: &Client,
        served: &[bool],
        changed: &Arc<Notify>,
        on_404: OnNotFound,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let mut tasks = Vec::new();
        let classes = watch(
            client,
            served[0],
            "deviceclasses.resource.k8s.io",
            changed,
            &on_404,
            &mut tasks,
        );
        let slices = watch(
            client,
            served[1],
            "resourceslices.resource.k8s.io",
            changed,
            &on_404,
            &mut tasks,
        );
        let claims = watch(
            client,
            served[2],
            "resourceclaims.resource.k8s.io",
            changed,
            &on_404,
            &mut tasks,
        );
        let stores = DraStores {
            classes,
            slices,
            claims,
        };
        (stores, tasks)
    }

    async fn ready(&self) {
        if let Some(s) = &self.classes {
            let _ = s.wait_until_ready().await;
        }
        if let Some(s) = &self.slices {
            let _ = s.wait_until_ready().await;
        }
        if let Some(s) = &self.claims {
            let _ = s.wait_until_ready().await;
        }
    }
}

/// DRA's kinds, watched while served.
pub type Dra = Optional<DraStores>;

//! A cluster's spec put together from its objects' conversions (see [`Assembly`]), and the
//! same with its pods left shared ([`SharedSpec`]).

use std::sync::Arc;

use basalt_engine::{ClusterSpec, PodSpec};

use super::device_names::GPU_NAME;
use super::{owners, Context, ConvertError, ConvertOptions, Converted};
use crate::read::Object;

/// A [`ClusterSpec`] put together from objects' conversions, in the objects' order: shared by
/// [`cluster_spec`] and the incremental snapshot's kept conversions
/// (`crate::incremental::ConvertedObjects`), so both assemble alike.
pub(crate) struct Assembly {
    spec: ClusterSpec,
    /// The pods, as converted (shared with the conversions that keep them).
    pods: Vec<Arc<PodSpec>>,
    /// Beside `pods`, the object each one was converted from.
    sources: Vec<Object>,
    /// The gangs of LeaderWorkerSet pods, made once every pod has joined.
    lws: owners::LwsGroups,
}

impl Assembly {
    pub(crate) fn new(now_ms: i64) -> Assembly {
        Assembly {
            spec: ClusterSpec {
                now_ms,
                device_resource: GPU_NAME.to_string(),
                ..ClusterSpec::default()
            },
            pods: Vec::new(),
            sources: Vec::new(),
            lws: owners::LwsGroups::default(),
        }
    }

    pub(crate) fn add(
        &mut self,
        origin: &str,
        object: &Object,
        mut one: Converted,
        warnings: &mut Vec<String>,
    ) {
        self.lws.join(origin, object, &mut one, warnings);
        match one {
            Converted::Pod(p) => {
                self.pods.push(p);
                self.sources.push(object.clone());
            }
            one => one.add_to(&mut self.spec),
        }
    }

    /// The spec, with the groups of the pods' gangs and the DRA the context read.
    pub(crate) fn finish(
        self,
        context: &Context,
        options: &ConvertOptions,
        warnings: &mut Vec<String>,
    ) -> Result<SharedSpec, ConvertError> {
        let mut spec = self.spec;
        spec.groups
            .extend(self.lws.groups(context, options, warnings)?);
        spec.dra = context.dra.spec();
        Ok(SharedSpec {
            spec,
            pods: self.pods,
            sources: self.sources,
        })
    }
}

/// A [`ClusterSpec`] whose pods are still the conversions' own: `spec.pods` is empty and
/// `pods` holds them in the order `spec.pods` would. What a reader that only reads the pods
/// (the daemon's forecast) takes without copying each one.
pub struct SharedSpec {
    pub spec: ClusterSpec,
    pub pods: Vec<Arc<PodSpec>>,
    /// Beside `pods`, the object each was converted from (what a reader of their annotations
    /// pairs them with, by place instead of by name); empty when not assembled from objects.
    pub sources: Vec<Object>,
}

impl From<ClusterSpec> for SharedSpec {
    fn from(mut spec: ClusterSpec) -> Self {
        let pods = std::mem::take(&mut spec.pods)
            .into_iter()
            .map(Arc::new)
            .collect();
        SharedSpec {
            spec,
            pods,
            sources: Vec::new(),
        }
    }
}

impl SharedSpec {
    /// The spec with its pods in it (each copied only where a conversion still holds it).
    pub fn into_spec(self) -> ClusterSpec {
        let pods = self.pods.into_iter().map(Arc::unwrap_or_clone).collect();
        ClusterSpec { pods, ..self.spec }
    }
}

//! The last update's objects with the conversions kept for them, shared with a reader off the
//! scheduling path (the daemon's forecast): it assembles the cluster's spec from them instead
//! of converting every object again. Handing them over costs the update's thread one list of
//! shared pointers; the spec is put together on the reader's thread.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use basalt_engine::ClusterSpec;

use super::store::{Conversion, Origin, Store};
use super::{informs, Objects};
use crate::convert::{Assembly, Context, ConvertError, ConvertOptions, SharedSpec};
use crate::read::Object;

/// The objects of an update, in order, each with its conversion (see the module documentation).
pub struct ConvertedObjects {
    entries: Vec<Kept>,
    context: Arc<Context>,
    /// The options they were converted under, at instant 0.
    options: ConvertOptions,
    /// Whether the context was read from every object it is read from (none refused).
    whole_context: bool,
    /// Whether workload objects are among them (then every pod informs the context).
    workloads: bool,
    /// The objects as a list, made when first asked for.
    listed: OnceLock<Objects>,
}

struct Kept {
    origin: Origin,
    object: Object,
    conversion: Option<Arc<Conversion>>,
}

/// The objects a spec was assembled from and the spec.
pub type UsableSpec = (ClusterSpec, Vec<(String, Object)>);

impl ConvertedObjects {
    pub(super) fn of(
        store: &Store,
        context: Arc<Context>,
        options: ConvertOptions,
        whole_context: bool,
    ) -> Self {
        let entries = (store.entries())
            .map(|e| Kept {
                origin: e.origin.clone(),
                object: e.object.clone(),
                conversion: e.converted.clone(),
            })
            .collect();
        ConvertedObjects {
            entries,
            context,
            options,
            whole_context,
            workloads: store.has_workloads(),
            listed: OnceLock::new(),
        }
    }

    /// The objects, in order, shared (the same list on every call).
    pub fn objects(&self) -> Objects {
        let listed = self.listed.get_or_init(|| {
            let objects = (self.entries.iter())
                .map(|e| (e.origin.to_string(), e.object.clone()))
                .collect();
            Arc::new(objects)
        });
        listed.clone()
    }

    /// What [`usable_spec`] gives under `options` for these objects, from the kept
    /// conversions: none converted again. `None` when the kept conversions cannot tell: an
    /// object the context is read from does not convert or was refused by it (leaving it out
    /// changes the context, so every conversion), a gang made of pods does not convert, or
    /// `options` are not those they were converted under (at any instant); then
    /// [`usable_spec`] converts anew.
    pub fn kept_spec(&self, options: &ConvertOptions) -> Option<UsableSpec> {
        let (spec, usable) = self.kept_shared_spec(options)?;
        Some((spec.into_spec(), usable))
    }

    /// [`ConvertedObjects::kept_spec`] with the pods left shared with the kept conversions
    /// (none copied).
    pub fn kept_shared_spec(
        &self,
        options: &ConvertOptions,
    ) -> Option<(SharedSpec, Vec<(String, Object)>)> {
        let timeless = ConvertOptions {
            now_ms: 0,
            ..options.clone()
        };
        if !self.whole_context || timeless != self.options {
            return None;
        }
        let mut warnings = Vec::new();
        let mut spec = Assembly::new(options.now_ms);
        let mut usable = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            match &e.conversion.as_ref()?.result {
                Ok(converted) => {
                    if let Some(one) = converted {
                        spec.add(&e.origin, &e.object, one.clone(), &mut warnings);
                    }
                    usable.push((e.origin.to_string(), e.object.clone()));
                }
                Err(_) if informs(&e.object, self.workloads) => return None,
                // Left out alone: the context, and so every other conversion, stays as it is.
                Err(_) => {}
            }
        }
        let spec = spec.finish(&self.context, options, &mut warnings).ok()?;
        Some((spec, usable))
    }
}

/// The cluster's spec from the objects that convert, with those objects: each one that does
/// not is left out (as a cycle leaves it out, and reports it), and the rest converted again
/// without it. An error when the one that does not convert cannot be left out (an error no
/// object stands for).
pub fn usable_spec(
    objects: &[(String, Object)],
    options: &ConvertOptions,
) -> Result<UsableSpec, ConvertError> {
    let mut objects = Cow::Borrowed(objects);
    loop {
        let e = match crate::convert::cluster_spec(&objects, options) {
            Ok(spec) => return Ok((spec, objects.into_owned())),
            Err(e) => e,
        };
        let before = objects.len();
        (objects.to_mut()).retain(|(_, o)| !(o.kind() == e.kind && o.key() == e.object));
        if objects.len() == before {
            return Err(e);
        }
    }
}

//! Basalt's Kubernetes surface: the `scheduling.basalt.dev/v1alpha1` custom resources
//! (PodGroup, Queue, NodeTopology), readers for manifest files (Basalt's and Volcano's objects,
//! Nodes, Pods and PriorityClasses) and their conversion into the engine's model.
//!
//! The resources themselves are `basalt-crd-types` (re-exported as [`types`]), which the node
//! agent uses without the rest.
//!
//! Dependency rule: this crate knows Kubernetes types (k8s-openapi, kube's derive) but talks to
//! no cluster: no kube client, no async runtime. Of Basalt's crates it depends on the engine,
//! topology (tier names), `basalt-cel` (DRA selectors) and `basalt-crd-types` only. Bad input gives an error naming the file, the object and the field; it never panics.

pub mod convert;
pub mod crdgen;
pub mod ends;
pub mod incremental;
pub mod limits;
pub mod quantity;
pub mod read;
pub mod tolerant;
pub use basalt_crd_types as types;
pub mod workloads;

use std::io::Read;
use std::path::{Path, PathBuf};

use basalt_engine::Snapshot;
use thiserror::Error;

pub use convert::{
    build_snapshot, build_snapshot_with_warnings, cluster_spec, cluster_spec_with_warnings,
    device_ask, ConvertError, ConvertOptions, SharedSpec,
};
pub use incremental::{Change, IncrementalSnapshot, Origin};
pub use quantity::QuantityError;
pub use read::{read_objects, read_objects_lenient, Loaded, Object, ReadError};
pub use tolerant::{build_snapshot_tolerant, TolerantSnapshot};
pub use types::volcano::HyperNode;
pub use types::{
    GpuInfo, MigDeviceInfo, MigInfo, NodeTopology, NodeTopologySpec, PodGroup, PodGroupForecast,
    PodGroupSpec, PodGroupStatus, Queue, QueueSpec, QueueStatus, QueueSummary, SubGroup,
    TopologyConstraint,
};

/// Anything [`load_files`] can fail with.
#[derive(Debug, Error)]
pub enum Error {
    // Not a `source`: the message says it once, also where the error chain is printed.
    #[error("{}: cannot read: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Not UTF-8 text (a binary file): no YAML or JSON manifest.
    #[error("{}: not a text file: invalid UTF-8 at byte {offset} (line {line})", path.display())]
    NotText {
        path: PathBuf,
        offset: usize,
        line: usize,
    },
    /// Larger than [`limits::MAX_BYTES`]: refused before more of it is read.
    #[error("{}: more than {} bytes, the limit of {} MiB a file", path.display(), limits::MAX_BYTES, limits::MAX_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Convert(#[from] ConvertError),
}

/// Reads every file (labelled by its path as given) and builds one snapshot from all their
/// objects. Returns the snapshot and the warnings: skipped documents, Volcano fields Basalt
/// does not honour, and those of [`cluster_spec_with_warnings`].
pub fn load_files(
    paths: &[PathBuf],
    options: &ConvertOptions,
) -> Result<(Snapshot, Vec<String>), Error> {
    let mut objects = Vec::new();
    let mut warnings = Vec::new();
    for path in paths {
        let loaded = read_file(path)?;
        objects.extend(loaded.objects);
        warnings.extend(loaded.warnings);
    }
    let (snapshot, more) = build_snapshot_with_warnings(&objects, options)?;
    warnings.extend(more);
    Ok((snapshot, warnings))
}

/// What [`load_files_lenient`] built: the snapshot of every object that could be read and
/// converted, the warnings, and one error per object left out (each naming it).
pub struct LenientLoad {
    pub snapshot: Option<Snapshot>,
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

/// As [`load_files`], but as the scheduler reads a cluster: an object that cannot be read or
/// converted is left out and reported, and the rest is built (`basalt-sim plan` on a dump
/// with one bad object plans the others). A file that cannot be read at all still fails.
pub fn load_files_lenient(
    paths: &[PathBuf],
    options: &ConvertOptions,
) -> Result<LenientLoad, Error> {
    let mut objects = Vec::new();
    let (mut warnings, mut errors) = (Vec::new(), Vec::new());
    for path in paths {
        let loaded = read_file_with(path, read_objects_lenient)?;
        objects.extend(loaded.objects);
        warnings.extend(loaded.warnings);
        errors.extend(loaded.errors.iter().map(ToString::to_string));
    }
    warnings.extend(convert::missing_owners(&objects, &options.scheduler_names));
    // The exact build when every object converts; only otherwise the tolerant one, which
    // leaves the bad objects out (it differs for LeaderWorkerSet pods' groups, which the
    // daemon makes itself; see the closing note of issue 31).
    let built = match build_snapshot_with_warnings(&objects, options) {
        Ok((snapshot, warnings)) => TolerantSnapshot {
            snapshot: Some(snapshot),
            warnings,
            errors: Vec::new(),
        },
        Err(_) => build_snapshot_tolerant(&objects, options),
    };
    warnings.extend(built.warnings);
    errors.extend(built.errors.iter().map(ToString::to_string));
    Ok(LenientLoad {
        snapshot: built.snapshot,
        warnings,
        errors,
    })
}

/// Reads one manifest file, labelled by its path as given. At most [`limits::MAX_BYTES`] are
/// read: a larger file (or a stream without end) is refused without holding it.
pub fn read_file(path: &Path) -> Result<Loaded, Error> {
    read_file_with(path, read_objects)
}

fn read_file_with(
    path: &Path,
    read: fn(&str, &str) -> Result<Loaded, ReadError>,
) -> Result<Loaded, Error> {
    let io = |error| Error::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // The size when it has one (a stream has none), so the buffer is not grown by doubling.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut bytes = Vec::with_capacity(size.min(limits::MAX_BYTES as u64 + 1) as usize);
    file.take(limits::MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > limits::MAX_BYTES {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        Error::NotText {
            path: path.to_path_buf(),
            offset,
            line: 1 + e.as_bytes()[..offset]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
        }
    })?;
    Ok(read(&path.display().to_string(), &text)?)
}

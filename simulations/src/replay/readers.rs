//! Trace and cluster readers: the Alibaba 2023 "openb" pod and node lists, the Philly job table
//! (and its per-VC node counts), Basalt's native CSV / JSON workload format, Kubernetes manifests
//! and a generator (the native formats are in [`super::native`]). Errors name the file and the
//! line (or the column); values are range-checked before they are scaled, so none wraps.

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{NodeSpec, ResourceList};
use thiserror::Error;

pub use super::native::{read_native_csv, read_native_json, NATIVE_COLUMNS};
use super::workload::*;

pub const MIB: i64 = 1 << 20;
pub const GIB: i64 = 1 << 30;
/// Duration of a job that never leaves (a trace without deletion times).
pub const FOREVER: i64 = i64::MAX / 4;
/// The latest time, and the longest duration, a trace may give: 10^12 s (about 31,700 years).
/// In milliseconds a time plus a duration plus [`FOREVER`] still fits an i64, so the replay's
/// clock never wraps.
pub const MAX_TRACE_SECONDS: i64 = 1_000_000_000_000;
/// The most pods one job may have, over all its rows or roles.
pub const MAX_PODS_PER_JOB: i64 = 100_000;

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{file}: cannot read: {message}")]
    Io { file: String, message: String },
    #[error("{file}: line {line}: {message}")]
    Row {
        file: String,
        line: u64,
        message: String,
    },
    #[error("{file}: unknown column {column:?} (known: {known})")]
    UnknownColumn {
        file: String,
        column: String,
        known: String,
    },
    #[error("{file}: missing column {column:?}")]
    MissingColumn { file: String, column: String },
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error(transparent)]
    Openb(#[from] crate::openb::OpenbError),
}

/// Where a table comes from: a file, or text built into the binary (the bundled samples).
#[derive(Clone, Debug)]
pub enum Source {
    File(std::path::PathBuf),
    Text {
        label: &'static str,
        text: &'static str,
    },
}

impl Source {
    pub fn label(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Text { label, .. } => label.to_string(),
        }
    }

    /// The table's bytes, streamed from the file or the built-in text.
    pub fn open(&self) -> Result<Box<dyn std::io::Read>, TraceError> {
        Ok(match self {
            Source::File(path) => {
                Box::new(std::fs::File::open(path).map_err(|e| TraceError::Io {
                    file: self.label(),
                    message: e.to_string(),
                })?)
            }
            Source::Text { text, .. } => Box::new(std::io::Cursor::new(*text)),
        })
    }

    /// The first line (the CSV header), to recognise a format.
    pub fn header(&self) -> Result<String, TraceError> {
        let text = match self {
            Source::File(p) => {
                use std::io::BufRead;
                let f = std::fs::File::open(p).map_err(|e| TraceError::Io {
                    file: self.label(),
                    message: e.to_string(),
                })?;
                let mut line = String::new();
                std::io::BufReader::new(f)
                    .read_line(&mut line)
                    .map_err(|e| TraceError::Io {
                        file: self.label(),
                        message: e.to_string(),
                    })?;
                line
            }
            Source::Text { text, .. } => text.lines().next().unwrap_or("").to_string(),
        };
        Ok(text.trim().to_string())
    }
}

/// A CSV file with named columns, checked against the columns a format knows.
pub(super) struct Table {
    file: String,
    reader: csv::Reader<Box<dyn std::io::Read>>,
    index: HashMap<String, usize>,
}

impl Table {
    pub(super) fn open(
        source: &Source,
        known: &[&str],
        required: &[&str],
    ) -> Result<Table, TraceError> {
        let file = source.label();
        let f = source.open()?;
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(f);
        let headers = reader.headers().map_err(|e| TraceError::Row {
            file: file.clone(),
            line: 1,
            message: e.to_string(),
        })?;
        let mut index = HashMap::new();
        for (i, h) in headers.iter().enumerate() {
            if !known.contains(&h) {
                return Err(TraceError::UnknownColumn {
                    file,
                    column: h.to_string(),
                    known: known.join(", "),
                });
            }
            index.insert(h.to_string(), i);
        }
        for r in required {
            if !index.contains_key(*r) {
                return Err(TraceError::MissingColumn {
                    file,
                    column: r.to_string(),
                });
            }
        }
        Ok(Table {
            file,
            reader,
            index,
        })
    }

    /// Calls `row` for every record with its line number.
    pub(super) fn rows(
        mut self,
        mut row: impl FnMut(&Row) -> Result<(), String>,
    ) -> Result<(), TraceError> {
        let mut record = csv::StringRecord::new();
        loop {
            match self.reader.read_record(&mut record) {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(e) => {
                    let line = e.position().map_or(0, |p| p.line());
                    return Err(TraceError::Row {
                        file: self.file,
                        line,
                        message: e.to_string(),
                    });
                }
            }
            let line = record.position().map_or(0, |p| p.line());
            let r = Row {
                record: &record,
                index: &self.index,
            };
            row(&r).map_err(|message| TraceError::Row {
                file: self.file.clone(),
                line,
                message,
            })?;
        }
    }
}

pub(super) struct Row<'a> {
    record: &'a csv::StringRecord,
    index: &'a HashMap<String, usize>,
}

impl Row<'_> {
    /// The cell, or `None` when the column is absent or the cell is empty.
    pub(super) fn opt(&self, col: &str) -> Option<&str> {
        self.index
            .get(col)
            .and_then(|&i| self.record.get(i))
            .filter(|s| !s.is_empty())
    }

    pub(super) fn str(&self, col: &str) -> Result<&str, String> {
        self.opt(col).ok_or_else(|| format!("{col}: empty"))
    }

    pub(super) fn int(&self, col: &str) -> Result<i64, String> {
        let s = self.str(col)?;
        s.parse::<i64>()
            .map_err(|_| format!("{col}: {s:?} is not an integer"))
    }

    pub(super) fn opt_int(&self, col: &str) -> Result<Option<i64>, String> {
        self.opt(col)
            .map(|s| {
                s.parse::<i64>()
                    .map_err(|_| format!("{col}: {s:?} is not an integer"))
            })
            .transpose()
    }

    pub(super) fn num(&self, col: &str) -> Result<f64, String> {
        let s = self.str(col)?;
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("{col}: {s:?} is not a number")),
        }
    }
}

pub(super) fn nonneg(col: &str, v: i64) -> Result<i64, String> {
    if v < 0 {
        Err(format!("{col}: must not be negative, got {v}"))
    } else {
        Ok(v)
    }
}

pub(super) fn seconds_to_ms(col: &str, s: f64) -> Result<i64, String> {
    if !(0.0..MAX_TRACE_SECONDS as f64).contains(&s) {
        return Err(format!(
            "{col}: {s} seconds is out of range (0 to {MAX_TRACE_SECONDS})"
        ));
    }
    Ok((s * 1000.0).round() as i64)
}

/// A count that must fit a u32 (`min_member`, `tp_size`): never truncated.
pub(super) fn count_u32(col: &str, v: i64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{col}: {v} is out of range (0 to {})", u32::MAX))
}

/// How fractional-GPU pods (`gpu_milli` < 1000) are mapped onto the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GpuShare {
    /// Each fractional pod takes a whole GPU (what Basalt did before it shared devices).
    /// Overstates GPU demand.
    #[default]
    RoundUp,
    /// Fractional pods take `basalt.dev/gpu-share-milli` from a per-node pool of 1,000 per GPU;
    /// whole-GPU pods take both GPUs and 1,000 milli each. Pooling per node (not per device)
    /// can pack shares that no single GPU could hold.
    Pool,
    /// The engine's own per-device sharing: GPU nodes become HAMi nodes and fractional pods
    /// ask HAMi's compute and memory shares of one device (see [`super::shares`]). The default
    /// for openb traces.
    Hami,
}

impl GpuShare {
    pub fn name(self) -> &'static str {
        match self {
            GpuShare::RoundUp => "round-up",
            GpuShare::Pool => "pool",
            GpuShare::Hami => "hami",
        }
    }
}

/// The openb pod list ([`crate::openb`]): one single-pod job per row. Times are seconds from
/// the trace start. A pod runs for `deletion_time − scheduled_time` (or `− creation_time` when
/// the trace never scheduled it); without a deletion time (the `multigpu*` lists) it never
/// leaves.
pub fn read_openb_pods(path: &Source) -> Result<Workload, TraceError> {
    let pods = crate::openb::read_pods(&path.label(), path.open()?)?;
    let fractional = pods
        .iter()
        .filter(|p| p.num_gpu == 1 && p.gpu_milli < 1000)
        .count();
    let jobs = pods.into_iter().map(openb_job).collect();
    let mut w = Workload {
        source: format!("openb pod list {}", path.label()),
        jobs,
        queues: vec![],
        notes: vec![],
    };
    if fractional > 0 {
        w.notes.push(format!(
            "{fractional} pods ask for a fraction of one GPU (gpu_milli < 1000)"
        ));
    }
    w.complete_queues();
    Ok(w)
}

/// One openb pod as a job; the reader has range-checked every value, so nothing here wraps.
fn openb_job(pod: crate::openb::Pod) -> TraceJob {
    let created = pod.creation_time.unwrap_or(0);
    let duration_ms = match pod.deletion_time {
        None => FOREVER,
        Some(deleted) => (deleted - pod.scheduled_time.unwrap_or(created)) * 1000,
    };
    TraceJob {
        name: pod.name,
        queue: "default".into(),
        priority: 0,
        submit_ms: created * 1000,
        duration_ms,
        pods: vec![PodShape {
            cpu_milli: pod.cpu_milli,
            memory: pod.memory_mib * MIB,
            gpus: pod.num_gpu,
            gpu_milli: pod.gpu_milli,
            gpu_models: pod.gpu_spec,
        }],
        min_member: 1,
        tp_size: 0,
    }
}

/// The openb node list ([`crate::openb`]): `sn, cpu_milli, memory_mib, gpu[, model]`.
pub fn read_openb_nodes(path: &Source) -> Result<Cluster, TraceError> {
    let nodes = crate::openb::read_nodes(&path.label(), path.open()?)?
        .into_iter()
        .map(|n| {
            let mut labels = BTreeMap::from([(HOSTNAME_LABEL.to_string(), n.name.clone())]);
            if !n.model.is_empty() {
                labels.insert(GPU_MODEL_LABEL.to_string(), n.model);
            }
            node_spec(
                n.name,
                labels,
                n.cpu_milli,
                n.memory_mib * MIB,
                n.gpus as i64,
            )
        })
        .collect();
    Ok(Cluster {
        source: format!("openb node list {}", path.label()),
        nodes,
    })
}

fn node_spec(
    name: String,
    labels: BTreeMap<String, String>,
    cpu_milli: i64,
    memory: i64,
    gpus: i64,
) -> NodeSpec {
    let mut alloc: ResourceList = [
        ("cpu".to_string(), cpu_milli),
        ("memory".to_string(), memory),
    ]
    .into_iter()
    .collect();
    if gpus > 0 {
        alloc.insert("nvidia.com/gpu".into(), gpus);
    }
    NodeSpec {
        name,
        labels,
        allocatable: alloc,
        ..Default::default()
    }
}

/// Philly's per-VC node counts (`vc, node num`), in file order.
pub fn read_philly_vc_nodes(path: &Source) -> Result<Vec<(String, u32)>, TraceError> {
    let table = Table::open(path, &["vc", "node num"], &["vc", "node num"])?;
    let mut out: Vec<(String, u32)> = Vec::new();
    table.rows(|r| {
        let vc = r.str("vc")?.to_string();
        let n = r.int("node num")?;
        if !(1..=1_000_000).contains(&n) {
            return Err(format!("node num: {n} is out of range (1..1000000)"));
        }
        if out.iter().any(|(v, _)| *v == vc) {
            return Err(format!("vc: {vc} is listed twice"));
        }
        out.push((vc, n as u32));
        Ok(())
    })?;
    Ok(out)
}

/// Philly's per-pod CPU and memory for each GPU (the trace records GPUs only).
pub const PHILLY_CPU_PER_GPU: i64 = 4_000;
pub const PHILLY_MEM_PER_GPU: i64 = 32 * GIB;
pub const PHILLY_GPUS_PER_NODE: u32 = 8;

/// The Philly job table (`timestamp, duration, num_gpus, gpu_time, cluster`): a job of N GPUs
/// is a gang of ⌈N/8⌉ pods (8 GPUs each, the last one the remainder), queue = virtual
/// cluster, submit times relative to the earliest one, TP size = GPUs per pod (one node).
pub fn read_philly(path: &Source) -> Result<Workload, TraceError> {
    let table = Table::open(
        path,
        &["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
        &["timestamp", "duration", "num_gpus", "cluster"],
    )?;
    let mut jobs = Vec::new();
    let mut row = 0usize;
    table.rows(|r| {
        let submit = parse_datetime(r.str("timestamp")?).ok_or_else(|| {
            format!(
                "timestamp: {:?} is not YYYY-MM-DD HH:MM:SS (years 1 to 9999)",
                r.str("timestamp").unwrap_or("")
            )
        })?;
        let duration = seconds_to_ms("duration", r.num("duration")?)?;
        let n = r.int("num_gpus")?;
        if !(1..=100_000).contains(&n) {
            return Err(format!("num_gpus: {n} is out of range (1..100000)"));
        }
        let vc = r.str("cluster")?.to_string();
        let n = n as u32;
        let per = PHILLY_GPUS_PER_NODE;
        let mut pods = Vec::new();
        let mut left = n;
        while left > 0 {
            let g = left.min(per);
            pods.push(PodShape {
                cpu_milli: PHILLY_CPU_PER_GPU * g as i64,
                memory: PHILLY_MEM_PER_GPU * g as i64,
                gpus: g,
                gpu_milli: 1000,
                gpu_models: vec![],
            });
            left -= g;
        }
        jobs.push(TraceJob {
            name: format!("philly-{row:05}"),
            queue: vc,
            priority: 0,
            submit_ms: submit * 1000,
            duration_ms: duration,
            min_member: pods.len() as u32,
            tp_size: n.min(per),
            pods,
        });
        row += 1;
        Ok(())
    })?;
    if let Some(t0) = jobs.iter().map(|j| j.submit_ms).min() {
        for j in &mut jobs {
            j.submit_ms -= t0;
        }
    }
    let mut w = Workload {
        source: format!("Philly job table {}", path.label()),
        jobs,
        queues: vec![],
        notes: vec![format!(
            "Philly records GPUs only: each pod asks {} CPU and {} GiB per GPU",
            PHILLY_CPU_PER_GPU / 1000,
            PHILLY_MEM_PER_GPU / GIB
        )],
    };
    w.complete_queues();
    Ok(w)
}

/// Seconds since the Unix epoch of `YYYY-MM-DD HH:MM:SS` (UTC), years 1 to 9999.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let (date, time) = s.split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, dd) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if d.next().is_some() || t.next().is_some() {
        return None;
    }
    // Bounded fields keep the arithmetic below far from overflow.
    if !(1..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&dd)
        || !(0..=23).contains(&hh)
        || !(0..=59).contains(&mm)
        || !(0..=60).contains(&ss)
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + dd - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Nodes (and Queues) from Kubernetes manifests, read by `basalt-crds`; pods in the files are
/// ignored (the workload comes from the trace).
pub fn read_manifests(
    paths: &[std::path::PathBuf],
) -> anyhow::Result<(Cluster, Vec<basalt_engine::QueueSpec>)> {
    let mut objects = Vec::new();
    for p in paths {
        objects.extend(basalt_crds::read_file(p)?.objects);
    }
    let spec = basalt_crds::cluster_spec(&objects, &basalt_crds::ConvertOptions::default())?;
    anyhow::ensure!(
        !spec.nodes.is_empty(),
        "{}: no Node objects",
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((
        Cluster {
            source: format!(
                "manifests {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            nodes: spec.nodes,
        },
        spec.queues,
    ))
}

/// A generated cluster: identical GPU nodes in racks, racks in spines, nodes in NVLink cliques.
#[derive(Clone, Debug)]
pub struct Generator {
    pub nodes: usize,
    pub gpus_per_node: u32,
    pub gpu_model: String,
    pub cpu_milli: i64,
    pub memory: i64,
    pub nodes_per_rack: usize,
    pub racks_per_spine: usize,
    /// Nodes per NVLink clique (0: no multi-node NVLink).
    pub clique_nodes: usize,
}

impl Default for Generator {
    fn default() -> Self {
        Generator {
            nodes: 16,
            gpus_per_node: 8,
            gpu_model: "H100".into(),
            cpu_milli: 96_000,
            memory: 1024 * GIB,
            nodes_per_rack: 16,
            racks_per_spine: 8,
            clique_nodes: 0,
        }
    }
}

impl Generator {
    pub fn build(&self) -> Cluster {
        let width = (self.nodes.max(1) - 1).to_string().len().max(4);
        let nodes = (0..self.nodes)
            .map(|i| {
                let name = format!("node-{i:0width$}");
                let rack = i / self.nodes_per_rack.max(1);
                let spine = rack / self.racks_per_spine.max(1);
                let mut labels = BTreeMap::from([
                    (HOSTNAME_LABEL.to_string(), name.clone()),
                    (RACK_LABEL.to_string(), format!("rack-{rack:03}")),
                    (SPINE_LABEL.to_string(), format!("spine-{spine:02}")),
                ]);
                if self.gpus_per_node > 0 {
                    labels.insert(GPU_MODEL_LABEL.to_string(), self.gpu_model.clone());
                }
                if let Some(clique) = i.checked_div(self.clique_nodes) {
                    labels.insert(CLIQUE_LABEL.to_string(), format!("clique-{clique:04}"));
                }
                node_spec(
                    name,
                    labels,
                    self.cpu_milli,
                    self.memory,
                    self.gpus_per_node as i64,
                )
            })
            .collect();
        Cluster {
            source: format!(
                "generated: {} nodes × {} {} GPUs, racks of {}, {} racks per spine{}",
                self.nodes,
                self.gpus_per_node,
                self.gpu_model,
                self.nodes_per_rack,
                self.racks_per_spine,
                if self.clique_nodes > 0 {
                    format!(", NVLink cliques of {} nodes", self.clique_nodes)
                } else {
                    String::new()
                }
            ),
            nodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_is_utc_seconds() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_datetime("1970-01-02 00:00:01"), Some(86_401));
        // 2017-09-04 is 17,413 days after the epoch.
        assert_eq!(
            parse_datetime("2017-09-04 10:30:41"),
            Some(17_413 * 86_400 + 37_841)
        );
        assert_eq!(parse_datetime("2017-13-04 10:30:41"), None);
        assert_eq!(parse_datetime("yesterday"), None);
    }
}

//! Trace and cluster readers: the Alibaba 2023 "openb" pod and node lists, the Philly job table
//! (and its per-VC node counts), Basalt's native CSV / JSON workload format, Kubernetes manifests
//! and a generator. Errors name the file and the line (or the column).

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{NodeSpec, ResourceList};
use serde::Deserialize;
use thiserror::Error;

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
struct Table {
    file: String,
    reader: csv::Reader<Box<dyn std::io::Read>>,
    index: HashMap<String, usize>,
}

impl Table {
    fn open(source: &Source, known: &[&str], required: &[&str]) -> Result<Table, TraceError> {
        let file = source.label();
        let f: Box<dyn std::io::Read> = match source {
            Source::File(path) => {
                Box::new(std::fs::File::open(path).map_err(|e| TraceError::Io {
                    file: file.clone(),
                    message: e.to_string(),
                })?)
            }
            Source::Text { text, .. } => Box::new(std::io::Cursor::new(*text)),
        };
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
    fn rows(mut self, mut row: impl FnMut(&Row) -> Result<(), String>) -> Result<(), TraceError> {
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

struct Row<'a> {
    record: &'a csv::StringRecord,
    index: &'a HashMap<String, usize>,
}

impl Row<'_> {
    /// The cell, or `None` when the column is absent or the cell is empty.
    fn opt(&self, col: &str) -> Option<&str> {
        self.index
            .get(col)
            .and_then(|&i| self.record.get(i))
            .filter(|s| !s.is_empty())
    }

    fn str(&self, col: &str) -> Result<&str, String> {
        self.opt(col).ok_or_else(|| format!("{col}: empty"))
    }

    fn int(&self, col: &str) -> Result<i64, String> {
        let s = self.str(col)?;
        s.parse::<i64>()
            .map_err(|_| format!("{col}: {s:?} is not an integer"))
    }

    fn opt_int(&self, col: &str) -> Result<Option<i64>, String> {
        self.opt(col)
            .map(|s| {
                s.parse::<i64>()
                    .map_err(|_| format!("{col}: {s:?} is not an integer"))
            })
            .transpose()
    }

    fn num(&self, col: &str) -> Result<f64, String> {
        let s = self.str(col)?;
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("{col}: {s:?} is not a number")),
        }
    }
}

fn nonneg(col: &str, v: i64) -> Result<i64, String> {
    if v < 0 {
        Err(format!("{col}: must not be negative, got {v}"))
    } else {
        Ok(v)
    }
}

fn seconds_to_ms(col: &str, s: f64) -> Result<i64, String> {
    if !(0.0..MAX_TRACE_SECONDS as f64).contains(&s) {
        return Err(format!(
            "{col}: {s} seconds is out of range (0 to {MAX_TRACE_SECONDS})"
        ));
    }
    Ok((s * 1000.0).round() as i64)
}

/// Whole seconds to milliseconds: negative times are refused (no format here defines them),
/// and so is anything past [`MAX_TRACE_SECONDS`], before it is scaled.
fn whole_seconds_to_ms(col: &str, s: i64) -> Result<i64, String> {
    if s < 0 {
        return Err(format!("{col}: {s} s is negative"));
    }
    if s > MAX_TRACE_SECONDS {
        return Err(format!(
            "{col}: {s} s overflows (at most {MAX_TRACE_SECONDS} s)"
        ));
    }
    Ok(s * 1000)
}

fn mib_to_bytes(col: &str, mib: i64) -> Result<i64, String> {
    mib.checked_mul(MIB)
        .ok_or_else(|| format!("{col}: {mib} MiB overflows"))
}

/// A count that must fit a u32 (`min_member`, `tp_size`): never truncated.
fn count_u32(col: &str, v: i64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{col}: {v} is out of range (0 to {})", u32::MAX))
}

/// How fractional-GPU pods (`gpu_milli` < 1000) are mapped onto an engine without GPU sharing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GpuShare {
    /// Each fractional pod takes a whole GPU (what Basalt does today). Overstates GPU demand.
    #[default]
    RoundUp,
    /// Fractional pods take `basalt.dev/gpu-share-milli` from a per-node pool of 1,000 per GPU;
    /// whole-GPU pods take both GPUs and 1,000 milli each. Pooling per node (not per device)
    /// can pack shares that no single GPU could hold.
    Pool,
}

impl GpuShare {
    pub fn name(self) -> &'static str {
        match self {
            GpuShare::RoundUp => "round-up",
            GpuShare::Pool => "pool",
        }
    }
}

const OPENB_POD_COLUMNS: [&str; 11] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// The openb pod list: one single-pod job per row. Times are seconds from the trace start.
/// A pod runs for `deletion_time − scheduled_time` (or `− creation_time` when the trace never
/// scheduled it); without a deletion time (the `multigpu*` lists) it never leaves.
pub fn read_openb_pods(path: &Source) -> Result<Workload, TraceError> {
    let table = Table::open(
        path,
        &OPENB_POD_COLUMNS,
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    )?;
    let mut jobs = Vec::new();
    let mut fractional = 0usize;
    table.rows(|r| {
        let name = r.str("name")?.to_string();
        let cpu = nonneg("cpu_milli", r.int("cpu_milli")?)?;
        let memory = mib_to_bytes("memory_mib", nonneg("memory_mib", r.int("memory_mib")?)?)?;
        let gpus = nonneg("num_gpu", r.int("num_gpu")?)?;
        let milli = nonneg("gpu_milli", r.int("gpu_milli")?)?;
        if gpus > 64 {
            return Err(format!("num_gpu: {gpus} is more than a node can hold"));
        }
        if milli > 1000 {
            return Err(format!("gpu_milli: {milli} is above 1000 (one whole GPU)"));
        }
        if gpus > 1 && milli != 1000 {
            return Err(format!(
                "gpu_milli: {milli} with num_gpu {gpus}; a share below 1000 needs num_gpu 1"
            ));
        }
        if gpus > 0 && milli == 0 {
            return Err("gpu_milli: 0 with a GPU requested".into());
        }
        if gpus == 1 && milli < 1000 {
            fractional += 1;
        }
        let models = r
            .opt("gpu_spec")
            .map(|s| {
                s.split('|')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let ms = |col: &str| {
            r.opt_int(col)?
                .map(|s| whole_seconds_to_ms(col, s).map(|ms| (s, ms)))
                .transpose()
        };
        let created = ms("creation_time")?.unwrap_or((0, 0));
        let scheduled = ms("scheduled_time")?;
        let duration = match ms("deletion_time")? {
            None => FOREVER,
            Some((d, d_ms)) => {
                let ((from, from_ms), from_col) = match scheduled {
                    Some(s) => (s, "scheduled_time"),
                    None => (created, "creation_time"),
                };
                if d < from {
                    return Err(format!("deletion_time: {d} is before {from_col} {from}"));
                }
                d_ms - from_ms
            }
        };
        jobs.push(TraceJob {
            name,
            queue: "default".into(),
            priority: 0,
            submit_ms: created.1,
            duration_ms: duration,
            pods: vec![PodShape {
                cpu_milli: cpu,
                memory,
                gpus: gpus as u32,
                gpu_milli: if gpus == 0 { 0 } else { milli as u32 },
                gpu_models: models,
            }],
            min_member: 1,
            tp_size: 0,
        });
        Ok(())
    })?;
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

/// The openb node list: `sn, cpu_milli, memory_mib, gpu, model`.
pub fn read_openb_nodes(path: &Source) -> Result<Cluster, TraceError> {
    let table = Table::open(
        path,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
        &["sn", "cpu_milli", "memory_mib", "gpu"],
    )?;
    let mut nodes = Vec::new();
    table.rows(|r| {
        let name = r.str("sn")?.to_string();
        let cpu = nonneg("cpu_milli", r.int("cpu_milli")?)?;
        let memory = mib_to_bytes("memory_mib", nonneg("memory_mib", r.int("memory_mib")?)?)?;
        let gpus = nonneg("gpu", r.int("gpu")?)?;
        if gpus > basalt_engine::MAX_GPUS_PER_NODE as i64 {
            return Err(format!(
                "gpu: {gpus}; at most {} per node are supported",
                basalt_engine::MAX_GPUS_PER_NODE
            ));
        }
        let mut labels = BTreeMap::from([(HOSTNAME_LABEL.to_string(), name.clone())]);
        if let Some(m) = r.opt("model") {
            labels.insert(GPU_MODEL_LABEL.to_string(), m.to_string());
        }
        nodes.push(node_spec(name, labels, cpu, memory, gpus));
        Ok(())
    })?;
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

/// Columns of the native CSV format: one row per role (a set of identical pods) of a job;
/// rows with the same `job` form one job and must agree on its job-level fields.
pub const NATIVE_COLUMNS: [&str; 13] = [
    "job",
    "queue",
    "priority",
    "submit_s",
    "duration_s",
    "pods",
    "cpu",
    "memory",
    "gpus",
    "gpu_milli",
    "gpu_models",
    "min_member",
    "tp_size",
];

fn quantity(col: &str, resource: &str, s: &str) -> Result<i64, String> {
    basalt_crds::quantity::parse_for_resource(resource, s).map_err(|e| format!("{col}: {e}"))
}

/// Basalt's native CSV workload (see the README for the format).
pub fn read_native_csv(path: &Source) -> Result<Workload, TraceError> {
    let table = Table::open(
        path,
        &NATIVE_COLUMNS,
        &["job", "submit_s", "duration_s", "cpu", "memory"],
    )?;
    let mut jobs: Vec<TraceJob> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    table.rows(|r| {
        let name = r.str("job")?.to_string();
        let queue = r.opt("queue").unwrap_or("default").to_string();
        let priority = r.opt_int("priority")?.unwrap_or(0);
        let priority = i32::try_from(priority).map_err(|_| format!("priority: {priority} is out of range"))?;
        let submit = seconds_to_ms("submit_s", r.num("submit_s")?)?;
        let duration = seconds_to_ms("duration_s", r.num("duration_s")?)?;
        let count = r.opt_int("pods")?.unwrap_or(1);
        if !(1..=MAX_PODS_PER_JOB).contains(&count) {
            return Err(format!("pods: {count} is out of range (1..{MAX_PODS_PER_JOB})"));
        }
        let shape = native_pod(
            r.str("cpu")?,
            r.str("memory")?,
            r.opt_int("gpus")?.unwrap_or(0),
            r.opt_int("gpu_milli")?.unwrap_or(1000),
            r.opt("gpu_models").unwrap_or(""),
        )?;
        let min_member = count_u32("min_member", r.opt_int("min_member")?.unwrap_or(0))?;
        let tp_size = count_u32("tp_size", r.opt_int("tp_size")?.unwrap_or(0))?;
        match by_name.get(&name) {
            Some(&i) => {
                let j = &mut jobs[i];
                if j.queue != queue || j.priority != priority || j.submit_ms != submit || j.duration_ms != duration || j.tp_size != tp_size {
                    return Err(format!("job {name}: queue, priority, submit_s, duration_s and tp_size must match its earlier rows"));
                }
                let total = j.pods.len() as i64 + count;
                if total > MAX_PODS_PER_JOB {
                    return Err(format!(
                        "pods: job {name} has {total} pods over its rows, more than {MAX_PODS_PER_JOB}"
                    ));
                }
                let pods = vec![shape; count as usize];
                if min_member != 0 {
                    j.min_member = min_member;
                }
                j.pods.extend(pods);
            }
            None => {
                by_name.insert(name.clone(), jobs.len());
                jobs.push(TraceJob {
                    name,
                    queue,
                    priority,
                    submit_ms: submit,
                    duration_ms: duration,
                    pods: vec![shape; count as usize],
                    min_member,
                    tp_size,
                });
            }
        }
        Ok(())
    })?;
    let mut w = Workload {
        source: format!("native CSV {}", path.label()),
        jobs,
        queues: vec![],
        notes: vec![],
    };
    check_min_member(&w, &path.label().to_string())?;
    w.complete_queues();
    Ok(w)
}

fn check_min_member(w: &Workload, file: &str) -> Result<(), TraceError> {
    for j in &w.jobs {
        if j.min_member as usize > j.pods.len() {
            return Err(TraceError::File {
                file: file.to_string(),
                message: format!(
                    "job {}: min_member {} is more than its {} pods",
                    j.name,
                    j.min_member,
                    j.pods.len()
                ),
            });
        }
    }
    Ok(())
}

fn native_pod(
    cpu: &str,
    memory: &str,
    gpus: i64,
    milli: i64,
    models: &str,
) -> Result<PodShape, String> {
    let cpu = quantity("cpu", "cpu", cpu)?;
    let memory = quantity("memory", "memory", memory)?;
    let gpus = nonneg("gpus", gpus)?;
    if gpus > basalt_engine::MAX_GPUS_PER_NODE as i64 {
        return Err(format!("gpus: {gpus} is more than a node can hold"));
    }
    if !(1..=1000).contains(&milli) {
        return Err(format!("gpu_milli: {milli} is out of range (1..1000)"));
    }
    if gpus > 1 && milli != 1000 {
        return Err(format!(
            "gpu_milli: {milli} with gpus {gpus}; a share below 1000 needs gpus 1"
        ));
    }
    Ok(PodShape {
        cpu_milli: cpu,
        memory,
        gpus: gpus as u32,
        gpu_milli: if gpus == 0 { 0 } else { milli as u32 },
        gpu_models: models
            .split('|')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NativeFile {
    #[serde(default)]
    queues: Vec<QueueDef>,
    jobs: Vec<NativeJob>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NativeJob {
    name: String,
    #[serde(default = "default_queue")]
    queue: String,
    #[serde(default)]
    priority: i32,
    /// Seconds.
    submit: f64,
    duration: f64,
    #[serde(default)]
    min_member: u32,
    #[serde(default)]
    tp_size: u32,
    pods: Vec<NativeRole>,
}

fn default_queue() -> String {
    "default".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NativeRole {
    #[serde(default = "one")]
    count: i64,
    cpu: String,
    memory: String,
    #[serde(default)]
    gpus: i64,
    #[serde(default = "thousand")]
    gpu_milli: i64,
    #[serde(default)]
    gpu_models: Vec<String>,
}

fn one() -> i64 {
    1
}
fn thousand() -> i64 {
    1000
}

/// Basalt's native JSON workload: `{"queues": [{"name", "weight"}], "jobs": [{"name", "queue",
/// "priority", "submit", "duration", "minMember", "tpSize", "pods": [{"count", "cpu", "memory",
/// "gpus", "gpuMilli", "gpuModels"}]}]}` (times in seconds, quantities as Kubernetes writes them).
pub fn read_native_json(path: &Source) -> Result<Workload, TraceError> {
    let file = path.label();
    let text = match path {
        Source::File(p) => std::fs::read_to_string(p).map_err(|e| TraceError::Io {
            file: file.clone(),
            message: e.to_string(),
        })?,
        Source::Text { text, .. } => text.to_string(),
    };
    let parsed: NativeFile = serde_json::from_str(&text).map_err(|e| TraceError::Row {
        file: file.clone(),
        line: e.line() as u64,
        message: e.to_string(),
    })?;
    let field = |message: String| TraceError::File {
        file: file.clone(),
        message,
    };
    let mut queue_at: HashMap<&str, usize> = HashMap::new();
    for (i, q) in parsed.queues.iter().enumerate() {
        if let Some(first) = queue_at.insert(&q.name, i) {
            return Err(field(format!(
                "queues[{i}].name: duplicate queue {:?} (first at queues[{first}])",
                q.name
            )));
        }
        if q.weight == 0 {
            return Err(field(format!(
                "queues[{i}].weight: queue {:?}: must be at least 1",
                q.name
            )));
        }
    }
    let mut job_at: HashMap<&str, usize> = HashMap::new();
    for (i, j) in parsed.jobs.iter().enumerate() {
        if let Some(first) = job_at.insert(&j.name, i) {
            return Err(field(format!(
                "jobs[{i}].name: duplicate job {:?} (first at jobs[{first}])",
                j.name
            )));
        }
    }
    let mut jobs = Vec::new();
    for (i, j) in parsed.jobs.iter().enumerate() {
        let at = |m: String| field(format!("jobs[{i}] ({}): {m}", j.name));
        // Checked before anything is sized by them.
        let mut total = 0i64;
        for (k, role) in j.pods.iter().enumerate() {
            if !(1..=MAX_PODS_PER_JOB).contains(&role.count) {
                return Err(at(format!(
                    "pods[{k}].count: {} is out of range (1..{MAX_PODS_PER_JOB})",
                    role.count
                )));
            }
            total += role.count;
            if total > MAX_PODS_PER_JOB {
                return Err(at(format!(
                    "pods[{k}].count: {total} pods over its roles, more than {MAX_PODS_PER_JOB}"
                )));
            }
        }
        let mut pods = Vec::new();
        for (k, role) in j.pods.iter().enumerate() {
            let shape = native_pod(
                &role.cpu,
                &role.memory,
                role.gpus,
                role.gpu_milli,
                &role.gpu_models.join("|"),
            )
            .map_err(|m| at(format!("pods[{k}].{m}")))?;
            pods.extend(std::iter::repeat_n(shape, role.count as usize));
        }
        if pods.is_empty() {
            return Err(at("pods: must not be empty".into()));
        }
        jobs.push(TraceJob {
            name: j.name.clone(),
            queue: j.queue.clone(),
            priority: j.priority,
            submit_ms: seconds_to_ms("submit", j.submit).map_err(at)?,
            duration_ms: seconds_to_ms("duration", j.duration).map_err(at)?,
            pods,
            min_member: j.min_member,
            tp_size: j.tp_size,
        });
    }
    let mut w = Workload {
        source: format!("native JSON {}", path.label()),
        jobs,
        queues: parsed.queues,
        notes: vec![],
    };
    check_min_member(&w, &file)?;
    w.complete_queues();
    Ok(w)
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

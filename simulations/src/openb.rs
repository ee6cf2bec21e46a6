//! The Alibaba 2023 "openb" node and pod lists (the traces of the FGD paper), read in one
//! place for the `fgd` experiment and the replay. Columns are found by header name, in any
//! order; a column openb does not have is refused (a misspelt `gpu_spec` would otherwise be
//! silently ignored). Every value is range-checked here, and every error names the file, the
//! line and the column.
//!
//! Node list: `sn, cpu_milli, memory_mib, gpu[, model]`. Pod list: `name, cpu_milli,
//! memory_mib, num_gpu, gpu_milli`, optionally `gpu_spec` (the `multigpu*` lists lack it:
//! any model), `qos`, `pod_phase` and the times `creation_time, deletion_time,
//! scheduled_time` (seconds from the trace start).

use std::io::Read;

use thiserror::Error;

/// At most this many GPUs per node or pod (per-GPU state lives in small arrays).
pub const MAX_GPUS: u32 = 64;
/// At most 2^40 milli-CPUs (about a billion cores) and 2^40 MiB (an exbibyte) per row, far
/// beyond any node: MiB × 2^20 and the fgd scores' products (50 · cpuFree · cpu in i128) then
/// fit with room for sums.
pub const MAX_CPU_MILLI: i64 = 1 << 40;
pub const MAX_MEMORY_MIB: i64 = 1 << 40;
/// One GPU's share, in milli.
pub const GPU_MILLI: u32 = 1000;
/// The latest time a list may give, in seconds (about 31,700 years): in milliseconds a time
/// plus a duration still fits an i64 with room to spare.
pub const MAX_SECONDS: i64 = 1_000_000_000_000;

pub const NODE_COLUMNS: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];
pub const POD_COLUMNS: [&str; 11] = [
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

#[derive(Debug, Error)]
pub enum OpenbError {
    #[error("{file}: cannot read: {message}")]
    Io { file: String, message: String },
    #[error("{file}: missing column {column:?}")]
    MissingColumn { file: String, column: String },
    #[error("{file}: unknown column {column:?} (known: {known})")]
    UnknownColumn {
        file: String,
        column: String,
        known: String,
    },
    /// A row the CSV reader refused as a whole (wrong field count, bad UTF-8).
    #[error("{file}: line {line}: {message}")]
    Row {
        file: String,
        line: u64,
        message: String,
    },
    #[error("{file}: line {line}: {column}: {message}")]
    Cell {
        file: String,
        line: u64,
        column: &'static str,
        message: String,
    },
    #[error("{file}: no rows")]
    Empty { file: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: u32,
    /// Empty when the list gives none.
    pub model: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: u32,
    /// Share of each of its GPUs, in milli (1000 = the whole GPU; 0 for a pod without GPUs).
    pub gpu_milli: u32,
    /// Allowed GPU models; empty = any.
    pub gpu_spec: Vec<String>,
    /// Seconds from the trace start; `None` when the list leaves them out.
    pub creation_time: Option<i64>,
    pub scheduled_time: Option<i64>,
    /// Not before the scheduled time (or the creation time when never scheduled).
    pub deletion_time: Option<i64>,
}

impl Pod {
    /// Total GPU request in milli (count × per-GPU share).
    pub fn gpu_request(&self) -> u64 {
        self.num_gpu as u64 * self.gpu_milli as u64
    }
}

/// Reads a node list; `file` names it in errors.
pub fn read_nodes(file: &str, input: impl Read) -> Result<Vec<Node>, OpenbError> {
    let mut table = Table::open(file, input, &NODE_COLUMNS, &NODE_COLUMNS[..4])?;
    let mut nodes = Vec::new();
    while let Some(row) = table.next_row()? {
        nodes.push(Node {
            name: row.name("sn")?,
            cpu_milli: row.int("cpu_milli", "milli-CPU", MAX_CPU_MILLI)?,
            memory_mib: row.int("memory_mib", "MiB", MAX_MEMORY_MIB)?,
            gpus: row.int("gpu", "GPUs", MAX_GPUS as i64)? as u32,
            model: row.text("model").to_string(),
        });
    }
    table.non_empty(nodes)
}

/// Reads a pod list; `file` names it in errors.
pub fn read_pods(file: &str, input: impl Read) -> Result<Vec<Pod>, OpenbError> {
    let mut table = Table::open(file, input, &POD_COLUMNS, &POD_COLUMNS[..5])?;
    let mut pods = Vec::new();
    while let Some(row) = table.next_row()? {
        let name = row.name("name")?;
        let num_gpu = row.int("num_gpu", "GPUs", MAX_GPUS as i64)? as u32;
        let gpu_milli = row.int("gpu_milli", "milli-GPU", GPU_MILLI as i64)? as u32;
        let share = |message: String| Err(row.error("gpu_milli", message));
        if num_gpu == 0 && gpu_milli != 0 {
            return share(format!("{gpu_milli} for a pod with num_gpu 0"));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return share(format!("0 for a pod with num_gpu {num_gpu}"));
        }
        if num_gpu > 1 && gpu_milli != GPU_MILLI {
            return share(format!(
                "{gpu_milli} with num_gpu {num_gpu}; a share below 1000 needs num_gpu 1"
            ));
        }
        let gpu_spec = row
            .text("gpu_spec")
            .split('|')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let creation_time = row.opt_int("creation_time", "s", MAX_SECONDS)?;
        let scheduled_time = row.opt_int("scheduled_time", "s", MAX_SECONDS)?;
        let deletion_time = row.opt_int("deletion_time", "s", MAX_SECONDS)?;
        if let Some(deleted) = deletion_time {
            let (from, from_col) = match scheduled_time {
                Some(s) => (s, "scheduled_time"),
                None => (creation_time.unwrap_or(0), "creation_time"),
            };
            if deleted < from {
                return Err(row.error(
                    "deletion_time",
                    format!("{deleted} is before {from_col} {from}"),
                ));
            }
        }
        pods.push(Pod {
            name,
            cpu_milli: row.int("cpu_milli", "milli-CPU", MAX_CPU_MILLI)?,
            memory_mib: row.int("memory_mib", "MiB", MAX_MEMORY_MIB)?,
            num_gpu,
            gpu_milli,
            gpu_spec,
            creation_time,
            scheduled_time,
            deletion_time,
        });
    }
    table.non_empty(pods)
}

/// A CSV list with its header checked against the columns openb has.
struct Table<'k, R> {
    file: String,
    reader: csv::Reader<R>,
    known: &'k [&'static str],
    /// Position of each known column in the file, by its index in `known`.
    index: Vec<Option<usize>>,
    record: csv::StringRecord,
}

impl<'k, R: Read> Table<'k, R> {
    fn open(
        file: &str,
        input: R,
        known: &'k [&'static str],
        required: &[&str],
    ) -> Result<Self, OpenbError> {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(input);
        let headers = reader.headers().map_err(|e| record_error(file, e))?.clone();
        if headers.iter().all(str::is_empty) {
            return Err(OpenbError::Empty { file: file.into() });
        }
        let mut index = vec![None; known.len()];
        for (i, h) in headers.iter().enumerate() {
            let Some(k) = known.iter().position(|c| *c == h) else {
                return Err(OpenbError::UnknownColumn {
                    file: file.into(),
                    column: h.to_string(),
                    known: known.join(", "),
                });
            };
            index[k] = Some(i);
        }
        if let Some(missing) = required.iter().find(|r| !headers.iter().any(|h| h == **r)) {
            return Err(OpenbError::MissingColumn {
                file: file.into(),
                column: missing.to_string(),
            });
        }
        Ok(Table {
            file: file.into(),
            reader,
            known,
            index,
            record: csv::StringRecord::new(),
        })
    }

    fn next_row(&mut self) -> Result<Option<Row<'_>>, OpenbError> {
        match self.reader.read_record(&mut self.record) {
            Ok(false) => Ok(None),
            Ok(true) => Ok(Some(Row {
                file: &self.file,
                line: self.record.position().map_or(0, |p| p.line()),
                known: self.known,
                index: &self.index,
                record: &self.record,
            })),
            Err(e) => Err(record_error(&self.file, e)),
        }
    }

    fn non_empty<T>(&self, rows: Vec<T>) -> Result<Vec<T>, OpenbError> {
        if rows.is_empty() {
            return Err(OpenbError::Empty {
                file: self.file.clone(),
            });
        }
        Ok(rows)
    }
}

fn record_error(file: &str, e: csv::Error) -> OpenbError {
    let line = e.position().map_or(0, |p| p.line());
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} fields, found {len}"),
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
        _ => e.to_string(),
    };
    OpenbError::Row {
        file: file.into(),
        line,
        message,
    }
}

struct Row<'a> {
    file: &'a str,
    line: u64,
    known: &'a [&'static str],
    index: &'a [Option<usize>],
    record: &'a csv::StringRecord,
}

impl Row<'_> {
    fn error(&self, column: &'static str, message: String) -> OpenbError {
        OpenbError::Cell {
            file: self.file.into(),
            line: self.line,
            column,
            message,
        }
    }

    /// The cell, or "" when the column is absent.
    fn text(&self, column: &str) -> &str {
        self.known
            .iter()
            .position(|c| *c == column)
            .and_then(|k| self.index[k])
            .and_then(|i| self.record.get(i))
            .unwrap_or("")
    }

    fn name(&self, column: &'static str) -> Result<String, OpenbError> {
        match self.text(column) {
            "" => Err(self.error(column, "empty name".into())),
            name => Ok(name.to_string()),
        }
    }

    /// A whole number from 0 to `max`, or `None` for an empty cell.
    fn opt_int(
        &self,
        column: &'static str,
        unit: &str,
        max: i64,
    ) -> Result<Option<i64>, OpenbError> {
        let raw = self.text(column);
        if raw.is_empty() {
            return Ok(None);
        }
        let v: i64 = raw
            .parse()
            .map_err(|_| self.error(column, format!("{raw:?} is not a whole number")))?;
        if v < 0 {
            return Err(self.error(column, format!("{v} {unit} is negative")));
        }
        if v > max {
            return Err(self.error(
                column,
                format!("{v} {unit} overflows (at most {max} {unit})"),
            ));
        }
        Ok(Some(v))
    }

    fn int(&self, column: &'static str, unit: &str, max: i64) -> Result<i64, OpenbError> {
        self.opt_int(column, unit, max)?
            .ok_or_else(|| self.error(column, "empty".into()))
    }
}

#[cfg(test)]
mod tests;

//! Readers for the Alibaba 2023 "openb" node and pod lists.
//!
//! Node list columns: `sn, cpu_milli, memory_mib, gpu, model`. Pod list columns: `name, cpu_milli,
//! memory_mib, num_gpu, gpu_milli`, optionally `gpu_spec` (the `multigpu*` lists lack it; absent
//! means any model) and further columns that this experiment does not read (qos, phase, times).
//! Columns are found by header name, in any order.

use super::FgdError;

/// At most this many GPUs per node (per-GPU state lives in small arrays).
pub const MAX_GPUS: u32 = 64;
/// At most 2^40 milli-CPUs (about a billion cores) and 2^40 MiB (an exbibyte) per row, far
/// beyond any node: MiB × 2^20 and the scores' products (50 · cpuFree · cpu in i128) then fit
/// with room for sums, where i64::MAX / 4 overflowed both.
pub const MAX_CPU_MILLI: i64 = 1 << 40;
pub const MAX_MEMORY_MIB: i64 = 1 << 40;
/// One GPU's share, in milli.
pub const GPU_MILLI: u32 = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: u32,
    /// Empty when the list gives none.
    pub model: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: u32,
    /// Share of each of its GPUs, in milli (1000 = the whole GPU).
    pub gpu_milli: u32,
    /// Allowed GPU models; empty = any.
    pub gpu_spec: Vec<String>,
}

impl PodSpec {
    /// Total GPU request in milli (count × per-GPU share).
    pub fn gpu_request(&self) -> u64 {
        self.num_gpu as u64 * self.gpu_milli as u64
    }
}

/// Header positions of the wanted columns; a missing required column is an error naming it.
fn columns(
    file: &str,
    headers: &csv::StringRecord,
    required: &[&str],
    optional: &[&str],
) -> Result<Vec<Option<usize>>, FgdError> {
    let find = |name: &str| headers.iter().position(|h| h.trim() == name);
    let mut out = Vec::new();
    for &name in required {
        match find(name) {
            Some(i) => out.push(Some(i)),
            None => {
                return Err(FgdError::MissingColumn {
                    file: file.to_string(),
                    column: name.to_string(),
                })
            }
        }
    }
    out.extend(optional.iter().map(|n| find(n)));
    Ok(out)
}

struct Row<'a> {
    file: &'a str,
    line: u64,
    record: &'a csv::StringRecord,
}

impl Row<'_> {
    fn malformed(&self, message: String) -> FgdError {
        FgdError::Malformed {
            file: self.file.to_string(),
            line: self.line,
            message,
        }
    }

    fn text(&self, col: usize) -> &str {
        self.record.get(col).unwrap_or("").trim()
    }

    /// A non-negative integer at most `max`.
    fn int(&self, col: usize, name: &str, max: i64) -> Result<i64, FgdError> {
        let raw = self.text(col);
        let v: i64 = raw.parse().map_err(|_| {
            self.malformed(format!(
                "column `{name}`: expected a whole number, got {raw:?}"
            ))
        })?;
        if !(0..=max).contains(&v) {
            return Err(
                self.malformed(format!("column `{name}`: {v} is out of range (0 to {max})"))
            );
        }
        Ok(v)
    }
}

fn reader(text: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes())
}

fn record_error(file: &str, e: csv::Error) -> FgdError {
    let line = e.position().map(|p| p.line()).unwrap_or(0);
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} fields, found {len}"),
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
        _ => e.to_string(),
    };
    FgdError::Malformed {
        file: file.to_string(),
        line,
        message,
    }
}

fn headers(file: &str, rdr: &mut csv::Reader<&[u8]>) -> Result<csv::StringRecord, FgdError> {
    let h = rdr.headers().map_err(|e| record_error(file, e))?.clone();
    if h.is_empty() || (h.len() == 1 && h[0].trim().is_empty()) {
        return Err(FgdError::Empty {
            file: file.to_string(),
        });
    }
    Ok(h)
}

/// Reads a node list; `file` names it in errors.
pub fn read_nodes(file: &str, text: &str) -> Result<Vec<NodeSpec>, FgdError> {
    let mut rdr = reader(text);
    let h = headers(file, &mut rdr)?;
    let cols = columns(
        file,
        &h,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
        &[],
    )?;
    let c = |i: usize| cols[i].expect("required column");
    let mut nodes = Vec::new();
    for rec in rdr.records() {
        let record = rec.map_err(|e| record_error(file, e))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let row = Row {
            file,
            line,
            record: &record,
        };
        let name = row.text(c(0)).to_string();
        if name.is_empty() {
            return Err(row.malformed("column `sn`: empty node name".to_string()));
        }
        nodes.push(NodeSpec {
            name,
            cpu_milli: row.int(c(1), "cpu_milli", MAX_CPU_MILLI)?,
            memory_mib: row.int(c(2), "memory_mib", MAX_MEMORY_MIB)?,
            gpus: row.int(c(3), "gpu", MAX_GPUS as i64)? as u32,
            model: row.text(c(4)).to_string(),
        });
    }
    if nodes.is_empty() {
        return Err(FgdError::Empty {
            file: file.to_string(),
        });
    }
    Ok(nodes)
}

/// Reads a pod list; `file` names it in errors.
pub fn read_pods(file: &str, text: &str) -> Result<Vec<PodSpec>, FgdError> {
    let mut rdr = reader(text);
    let h = headers(file, &mut rdr)?;
    let cols = columns(
        file,
        &h,
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
        &["gpu_spec"],
    )?;
    let c = |i: usize| cols[i].expect("required column");
    let mut pods = Vec::new();
    for rec in rdr.records() {
        let record = rec.map_err(|e| record_error(file, e))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let row = Row {
            file,
            line,
            record: &record,
        };
        let name = row.text(c(0)).to_string();
        if name.is_empty() {
            return Err(row.malformed("column `name`: empty pod name".to_string()));
        }
        let num_gpu = row.int(c(3), "num_gpu", MAX_GPUS as i64)? as u32;
        let gpu_milli = row.int(c(4), "gpu_milli", GPU_MILLI as i64)? as u32;
        if num_gpu == 0 && gpu_milli != 0 {
            return Err(row.malformed(format!(
                "column `gpu_milli`: {gpu_milli} for a pod with num_gpu 0"
            )));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(row.malformed(format!(
                "column `gpu_milli`: 0 for a pod with num_gpu {num_gpu}"
            )));
        }
        let gpu_spec = match cols[5] {
            Some(col) => row
                .text(col)
                .split('|')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            None => Vec::new(),
        };
        pods.push(PodSpec {
            name,
            cpu_milli: row.int(c(1), "cpu_milli", MAX_CPU_MILLI)?,
            memory_mib: row.int(c(2), "memory_mib", MAX_MEMORY_MIB)?,
            num_gpu,
            gpu_milli,
            gpu_spec,
        });
    }
    if pods.is_empty() {
        return Err(FgdError::Empty {
            file: file.to_string(),
        });
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nodes_and_pods_by_header_name() {
        let nodes = read_nodes(
            "n.csv",
            "model,sn,gpu,cpu_milli,memory_mib\nT4,a,2,96000,1024\n,b,0,32000,2048\n",
        )
        .unwrap();
        assert_eq!(nodes[0].name, "a");
        assert_eq!(nodes[0].gpus, 2);
        assert_eq!(nodes[0].model, "T4");
        assert_eq!(nodes[1].model, "");
        let pods = read_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n\
             p0,1000,10,1,500,V100M16|V100M32,LS\np1,2000,10,2,1000,,BE\n",
        )
        .unwrap();
        assert_eq!(pods[0].gpu_spec, vec!["V100M16", "V100M32"]);
        assert_eq!(pods[0].gpu_request(), 500);
        assert!(pods[1].gpu_spec.is_empty());
        assert_eq!(pods[1].gpu_request(), 2000);
    }

    #[test]
    fn gpu_spec_column_is_optional() {
        let pods = read_pods(
            "m.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n",
        )
        .unwrap();
        assert!(pods[0].gpu_spec.is_empty());
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = read_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\nq,x,1,1,1000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("p.csv:3") && e.contains("cpu_milli"), "{e}");
        let e = read_pods("p.csv", "name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.csv") && e.contains("`num_gpu`"), "{e}");
        let e = read_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1500\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("p.csv:2") && e.contains("gpu_milli"), "{e}");
        let e = read_nodes("n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("n.csv:2"), "{e}");
        let e = read_nodes("n.csv", "sn,cpu_milli,memory_mib,gpu,model\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("n.csv") && e.contains("no rows"), "{e}");
    }
}

//! Output: aligned columns as kubectl prints them, or the same rows as JSON or YAML.

use std::fmt::Write as _;

use serde::Serialize;

use crate::Format;

/// Columns padded to their widest cell, three spaces apart, the last unpadded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}   ", w = width[i]);
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `value` as JSON or YAML (`table` for the table format, which the caller gives).
pub fn structured(format: Format, value: &impl Serialize, table: String) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => table,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
        Format::Yaml => serde_yaml::to_string(value)?,
    })
}

//! Server-side printing: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (what `kubectl
//! get` asks for) answers a `meta.k8s.io` Table with the real server's columns for pods, events,
//! nodes, namespaces and ConfigMaps, a CRD's `additionalPrinterColumns` for its kinds, and Name
//! and Age for the rest.

use axum::http::{header, HeaderMap};
use serde_json::{json, Value};

use crate::resources::{PrinterColumn, ResourceInfo};

/// What the client asked for: the Table's version and what each row carries as its object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TableRequest {
    version: &'static str,
    include: Include,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Include {
    None,
    Metadata,
    Object,
}

/// The Table the `Accept` header asks for, if any (its first `as=Table` entry wins, as the
/// client lists its preference first).
pub fn requested(headers: &HeaderMap, include_object: Option<&str>) -> Option<TableRequest> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    let version = accept.split(',').find_map(|entry| {
        let params: Vec<&str> = entry.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if !has("as=Table") || !has("g=meta.k8s.io") {
            return None;
        }
        match () {
            _ if has("v=v1") => Some("v1"),
            _ if has("v=v1beta1") => Some("v1beta1"),
            _ => None,
        }
    })?;
    let include = match include_object {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    };
    Some(TableRequest { version, include })
}

/// A Table of `items` (objects of `info` in `version`).
fn table(
    req: TableRequest,
    info: &ResourceInfo,
    version: &str,
    items: &[&Value],
    list_meta: Value,
) -> Value {
    let columns = columns(info, version);
    let definitions: Vec<Value> = columns.iter().map(|c| c.definition()).collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells: Vec<Value> = columns.iter().map(|c| c.cell(o)).collect();
            let mut row = json!({ "cells": cells });
            if let Some(obj) = row_object(req.include, o) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{}", req.version),
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A list page as a Table (`kubectl get pods`).
pub fn list_table(
    req: TableRequest,
    info: &ResourceInfo,
    version: &str,
    page: &crate::store::ListPage,
) -> Value {
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    let items: Vec<&Value> = page.items.iter().map(|i| &**i).collect();
    table(req, info, version, &items, meta)
}

/// One object as a one-row Table (`kubectl get pod web`, each event of `kubectl get -w`).
pub fn object_table(req: TableRequest, info: &ResourceInfo, version: &str, o: &Value) -> Value {
    let meta = json!({"resourceVersion": str_at(o, "/metadata/resourceVersion")});
    table(req, info, version, &[o], meta)
}

fn row_object(include: Include, o: &Value) -> Option<Value> {
    match include {
        Include::None => None,
        Include::Object => Some(o.clone()),
        Include::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
        })),
    }
}

/// How a column gets its cell.
pub(crate) enum Cell {
    Name,
    /// Time since `metadata.creationTimestamp`, as kubectl prints it (`5m`).
    Age,
    /// A CRD column: a JSONPath, typed by the column.
    Path(String),
    /// A built-in printer's rule.
    Rule(fn(&Value) -> Value),
}

pub(crate) struct Column {
    name: String,
    type_: String,
    format: String,
    description: String,
    priority: i64,
    cell: Cell,
}

impl Column {
    pub(crate) fn new(name: &str, type_: &str, priority: i64, cell: Cell) -> Self {
        Column {
            name: name.into(),
            type_: type_.into(),
            // Marks the column kubectl takes the object's name from.
            format: if matches!(cell, Cell::Name) {
                "name"
            } else {
                ""
            }
            .into(),
            description: String::new(),
            priority,
            cell,
        }
    }

    pub(crate) fn rule(name: &str, priority: i64, rule: fn(&Value) -> Value) -> Self {
        Column::new(name, "string", priority, Cell::Rule(rule))
    }

    /// Shown with `-o wide` only.
    pub(crate) fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    fn definition(&self) -> Value {
        json!({
            "name": self.name, "type": self.type_, "format": self.format,
            "description": self.description, "priority": self.priority,
        })
    }

    fn cell(&self, o: &Value) -> Value {
        match &self.cell {
            Cell::Name => json!(str_at(o, "/metadata/name")),
            Cell::Age => json!(age(str_at(o, "/metadata/creationTimestamp"))),
            Cell::Path(path) => typed_cell(&self.type_, jsonpath(o, path)),
            Cell::Rule(rule) => rule(o),
        }
    }
}

pub(crate) fn name_column() -> Column {
    Column::new("Name", "string", 0, Cell::Name)
}

pub(crate) fn age_column() -> Column {
    Column::new("Age", "string", 0, Cell::Age)
}

fn columns(info: &ResourceInfo, version: &str) -> Vec<Column> {
    if info.custom {
        return crd_columns(info, version);
    }
    let mut cols = vec![name_column()];
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => cols.extend(crate::printers::pod_columns()),
        ("", "events") => cols = crate::printers::event_columns(),
        ("", "nodes") => cols.extend(crate::printers::node_columns()),
        ("", "namespaces") => {
            cols.push(Column::rule("Status", 0, crate::printers::namespace_status));
            cols.push(age_column());
        }
        ("", "configmaps") => {
            cols.push(Column::new(
                "Data",
                "integer",
                0,
                Cell::Rule(crate::printers::config_map_data),
            ));
            cols.push(age_column());
        }
        _ => cols.push(age_column()),
    }
    cols
}

/// Name, then the version's `additionalPrinterColumns`; Age when it declares none (as the API
/// server defaults them).
fn crd_columns(info: &ResourceInfo, version: &str) -> Vec<Column> {
    let declared = info
        .printer_columns
        .iter()
        .find(|(v, _)| v == version)
        .map(|(_, c)| c.as_slice())
        .unwrap_or_default();
    if declared.is_empty() {
        return vec![name_column(), age_column()];
    }
    let mut cols = vec![name_column()];
    cols.extend(declared.iter().map(crd_column));
    cols
}

fn crd_column(c: &PrinterColumn) -> Column {
    let mut col = Column::new(
        &c.name,
        &c.type_,
        c.priority,
        Cell::Path(c.json_path.clone()),
    );
    col.format = c.format.clone();
    col.description = c.description.clone();
    col
}

/// A CRD cell as the API server converts it: strings printed, numbers and booleans kept when
/// of the column's type, dates as an age; missing values are null (kubectl prints nothing).
fn typed_cell(type_: &str, v: Option<&Value>) -> Value {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match (type_, v) {
        ("string", Value::String(s)) => json!(s),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => v.clone(),
        ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => v.clone(),
        ("date", Value::String(s)) => json!(age(s)),
        _ => Value::Null,
    }
}

/// The first value `path` selects in `o`: `.a.b`, `[N]`, and `[?(@.k=="v")]` filters (what
/// Basalt's CRDs use); anything else selects nothing.
pub fn jsonpath<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = o;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            cur = match inner.strip_prefix("?(@").and_then(|f| f.strip_suffix(')')) {
                Some(filter) => filter_first(cur, filter)?,
                None => cur.get(inner.parse::<usize>().ok()?)?,
            };
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(cur)
}

/// The first element of array `v` whose `.k.l == "value"` (the filter without its `?(@`).
fn filter_first<'a>(v: &'a Value, filter: &str) -> Option<&'a Value> {
    let (path, want) = filter.split_once("==")?;
    let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
    v.as_array()?
        .iter()
        .find(|item| match jsonpath(item, path.trim()) {
            Some(Value::String(s)) => s == want,
            // A number or boolean: `[?(@.count==3)]`.
            Some(other) => serde_json::from_str::<Value>(want).is_ok_and(|w| &w == other),
            None => false,
        })
}

pub(crate) fn str_at<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Time since an RFC 3339 timestamp as kubectl prints ages (`45s`, `3m20s`, `5h`, `2d`);
/// `<unknown>` when it cannot be read.
pub(crate) fn age(timestamp: &str) -> String {
    match unix_seconds(timestamp) {
        Some(t) => human_duration(now_seconds().saturating_sub(t)),
        None => "<unknown>".into(),
    }
}

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2026-12-06T02:27:09Z` (fractions allowed, UTC only: what this server writes) to seconds.
fn unix_seconds(t: &str) -> Option<i64> {
    let t = t.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let num = |s: &str| s.parse::<i64>().ok();
    let mut d = date.splitn(3, '-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = time.splitn(3, ':');
    let (h, min) = (num(c.next()?)?, num(c.next()?)?);
    let sec = num(c.next()?.split('.').next()?)?;
    // Howard Hinnant's days-from-civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + sec)
}

/// kubectl's `duration.HumanDuration`.
fn human_duration(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    let pair = |a: i64, ua: &str, b: i64, ub: &str| match b {
        0 => format!("{a}{ua}"),
        b => format!("{a}{ua}{b}{ub}"),
    };
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => pair(m, "m", secs % 60, "s"),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => pair(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 => pair(d, "d", h % 24, "h"),
        _ if d < 730 => format!("{d}d"),
        _ if d < 2920 => pair(d / 365, "y", d % 365, "d"),
        _ => format!("{}y", d / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(3600 * 5), "5h");
        assert_eq!(human_duration(86_400 * 3), "3d");
        assert_eq!(unix_seconds("1970-01-02T00:00:01Z"), Some(86_401));
        assert_eq!(unix_seconds("2000-03-01T00:00:00.5Z"), Some(951_868_800));
        assert_eq!(age("yesterday"), "<unknown>");
    }

    #[test]
    fn jsonpath_subset() {
        let o = json!({"status": {"conditions": [
            {"type": "Ready", "reason": "a"}, {"type": "Unschedulable", "reason": "b"}]}});
        let r = jsonpath(
            &o,
            r#".status.conditions[?(@.type=="Unschedulable")].reason"#,
        );
        assert_eq!(r, Some(&json!("b")));
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            Some(&json!("Ready"))
        );
        assert_eq!(jsonpath(&o, ".spec.x"), None);
    }
}

//! Watch streams: newline-delimited `WatchEvent`s from the store's watcher, bookmarks, the
//! `timeoutSeconds` bound, and Tables for `kubectl get -w`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::server::{flag, Params, Shared};
use crate::store::{Filter, ResId, WatchFrom, WatchMsg};
use crate::tables;

pub fn watch(
    s: &Shared,
    res: ResId,
    (info, table): (&ResourceInfo, Option<tables::TableRequest>),
    version: &str,
    filter: Filter,
    params: &Params,
) -> Result<Response, ApiError> {
    let rv = params
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let from = match rv {
        "" | "0" => WatchFrom::Now,
        v => WatchFrom::After(v.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: {v:?} is not a resourceVersion this server issued"
            ))
        })?),
    };
    let send_initial = flag(params, "sendInitialEvents");
    let bookmarks = flag(params, "allowWatchBookmarks");
    if send_initial {
        if params.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
            return Err(ApiError::invalid("ListOptions", "", "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
        }
        if !bookmarks {
            return Err(ApiError::invalid("ListOptions", "", "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"));
        }
    }
    // With sendInitialEvents the initial state is sent whatever the version (this store
    // always has the newest data, which satisfies NotOlderThan).
    let from = if send_initial { WatchFrom::Now } else { from };
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(1800);
    let rx = s.store().watch(res, filter, from, bookmarks, send_initial);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let av = info.api_version(version);
    let kind = info.kind.clone();
    let multi = info.versions.len() > 1;
    let (info, version) = (info.clone(), version.to_string());
    let stream = futures::stream::unfold((rx, false), move |(mut rx, done)| {
        let (av, kind) = (av.clone(), kind.clone());
        let (info, version) = (info.clone(), version.clone());
        async move {
            if done {
                return None;
            }
            let msg = tokio::time::timeout_at(deadline, rx.recv()).await.ok()??;
            let (line, done) = match msg {
                WatchMsg::Event(t, obj) => {
                    let obj = if multi {
                        let mut o = (*obj).clone();
                        o["apiVersion"] = json!(av);
                        o
                    } else {
                        (*obj).clone()
                    };
                    // Asked as a Table (`kubectl get -w`): each event's object is a one-row Table.
                    let obj = match table {
                        Some(req) => tables::object_table(req, &info, &version, &obj),
                        None => obj,
                    };
                    (json!({"type": t, "object": obj}), false)
                }
                WatchMsg::Bookmark(rv, initial_end) => {
                    let mut meta = json!({"resourceVersion": rv.to_string()});
                    if initial_end {
                        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                    }
                    (
                        json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": av, "metadata": meta}}),
                        false,
                    )
                }
                WatchMsg::Error(status) => (json!({"type": "ERROR", "object": status}), true),
            };
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            Some((Ok::<_, Infallible>(Bytes::from(bytes)), (rx, done)))
        }
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

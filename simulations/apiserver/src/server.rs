//! HTTP routing: parses Kubernetes API paths, applies faults, and calls the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::discovery;
use crate::error::{json_response, success_status, ApiError};
use crate::faults::{FaultState, Faults, Verb};
use crate::patch::PatchKind;
use crate::requests::{RequestLog, RequestRecord};
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Filter, Part, Store};
use crate::{protobuf, tables};

/// State shared by the handlers and the library handle.
#[derive(Clone)]
pub struct Shared {
    pub store: Arc<Mutex<Store>>,
    pub faults: Arc<Mutex<FaultState>>,
    /// `http://127.0.0.1:PORT`, for discovery.
    pub server: Arc<str>,
    /// Bumped whenever the fault settings are replaced or the server stops: stalled requests
    /// wait for it.
    pub released: Arc<watch::Sender<u64>>,
    /// The writes answered so far, oldest first.
    pub requests: Arc<Mutex<RequestLog>>,
}

impl Shared {
    pub fn store(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock is a bug; keep serving rather than poisoning every request.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn faults(&self) -> MutexGuard<'_, FaultState> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn request_log(&self) -> MutexGuard<'_, RequestLog> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the fault settings (validated by the caller) and lets stalled requests go on.
    pub fn replace_faults(&self, faults: Faults) {
        self.store()
            .set_drop_watches_after(faults.drop_watches_after);
        self.faults().faults = faults;
        self.release_stalled();
    }

    pub fn release_stalled(&self) {
        self.released.send_modify(|n| *n += 1);
    }
}

pub fn router(shared: Shared) -> Router {
    Router::new()
        .route(
            "/version",
            axum::routing::get(|| async { json_response(StatusCode::OK, &discovery::version()) }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route("/livez", axum::routing::get(|| async { "ok" }))
        .route(
            "/admin/faults",
            axum::routing::get(get_faults).put(put_faults),
        )
        .route("/admin/drop-watches", axum::routing::post(drop_watches))
        .route("/admin/requests", axum::routing::get(get_requests))
        .fallback(api)
        .with_state(shared)
}

async fn get_faults(State(s): State<Shared>) -> Response {
    let f = s.faults();
    let mut v = serde_json::to_value(&f.faults).unwrap_or_default();
    v["injected"] = json!(f.injected);
    json_response(StatusCode::OK, &v)
}

async fn put_faults(State(s): State<Shared>, body: Bytes) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return ApiError::bad_request(format!("fault settings: {e}")).into_response(),
    };
    if let Err(e) = faults.validate() {
        return ApiError::bad_request(format!("fault settings: {e}")).into_response();
    }
    s.replace_faults(faults);
    StatusCode::NO_CONTENT.into_response()
}

async fn get_requests(State(s): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"requests": s.request_log().entries()}),
    )
}

async fn drop_watches(State(s): State<Shared>) -> Response {
    let n = s.store().drop_watches();
    json_response(StatusCode::OK, &json!({"dropped": n}))
}

/// The parsed path of a resource request.
#[derive(Debug)]
struct Target {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Path {
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    Resource(Target),
    OpenApiV2,
    OpenApiV3,
    OpenApiV3Doc(String, String),
}

fn parse_path(path: &str) -> Option<Path> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api"] => return Some(Path::CoreVersions),
        ["apis"] => return Some(Path::Groups),
        ["apis", g] => return Some(Path::Group(g.to_string())),
        ["openapi", "v2"] => return Some(Path::OpenApiV2),
        ["openapi", "v3"] => return Some(Path::OpenApiV3),
        ["openapi", "v3", "api", v] => {
            return Some(Path::OpenApiV3Doc(String::new(), v.to_string()))
        }
        ["openapi", "v3", "apis", g, v] => {
            return Some(Path::OpenApiV3Doc(g.to_string(), v.to_string()))
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let t = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Some(Path::Resource(Target {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        }))
    };
    match rest {
        [] => Some(Path::Resources(group.to_string(), version.to_string())),
        // The namespace object's own subresources (core only), before namespaced collections.
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            t("namespaces", None, Some(ns), Some(sub))
        }
        ["namespaces", ns, plural] => t(plural, Some(ns), None, None),
        ["namespaces", ns, plural, name] => t(plural, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => t(plural, Some(ns), Some(name), Some(sub)),
        [plural] => t(plural, None, None, None),
        [plural, name] => t(plural, None, Some(name), None),
        [plural, name, sub] => t(plural, None, Some(name), Some(sub)),
        _ => None,
    }
}

pub(crate) type Params = HashMap<String, String>;

pub(crate) fn flag(p: &Params, k: &str) -> bool {
    matches!(p.get(k).map(String::as_str), Some("true" | "1"))
}

async fn api(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({method} {})",
                uri.path()
            ),
        )
        .into_response()
    };
    let Some(path) = parse_path(uri.path()) else {
        return not_found();
    };
    let store = || s.store();
    match path {
        Path::CoreVersions => json_response(StatusCode::OK, &discovery::core_versions(&s.server)),
        Path::Groups => json_response(StatusCode::OK, &discovery::groups(store().resources())),
        Path::Group(g) => match discovery::group(&g, store().resources()) {
            Some(v) => json_response(StatusCode::OK, &v),
            None => not_found(),
        },
        Path::Resources(g, v) => match discovery::resource_list(&g, &v, store().resources()) {
            Some(v) => json_response(StatusCode::OK, &v),
            None => not_found(),
        },
        Path::OpenApiV2 => {
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let (ct, body) = discovery::openapi_v2(accept.is_some_and(|a| a.contains("protobuf")));
            (StatusCode::OK, [(header::CONTENT_TYPE, ct)], body).into_response()
        }
        Path::OpenApiV3 => json_response(
            StatusCode::OK,
            &discovery::openapi_v3_root(store().resources()),
        ),
        Path::OpenApiV3Doc(g, v) => {
            match discovery::openapi_v3_group_version(&g, &v, store().resources()) {
                Some(v) => json_response(StatusCode::OK, &v),
                None => not_found(),
            }
        }
        Path::Resource(t) => {
            let user_agent = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let write = verb_of(&method, &t, &params)
                .ok()
                .filter(|v| matches!(v, Verb::Create | Verb::Update | Verb::Patch | Verb::Delete));
            let record = write.map(|verb| RequestRecord {
                seq: 0,
                verb,
                resource: fault_resource(&t),
                namespace: t.namespace.clone(),
                name: t.name.clone(),
                user_agent: user_agent.clone(),
                code: 0,
            });
            let response =
                match resource_request(&s, &method, t, &params, &headers, &body, &user_agent).await
                {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                };
            if let Some(mut r) = record {
                r.code = response.status().as_u16();
                s.request_log().push(r);
            }
            response
        }
    }
}

/// `pods`, or `pods/binding` for a subresource: what fault rules and the request log name.
fn fault_resource(t: &Target) -> String {
    match &t.sub {
        Some(sub) => format!("{}/{sub}", t.plural),
        None => t.plural.clone(),
    }
}

fn verb_of(method: &Method, t: &Target, params: &Params) -> Result<Verb, ApiError> {
    Ok(match (method.as_str(), &t.name) {
        ("GET", None) if flag(params, "watch") => Verb::Watch,
        ("GET", None) => Verb::List,
        ("GET", Some(_)) => Verb::Get,
        ("POST", _) => Verb::Create,
        ("PUT", Some(_)) => Verb::Update,
        ("PATCH", Some(_)) => Verb::Patch,
        ("DELETE", _) => Verb::Delete,
        (m, _) => {
            return Err(ApiError::method_not_allowed(format!(
                "{m} is not supported on {}",
                t.plural
            )))
        }
    })
}

fn parse_body(headers: &HeaderMap, body: &[u8], what: &str) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if body.is_empty() {
        return Ok(json!({}));
    }
    if ct.contains("yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("{what}: the body is not valid YAML: {e}")))
    } else if ct.contains("protobuf") {
        protobuf_body(ct, body, what)
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("{what}: the body is not valid JSON: {e}")))
    }
}

/// A protobuf body: client-go's typed clients send built-in kinds so (`kubectl create namespace`).
fn protobuf_body(ct: &str, body: &[u8], what: &str) -> Result<Value, ApiError> {
    protobuf::decode(body).map_err(|e| match e {
        protobuf::DecodeError::Unsupported(kind) => ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "{what}: the body is {ct:?} of {kind}; basalt-apiserver reads protobuf bodies of {} only: send JSON",
                protobuf::KINDS
            ),
        ),
        protobuf::DecodeError::Malformed(m) => {
            ApiError::bad_request(format!("{what}: the body is not valid protobuf: {m}"))
        }
    })
}

async fn resource_request(
    s: &Shared,
    method: &Method,
    t: Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
    user_agent: &str,
) -> Result<Response, ApiError> {
    let verb = verb_of(method, &t, params)?;
    // Subscribed before deciding, so settings replaced in between still release this request.
    let mut released = s.released.subscribe();
    let decision = s.faults().decide(verb, &fault_resource(&t), user_agent);
    if decision.stall {
        // Dropped with the connection when the client goes away; otherwise held until released.
        let _ = released.changed().await;
    }
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    if let Some(e) = decision.error {
        return Err(e);
    }
    if params.get("dryRun").is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by basalt-apiserver",
        ));
    }
    let (res, info) = {
        let st = s.store();
        let res = st
            .find_version(&t.group, &t.version, &t.plural)
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    format!(
                        "the server could not find the requested resource ({} {}/{}/{})",
                        method,
                        if t.group.is_empty() { "core" } else { &t.group },
                        t.version,
                        t.plural
                    ),
                )
            })?;
        (res, st.info(res).clone())
    };
    if !info.namespaced && t.namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "{} is cluster-scoped: it has no namespaced path",
                info.qualified()
            ),
        ));
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let part = match t.sub.as_deref() {
        None => Part::Main,
        Some("status") if info.status_subresource => Part::Status,
        Some(sub @ ("binding" | "eviction")) if info.is_core("pods") && verb == Verb::Create => {
            let name = t.name.clone().unwrap_or_default();
            let b = parse_body(headers, body, &format!("pods/{sub} {name}"))?;
            let mut st = s.store();
            if sub == "binding" {
                st.bind(&ns, &name, &b)?;
            } else {
                st.evict(&ns, &name, &b)?;
            }
            return Ok(json_response(StatusCode::CREATED, &success_status(201)));
        }
        Some(sub) => {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!(
                    "{}/{sub} is not a subresource the server serves (or not for {verb:?})",
                    info.plural,
                    verb = verb.as_str()
                ),
            ))
        }
    };
    let render = |o: &Value| versioned(&info, &t.version, o);
    let table = tables::requested(headers, params.get("includeObject").map(String::as_str));
    match verb {
        Verb::List | Verb::Watch => {
            let filter = selection(params, t.namespace.clone())?;
            if verb == Verb::Watch {
                return crate::watch::watch(s, res, (&info, table), &t.version, filter, params);
            }
            let limit =
                match params.get("limit").filter(|l| !l.is_empty()) {
                    Some(l) => Some(l.parse::<usize>().map_err(|_| {
                        ApiError::bad_request(format!("limit: {l:?} is not a number"))
                    })?),
                    None => None,
                };
            let page = s.store().list(
                res,
                &filter,
                limit,
                params
                    .get("continue")
                    .map(String::as_str)
                    .filter(|c| !c.is_empty()),
            )?;
            Ok(match table {
                Some(req) => json_response(
                    StatusCode::OK,
                    &tables::list_table(req, &info, &t.version, &page),
                ),
                None => list_response(&info, &t.version, page),
            })
        }
        Verb::Get => {
            let name = t.name.as_deref().unwrap_or_default();
            let obj = render(&*s.store().get(res, &ns, name)?);
            Ok(match table {
                Some(req) => json_response(
                    StatusCode::OK,
                    &tables::object_table(req, &info, &t.version, &obj),
                ),
                None => json_response(StatusCode::OK, &obj),
            })
        }
        Verb::Create => {
            if t.name.is_some() {
                return Err(ApiError::method_not_allowed(format!(
                    "POST to a named {} is not supported; POST to the collection",
                    info.plural
                )));
            }
            let obj = parse_body(headers, body, &format!("create {}", info.plural))?;
            let created = s.store().create(res, &ns, obj)?;
            Ok(json_response(StatusCode::CREATED, &render(&created)))
        }
        Verb::Update => {
            let name = t.name.as_deref().unwrap_or_default();
            let obj = parse_body(headers, body, &format!("update {} {name}", info.plural))?;
            let updated = s.store().update(res, &ns, name, obj, part)?;
            Ok(json_response(StatusCode::OK, &render(&updated)))
        }
        Verb::Patch => {
            let name = t.name.as_deref().unwrap_or_default();
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(ct)
                .ok_or_else(|| ApiError::unsupported_media_type(ct))?;
            if kind == PatchKind::Apply && params.get("fieldManager").is_none_or(|m| m.is_empty()) {
                return Err(ApiError::bad_request(
                    "PATCH with application/apply-patch+yaml requires the fieldManager parameter",
                ));
            }
            let patch = parse_body(headers, body, &format!("patch {} {name}", info.plural))?;
            let (obj, created) = s.store().patch(res, &ns, name, kind, &patch, part)?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, &render(&obj)))
        }
        Verb::Delete => {
            let options = parse_body(headers, body, "DeleteOptions")?;
            match &t.name {
                Some(name) => {
                    let obj = s.store().delete(res, &ns, name, &options)?;
                    Ok(json_response(StatusCode::OK, &render(&obj)))
                }
                None => {
                    // deletecollection
                    let filter = selection(params, t.namespace.clone())?;
                    let mut st = s.store();
                    let page = st.list(res, &filter, None, None)?;
                    for o in page.items {
                        let n = o
                            .pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        let nsn = o
                            .pointer("/metadata/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        st.delete(res, nsn, n, &json!({}))?;
                    }
                    Ok(json_response(StatusCode::OK, &success_status(200)))
                }
            }
        }
    }
}

/// The object as the requested version names it (custom kinds may serve several versions).
fn versioned(info: &ResourceInfo, version: &str, obj: &Value) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = json!(info.api_version(version));
    o
}

fn list_response(info: &ResourceInfo, version: &str, page: crate::store::ListPage) -> Response {
    let av = info.api_version(version);
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = page.continue_token {
        meta["continue"] = json!(c);
    }
    // Written by hand so that large lists are not cloned into one more tree first.
    let mut out = Vec::with_capacity(256 + page.items.len() * 512);
    out.extend_from_slice(
        format!(
            r#"{{"kind":"{}List","apiVersion":"{av}","metadata":{meta},"items":["#,
            info.kind
        )
        .as_bytes(),
    );
    let same_version = info.versions.len() == 1;
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let written = if same_version {
            serde_json::to_writer(&mut out, &**item)
        } else {
            serde_json::to_writer(&mut out, &versioned(info, version, item))
        };
        if let Err(e) = written {
            return ApiError::internal(format!("encoding {} list: {e}", info.plural))
                .into_response();
        }
    }
    out.extend_from_slice(b"]}");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        out,
    )
        .into_response()
}

/// The objects a list, watch or deletecollection selects: the namespace and the
/// `labelSelector` / `fieldSelector` query parameters.
fn selection(params: &Params, namespace: Option<String>) -> Result<Filter, ApiError> {
    let param = |k: &str| params.get(k).map(String::as_str).unwrap_or("");
    Ok(Filter {
        namespace,
        labels: LabelSelector::parse(param("labelSelector"))?,
        fields: FieldSelector::parse(param("fieldSelector"))?,
    })
}

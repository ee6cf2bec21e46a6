//! Errors: the Kubernetes `Status` objects the server answers with, and the library's own errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// An API error, answered as a `Status` object (`kind: Status, status: Failure`).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, `Expired`, ...
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status: the object's name, group and kind (plural, as Kubernetes does).
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": group, "kind": kind}));
        self
    }

    /// `pods "x" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let q = qualified(group, plural);
        Self::new(404, "NotFound", format!("{q} {name:?} not found"))
            .with_details(group, plural, name)
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let q = qualified(group, plural);
        Self::new(409, "AlreadyExists", format!("{q} {name:?} already exists"))
            .with_details(group, plural, name)
    }

    /// A stale write: the object changed since the writer read it.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let q = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {q} {name:?}: {why}"),
        )
        .with_details(group, plural, name)
    }

    /// 422: a field of the object is wrong (`kind` is the object's Kind, as Kubernetes prints it).
    pub fn invalid(kind: &str, name: &str, field_message: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{kind} {name:?} is invalid: {field_message}"),
        )
        .with_details("", kind, name)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"),
        )
    }

    /// The history window no longer holds the requested resourceVersion.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The reason Kubernetes gives for a bare HTTP code (used by fault injection).
    pub fn from_code(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        };
        Self::new(code, reason, message)
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.status())
    }
}

/// A JSON body with the Kubernetes content type.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

/// A `Status` of `status: Success` (binding and eviction answer with one).
pub fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// Errors of the library API (starting the server, writing files).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("fault rule {index}: {message}")]
    FaultRule { index: usize, message: String },
    #[error(transparent)]
    Api(#[from] ApiError),
}

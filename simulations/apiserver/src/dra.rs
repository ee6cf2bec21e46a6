//! `resource.k8s.io/v1`, Dynamic Resource Allocation's GA API (Kubernetes 1.34): the defaults
//! kube-apiserver fills in and the part of its validation a scheduler, a claim controller or a
//! driver can run into.
//!
//! - Defaults: a request (`exactly`, each `firstAvailable` entry) gets `allocationMode:
//!   ExactCount` and, in that mode, `count: 1`; a toleration gets `operator: Equal`; a slice's
//!   device taint gets `timeAdded`.
//! - ResourceClaim: `status` is dropped on create; `spec` is immutable (so is a template's);
//!   `status.allocation` may be set once, then only cleared; its results must name the claim's
//!   requests; `status.reservedFor` needs an allocation, holds at most 256 consumers, unique by
//!   uid, each with resource, name and uid, and takes no new entry once the claim is being
//!   deleted.
//! - ResourceSlice: driver, pool name and a positive `resourceSliceCount` are required; exactly
//!   one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`; at most 128
//!   devices, named and unique; an attribute holds exactly one value; driver, pool name and
//!   node name are immutable.
//! - No new finalizer on an object of the group that is being deleted.
//!
//! Not checked: CEL selectors, name formats, quantities (kept as written, not canonicalised).
//! Errors read as kube-apiserver's (`ResourceClaim.resource.k8s.io "c" is invalid: spec: ...`,
//! several joined in brackets) with `details.causes`.

mod fields;

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::resources::{Part, ResourceInfo, DRA_GROUP};
use crate::timestamps::now_rfc3339;

use fields::{
    array_at, duplicate, finish, forbidden, invalid, normalized, not_supported, required, str_at,
    too_many, FieldError,
};

/// `ResourceClaimReservedForMaxSize`.
const RESERVED_FOR_MAX: usize = 256;
/// `ResourceSliceMaxDevices`.
const SLICE_MAX_DEVICES: usize = 128;
/// `DeviceRequestsMaxSize` (and `AllocationResultsMaxSize`).
const REQUESTS_MAX: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Class,
    Slice,
    Claim,
    Template,
}

fn kind_of(info: &ResourceInfo) -> Option<Kind> {
    if info.group != DRA_GROUP || info.custom {
        return None;
    }
    Some(match info.plural.as_str() {
        "deviceclasses" => Kind::Class,
        "resourceslices" => Kind::Slice,
        "resourceclaims" => Kind::Claim,
        "resourceclaimtemplates" => Kind::Template,
        _ => return None,
    })
}

/// Defaults and validation of a new object (after the generic preparation of a create).
pub fn on_create(info: &ResourceInfo, name: &str, obj: &mut Value) -> Result<(), ApiError> {
    let Some(kind) = kind_of(info) else {
        return Ok(());
    };
    set_defaults(kind, obj);
    let mut errs = Vec::new();
    match kind {
        Kind::Claim => {
            // Status belongs to the scheduler and the drivers: a create never sets it.
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
            validate_claim_spec(obj.get("spec"), "spec", &mut errs);
        }
        Kind::Template => validate_claim_spec(obj.pointer("/spec/spec"), "spec.spec", &mut errs),
        Kind::Slice => validate_slice(obj, None, &mut errs),
        Kind::Class => {}
    }
    finish(info, name, errs)
}

/// Defaults and validation of an update or patch; `new` is what would be stored (for a status
/// write: the stored object with the new status).
pub fn on_write(
    info: &ResourceInfo,
    name: &str,
    old: &Value,
    new: &mut Value,
    part: Part,
) -> Result<(), ApiError> {
    let Some(kind) = kind_of(info) else {
        return Ok(());
    };
    let mut errs = Vec::new();
    match part {
        Part::Main => {
            set_defaults(kind, new);
            no_new_finalizers(old, new, &mut errs);
            match kind {
                Kind::Claim | Kind::Template => {
                    immutable(old.get("spec"), new.get("spec"), "spec", &mut errs)
                }
                Kind::Slice => validate_slice(new, Some(old), &mut errs),
                Kind::Class => {}
            }
        }
        Part::Status if kind == Kind::Claim => validate_claim_status(old, new, &mut errs),
        Part::Status => {}
    }
    finish(info, name, errs)
}

// --- defaults ---

fn set_defaults(kind: Kind, obj: &mut Value) {
    match kind {
        Kind::Claim => default_device_claim(obj.pointer_mut("/spec/devices")),
        Kind::Template => default_device_claim(obj.pointer_mut("/spec/spec/devices")),
        Kind::Slice => {
            let now = now_rfc3339();
            for device in array_mut(obj.pointer_mut("/spec/devices")) {
                for taint in array_mut(device.get_mut("taints")) {
                    if taint.is_object() && taint.get("timeAdded").is_none_or(Value::is_null) {
                        taint["timeAdded"] = json!(now);
                    }
                }
            }
        }
        Kind::Class => {}
    }
}

fn array_mut(v: Option<&mut Value>) -> impl Iterator<Item = &mut Value> {
    v.and_then(Value::as_array_mut).into_iter().flatten()
}

fn default_device_claim(devices: Option<&mut Value>) {
    for request in array_mut(devices.and_then(|d| d.get_mut("requests"))) {
        if let Some(exact) = request.get_mut("exactly").filter(|e| e.is_object()) {
            default_request(exact);
        }
        for sub in array_mut(request.get_mut("firstAvailable")) {
            if sub.is_object() {
                default_request(sub);
            }
        }
    }
}

fn default_request(r: &mut Value) {
    if str_at(r, "allocationMode").is_empty() {
        r["allocationMode"] = json!("ExactCount");
    }
    if r["allocationMode"] == "ExactCount"
        && r.get("count").and_then(Value::as_i64).unwrap_or(0) == 0
    {
        r["count"] = json!(1);
    }
    for t in array_mut(r.get_mut("tolerations")) {
        if t.is_object() && str_at(t, "operator").is_empty() {
            t["operator"] = json!("Equal");
        }
    }
}

// --- validation ---

fn immutable(old: Option<&Value>, new: Option<&Value>, field: &str, errs: &mut Vec<FieldError>) {
    let new = normalized(new);
    if new != normalized(old) {
        errs.push(invalid(field, &new, "field is immutable"));
    }
}

fn no_new_finalizers(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    if old.pointer("/metadata/deletionTimestamp").is_none() {
        return;
    }
    let before = array_at(old.pointer("/metadata/finalizers"));
    let added: Vec<String> = array_at(new.pointer("/metadata/finalizers"))
        .iter()
        .filter(|f| !before.contains(f))
        .map(|f| format!("{:?}", f.as_str().unwrap_or("")))
        .collect();
    if !added.is_empty() {
        errs.push(forbidden(
            "metadata.finalizers",
            &format!(
                "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                added.join(", ")
            ),
        ));
    }
}

fn validate_claim_spec(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let base = format!("{path}.devices.requests");
    let requests = array_at(spec.and_then(|s| s.pointer("/devices/requests")));
    if requests.len() > REQUESTS_MAX {
        errs.push(too_many(&base, requests.len(), REQUESTS_MAX));
    }
    let mut names = HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        let p = format!("{base}[{i}]");
        request_name(r, &p, &mut names, errs);
        let exactly = r.get("exactly").filter(|e| e.is_object());
        let first = array_at(r.get("firstAvailable"));
        match (exactly, first.is_empty()) {
            (None, true) => errs.push(required(
                &p,
                "exactly one of `exactly` or `firstAvailable` is required",
            )),
            (Some(_), false) => errs.push(invalid(
                &p,
                &Value::Null,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )),
            (Some(e), true) => validate_request(e, &format!("{p}.exactly"), errs),
            (None, false) => {
                let mut sub_names = HashSet::new();
                for (j, s) in first.iter().enumerate() {
                    let sp = format!("{p}.firstAvailable[{j}]");
                    request_name(s, &sp, &mut sub_names, errs);
                    validate_request(s, &sp, errs);
                }
            }
        }
    }
}

fn request_name<'a>(
    r: &'a Value,
    p: &str,
    seen: &mut HashSet<&'a str>,
    errs: &mut Vec<FieldError>,
) {
    let name = str_at(r, "name");
    if name.is_empty() {
        errs.push(required(&format!("{p}.name"), ""));
    } else if !seen.insert(name) {
        errs.push(duplicate(&format!("{p}.name"), name));
    }
}

fn validate_request(r: &Value, p: &str, errs: &mut Vec<FieldError>) {
    if str_at(r, "deviceClassName").is_empty() {
        errs.push(required(&format!("{p}.deviceClassName"), ""));
    }
    let count = r.get("count").and_then(Value::as_i64).unwrap_or(0);
    let count_path = format!("{p}.count");
    match str_at(r, "allocationMode") {
        "All" if count != 0 => errs.push(invalid(
            &count_path,
            &json!(count),
            "must not be specified when allocationMode is 'All'",
        )),
        "ExactCount" if count <= 0 => errs.push(invalid(
            &count_path,
            &json!(count),
            "must be greater than zero",
        )),
        "All" | "ExactCount" => {}
        other => errs.push(not_supported(
            &format!("{p}.allocationMode"),
            other,
            &["All", "ExactCount"],
        )),
    }
}

fn validate_slice(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    if str_at(&spec, "driver").is_empty() {
        errs.push(required("spec.driver", ""));
    }
    let pool = spec.get("pool").cloned().unwrap_or(Value::Null);
    if str_at(&pool, "name").is_empty() {
        errs.push(required("spec.pool.name", ""));
    }
    let count = pool
        .get("resourceSliceCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if count <= 0 {
        errs.push(invalid(
            "spec.pool.resourceSliceCount",
            &json!(count),
            "must be greater than zero",
        ));
    }
    if let Some(old) = old {
        for (ptr, field) in [
            ("/spec/pool/name", "spec.pool.name"),
            ("/spec/driver", "spec.driver"),
            ("/spec/nodeName", "spec.nodeName"),
        ] {
            immutable(old.pointer(ptr), obj.pointer(ptr), field, errs);
        }
    }
    let mut set = Vec::new();
    match spec.get("nodeName") {
        Some(Value::String(n)) if n.is_empty() => errs.push(invalid(
            "spec.nodeName",
            &json!(""),
            "must be either unset or set to a non-empty string",
        )),
        Some(Value::String(_)) => set.push("`nodeName`".to_string()),
        _ => {}
    }
    if spec.get("nodeSelector").is_some_and(|s| !s.is_null()) {
        set.push("`nodeSelector`".to_string());
    }
    for flag in ["allNodes", "perDeviceNodeSelection"] {
        match spec.get(flag) {
            Some(Value::Bool(true)) => set.push(format!("`{flag}`")),
            Some(Value::Bool(false)) => errs.push(invalid(
                &format!("spec.{flag}"),
                &json!(false),
                "must be either unset or set to true",
            )),
            _ => {}
        }
    }
    const ONE_OF: &str =
        "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => errs.push(required("spec", ONE_OF)),
        1 => {}
        _ => errs.push(invalid(
            "spec",
            &json!(format!("{{{}}}", set.join(", "))),
            &format!("{ONE_OF}, but multiple fields are set"),
        )),
    }
    let devices = array_at(spec.get("devices"));
    if devices.len() > SLICE_MAX_DEVICES {
        errs.push(too_many("spec.devices", devices.len(), SLICE_MAX_DEVICES));
    }
    let mut names = HashSet::new();
    for (i, d) in devices.iter().enumerate() {
        let p = format!("spec.devices[{i}]");
        request_name(d, &p, &mut names, errs);
        for (key, attr) in d
            .get("attributes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let values = ["bool", "int", "string", "version"]
                .iter()
                .filter(|k| attr.get(**k).is_some_and(|v| !v.is_null()))
                .count();
            if values != 1 {
                let shown = if values == 0 { json!("") } else { attr.clone() };
                errs.push(invalid(
                    &format!("{p}.attributes[{key}]"),
                    &shown,
                    "exactly one value must be specified",
                ));
            }
        }
    }
}

fn validate_claim_status(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let reserved = array_at(new.pointer("/status/reservedFor"));
    if reserved.len() > RESERVED_FOR_MAX {
        errs.push(too_many(
            "status.reservedFor",
            reserved.len(),
            RESERVED_FOR_MAX,
        ));
    }
    let mut uids = HashSet::new();
    for (i, c) in reserved.iter().enumerate() {
        let p = format!("status.reservedFor[{i}]");
        for f in ["resource", "name", "uid"] {
            if str_at(c, f).is_empty() {
                errs.push(required(&format!("{p}.{f}"), ""));
            }
        }
        let uid = str_at(c, "uid");
        if !uid.is_empty() && !uids.insert(uid) {
            errs.push(duplicate(&format!("{p}.uid"), uid));
        }
    }
    let present = |v: Option<&Value>| v.filter(|a| !a.is_null()).cloned();
    let allocation = present(new.pointer("/status/allocation"));
    let old_allocation = present(old.pointer("/status/allocation"));
    if !reserved.is_empty() {
        if allocation.is_none() {
            errs.push(forbidden(
                "status.reservedFor",
                "may not be specified when `allocated` is not set",
            ));
        } else if new.pointer("/metadata/deletionTimestamp").is_some() {
            let before: Vec<Value> = array_at(old.pointer("/status/reservedFor"))
                .iter()
                .map(|c| normalized(Some(c)))
                .collect();
            if reserved
                .iter()
                .any(|c| !before.contains(&normalized(Some(c))))
            {
                errs.push(forbidden(
                    "status.reservedFor",
                    "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
                ));
            }
        }
    }
    match (old_allocation, allocation) {
        (Some(o), Some(n)) => immutable(Some(&o), Some(&n), "status.allocation", errs),
        (None, Some(n)) => validate_allocation(new, &n, errs),
        _ => {}
    }
}

/// A new allocation: each result names a request of the claim (`request` or `request/sub`) and
/// a device (driver, pool, device).
fn validate_allocation(claim: &Value, allocation: &Value, errs: &mut Vec<FieldError>) {
    let requests = array_at(claim.pointer("/spec/devices/requests"));
    let known = |reference: &str| {
        let (req, sub) = match reference.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (reference, None),
        };
        requests.iter().any(|r| {
            str_at(r, "name") == req
                && match sub {
                    None => true,
                    Some(s) => array_at(r.get("firstAvailable"))
                        .iter()
                        .any(|x| str_at(x, "name") == s),
                }
        })
    };
    let base = "status.allocation.devices.results";
    let results = array_at(allocation.pointer("/devices/results"));
    if results.len() > REQUESTS_MAX {
        errs.push(too_many(base, results.len(), REQUESTS_MAX));
    }
    for (i, r) in results.iter().enumerate() {
        let p = format!("{base}[{i}]");
        let request = str_at(r, "request");
        if request.is_empty() {
            errs.push(required(&format!("{p}.request"), ""));
        } else if !known(request) {
            errs.push(invalid(
                &format!("{p}.request"),
                &json!(request),
                "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'",
            ));
        }
        for f in ["driver", "pool", "device"] {
            if str_at(r, f).is_empty() {
                errs.push(required(&format!("{p}.{f}"), ""));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_info() -> ResourceInfo {
        crate::resources::dra()
            .into_iter()
            .find(|r| r.plural == "resourceclaims")
            .unwrap()
    }

    #[test]
    fn requests_are_defaulted_and_checked() {
        let mut claim = json!({"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com",
                "tolerations": [{"key": "k"}]}},
            {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": "c", "allocationMode": "All"}]},
        ]}}, "status": {"reservedFor": []}});
        on_create(&claim_info(), "c", &mut claim).unwrap();
        let exact = &claim["spec"]["devices"]["requests"][0]["exactly"];
        assert_eq!(exact["allocationMode"], "ExactCount");
        assert_eq!(exact["count"], 1);
        assert_eq!(exact["tolerations"][0]["operator"], "Equal");
        let sub = &claim["spec"]["devices"]["requests"][1]["firstAvailable"][0];
        assert!(sub.get("count").is_none(), "All takes no count");
        assert!(claim.get("status").is_none(), "a create drops status");

        let mut bad = json!({"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"allocationMode": "Some"}},
            {"name": "gpu"},
        ]}}});
        let e = on_create(&claim_info(), "bad", &mut bad).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ResourceClaim.resource.k8s.io \"bad\" is invalid: [\
             spec.devices.requests[0].exactly.deviceClassName: Required value, \
             spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\", \
             spec.devices.requests[1].name: Duplicate value: \"gpu\", \
             spec.devices.requests[1]: Required value: exactly one of `exactly` or `firstAvailable` is required]"
        );
        assert_eq!(e.details.unwrap()["causes"].as_array().unwrap().len(), 4);
    }
}

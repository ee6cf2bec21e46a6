//! Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/GROUP/VERSION`, `/version`.
//! Aggregated discovery is not served; kubectl and kube-rs fall back to these.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::resources::ResourceInfo;

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": "v1.34.0-basalt",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none (basalt-apiserver, Rust)",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

/// `/apis`: every non-core group with its versions, the first one preferred.
pub fn groups<'a>(resources: impl Iterator<Item = &'a ResourceInfo>) -> Value {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in resources.filter(|r| !r.group.is_empty()) {
        let vs = groups.entry(&r.group).or_default();
        for v in &r.versions {
            if !vs.contains(&v.as_str()) {
                vs.push(v);
            }
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`: one group.
pub fn group<'a>(name: &str, resources: impl Iterator<Item = &'a ResourceInfo>) -> Option<Value> {
    let all = groups(resources);
    all["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == name)
        .map(|g| {
            let mut g = g.clone();
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        })
}

/// `/api/v1` or `/apis/GROUP/VERSION`; None when nothing is served there.
pub fn resource_list<'a>(
    group: &str,
    version: &str,
    resources: impl Iterator<Item = &'a ResourceInfo>,
) -> Option<Value> {
    let mut out = Vec::new();
    for r in resources.filter(|r| r.group == group && r.versions.iter().any(|v| v == version)) {
        let mut main = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if r.custom {
            main["categories"] = json!(["all"]);
        }
        out.push(main);
        for (sub, kind) in r.subresources() {
            let verbs: &[&str] = match sub {
                "status" => &["get", "patch", "update"],
                _ => &["create"],
            };
            out.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    if out.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}),
    )
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// FNV-1a over the kinds of a group-version: the `hash` clients cache OpenAPI documents by.
fn gv_hash<'a>(kinds: impl Iterator<Item = &'a ResourceInfo>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in kinds {
        for b in r
            .plural
            .bytes()
            .chain(r.kind.bytes())
            .chain([u8::from(r.namespaced)])
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_root<'a>(resources: impl Iterator<Item = &'a ResourceInfo>) -> Value {
    let mut gvs: BTreeMap<String, Vec<&ResourceInfo>> = BTreeMap::new();
    for r in resources {
        for v in &r.versions {
            gvs.entry(gv_path(&r.group, v)).or_default().push(r);
        }
    }
    let paths: serde_json::Map<String, Value> = gvs
        .into_iter()
        .map(|(p, rs)| {
            let url = format!("/openapi/v3/{p}?hash={}", gv_hash(rs.into_iter()));
            (p, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`: no schemas, only the PATCH
/// operation of each kind, declaring the `fieldValidation` parameter. That is what kubectl
/// looks for to validate on the server instead of downloading schemas (which we do not have).
pub fn openapi_v3_group_version<'a>(
    group: &str,
    version: &str,
    resources: impl Iterator<Item = &'a ResourceInfo>,
) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for r in resources.filter(|r| r.group == group && r.versions.iter().any(|v| v == version)) {
        let base = format!("/{}", gv_path(group, version));
        let path = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let op = json!({
            "operationId": format!("patch{}", r.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            "parameters": [
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(path, json!({"patch": op}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (basalt-apiserver)", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// `/openapi/v2`: a document without definitions. kubectl's client-side validation reads it
/// for what it cannot validate on the server (a `kind: List` file); with no definitions it
/// skips the items, which the server then checks as it creates them. Asked for protobuf (as
/// kubectl does), it answers gnostic's `openapi_v2.Document` encoding.
pub fn openapi_v2(protobuf: bool) -> (&'static str, Vec<u8>) {
    const TITLE: &str = "Kubernetes";
    const VERSION: &str = "v1.34.0-basalt";
    if !protobuf {
        let doc = json!({"swagger": "2.0", "info": {"title": TITLE, "version": VERSION},
                         "paths": {}, "definitions": {}});
        return ("application/json", doc.to_string().into_bytes());
    }
    // Length-delimited fields: Document.swagger = 1, Document.info = 2, Info.title = 1,
    // Info.version = 2. Every length here is under 128, one varint byte.
    let field = |num: u8, bytes: &[u8]| {
        let mut f = vec![num << 3 | 2, bytes.len() as u8];
        f.extend_from_slice(bytes);
        f
    };
    let info = [field(1, TITLE.as_bytes()), field(2, VERSION.as_bytes())].concat();
    let doc = [field(1, b"2.0"), field(2, &info)].concat();
    // The real server's type (kubectl asks `...spec.v2@v1.0+protobuf`; `@` is not valid in an
    // answer's media type, and Go's mime parser refuses it).
    (
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        doc,
    )
}

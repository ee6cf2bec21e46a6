//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`). client-go's typed clients
//! send built-in kinds this way since Kubernetes 1.31, so `kubectl create namespace x` (and
//! `create configmap|priorityclass`, the evictions or deletes of `kubectl drain`) POSTs protobuf, not JSON. The kinds
//! those commands write are decoded here to JSON through a table of their messages (field
//! numbers from k8s.io/api's generated.proto); any other kind is a 415 naming it.

use serde_json::{json, Map, Value};

/// The envelope's prefix (runtime.protobufSerializer).
const MAGIC: &[u8] = b"k8s\0";

/// The kinds whose protobuf bodies this server reads.
pub const KINDS: &str = "Namespace, ConfigMap, PriorityClass, Eviction, Binding, DeleteOptions";

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    /// metav1.Time: seconds and nanos, RFC 3339 in JSON.
    Time,
    Msg(&'static [F]),
    MapStr,
    /// Values base64 in JSON.
    MapBytes,
}

/// One field: number, JSON name, type, repeated.
#[derive(Clone, Copy)]
struct F(u64, &'static str, Ty, bool);

const OWNER_REF: &[F] = &[
    F(1, "kind", Ty::Str, false),
    F(3, "name", Ty::Str, false),
    F(4, "uid", Ty::Str, false),
    F(5, "apiVersion", Ty::Str, false),
    F(6, "controller", Ty::Bool, false),
    F(7, "blockOwnerDeletion", Ty::Bool, false),
];

const OBJECT_META: &[F] = &[
    F(1, "name", Ty::Str, false),
    F(2, "generateName", Ty::Str, false),
    F(3, "namespace", Ty::Str, false),
    F(5, "uid", Ty::Str, false),
    F(6, "resourceVersion", Ty::Str, false),
    F(8, "creationTimestamp", Ty::Time, false),
    F(11, "labels", Ty::MapStr, false),
    F(12, "annotations", Ty::MapStr, false),
    F(13, "ownerReferences", Ty::Msg(OWNER_REF), true),
    F(14, "finalizers", Ty::Str, true),
];

const OBJECT_REF: &[F] = &[
    F(1, "kind", Ty::Str, false),
    F(2, "namespace", Ty::Str, false),
    F(3, "name", Ty::Str, false),
    F(4, "uid", Ty::Str, false),
    F(5, "apiVersion", Ty::Str, false),
    F(6, "resourceVersion", Ty::Str, false),
    F(7, "fieldPath", Ty::Str, false),
];

const NAMESPACE: &[F] = &[
    F(1, "metadata", Ty::Msg(OBJECT_META), false),
    F(
        2,
        "spec",
        Ty::Msg(&[F(1, "finalizers", Ty::Str, true)]),
        false,
    ),
];

const CONFIG_MAP: &[F] = &[
    F(1, "metadata", Ty::Msg(OBJECT_META), false),
    F(2, "data", Ty::MapStr, false),
    F(3, "binaryData", Ty::MapBytes, false),
    F(4, "immutable", Ty::Bool, false),
];

const DELETE_OPTIONS: &[F] = &[
    F(1, "gracePeriodSeconds", Ty::Int, false),
    F(
        2,
        "preconditions",
        Ty::Msg(&[
            F(1, "uid", Ty::Str, false),
            F(2, "resourceVersion", Ty::Str, false),
        ]),
        false,
    ),
    F(3, "orphanDependents", Ty::Bool, false),
    F(4, "propagationPolicy", Ty::Str, false),
    F(5, "dryRun", Ty::Str, true),
];

/// policy/v1 Eviction: `kubectl drain` posts it through the typed client.
const EVICTION: &[F] = &[
    F(1, "metadata", Ty::Msg(OBJECT_META), false),
    F(2, "deleteOptions", Ty::Msg(DELETE_OPTIONS), false),
];

const BINDING: &[F] = &[
    F(1, "metadata", Ty::Msg(OBJECT_META), false),
    F(2, "target", Ty::Msg(OBJECT_REF), false),
];

const PRIORITY_CLASS: &[F] = &[
    F(1, "metadata", Ty::Msg(OBJECT_META), false),
    F(2, "value", Ty::Int, false),
    F(3, "globalDefault", Ty::Bool, false),
    F(4, "description", Ty::Str, false),
    F(5, "preemptionPolicy", Ty::Str, false),
];

fn schema(api_version: &str, kind: &str) -> Option<&'static [F]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("policy/v1", "Eviction") => EVICTION,
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => DELETE_OPTIONS,
        ("v1", "Binding") => BINDING,
        ("scheduling.k8s.io/v1", "PriorityClass") => PRIORITY_CLASS,
        _ => return None,
    })
}

/// Why a body could not be read: not protobuf at all, or a kind without a table here.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    Malformed(String),
    Unsupported(String),
}

/// The JSON object a protobuf request body holds.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let bad = |m: &str| DecodeError::Malformed(m.to_string());
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no \"k8s\\0\" envelope prefix"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for field in Fields(unknown) {
        match field.map_err(DecodeError::Malformed)? {
            (1, Wire::Bytes(type_meta)) => {
                for f in Fields(type_meta) {
                    match f.map_err(DecodeError::Malformed)? {
                        (1, Wire::Bytes(b)) => api_version = String::from_utf8_lossy(b).into(),
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let fields = schema(&api_version, &kind)
        .ok_or_else(|| DecodeError::Unsupported(format!("{api_version} {kind}")))?;
    let mut obj = message(raw, fields).map_err(DecodeError::Malformed)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

/// A message as a JSON object; empty strings, lists, maps and zero times are left out, as Go's
/// `omitempty` leaves them out of JSON.
fn message(buf: &[u8], fields: &[F]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for field in Fields(buf) {
        let (num, wire) = field?;
        let Some(&F(_, name, ty, repeated)) = fields.iter().find(|f| f.0 == num) else {
            continue;
        };
        let Some(v) = value(ty, wire).map_err(|e| format!("{name}: {e}"))? else {
            continue;
        };
        if repeated {
            let list = out.entry(name).or_insert_with(|| json!([]));
            if let Value::Array(a) = list {
                a.push(v);
            }
        } else if let (Some(Value::Object(m)), Value::Object(add)) = (out.get_mut(name), &v) {
            // Map entries come one per field occurrence.
            m.extend(add.clone());
        } else {
            out.insert(name.into(), v);
        }
    }
    Ok(out)
}

fn value(ty: Ty, wire: Wire) -> Result<Option<Value>, String> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| "not UTF-8".to_string());
    Ok(match (ty, wire) {
        (Ty::Str, Wire::Bytes(b)) => Some(json!(text(b)?)).filter(|s| s != ""),
        (Ty::Int, Wire::Varint(n)) => Some(json!(n as i64)),
        (Ty::Bool, Wire::Varint(n)) => Some(json!(n != 0)),
        (Ty::Time, Wire::Bytes(b)) => time(b)?,
        (Ty::Msg(fields), Wire::Bytes(b)) => {
            Some(Value::Object(message(b, fields)?)).filter(|m| m != &json!({}))
        }
        (Ty::MapStr | Ty::MapBytes, Wire::Bytes(b)) => {
            let (mut k, mut v) = (String::new(), json!(""));
            for f in Fields(b) {
                match (f?, ty) {
                    ((1, Wire::Bytes(x)), _) => k = text(x)?,
                    ((2, Wire::Bytes(x)), Ty::MapStr) => v = json!(text(x)?),
                    ((2, Wire::Bytes(x)), _) => v = json!(base64(x)),
                    _ => {}
                }
            }
            Some(json!({ k: v }))
        }
        _ => return Err("unexpected wire type".into()),
    })
}

/// metav1.Time {seconds, nanos} as RFC 3339 (whole seconds, as Kubernetes writes it).
fn time(b: &[u8]) -> Result<Option<Value>, String> {
    let mut secs = 0i64;
    for f in Fields(b) {
        if let (1, Wire::Varint(n)) = f? {
            secs = n as i64;
        }
    }
    Ok((secs != 0).then(|| json!(crate::timestamps::rfc3339(secs))))
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message: (number, value), or an error for a truncated or unknown encoding.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let r = self.read();
        if r.is_err() {
            self.0 = &[];
        }
        Some(r)
    }
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first().ok_or("truncated varint")?;
            self.0 = rest;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err("varint over 64 bits".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err("truncated field".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn read(&mut self) -> Result<(u64, Wire<'a>), String> {
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => self.take(8).map(|_| Wire::Fixed)?,
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                Wire::Bytes(self.take(len)?)
            }
            5 => self.take(4).map(|_| Wire::Fixed)?,
            w => return Err(format!("wire type {w} is not used by Kubernetes")),
        };
        Ok((key >> 3, wire))
    }
}

fn base64(b: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
        for i in 0..4 {
            let c = ABC[(n >> (18 - 6 * i) & 63) as usize] as char;
            out.push(if i <= chunk.len() { c } else { '=' });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl v1.32 sent for `kubectl create namespace x` (captured with -v=8).
    const CREATE_NAMESPACE_X: &[u8] = &[
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61, 0x6d,
        0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, 0x78, 0x12, 0x00,
        0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x00, 0x1a,
        0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
    ];

    #[test]
    fn kubectls_create_namespace_body_reads_as_json() {
        assert_eq!(
            decode(CREATE_NAMESPACE_X),
            Ok(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}))
        );
    }

    #[test]
    fn other_kinds_and_garbage_are_refused() {
        assert_eq!(
            decode(b"{\"kind\": \"Namespace\"}"),
            Err(DecodeError::Malformed(
                "no \"k8s\\0\" envelope prefix".into()
            ))
        );
        let pod = [b"k8s\0\x0a\x09\x0a\x02v1\x12\x03Pod".as_slice()].concat();
        assert_eq!(decode(&pod), Err(DecodeError::Unsupported("v1 Pod".into())));
        assert!(matches!(
            decode(b"k8s\0\x0a\xff"),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn drains_delete_options_read_as_json() {
        // v1 DeleteOptions {gracePeriodSeconds: 0, propagationPolicy: Background}.
        let raw = [b"\x08\x00\x22\x0aBackground".as_slice()].concat();
        let body = [
            b"k8s\0\x0a\x13\x0a\x02v1\x12\x0dDeleteOptions\x12".as_slice(),
            &[raw.len() as u8],
            &raw,
        ]
        .concat();
        assert_eq!(
            decode(&body),
            Ok(json!({"apiVersion": "v1", "kind": "DeleteOptions",
                      "gracePeriodSeconds": 0, "propagationPolicy": "Background"}))
        );
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }
}

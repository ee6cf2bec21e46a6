//! Which pod holds which device, from the kubelet's PodResources API (`v1.PodResourcesLister/
//! List` on its Unix socket, `/var/lib/kubelet/pod-resources/kubelet.sock`): the device plugin's
//! device ids per container. NVIDIA's device plugin names a MIG device by its UUID (`MIG-…`),
//! which NVML reports for each compute instance, so a GPU instance is held when a pod's
//! container lists one of its UUIDs, whether or not a process runs on it yet.
//!
//! The call is one unary gRPC request over HTTP/2, written out here rather than generated: the
//! request has no fields and only five fields of the response are read (see [`decode`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};

const METHOD: &str = "/v1.PodResourcesLister/List";
/// The kubelet answers at once; a socket that does not is as good as absent.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Device ids held by pods: device id → `namespace/name` of the pod.
pub type Holdings = HashMap<String, String>;

/// Lists the devices every pod's containers hold.
pub async fn list(socket: &Path) -> Result<Holdings, String> {
    let at = |e: String| format!("PodResources {}: {e}", socket.display());
    tokio::time::timeout(TIMEOUT, call(socket))
        .await
        .map_err(|_| at(format!("no answer in {}s", TIMEOUT.as_secs())))?
        .map_err(at)
}

async fn call(socket: &Path) -> Result<Holdings, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(connection);
    // A gRPC message: no compression, length 0 (ListPodResourcesRequest has no fields).
    let request = hyper::Request::post(format!("http://localhost{METHOD}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("calling List: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("List answered HTTP {}", response.status()));
    }
    let collected = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let trailers = collected.trailers().cloned();
    if let Some(t) = &trailers {
        let status = t.get("grpc-status").and_then(|v| v.to_str().ok());
        if status.is_some_and(|s| s != "0") {
            let message = t.get("grpc-message").and_then(|v| v.to_str().ok());
            return Err(format!(
                "List failed: gRPC status {}: {}",
                status.unwrap_or("?"),
                message.unwrap_or("")
            ));
        }
    }
    let body = collected.to_bytes();
    let message = unframe(&body)?;
    decode(message)
}

/// The one message of a unary answer, without its 5-byte frame.
fn unframe(body: &[u8]) -> Result<&[u8], String> {
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!("answer of {} bytes, no gRPC message", body.len()));
    };
    if head[0] != 0 {
        return Err("compressed answer (none was asked)".into());
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    rest.get(..len)
        .ok_or_else(|| format!("message of {len} bytes cut short at {}", rest.len()))
}

/// `ListPodResourcesResponse { repeated PodResources pod_resources = 1; }` with
/// `PodResources { name = 1; namespace = 2; repeated ContainerResources containers = 3; }`,
/// `ContainerResources { repeated ContainerDevices devices = 2; }` and
/// `ContainerDevices { resource_name = 1; repeated string device_ids = 2; }`; every other
/// field is skipped.
pub fn decode(message: &[u8]) -> Result<Holdings, String> {
    let mut held = Holdings::new();
    for pod in fields(message, 1)? {
        let (mut name, mut namespace) = (String::new(), String::new());
        let mut ids = Vec::new();
        for (field, value) in Fields(pod) {
            match (field?, value) {
                (1, v) => name = text(v)?,
                (2, v) => namespace = text(v)?,
                (3, container) => {
                    for devices in fields(container, 2)? {
                        for id in fields(devices, 2)? {
                            ids.push(text(id)?);
                        }
                    }
                }
                _ => {}
            }
        }
        for id in ids {
            held.insert(id, format!("{namespace}/{name}"));
        }
    }
    Ok(held)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

/// The length-delimited values of field `wanted` in `message`.
fn fields(message: &[u8], wanted: u32) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    for (field, value) in Fields(message) {
        if field? == wanted {
            out.push(value);
        }
    }
    Ok(out)
}

/// A message's fields in order: (field number, bytes of a length-delimited value; empty for
/// the scalar kinds, which are skipped). An error ends it.
struct Fields<'m>(&'m [u8]);

impl<'m> Iterator for Fields<'m> {
    type Item = (Result<u32, String>, &'m [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let result = self.field();
        if result.is_err() {
            self.0 = &[];
        }
        Some(match result {
            Ok((field, value)) => (Ok(field), value),
            Err(e) => (Err(e), &[]),
        })
    }
}

impl<'m> Fields<'m> {
    fn field(&mut self) -> Result<(u32, &'m [u8]), String> {
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| "field number out of range")?;
        match key & 7 {
            0 => self.varint().map(|_| (field, &[][..])),
            1 => self.skip(8).map(|_| (field, &[][..])),
            5 => self.skip(4).map(|_| (field, &[][..])),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length out of range")?;
                self.skip(len).map(|value| (field, value))
            }
            kind => Err(format!("field {field}: wire type {kind} is not read")),
        }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err("a varint runs past the message".into())
    }

    fn skip(&mut self, n: usize) -> Result<&'m [u8], String> {
        if self.0.len() < n {
            return Err(format!("a value of {n} bytes runs past the message"));
        }
        let (value, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delimited(field: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(field << 3 | 2) as u8];
        let mut len = bytes.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn holdings_are_read_and_other_fields_skipped() {
        let devices = [
            delimited(1, b"nvidia.com/mig-3g.40gb"),
            delimited(2, b"MIG-aaaa"),
            delimited(2, b"MIG-bbbb"),
            // TopologyInfo, skipped.
            delimited(3, &delimited(1, &[8, 1])),
        ]
        .concat();
        let container = [
            delimited(1, b"train"),
            delimited(2, &devices),
            vec![3 << 3, 7], // cpu_ids (varint), skipped
        ]
        .concat();
        let pod = [
            delimited(1, b"p-0"),
            delimited(2, b"ml"),
            delimited(3, &container),
        ]
        .concat();
        let idle = [delimited(1, b"idle"), delimited(2, b"ml")].concat();
        let message = [delimited(1, &pod), delimited(1, &idle)].concat();
        let held = decode(&message).unwrap();
        assert_eq!(held.len(), 2);
        assert_eq!(held["MIG-aaaa"], "ml/p-0");
        assert_eq!(held["MIG-bbbb"], "ml/p-0");
        // Cut short: an error, never a partial answer taken as whole.
        assert!(decode(&message[..message.len() - 3]).is_err());
        let mut framed = vec![0, 0, 0, 0, message.len() as u8];
        framed.extend_from_slice(&message);
        assert_eq!(unframe(&framed).unwrap(), &message[..]);
        assert!(unframe(&framed[..framed.len() - 1]).is_err());
    }
}

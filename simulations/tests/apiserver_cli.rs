//! `basalt-sim apiserver`: serves on a free port, writes a kubeconfig naming it, answers
//! requests, and exits cleanly on SIGTERM; bad fault files are refused with a clear message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "basalt-sim-apiserver-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn serves_on_a_free_port_until_sigterm() {
    let dir = scratch("serve");
    let kc = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(["apiserver", "--listen", "127.0.0.1:0", "--write-kubeconfig"])
        .arg(&kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .strip_prefix("basalt-apiserver serving on ")
        .expect(&first)
        .to_string();
    let addr = url.strip_prefix("http://").unwrap().to_string();
    assert!(!addr.ends_with(":0"), "{addr}");
    let config = std::fs::read_to_string(&kc).unwrap();
    assert!(config.contains(&format!("server: {url}")), "{config}");

    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "GET /api/v1/namespaces/default HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""phase":"Active""#), "{reply}");

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_fault_file_names_the_file_and_field() {
    let dir = scratch("faults");
    let f = dir.join("faults.yaml");
    std::fs::write(
        &f,
        "rules:\n- verb: create\n  resource: pods/binding\n  probabilty: 0.3\n  code: 500\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(["apiserver", "--faults"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("faults.yaml") && err.contains("probabilty"),
        "{err}"
    );

    std::fs::write(
        &f,
        "rules:\n- resource: pods\n  probability: 1.5\n  code: 500\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-sim"))
        .args(["apiserver", "--faults"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fault rule 0") && err.contains("probability 1.5"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

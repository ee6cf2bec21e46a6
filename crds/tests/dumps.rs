//! Large dumps: a `kubectl get -o yaml` List is read item by item (the same objects, warnings and
//! errors as a whole read, in a fraction of the memory), and a file over the size limit is
//! refused before it is held.

use std::sync::Mutex;

use basalt_crds::{read_file, read_objects, Error, Loaded, ReadError};

/// Held by each test, so that the memory one measures only itself.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What `text` reads to, and what the whole read gives (a leading document marker keeps the
/// reader from cutting the List apart; the document is still document 1).
fn both(text: &str) -> (Result<Loaded, ReadError>, Result<Loaded, ReadError>) {
    (
        read_objects("dump.yaml", text),
        read_objects("dump.yaml", &format!("---\n{text}")),
    )
}

const NODE: &str = "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n0\n    labels: {a: b}\n  status:\n    allocatable: {cpu: \"8\", nvidia.com/gpu: \"8\"}\n";

#[test]
fn a_list_read_item_by_item_reads_as_the_whole() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let pod = "-\n  apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: ml}\n  spec:\n    containers:\n    - name: c\n      args:\n      - |\n        line one\n\n        - not an item\n      - >-\n        folded\n";
    let cases = [
        format!("apiVersion: v1\nitems:\n{NODE}{pod}- null\n# a comment\n\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"),
        // A typed list: items without their own kind take the list's.
        "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n".to_string(),
        // A kind Basalt does not read: a warning.
        format!("apiVersion: v1\nitems:\n- {{apiVersion: v1, kind: Service, metadata: {{name: s}}}}\n{NODE}kind: List\n"),
        // Anchors shared between items: read whole.
        "apiVersion: v1\nitems:\n- &n {apiVersion: v1, kind: Node, metadata: {name: a}}\n- *n\nkind: List\n".to_string(),
        // An item that cannot be typed, then one that does not parse: the syntax error wins.
        format!("apiVersion: v1\nitems:\n- {{apiVersion: v1, kind: Node, metadata: {{name: [x]}}}}\n{NODE}- {{a: [}}\nkind: List\n"),
        // An item that cannot be typed.
        format!("apiVersion: v1\nitems:\n{NODE}- {{apiVersion: v1, kind: Node, metadata: {{name: [x]}}}}\nkind: List\n"),
        // Not a List: an object with items.
        "apiVersion: v1\nkind: Thing\nitems:\n- a\n".to_string(),
    ];
    for text in &cases {
        let (cut, whole) = both(text);
        match (&cut, &whole) {
            // A syntax error's line counts the marker added to the whole read.
            (Err(a), Err(b)) if a.message.contains("invalid YAML") => {
                assert!(b.message.contains("invalid YAML"), "{a}\n{b}\n{text}")
            }
            _ => assert_eq!(cut, whole, "{text}"),
        }
    }
}

/// The peak resident memory of this process, in bytes (Linux).
fn peak() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A 16 MiB dump read whole took 41 times its size at its peak (a debug build); read item by
/// item, 18 times, nearly all of it the typed pods that stay.
#[test]
fn a_large_list_is_read_in_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    let mut i = 0;
    while text.len() < 16 << 20 {
        text.push_str(&format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: w-{i}\n    namespace: ml\n    labels: {{app: trainer, index: \"{i}\"}}\n  spec:\n    nodeName: n0\n    containers:\n    - name: main\n      image: trainer:1\n      resources:\n        requests: {{cpu: 100m, memory: 1Gi}}\n  status:\n    phase: Succeeded\n"
        ));
        i += 1;
    }
    let Some(before) = peak() else { return };
    let loaded = read_objects("dump.yaml", &text).unwrap();
    assert_eq!(loaded.objects.len(), i);
    let grown = peak().unwrap().saturating_sub(before);
    assert!(
        grown < 25 * text.len(),
        "{grown} bytes at the peak for {} bytes of text",
        text.len()
    );
}

#[test]
fn a_file_over_the_limit_is_refused_without_being_held() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Endless: the whole read would never end (or take all memory).
    if std::path::Path::new("/dev/zero").exists() {
        let e = read_file("/dev/zero".as_ref()).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "/dev/zero: more than 67108864 bytes, the limit of 64 MiB a file"
        );
    }
    // One byte over, sparse.
    let path = std::env::temp_dir().join(format!("basalt-dumps-{}-big.yaml", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    file.set_len((64 << 20) + 1).unwrap();
    let e = read_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(
        e.to_string()
            .ends_with("big.yaml: more than 67108864 bytes, the limit of 64 MiB a file"),
        "{e}"
    );
}

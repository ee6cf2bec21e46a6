//! Helpers shared by the integration tests.
#![allow(dead_code)]

use basalt_crds::{read_objects, Loaded, Object};

/// Reads a file under `tests/data`, labelled by its bare name.
pub fn data(name: &str) -> Loaded {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    read_objects(name, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Reads inline text, labelled `name`, and panics on error.
pub fn objects(name: &str, text: &str) -> Vec<(String, Object)> {
    read_objects(name, text)
        .unwrap_or_else(|e| panic!("{e}"))
        .objects
}

//! A `kubectl get -o yaml` dump read one item at a time.
//!
//! Such a dump is one YAML document, a `List` whose `items` hold every object. The YAML reader
//! keeps every event of a document until the document ends, so reading it whole holds the
//! whole dump as events and then as values (about 25 times the text: 1.5 GB for 60 MiB) before
//! the first object is typed. Its items are cut apart by their lines instead: each `- ` at the
//! start of a line under a top-level `items:` opens one, and each is read on its own.
//!
//! Any text this cutting could misread (anchors shared between items, a scalar running past
//! the lines cut at) fails to parse somewhere, and then the document is read whole as before,
//! so the objects, warnings and errors are always those of the whole read.

use serde::de::IgnoredAny;
use serde_json::Value;

use super::{is_document_marker, read_value, Loaded, Place, ReadError};

/// A single-document file whose top level is a block mapping with a block `items:` sequence.
struct Cut<'t> {
    /// The document without its items (`items:` left empty, so null).
    skeleton: String,
    /// Each item's lines, from its `- `.
    items: Vec<&'t str>,
}

/// The objects of `text` read item by item; `None` when it is not a dump of that form or any
/// part fails to parse (the caller then reads it whole, which says why).
pub(super) fn read_by_item(file: &str, text: &str) -> Option<Result<Loaded, ReadError>> {
    let cut = cut(text)?;
    let place = Place {
        file,
        document: 1,
        item: None,
    };
    let skeleton: Value = serde_yaml::from_str(&cut.skeleton).ok()?;
    let map = skeleton.as_object()?;
    let kind = map.get("kind")?.as_str()?;
    let api_version = map.get("apiVersion")?.as_str()?;
    let item_kind = kind.strip_suffix("List")?;
    if !map.get("items").is_some_and(Value::is_null) {
        return None;
    }
    let inherit = (!item_kind.is_empty()).then_some((api_version, item_kind));
    let mut loaded = Loaded::default();
    for (i, item) in cut.items.iter().enumerate() {
        let place = Place {
            item: Some(i),
            ..place
        };
        let value = match serde_yaml::from_str::<Value>(item).ok()? {
            Value::Array(mut one) if one.len() == 1 => one.pop().expect("one"),
            _ => return None,
        };
        if value.is_null() {
            continue;
        }
        if let Err(e) = read_value(place, value, inherit, &mut loaded) {
            // The whole read stops at a later item that does not parse before it types any.
            let rest_parses = (cut.items[i + 1..].iter())
                .all(|item| serde_yaml::from_str::<IgnoredAny>(item).is_ok());
            return rest_parses.then_some(Err(e));
        }
    }
    Some(Ok(loaded))
}

/// Cuts `text` into its skeleton and items, or `None` when it is not one block `List`.
fn cut(text: &str) -> Option<Cut<'_>> {
    let mut skeleton = String::new();
    let mut items: Vec<&str> = Vec::new();
    // Byte offset where the item being read began, while under `items:`.
    let mut item_start: Option<usize> = None;
    let mut under_items = false;
    let mut seen_items = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        if is_document_marker(line) {
            return None;
        }
        if under_items {
            let opens = line.starts_with("- ") || line.trim_end() == "-";
            let inside = line.starts_with(' ') || is_blank_or_comment(line);
            if opens {
                if let Some(start) = item_start.replace(at) {
                    items.push(&text[start..at]);
                }
                continue;
            }
            if inside && item_start.is_some() {
                continue;
            }
            if let Some(start) = item_start.take() {
                items.push(&text[start..at]);
            }
            under_items = false;
        }
        if is_items_key(line) {
            if seen_items {
                return None;
            }
            seen_items = true;
            under_items = true;
        }
        skeleton.push_str(line);
    }
    if let Some(start) = item_start {
        items.push(&text[start..]);
    }
    seen_items.then_some(Cut { skeleton, items })
}

/// `items:` at the top level with nothing after it but a comment.
fn is_items_key(line: &str) -> bool {
    line.strip_prefix("items:").is_some_and(|rest| {
        let rest = rest.trim();
        rest.is_empty() || rest.starts_with('#')
    })
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_is_cut_into_its_items() {
        let text = "apiVersion: v1\nitems:\n- kind: Node\n  metadata: {name: a}\n\n# c\n-\n  kind: Pod\n- null\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
        let cut = cut(text).unwrap();
        assert_eq!(
            cut.items,
            [
                "- kind: Node\n  metadata: {name: a}\n\n# c\n",
                "-\n  kind: Pod\n",
                "- null\n"
            ]
        );
        assert_eq!(
            cut.skeleton,
            "apiVersion: v1\nitems:\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"
        );
        assert!(serde_yaml::from_str::<Value>(&cut.skeleton).is_ok());
    }

    #[test]
    fn other_shapes_are_not_cut() {
        // Several documents, a flow list, no items, items twice.
        for text in [
            "---\nkind: List\nitems:\n- {kind: Node}\n",
            "kind: List\nitems: [{kind: Node}]\n",
            "kind: Node\nmetadata: {name: a}\n",
            "items:\n- a\nitems:\n- b\n",
        ] {
            assert!(
                cut(text).is_none() || cut(text).unwrap().items.is_empty(),
                "{text}"
            );
        }
    }
}

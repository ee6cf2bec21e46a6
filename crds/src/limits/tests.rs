use super::*;

fn depth_error(text: &str) -> Option<usize> {
    check("f.yaml", text).err().and_then(|e| e.line)
}

fn nested(open: &str, close: &str, n: usize) -> String {
    format!("spec: {}1{}\n", open.repeat(n), close.repeat(n))
}

#[test]
fn flow_nesting_over_the_limit_is_refused_with_its_line() {
    assert_eq!(depth_error(&nested("[", "]", MAX_DEPTH - 1)), None);
    let err = check("deep.yaml", &format!("a: 1\n{}", nested("{a: ", "}", 100))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "deep.yaml: line 2: nested more than 64 deep, the limit"
    );
    assert_eq!(depth_error(&format!("[{}]", "[".repeat(70))), Some(1));
}

#[test]
fn block_nesting_counts_too() {
    let deep: String = (0..70)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    assert_eq!(depth_error(&deep), Some(MAX_DEPTH + 1));
    let seqs = format!("{}x\n", "- ".repeat(70));
    assert_eq!(depth_error(&seqs), Some(1));
    let shallow: String = (0..60)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    assert_eq!(depth_error(&shallow), None);
}

#[test]
fn brackets_in_text_do_not_nest() {
    let many = "[".repeat(200);
    for text in [
        format!("a: \"{many}\"\n"),
        format!("a: '{many}'\n"),
        format!("a: x{many}\n"),
        format!("# {many}\na: 1\n"),
        format!("a: |\n  {many}\n  more\nb: 2\n"),
        format!("a: >-\n\n   {many}\nb: 2\n"),
        format!("a: !tag{many}\n"),
        format!("a: x#{many}\n"),
        format!("{{\"k\": \"{many}\\\"\"}}\n"),
    ] {
        assert_eq!(depth_error(&text), None, "{text}");
    }
}

#[test]
fn text_that_ends_does_not_hide_nesting() {
    let deep = "[".repeat(70);
    for text in [
        // The quote closes: what follows nests.
        format!("a: \"x\"\nb: {deep}\n"),
        format!("a: 'it''s'\nb: {deep}\n"),
        // A quote inside a plain scalar is text, not the start of a quoted one.
        format!("a: it's\nb: {deep}\n"),
        format!("a: x \"y\nb: {deep}\n"),
        // The block literal ends at the first line indented no deeper than its parent.
        format!("- a: |\n   text\n  {deep}\n"),
        format!("a: |\n  text\n{deep}\n"),
        // A `#` after a blank inside a quoted key is text, not a comment.
        format!("{{\"a #\": {deep}}}\n"),
        // Unicode line separators end lines as in libyaml.
        format!("a: 'x'\u{2028}b: {deep}\n"),
    ] {
        assert!(depth_error(&text).is_some(), "{text}");
    }
}

#[test]
fn size_limit() {
    let big = " ".repeat(MAX_BYTES + 1);
    let err = check("big.yaml", &big).unwrap_err();
    assert_eq!(err.line, None);
    assert!(
        err.to_string().starts_with("big.yaml: 67108865 bytes"),
        "{err}"
    );
}

#[test]
fn kubernetes_manifests_pass() {
    let text = include_str!("../../../examples/cluster.yaml");
    check("cluster.yaml", text).unwrap();
    let json = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"In","values":["x"]}]}]}}}}}]}"#;
    check("list.json", json).unwrap();
}

//! Field formatting for the text log (`--log-format text`) that keeps one event on one line.
//!
//! Values come from users' objects (a PodGroup's `spec.queue`, names, error messages), and
//! tracing-subscriber's default text fields write `%value` and messages raw: a newline in a
//! queue name would start a line that looks like a log line of its own. Here every control
//! character (C0, DEL, C1, and the Unicode line and paragraph separators) in a message or a
//! value is written as an escape (`\n`, `\r`, `\t`, `\u{1b}`). The JSON log escapes on its own.
//!
//! The node agent's text log uses this file too (`#[path]` in its `main.rs`).

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// Formats an event's or span's fields as the default text log does (`message a=1 b="x"`),
/// escaping control characters (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = Visitor {
            out: Escaping(&mut writer),
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a, W: Write> {
    out: Escaping<'a, W>,
    first: bool,
    result: fmt::Result,
}

impl<W: Write> Visit for Visitor<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // A message is written as it is, other strings quoted, as by default.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{}", ErrorChain(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // What the `log` crate's records carry as fields: the line's metadata says it already.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let pad = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        self.result = match name {
            "message" => write!(self.out, "{pad}{value:?}"),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                write!(self.out, "{pad}{name}={value:?}")
            }
        };
    }
}

/// An error and its sources: `outer: inner`.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

/// Writes through to `W`, escaping control characters.
pub struct Escaping<'a, W: Write>(pub &'a mut W);

impl<W: Write> Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Most text has nothing to escape: one write.
        if !s.chars().any(escaped) {
            return self.0.write_str(s);
        }
        for c in s.chars() {
            if escaped(c) {
                write!(self.0, "{}", c.escape_default())?;
            } else {
                self.0.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// Control characters (`\n`, `\r`, `\t`, ESC, the rest of C0, DEL, C1) and the Unicode line
/// and paragraph separators.
fn escaped(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log that keeps what it is written.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn logged(events: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, events);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn control_characters_in_messages_and_values_are_escaped() {
        let hostile = "a\nb\rc\td\x1b[31me\u{85}f\u{2028}g\x07";
        let text = logged(|| {
            let span = tracing::info_span!("cycle", queue = %hostile);
            let _in = span.enter();
            tracing::info!(queue = %hostile, debug = ?hostile, n = 3, "PodGroup {hostile} skipped");
            tracing::warn!(
                error = &io::Error::other(hostile) as &(dyn std::error::Error + 'static)
            );
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let escaped = r"a\nb\rc\td\u{1b}[31me\u{85}f\u{2028}g\u{7}";
        assert!(
            lines[0].contains(&format!("cycle{{queue={escaped}}}")),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(&format!("PodGroup {escaped} skipped queue={escaped}")),
            "{}",
            lines[0]
        );
        // `?` values were escaped by Debug already, and stay as they were.
        assert!(
            lines[0].contains(r#"debug="a\nb\rc\td\u{1b}[31me"#),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with(" n=3"), "{}", lines[0]);
        assert!(
            lines[1].contains(&format!("error={escaped}")),
            "{}",
            lines[1]
        );
        assert!(!text.contains('\x1b') && !text.contains('\r') && !text.contains('\t'));
    }

    #[test]
    fn plain_fields_look_as_by_default() {
        let ours = logged(|| tracing::info!(queue = "team", n = 3, r#type = %"x", "bound"));
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(
            subscriber,
            || tracing::info!(queue = "team", n = 3, r#type = %"x", "bound"),
        );
        let theirs = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        // Past the timestamp.
        let tail = |s: &str| s.split_once(" INFO ").unwrap().1.to_string();
        assert_eq!(tail(&ours), tail(&theirs));
    }
}

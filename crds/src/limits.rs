//! Limits checked before a YAML or JSON parser sees a manifest or a config file.
//!
//! The YAML parser (libyaml, through `yaml_serde`) spends time quadratic in the nesting of flow
//! collections (`{a: {a: {a: ...}}}`, `[[[...]]]`) before its own recursion limit applies: a
//! 250 KB file took 45 s in a debug build. [`check`] refuses such input in one linear pass, with
//! an error naming the file, the line and the limit:
//!
//! - [`MAX_BYTES`] (64 MiB) for one file: a `kubectl get -o yaml` dump of 10,000 nodes and
//!   100,000 pods is well under it.
//! - [`MAX_DEPTH`] (64) nested collections, flow and block together: Kubernetes objects nest
//!   about 15 deep (a pod's node affinity expressions are the deepest Basalt reads), and the
//!   YAML reader refuses anything beyond 128 anyway.
//!
//! Bounds on what one object may add, checked when it is converted:
//!
//! - [`MAX_DRA_DEVICES_PER_NODE`] (4,096) DRA devices of a node's own ResourceSlices (and of a
//!   pool reaching several nodes): 32 full slices of 128, far above a GPU node with every MIG
//!   instance or a NIC with every virtual function. Each device costs the reader and the
//!   allocator memory per node that reaches it (100,000 on one node took 770 MB); past the
//!   bound none of them is used, with a warning naming the slice. GPUs per node are bounded by
//!   the engine (64, `MAX_GPUS_PER_NODE`) and quantities by `quantity::MAX_QUANTITY` (2^60).
//!
//! The depth comes from a small scanner that follows libyaml's tokenizer (`scanner.c`) where it
//! decides what nests: flow collection indicators, block indentation (sequence entries and
//! mapping keys), and the scalars, comments and block literals whose text does not nest. It
//! must never see less nesting than libyaml does, so it follows the same rules rather than
//! guessing from brackets; where libyaml would stop with an error, the scan stops too (the
//! parser reports the error). JSON is flow YAML, so the same scan covers JSON input.

use std::fmt;

use thiserror::Error;

/// The largest file Basalt reads, in bytes.
pub const MAX_BYTES: usize = 64 << 20;
/// The deepest nesting of collections Basalt reads.
pub const MAX_DEPTH: usize = 64;
/// The most DRA devices a node's own ResourceSlices (or one pool reaching several nodes) may
/// publish for Basalt to use them.
pub const MAX_DRA_DEVICES_PER_NODE: usize = 4096;

/// Input over a limit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct LimitError {
    pub file: String,
    /// 1-based line where the limit was crossed; none for the file size.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}: line {line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Checks `text` against [`MAX_BYTES`] and [`MAX_DEPTH`]; `file` names it in the error.
pub fn check(file: &str, text: &str) -> Result<(), LimitError> {
    if text.len() > MAX_BYTES {
        return Err(LimitError {
            file: file.to_string(),
            line: None,
            message: format!(
                "{} bytes, more than the limit of {} MiB",
                text.len(),
                MAX_BYTES >> 20
            ),
        });
    }
    let mut scan = Scan::new(text.as_bytes());
    match scan.run() {
        Ok(()) => Ok(()),
        Err(line) => Err(LimitError {
            file: file.to_string(),
            line: Some(line),
            message: format!("nested more than {MAX_DEPTH} deep, the limit"),
        }),
    }
}

/// The scan's outcome: `Err(line)` when the depth limit is crossed on that 1-based line.
type Outcome = Result<(), usize>;

/// Why a scan ends early.
enum Stop {
    /// libyaml would fail here: the parser reports it, nothing after it is parsed.
    Invalid,
    /// The depth limit was crossed on this 1-based line.
    TooDeep(usize),
}

/// libyaml's tokenizer state, as far as nesting depends on it.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    line: usize,
    col: i64,
    flow: usize,
    /// Enclosing block indentations (libyaml's `indents`); their number is the block depth.
    indents: Vec<i64>,
    indent: i64,
    simple_key_allowed: bool,
    /// A possible simple key in block context: (line, byte index, column) of its start.
    key: Option<(usize, usize, i64)>,
}

impl<'a> Scan<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scan {
            b,
            i: 0,
            line: 0,
            col: 0,
            flow: 0,
            indents: Vec::new(),
            indent: -1,
            simple_key_allowed: true,
            key: None,
        }
    }

    fn run(&mut self) -> Outcome {
        match self.tokens() {
            Ok(()) | Err(Stop::Invalid) => Ok(()),
            Err(Stop::TooDeep(line)) => Err(line),
        }
    }

    fn at(&self, k: usize) -> u8 {
        // NUL stands for the end, as in libyaml (which refuses a NUL in the input).
        self.b.get(self.i + k).copied().unwrap_or(0)
    }

    fn is_break(&self, k: usize) -> bool {
        let s = &self.b[(self.i + k).min(self.b.len())..];
        matches!(
            s,
            [b'\r' | b'\n', ..] | [0xC2, 0x85, ..] | [0xE2, 0x80, 0xA8 | 0xA9, ..]
        )
    }

    fn is_blank(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    fn is_blankz(&self, k: usize) -> bool {
        self.is_blank(k) || self.is_break(k) || self.at(k) == 0
    }

    fn is_breakz(&self, k: usize) -> bool {
        self.is_break(k) || self.at(k) == 0
    }

    /// Moves over one character (one column).
    fn skip(&mut self) {
        let width = match self.at(0) {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        self.i = (self.i + width).min(self.b.len());
        self.col += 1;
    }

    /// Moves over a run of printable ASCII bytes outside `stop`: the bulk of any scalar, taken
    /// at once. Returns whether it moved.
    fn skip_run(&mut self, stop: &[u8]) -> bool {
        let start = self.i;
        while let Some(&c) = self.b.get(self.i) {
            if !(b'!'..=b'~').contains(&c) || stop.contains(&c) {
                break;
            }
            self.i += 1;
        }
        self.col += (self.i - start) as i64;
        self.i > start
    }

    /// Moves over one line break.
    fn skip_line(&mut self) {
        let width = match self.b[self.i..] {
            [b'\r', b'\n', ..] => 2,
            [b'\r' | b'\n', ..] => 1,
            [0xC2, ..] => 2,
            _ => 3,
        };
        self.i += width;
        self.line += 1;
        self.col = 0;
    }

    fn document_marker(&self) -> bool {
        self.col == 0
            && matches!(
                &self.b[self.i..],
                [b'-', b'-', b'-', ..] | [b'.', b'.', b'.', ..]
            )
            && self.is_blankz(3)
    }

    fn depth(&self) -> usize {
        self.flow + self.indents.len()
    }

    fn check_depth(&self) -> Result<(), Stop> {
        match self.depth() > MAX_DEPTH {
            true => Err(Stop::TooDeep(self.line + 1)),
            false => Ok(()),
        }
    }

    fn roll_indent(&mut self, column: i64) -> Result<(), Stop> {
        if self.flow == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
            self.check_depth()?;
        }
        Ok(())
    }

    fn unroll_indent(&mut self, column: i64) {
        if self.flow == 0 {
            while self.indent > column {
                self.indent = self.indents.pop().unwrap_or(-1);
            }
        }
    }

    /// Only the block context's simple key moves the indentation; flow levels' keys do not.
    fn save_key(&mut self) {
        if self.flow == 0 && self.simple_key_allowed {
            self.key = Some((self.line, self.i, self.col));
        }
    }

    fn remove_key(&mut self) {
        if self.flow == 0 {
            self.key = None;
        }
    }

    fn tokens(&mut self) -> Result<(), Stop> {
        loop {
            self.skip_to_next_token();
            // A simple key ends at its line, or 1024 bytes on.
            if let Some((line, index, _)) = self.key {
                if line < self.line || index + 1024 < self.i {
                    self.key = None;
                }
            }
            self.unroll_indent(self.col);
            let c = self.at(0);
            if c == 0 {
                return Ok(());
            }
            if self.col == 0 && c == b'%' {
                while !self.is_breakz(0) {
                    self.skip();
                }
                continue;
            }
            if self.document_marker() {
                if self.flow > 0 {
                    return Err(Stop::Invalid);
                }
                self.unroll_indent(-1);
                self.remove_key();
                self.simple_key_allowed = false;
                (0..3).for_each(|_| self.skip());
                continue;
            }
            match c {
                b'[' | b'{' => {
                    self.save_key();
                    self.flow += 1;
                    self.check_depth()?;
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_key();
                    self.flow = self.flow.saturating_sub(1);
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if self.is_blankz(1) => {
                    self.roll_indent(self.col)?;
                    self.remove_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if self.flow > 0 || self.is_blankz(1) => {
                    self.roll_indent(self.col)?;
                    self.remove_key();
                    self.simple_key_allowed = self.flow == 0;
                    self.skip();
                }
                b':' if self.flow > 0 || self.is_blankz(1) => {
                    let key = if self.flow == 0 {
                        self.key.take()
                    } else {
                        None
                    };
                    match key {
                        Some((_, _, column)) => {
                            self.roll_indent(column)?;
                            self.simple_key_allowed = false;
                        }
                        None => {
                            self.roll_indent(self.col)?;
                            self.simple_key_allowed = self.flow == 0;
                        }
                    }
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    while self.at(0).is_ascii_alphanumeric() || matches!(self.at(0), b'-' | b'_') {
                        self.skip();
                    }
                }
                b'!' => {
                    // A tag: everything up to a blank (libyaml takes a subset of it, or fails).
                    self.save_key();
                    self.simple_key_allowed = false;
                    while !self.is_blankz(0) {
                        self.skip();
                    }
                }
                b'|' | b'>' if self.flow == 0 => {
                    self.remove_key();
                    self.simple_key_allowed = true;
                    self.block_scalar()?;
                }
                b'\'' | b'"' => {
                    self.save_key();
                    self.simple_key_allowed = false;
                    self.quoted_scalar(c == b'\'')?;
                }
                _ if self.plain_starts() => {
                    self.save_key();
                    self.simple_key_allowed = false;
                    self.plain_scalar()?;
                }
                _ => return Err(Stop::Invalid),
            }
        }
    }

    /// Skips blanks, comments and line breaks before the next token.
    fn skip_to_next_token(&mut self) {
        loop {
            if self.col == 0 && self.b[self.i..].starts_with("\u{FEFF}".as_bytes()) {
                self.skip();
            }
            while self.at(0) == b' '
                || ((self.flow > 0 || !self.simple_key_allowed) && self.at(0) == b'\t')
            {
                self.skip();
            }
            if self.at(0) == b'#' {
                while !self.is_breakz(0) {
                    self.skip();
                }
            }
            if !self.is_break(0) {
                return;
            }
            self.skip_line();
            if self.flow == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    fn plain_starts(&self) -> bool {
        let c = self.at(0);
        let indicator = b"-?:,[]{}#&*!|>'\"%@`".contains(&c);
        !(self.is_blankz(0) || indicator)
            || (c == b'-' && !self.is_blank(1))
            || (self.flow == 0 && matches!(c, b'?' | b':') && !self.is_blankz(1))
    }

    fn plain_scalar(&mut self) -> Result<(), Stop> {
        let indent = self.indent + 1;
        let mut leading_blanks = false;
        loop {
            if self.document_marker() || self.at(0) == b'#' {
                break;
            }
            while !self.is_blankz(0) {
                if self.skip_run(b":,[]{}") {
                    leading_blanks = false;
                    continue;
                }
                let c = self.at(0);
                if self.flow > 0 && c == b':' && b",?[]{}".contains(&self.at(1)) {
                    return Err(Stop::Invalid);
                }
                if (c == b':' && self.is_blankz(1)) || (self.flow > 0 && b",[]{}".contains(&c)) {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    if leading_blanks && self.col < indent && self.at(0) == b'\t' {
                        return Err(Stop::Invalid);
                    }
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if self.flow == 0 && self.col < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        Ok(())
    }

    fn quoted_scalar(&mut self, single: bool) -> Result<(), Stop> {
        let quote = if single { b'\'' } else { b'"' };
        self.skip();
        loop {
            if self.document_marker() || self.at(0) == 0 {
                return Err(Stop::Invalid);
            }
            while !self.is_blankz(0) {
                if self.skip_run(b"'\"\\") {
                    continue;
                }
                let c = self.at(0);
                if single && c == b'\'' && self.at(1) == b'\'' {
                    self.skip();
                    self.skip();
                } else if c == quote {
                    self.skip();
                    return Ok(());
                } else if !single && c == b'\\' && self.is_break(1) {
                    self.skip();
                    self.skip_line();
                    break;
                } else if !single && c == b'\\' {
                    // The escaped character never ends the scalar.
                    self.skip();
                    if self.at(0) == 0 {
                        return Err(Stop::Invalid);
                    }
                    self.skip();
                } else {
                    self.skip();
                }
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    self.skip();
                } else {
                    self.skip_line();
                }
            }
        }
    }

    fn block_scalar(&mut self) -> Result<(), Stop> {
        self.skip();
        let mut increment = 0;
        let digit = |c: u8| c.is_ascii_digit().then(|| i64::from(c - b'0'));
        if matches!(self.at(0), b'+' | b'-') {
            self.skip();
            if let Some(d) = digit(self.at(0)) {
                if d == 0 {
                    return Err(Stop::Invalid);
                }
                increment = d;
                self.skip();
            }
        } else if let Some(d) = digit(self.at(0)) {
            if d == 0 {
                return Err(Stop::Invalid);
            }
            increment = d;
            self.skip();
            if matches!(self.at(0), b'+' | b'-') {
                self.skip();
            }
        }
        while self.is_blank(0) {
            self.skip();
        }
        if self.at(0) == b'#' {
            while !self.is_breakz(0) {
                self.skip();
            }
        }
        if !self.is_breakz(0) {
            return Err(Stop::Invalid);
        }
        if self.is_break(0) {
            self.skip_line();
        }
        let mut indent = match increment {
            0 => 0,
            n if self.indent >= 0 => self.indent + n,
            n => n,
        };
        self.block_breaks(&mut indent)?;
        while self.col == indent && self.at(0) != 0 {
            while !self.is_breakz(0) {
                self.skip();
            }
            if self.at(0) == 0 {
                break;
            }
            self.skip_line();
            self.block_breaks(&mut indent)?;
        }
        Ok(())
    }

    /// Skips a block scalar's indentation and empty lines; sets an undetermined `indent` as
    /// libyaml does (the deepest of those lines, at least one past the enclosing block).
    fn block_breaks(&mut self, indent: &mut i64) -> Result<(), Stop> {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.col < *indent) && self.at(0) == b' ' {
                self.skip();
            }
            max_indent = max_indent.max(self.col);
            if (*indent == 0 || self.col < *indent) && self.at(0) == b'\t' {
                return Err(Stop::Invalid);
            }
            if !self.is_break(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! Lines of the generated Metal text mapped back to what the user wrote: the body or header of a
//! body kernel (MLX wraps them in a signature of its own), or the lines of a `.metal` file.

use rustc_hash::FxHashMap;

/// The last line of a compile error mapped onto the user's lines: where the whole generated
/// unit can be read (the Python package shows its own way, `kernel.translate(...)`).
pub const GENERATED_SOURCE_HINT: &str = "(the generated source: `kiln translate SPEC --emit cpu` or `--emit cuda`)";

use crate::error::Error;
use crate::program::{MetalProgram, ProgramKind};

/// A line of the user's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserLine {
    /// `"body"`, `"header"` or `"source"` (a whole `.metal` file).
    pub part: &'static str,
    /// 1-based within that part.
    pub line: u32,
    /// The line's text.
    pub text: String,
    /// For a line of a header the `.metal` file includes: the header's name as the `#include`
    /// found it (`part` is then `"source"`).
    pub file: Option<String>,
}

impl UserLine {
    /// `body line N`, or `NAME line N` for a line of an included header.
    pub fn label(&self) -> String {
        format!("{} line {}", self.file.as_deref().unwrap_or(self.part), self.line)
    }
}

/// How the lines of one program's Metal text map to the user's.
#[derive(Clone, Debug)]
pub struct UserLines {
    file: String,
    lines: Vec<String>,
    /// Body kernels: the header's last line and the body's first and last lines, in the
    /// generated text (1-based).
    header_end: u32,
    body: Option<(u32, u32)>,
    /// `.metal` files with headers pasted in: the name the pasted text gives the file itself
    /// after a header, and the text of each line of the file and of its headers by (name, line),
    /// as their `#line` directives say.
    main_name: Option<String>,
    included: FxHashMap<(String, u32), String>,
    names: Vec<String>,
}

/// The file name compiler messages use for the user's Metal text (the generated unit's `#line`).
pub fn user_file_name(program: &MetalProgram) -> String {
    let safe: String =
        program.kernel.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("{safe}.metal")
}

impl UserLines {
    /// The map of `program`.
    pub fn of(program: &MetalProgram) -> UserLines {
        let source = &program.source;
        let lines: Vec<String> = source.lines().map(str::to_string).collect();
        let file = user_file_name(program);
        if program.kind == ProgramKind::FullFile {
            let (main_name, included) = included_lines(program, &lines);
            let mut names: Vec<String> = included.keys().map(|(name, _)| name.clone()).collect();
            names.sort_unstable();
            names.dedup();
            return UserLines { file, lines, header_end: 0, body: None, main_name, included, names };
        }
        let signature = format!("[[kernel]] void {}(\n", program.function);
        let Some(sig) = source.rfind(&signature) else {
            return UserLines {
                file,
                lines,
                header_end: 0,
                body: None,
                main_name: None,
                included: FxHashMap::default(),
                names: Vec::new(),
            };
        };
        let line_of = |offset: usize| source[..offset].matches('\n').count() as u32 + 1;
        let mut header_end = line_of(sig) - 1;
        if header_end > 0 && lines.get(header_end as usize - 1).is_some_and(|l| l.starts_with("template <")) {
            header_end -= 1;
        }
        let body = source[sig..].find(") {\n").map(|open| {
            let start = line_of(sig + open + 4);
            let close = source.rfind("\n}\n").map_or(lines.len() as u32, line_of);
            (start, close.max(start))
        });
        UserLines { file, lines, header_end, body, main_name: None, included: FxHashMap::default(), names: Vec::new() }
    }

    /// The user's line for line `generated` of the Metal text; `None` for lines kiln wrote.
    pub fn map(&self, generated: u32) -> Option<UserLine> {
        let text = self.lines.get(generated.checked_sub(1)? as usize)?.clone();
        let Some((start, end)) = self.body else {
            return Some(UserLine { part: "source", line: generated, text, file: None });
        };
        if generated <= self.header_end {
            return Some(UserLine { part: "header", line: generated, text, file: None });
        }
        if generated >= start && generated <= end {
            return Some(UserLine { part: "body", line: generated - start + 1, text, file: None });
        }
        None
    }

    /// The part (`"body"`, `"header"` or `"source"`) line `generated` of the Metal text belongs
    /// to; `None` for lines kiln wrote.
    pub fn part_of(&self, generated: u32) -> Option<&'static str> {
        if generated == 0 || generated as usize > self.lines.len() {
            return None;
        }
        let Some((start, end)) = self.body else { return Some("source") };
        if generated <= self.header_end {
            return Some("header");
        }
        (generated >= start && generated <= end).then_some("body")
    }

    /// The innermost frame of an inline chain (`file`, line) that lies in the user's text: the
    /// program's own lines, or those of a header a `.metal` file includes.
    pub fn site(&self, frames: &[(String, u32)]) -> Option<UserLine> {
        frames.iter().find_map(|(f, l)| {
            if f.ends_with(&self.file) {
                return self.map(*l);
            }
            let name = self.names.iter().find(|name| f == *name || f.ends_with(&format!("/{name}")))?;
            let text = self.included.get(&(name.clone(), *l))?;
            // The file itself goes by the library's name (with `"` and `\\` as `_` after defines).
            let main = self.main_name.as_ref().is_some_and(|m| name == m || *name == m.replace(['"', '\\'], "_"));
            let file = (!main).then(|| name.clone());
            Some(UserLine { part: "source", line: *l, text: text.clone(), file })
        })
    }

    /// The file name the generated unit gives the user's text.
    pub fn file_name(&self) -> &str {
        &self.file
    }
}

/// The lines of a `.metal` file's text under `#line N "name"` directives (its headers pasted in
/// place of their `#include`s, see `preprocess::resolve_includes`) by (name, line), and the name
/// the file itself goes by there (the library's name, before the function in `program.kernel`).
fn included_lines(program: &MetalProgram, lines: &[String]) -> (Option<String>, FxHashMap<(String, u32), String>) {
    let mut included = FxHashMap::default();
    let mut at: Option<(String, u32)> = None;
    for text in lines {
        if let Some((n, name)) = line_directive(text) {
            at = Some((name, n));
            continue;
        }
        if let Some((name, n)) = at.as_mut() {
            included.insert((name.clone(), *n), text.clone());
            *n += 1;
        }
    }
    if included.is_empty() {
        return (None, included);
    }
    (program.kernel.rsplit_once(':').map(|(lib, _)| lib.to_string()), included)
}

/// `(N, name)` of a line `#line N "name"`.
fn line_directive(text: &str) -> Option<(u32, String)> {
    let rest = text.trim_start().strip_prefix('#')?.trim_start().strip_prefix("line")?;
    let (n, name) = rest.trim().split_once(char::is_whitespace)?;
    let name = name.trim().strip_prefix('"')?.strip_suffix('"')?;
    Some((n.parse().ok()?, name.replace("\\\\", "\\").replace("\\\"", "\"")))
}

/// `line` as an excerpt: its number and text, then a caret under `name` where the line holds it
/// as a word (else under its first character).
pub fn excerpt(line: &UserLine, name: Option<&str>) -> String {
    let gutter = line.label();
    let text = line.text.trim_end();
    let column = name.and_then(|n| word_at(text, n)).unwrap_or_else(|| text.len() - text.trim_start().len());
    let pad: String = text[..column].chars().map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    format!("  {gutter} | {text}\n  {} | {pad}^", " ".repeat(gutter.len()))
}

/// Byte offset of `name` as a whole identifier in `text`.
fn word_at(text: &str, name: &str) -> Option<usize> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = text[from..].find(name).map(|i| i + from) {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        if !before.is_some_and(ident) && !after.is_some_and(ident) {
            return Some(i);
        }
        from = i + name.len();
    }
    None
}

/// `error` with its compiler log rewritten for the user (`Error::Compile` of a program's
/// library or cubin): every message about the user's text names the body, header or file line
/// with an excerpt and a caret at the column, in place of the generated unit's file and line;
/// the host compiler's hints ("did you mean ...?"), which name the prelude's identifiers, are
/// dropped. The generated source stays one command away (`kiln translate --emit cpu|cuda`).
pub fn user_compile_error(program: &MetalProgram, error: Error) -> Error {
    match error {
        Error::Compile { backend, kernel, log } => {
            let log = user_compile_log(program, &log);
            Error::Compile { backend, kernel, log }
        }
        other => other,
    }
}

/// The compiler log `log` (GCC/clang `file:line:col: error: ...`, NVRTC `file(line): error: ...`)
/// with the user's lines (see `user_compile_error`).
pub fn user_compile_log(program: &MetalProgram, log: &str) -> String {
    let lines = UserLines::of(program);
    let cuda_file = program.kernel.replace(['"', '\\'], "_");
    let mut out = Vec::new();
    let mut mapped = false;
    for raw in log.lines() {
        let Some((line, column, rest)) =
            parse_location(raw, lines.file_name()).or_else(|| parse_location(raw, &cuda_file))
        else {
            out.push(raw.to_string());
            continue;
        };
        let Some(user) = lines.map(line) else {
            out.push(format!("{raw} (a line kiln generates around the kernel)"));
            continue;
        };
        mapped = true;
        let rest = drop_hint(rest.trim());
        out.push(format!("{}: {rest}", located(&user, column)));
        out.push(caret_excerpt(&user, column));
    }
    if mapped {
        out.push(GENERATED_SOURCE_HINT.to_string());
    }
    out.join("\n")
}

/// The log of kiln's own translation of `program` (the preprocessor, the parse and the lowering
/// write `line N: ...` or `line N, column C: ...` about the program's Metal text) with the
/// user's lines, as [`user_compile_log`] gives a compiler's: each such message names the body,
/// header or file line, with an excerpt and a caret. Other lines stay as they are.
pub fn user_translate_log(program: &MetalProgram, log: &str) -> String {
    if !log.lines().any(|l| translate_location(l).is_some()) {
        return log.to_string();
    }
    let lines = UserLines::of(program);
    let mut out = Vec::new();
    for raw in log.lines() {
        match translate_location(raw).and_then(|(line, column, rest)| Some((lines.map(line)?, column, rest))) {
            Some((user, column, rest)) => {
                out.push(format!("{}: {rest}", located(&user, column)));
                out.push(caret_excerpt(&user, column));
            }
            None => out.push(raw.to_string()),
        }
    }
    out.join("\n")
}

/// (line, column, what follows) of a message of kiln's translation: `line N: ...` or
/// `line N, column C: ...`.
fn translate_location(raw: &str) -> Option<(u32, Option<u32>, &str)> {
    let (at, rest) = raw.strip_prefix("line ")?.split_once(": ")?;
    match at.split_once(", column ") {
        Some((line, column)) => Some((line.parse().ok()?, Some(column.parse().ok()?), rest)),
        None => Some((at.parse().ok()?, None, rest)),
    }
}

/// `body line N, column C` (or without the column when it is not known).
fn located(user: &UserLine, column: Option<u32>) -> String {
    match column {
        Some(c) => format!("{}, column {c}", user.label()),
        None => user.label(),
    }
}

/// (line, column, what follows) of a compiler message about `file`.
fn parse_location<'a>(raw: &'a str, file: &str) -> Option<(u32, Option<u32>, &'a str)> {
    let at = raw.find(file)?;
    let tail = &raw[at + file.len()..];
    if let Some(rest) = tail.strip_prefix('(') {
        // NVRTC: file(line): error: ...
        let (line, rest) = rest.split_once(')')?;
        return Some((line.trim().parse().ok()?, None, rest.trim_start_matches(':').trim()));
    }
    let rest = tail.strip_prefix(':')?;
    let (line, rest) = rest.split_once(':')?;
    let line = line.parse().ok()?;
    match rest.split_once(':') {
        Some((col, more)) if col.chars().all(|c| c.is_ascii_digit()) && !col.is_empty() => {
            Some((line, col.parse().ok(), more.trim()))
        }
        _ => Some((line, None, rest.trim())),
    }
}

/// `message` without the compiler's "; did you mean ...?" suggestion.
fn drop_hint(message: &str) -> String {
    match message.find("; did you mean") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// The line with a caret under `column` (1-based bytes; else its first character). A line
/// longer than [`EXCERPT_WIDTH`] bytes shows the part around the column.
fn caret_excerpt(line: &UserLine, column: Option<u32>) -> String {
    let gutter = line.label();
    let text = line.text.trim_end();
    let indent = text.len() - text.trim_start().len();
    let col = char_floor(text, column.map_or(indent, |c| (c as usize).saturating_sub(1).min(text.len())));
    let start = char_floor(text, col.saturating_sub(EXCERPT_WIDTH / 2));
    let end = char_floor(text, (start + EXCERPT_WIDTH).min(text.len()));
    let (open, close) = (if start > 0 { "..." } else { "" }, if end < text.len() { "..." } else { "" });
    let pad: String =
        open.chars().chain(text[start..col].chars()).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    format!("  {gutter} | {open}{}{close}\n  {} | {pad}^", &text[start..end], " ".repeat(gutter.len()))
}

/// The widest part of a line an excerpt shows.
const EXCERPT_WIDTH: usize = 160;

/// The largest character boundary of `text` at or before `at`.
fn char_floor(text: &str, at: usize) -> usize {
    (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}

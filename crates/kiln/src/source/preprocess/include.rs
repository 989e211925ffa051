//! `#include` of a program's own headers, resolved before the program is preprocessed: the
//! header's text pasted in place of the directive under `#line` directives, so compilers name
//! the header's own lines. A quoted name is looked up in the including file's directory, then
//! in the include directories in order; an angled name in the include directories only.
//! Metal's standard headers are the preludes' business and stay as they are.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use super::lex::{PpKind, PpToken};

/// Where a program's headers are found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IncludePaths {
    /// The directory of the program's own file, searched first for quoted names.
    pub file_dir: Option<PathBuf>,
    /// The include directories, in search order.
    pub dirs: Vec<PathBuf>,
}

/// The deepest nesting of included files (clang's default is 200).
const MAX_INCLUDE_DEPTH: usize = 200;

/// Whether a header name is one of Metal's own (`<metal_stdlib>`, `<simd/simd.h>`).
pub(super) fn is_metal_header(name: &str) -> bool {
    name.starts_with("metal_") || name.starts_with("simd/") || name == "metal"
}

/// Whether `src` has an `#include` line that names something besides Metal's headers (a quick
/// look at the text: conditions are not decided here).
pub(super) fn includes_own_headers(src: &str) -> bool {
    src.lines().any(|line| {
        let Some(rest) = line.trim_start().strip_prefix('#') else { return false };
        let Some(rest) = rest.trim_start().strip_prefix("include") else { return false };
        let rest = rest.trim_start();
        let name = rest.trim_start_matches(['"', '<']);
        !(rest.starts_with('<') && is_metal_header(name))
    })
}

/// The header named by the tokens after `include`: `"name"` or `<name>`, as written.
pub(super) fn header_name(toks: &[PpToken]) -> Option<Header> {
    let first = toks.first()?;
    if first.kind == PpKind::Str && first.text.starts_with('"') && first.text.len() >= 2 {
        let name = first.text[1..first.text.len() - 1].to_string();
        return Some(Header { name, quoted: true });
    }
    if !first.is_punct("<") {
        return None;
    }
    let close = toks.iter().position(|t| t.is_punct(">"))?;
    let mut name = String::new();
    for t in &toks[1..close] {
        if t.space && !name.is_empty() {
            name.push(' ');
        }
        name.push_str(&t.text);
    }
    Some(Header { name, quoted: false })
}

/// A header name as an `#include` spells it.
pub(super) struct Header {
    name: String,
    quoted: bool,
}

impl Header {
    fn spelled(&self) -> String {
        if self.quoted {
            format!("\"{}\"", self.name)
        } else {
            format!("<{}>", self.name)
        }
    }
}

impl std::ops::Deref for Header {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

/// One file being read.
struct Open {
    /// The name `#line` gives it: the path under the directory it was found in.
    display: String,
    /// The directory it was read from, searched first for its quoted includes.
    dir: Option<PathBuf>,
    /// Its path, canonical where the system can tell, for `#pragma once`.
    key: PathBuf,
}

/// A header's text, read.
pub(super) struct File {
    pub text: String,
}

/// The state of one resolution: the text written so far and the files being read.
pub(super) struct Includer {
    pub out: String,
    dirs: Vec<PathBuf>,
    stack: Vec<Open>,
    once: HashSet<PathBuf>,
}

impl Includer {
    pub fn new(name: &str, paths: &IncludePaths) -> Includer {
        let main = Open {
            display: name.to_string(),
            dir: paths.file_dir.clone(),
            key: paths.file_dir.as_ref().map_or_else(|| PathBuf::from(name), |d| d.join(name)),
        };
        Includer { out: String::new(), dirs: paths.dirs.clone(), stack: vec![main], once: HashSet::new() }
    }

    /// Writes `line` as it is.
    pub fn copy(&mut self, line: &[PpToken]) {
        for t in line {
            self.out.push_str(&t.text);
        }
    }

    /// Writes the newlines of `line` alone.
    pub fn blank(&mut self, line: &[PpToken]) {
        let n: usize = line.iter().map(PpToken::newlines).sum();
        self.out.extend(std::iter::repeat_n('\n', n));
    }

    /// The file being read has `#pragma once`.
    pub fn mark_once(&mut self) {
        if let Some(open) = self.stack.last() {
            self.once.insert(open.key.clone());
        }
    }

    /// Opens `header`, included on line `at` of the file being read, and writes the `#line`
    /// that starts it; `None` when it was read before and has `#pragma once`.
    pub fn open(&mut self, header: &Header, at: u32) -> Result<Option<File>, String> {
        if self.stack.len() > MAX_INCLUDE_DEPTH {
            return Err(format!(
                "line {at}: `#include {}` nests includes deeper than {MAX_INCLUDE_DEPTH} files",
                header.spelled()
            ));
        }
        let including = self.stack.last();
        let mut candidates: Vec<(PathBuf, String)> = Vec::new();
        if header.quoted {
            if let Some(open) = including {
                let display_dir = Path::new(&open.display).parent().map(Path::to_path_buf).unwrap_or_default();
                if let Some(dir) = &open.dir {
                    candidates.push((dir.join(&**header), normalized(&display_dir.join(&**header))));
                }
            }
        }
        for dir in &self.dirs {
            candidates.push((dir.join(&**header), normalized(Path::new(&**header))));
        }
        let Some((path, display)) = candidates.into_iter().find(|(p, _)| p.is_file()) else {
            let searched: Vec<String> = self.searched(header.quoted);
            let place = if searched.is_empty() {
                "no include directories are given (MetalLibrary::include_dirs)".to_string()
            } else {
                format!("searched {}", searched.join(", "))
            };
            return Err(format!("line {at}: `#include {}`: no such header ({place})", header.spelled()));
        };
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if self.once.contains(&key) {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("line {at}: `#include {}`: {}: {e}", header.spelled(), path.display()))?;
        self.line_directive(1, &display);
        self.stack.push(Open { display, dir: path.parent().map(Path::to_path_buf), key });
        Ok(Some(File { text }))
    }

    /// Ends the file being read; returns its name.
    pub fn close(&mut self) -> String {
        if !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        self.stack.pop().map(|o| o.display).unwrap_or_default()
    }

    /// Continues the including file at its line `line` (the one after the `#include`).
    pub fn resume(&mut self, line: usize) {
        if let Some(display) = self.stack.last().map(|o| o.display.clone()) {
            self.line_directive(line, &display);
        }
    }

    fn line_directive(&mut self, line: usize, file: &str) {
        let escaped = file.replace('\\', "\\\\").replace('"', "\\\"");
        self.out.push_str(&format!("#line {line} \"{escaped}\"\n"));
    }

    /// The directories a header would be looked for in, for messages.
    fn searched(&self, quoted: bool) -> Vec<String> {
        let own = self.stack.last().and_then(|o| o.dir.as_ref()).filter(|_| quoted);
        own.into_iter().chain(&self.dirs).map(|d| d.display().to_string()).collect()
    }
}

/// `path` with `.` and `dir/..` steps taken out, as text with `/` between parts.
fn normalized(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if parts.last().is_some_and(|p| p != "..") => {
                parts.pop();
            }
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

//! The C preprocessor pass that runs before the rewriter, so that kernels, address spaces,
//! attributes and swizzles produced by the user's macros are seen, and code in inactive `#if`
//! branches is not. It implements what Metal files use: object- and function-like macros
//! (variadic, `#`, `##`), `#undef`, `#if`/`#ifdef`/`#ifndef`/`#elif`/`#else`/`#endif` with
//! integer constant expressions and `defined`, with Metal's predefined macros.
//!
//! The output keeps the input's lines: directives it consumes and inactive lines become empty
//! lines, an expansion is written on the line of its macro's name and any newlines inside the
//! invocation follow it. Text outside macro invocations is written unchanged (comments
//! included). `#include`, `#pragma` and `#line` stay for the rewriter and the target compiler
//! (`#pragma unroll N` with its macros expanded).
//!
//! Conditions on the target compiler's own macros (`KILN_*`, `__CUDA*`, `__NVCC__`), which
//! kiln's library kernels use, cannot be decided here: such a `#if` group is left to the target
//! compiler, with the user's macros in its conditions expanded, and all its branches are lowered.

mod expand;
mod expr;
mod include;
mod lex;

use crate::source::limits::{exceeded, MAX_NESTING};
use expand::{Macro, Macros};
pub use include::IncludePaths;
use include::Includer;
use lex::{lex, render, HideSet, PpKind, PpToken};

/// The macros Metal predefines for kiln's target (Metal 3.1 with bfloat), as `(name, value)`.
/// `__FAST_MATH__` is added in fast math mode. Both preludes define exactly these
/// (`kernel::predefined` checks them).
pub const METAL_PREDEFINED: [(&str, &str); 2] = [("__METAL_VERSION__", "310"), ("__HAVE_BFLOAT__", "1")];

/// True for a macro of the target compiler (kiln's preludes, CUDA), which this pass leaves to it.
fn is_target_macro(name: &str) -> bool {
    name.starts_with("KILN_") || name.starts_with("__CUDA") || name.starts_with("__NVCC")
}

/// One `#if` group being read.
struct Group {
    /// The enclosing text is emitted.
    parent_active: bool,
    /// The current branch is emitted.
    active: bool,
    /// A branch known to be true was taken: later branches are dropped.
    done: bool,
    /// A condition was left to the target compiler: the group's directives from then on are
    /// written out.
    deferred: bool,
    seen_else: bool,
    line: u32,
}

/// What a condition comes to.
enum Condition {
    Decided(bool),
    /// Depends on target macros: the condition as text for the target compiler.
    Deferred(String),
}

struct Preprocessor {
    macros: Macros,
    groups: Vec<Group>,
    out: String,
    /// Set when resolving `#include`s (`resolve_includes`): then the text is not expanded but
    /// copied, with each active include replaced by its file.
    includer: Option<Includer>,
}

/// Preprocesses `src` with `predefined` macros (`(name, replacement)`). Errors name the line.
pub fn preprocess(src: &str, predefined: &[(&str, &str)]) -> Result<String, String> {
    let mut pp = Preprocessor::new(predefined, None);
    pp.run(src)?;
    pp.finish()?;
    Ok(pp.out)
}

/// `src` (the file `name`) with every active `#include "..."` and `#include <...>` of the
/// program's own headers replaced by the header's text, found as `paths` says, under `#line`
/// directives that name each file and line; Metal's own headers (`<metal_stdlib>`, ...) stay.
/// A header with `#pragma once` is pasted once. `src` comes back unchanged when it includes
/// nothing of its own. Conditions are decided with `predefined` and the macros defined so
/// far, as the preprocessing that follows decides them. Errors name the file and line.
pub fn resolve_includes(
    name: &str,
    src: &str,
    predefined: &[(&str, &str)],
    paths: &IncludePaths,
) -> Result<String, String> {
    if !include::includes_own_headers(src) {
        return Ok(src.to_string());
    }
    let mut pp = Preprocessor::new(predefined, Some(Includer::new(name, paths)));
    pp.run(src)?;
    pp.finish()?;
    Ok(pp.includer.map(|i| i.out).unwrap_or_default())
}

impl Preprocessor {
    fn new(predefined: &[(&str, &str)], includer: Option<Includer>) -> Preprocessor {
        let mut pp = Preprocessor { macros: Macros::default(), groups: Vec::new(), out: String::new(), includer };
        for (name, value) in predefined {
            pp.macros.define(name, Macro { params: None, variadic: false, body: significant(lex(value)) });
        }
        pp
    }

    /// Reads one file's text: its directives, and its other lines expanded (or, resolving
    /// includes, copied).
    fn run(&mut self, src: &str) -> Result<(), String> {
        self.out.reserve(src.len());
        let toks = lex(src);
        // Comments end before directives are read (translation phase 3), so an open one is an
        // error even where it starts in an inactive `#if` branch.
        let mut column = 1;
        for t in &toks {
            if t.is_open_comment() {
                return Err(format!("line {}, column {column}: this `/*` comment is never closed by `*/`", t.line));
            }
            column = t.text.rfind('\n').map_or(column + t.text.len(), |i| t.text.len() - i);
        }
        let mut text: Vec<PpToken> = Vec::new();
        let mut start = 0;
        while start < toks.len() {
            let end =
                toks[start..].iter().position(|t| t.kind == PpKind::Newline).map_or(toks.len(), |p| start + p + 1);
            let line = &toks[start..end];
            let directive = line
                .iter()
                .find(|t| !matches!(t.kind, PpKind::Space | PpKind::Comment))
                .is_some_and(|t| t.is_punct("#"));
            if self.includer.is_some() {
                if !(directive && self.active() && self.include(line)?) {
                    if let Some(includer) = self.includer.as_mut() {
                        includer.copy(line);
                    }
                    if directive {
                        self.directive(line)?;
                    }
                }
            } else if directive {
                self.flush(&mut text)?;
                self.directive(line)?;
            } else if self.active() {
                // A line splice outside a directive ends its line here: the lowering may write
                // after the token before it, which would leave the `\` stray.
                text.extend(line.iter().map(|t| match t.kind {
                    PpKind::Space if t.text.contains('\\') => PpToken { text: unspliced(&t.text), ..t.clone() },
                    _ => t.clone(),
                }));
            } else {
                self.blank(line);
            }
            start = end;
        }
        self.flush(&mut text)
    }

    /// Checks that every `#if` was closed.
    fn finish(&self) -> Result<(), String> {
        match self.groups.last() {
            Some(g) => Err(format!("line {}: `#if` without `#endif`", g.line)),
            None => Ok(()),
        }
    }

    /// Resolving includes, the active directive `line` when it includes one of the program's
    /// own headers: the header's text written in its place. False for any other directive.
    fn include(&mut self, line: &[PpToken]) -> Result<bool, String> {
        let toks = significant(line.to_vec());
        let at = toks[0].line;
        if !toks.get(1).is_some_and(|t| t.kind == PpKind::Ident && t.text == "include") {
            let once = toks.get(1).is_some_and(|t| t.text == "pragma") && toks.get(2).is_some_and(|t| t.text == "once");
            if let Some(includer) = self.includer.as_mut().filter(|_| once) {
                // Pasted into one text, the header needs no `#pragma once` (compilers warn).
                includer.mark_once();
                includer.blank(line);
                return Ok(true);
            }
            return Ok(false);
        }
        let mut spelled = toks[2..].to_vec();
        if spelled.first().is_some_and(|t| t.kind == PpKind::Ident) {
            spelled = significant(self.macros.expand(spelled)?);
        }
        let header = include::header_name(&spelled).ok_or_else(|| {
            let mut text = String::new();
            render(&toks, &mut text);
            format!("line {at}: `{}` names no header (`\"file\"` or `<file>`)", text.trim())
        })?;
        if include::is_metal_header(&header) {
            return Ok(false);
        }
        let newlines: usize = line.iter().map(PpToken::newlines).sum();
        let Some(includer) = self.includer.as_mut() else { return Ok(false) };
        let Some(file) = includer.open(&header, at)? else {
            // A header with `#pragma once` read before: nothing, the lines kept.
            includer.blank(line);
            return Ok(true);
        };
        let depth = self.groups.len();
        let result = self.run(&file.text).and_then(|()| match self.groups.get(depth) {
            Some(g) => Err(format!("line {}: `#if` without `#endif`", g.line)),
            None => Ok(()),
        });
        let Some(includer) = self.includer.as_mut() else { return Ok(true) };
        let display = includer.close();
        result.map_err(|e| format!("{display}: {e}"))?;
        includer.resume(at as usize + newlines);
        Ok(true)
    }
}

/// Blank text with its line splices (`\` before a newline) turned into plain newlines.
fn unspliced(text: &str) -> String {
    text.replace("\\\r\n", "\n").replace("\\\n", "\n")
}

/// The significant tokens of `toks`, with `space` set where blanks preceded them.
fn significant(toks: Vec<PpToken>) -> Vec<PpToken> {
    let mut out = Vec::new();
    let mut space = false;
    for mut t in toks {
        if t.is_blank() {
            space = true;
            continue;
        }
        t.space = space;
        space = false;
        out.push(t);
    }
    out
}

impl Preprocessor {
    fn active(&self) -> bool {
        self.groups.last().is_none_or(|g| g.active)
    }

    /// Writes the newlines of `line` (a directive or inactive line that leaves no text).
    fn blank(&mut self, line: &[PpToken]) {
        let n: usize = line.iter().map(PpToken::newlines).sum();
        self.out.extend(std::iter::repeat_n('\n', n));
    }

    /// Writes `text` in place of `line`, keeping its newlines.
    fn replace(&mut self, line: &[PpToken], text: &str) {
        self.out.push_str(text);
        self.blank(line);
    }

    /// Expands and writes the text lines gathered since the last directive.
    fn flush(&mut self, text: &mut Vec<PpToken>) -> Result<(), String> {
        if text.is_empty() {
            return Ok(());
        }
        let expanded = self.macros.expand(std::mem::take(text))?;
        render(&expanded, &mut self.out);
        Ok(())
    }

    fn directive(&mut self, line: &[PpToken]) -> Result<(), String> {
        let toks = significant(line.to_vec());
        let at = toks[0].line;
        let name = toks.get(1).filter(|t| t.kind == PpKind::Ident).map_or("", |t| t.text.as_str());
        let args = toks.get(2..).unwrap_or(&[]);
        let active = self.active();
        match name {
            "if" | "ifdef" | "ifndef" => {
                if self.groups.len() >= MAX_NESTING {
                    return Err(format!("line {at}: {}", exceeded("the nesting of `#if` groups", MAX_NESTING)));
                }
                let cond = if !active {
                    Condition::Decided(false)
                } else if name == "if" {
                    self.condition(args, at)?
                } else {
                    self.defined_test(args, at, name)?
                };
                let mut g = Group {
                    parent_active: active,
                    active: false,
                    done: !active,
                    deferred: false,
                    seen_else: false,
                    line: at,
                };
                self.enter_branch(&mut g, cond, line);
                self.groups.push(g);
            }
            "elif" | "elifdef" | "elifndef" => {
                let Some(mut g) = self.groups.pop() else {
                    return Err(format!("line {at}: `#{name}` without `#if`"));
                };
                if g.seen_else {
                    return Err(format!("line {at}: `#{name}` after `#else`"));
                }
                let cond = if g.done || !g.parent_active {
                    Condition::Decided(false)
                } else if name == "elif" {
                    self.condition(args, at)?
                } else {
                    self.defined_test(args, at, name)?
                };
                if g.done || !g.parent_active {
                    g.active = false;
                    self.blank(line);
                } else {
                    self.enter_branch(&mut g, cond, line);
                }
                self.groups.push(g);
            }
            "else" => {
                let Some(g) = self.groups.last_mut() else {
                    return Err(format!("line {at}: `#else` without `#if`"));
                };
                if g.seen_else {
                    return Err(format!("line {at}: `#else` after `#else`"));
                }
                g.seen_else = true;
                g.active = g.parent_active && !g.done;
                g.done = true;
                let text = (g.active && g.deferred).then_some("#else");
                self.replace(line, text.unwrap_or(""));
            }
            "endif" => {
                let g = self.groups.pop().ok_or_else(|| format!("line {at}: `#endif` without `#if`"))?;
                self.replace(line, if g.deferred { "#endif" } else { "" });
            }
            _ if !active => self.blank(line),
            "define" | "undef" => {
                if let Some(g) = self.groups.iter().find(|g| g.deferred) {
                    return Err(format!(
                        "line {at}: `#{name}` inside the `#if` of line {} on target macros, which kiln leaves to the target compiler; define it outside the group",
                        g.line
                    ));
                }
                let macro_name = args
                    .first()
                    .filter(|t| t.kind == PpKind::Ident)
                    .ok_or_else(|| format!("line {at}: `#{name}` needs a macro name"))?;
                if name == "undef" {
                    self.macros.undef(&macro_name.text);
                } else {
                    let m = definition(line, at)?;
                    self.macros.define(&macro_name.text, m);
                }
                self.blank(line);
            }
            "error" => {
                let mut msg = String::new();
                render(args, &mut msg);
                return Err(format!("line {at}: #error {msg}"));
            }
            "pragma" if args.first().is_some_and(|t| t.text == "unroll") => {
                let expanded = self.macros.expand(args.to_vec())?;
                let mut text = String::from("#pragma ");
                render(&expanded, &mut text);
                self.replace(line, &text);
            }
            _ if toks.len() == 1 || name == "warning" => self.blank(line),
            // `#include`, `#pragma`, `#line` and the like are for the rewriter and the compiler.
            _ => {
                let text: String = line
                    .iter()
                    .filter(|t| t.kind != PpKind::Newline)
                    .map(|t| if t.is_blank() { " " } else { t.text.as_str() })
                    .collect();
                self.replace(line, text.trim_end());
            }
        }
        Ok(())
    }

    /// Starts a branch of `g` whose condition is `cond`, writing what the target compiler needs.
    fn enter_branch(&mut self, g: &mut Group, cond: Condition, line: &[PpToken]) {
        match cond {
            Condition::Decided(true) => {
                g.active = true;
                g.done = true;
                self.replace(line, if g.deferred { "#else" } else { "" });
            }
            Condition::Decided(false) => {
                g.active = false;
                self.blank(line);
            }
            Condition::Deferred(expr) => {
                g.active = true;
                let text = format!("#{} {expr}", if g.deferred { "elif" } else { "if" });
                g.deferred = true;
                self.replace(line, &text);
            }
        }
    }

    /// `#ifdef X` / `#ifndef X` (and the `elif` forms).
    fn defined_test(&self, args: &[PpToken], at: u32, directive: &str) -> Result<Condition, String> {
        let name = args
            .first()
            .filter(|t| t.kind == PpKind::Ident)
            .ok_or_else(|| format!("line {at}: `#{directive}` needs a macro name"))?;
        let negate = directive.ends_with("ndef");
        if !self.macros.is_defined(&name.text) && is_target_macro(&name.text) {
            return Ok(Condition::Deferred(format!("{}defined({})", if negate { "!" } else { "" }, name.text)));
        }
        Ok(Condition::Decided(self.macros.is_defined(&name.text) != negate))
    }

    /// The condition of `#if` / `#elif`: `defined` answered, macros expanded, then evaluated
    /// unless target macros remain.
    fn condition(&mut self, args: &[PpToken], at: u32) -> Result<Condition, String> {
        let mut toks: Vec<PpToken> = Vec::with_capacity(args.len());
        let mut i = 0;
        while i < args.len() {
            let t = &args[i];
            if t.kind == PpKind::Ident && t.text == "defined" {
                let paren = args.get(i + 1).is_some_and(|n| n.is_punct("("));
                let name_at = i + 1 + usize::from(paren);
                let name = args
                    .get(name_at)
                    .filter(|n| n.kind == PpKind::Ident)
                    .ok_or_else(|| format!("line {at}: `defined` needs a macro name"))?;
                let end = name_at + usize::from(paren);
                if paren && !args.get(end).is_some_and(|n| n.is_punct(")")) {
                    return Err(format!("line {at}: missing `)` after `defined({}`", name.text));
                }
                if !self.macros.is_defined(&name.text) && is_target_macro(&name.text) {
                    toks.extend_from_slice(&args[i..=end]);
                } else {
                    let v = if self.macros.is_defined(&name.text) { "1" } else { "0" };
                    toks.push(PpToken {
                        kind: PpKind::Number,
                        text: v.into(),
                        space: t.space,
                        hide: HideSet::default(),
                        line: at,
                    });
                }
                i = end + 1;
                continue;
            }
            toks.push(t.clone());
            i += 1;
        }
        let expanded = self.macros.expand(toks)?;
        if expanded.iter().any(|t| t.kind == PpKind::Ident && is_target_macro(&t.text)) {
            let mut text = String::new();
            render(&expanded, &mut text);
            return Ok(Condition::Deferred(text));
        }
        let macros = &self.macros;
        expr::evaluate(&expanded, at, &|n| macros.is_defined(n)).map(Condition::Decided)
    }
}

/// The macro defined by the directive `line` (`#define NAME ...`).
fn definition(line: &[PpToken], at: u32) -> Result<Macro, String> {
    // Whether `(` follows the name directly decides between function- and object-like, so
    // this looks at the raw tokens.
    let raw: Vec<&PpToken> = line.iter().filter(|t| t.kind != PpKind::Newline).collect();
    let mut k = 0;
    let mut seen = 0;
    while k < raw.len() && seen < 3 {
        if !raw[k].is_blank() {
            seen += 1;
        }
        k += 1;
    }
    // `k` is just past the name (`#`, `define`, name).
    let name = &raw[k - 1].text;
    let function_like = raw.get(k).is_some_and(|t| t.is_punct("("));
    let rest = significant(raw[k..].iter().map(|t| (*t).clone()).collect());
    let mut params = None;
    let mut variadic = false;
    let mut body_from = 0;
    if function_like {
        let close = rest
            .iter()
            .position(|t| t.is_punct(")"))
            .ok_or_else(|| format!("line {at}: macro `{name}`: missing `)` in the parameter list"))?;
        let mut names = Vec::new();
        for part in rest[1..close].split(|t| t.is_punct(",")) {
            if variadic {
                return Err(format!("line {at}: macro `{name}`: `...` must be the last parameter"));
            }
            match part {
                [p] if p.kind == PpKind::Ident => names.push(p.text.clone()),
                [p] if p.is_punct("...") => {
                    names.push("__VA_ARGS__".to_string());
                    variadic = true;
                }
                [p, dots] if p.kind == PpKind::Ident && dots.is_punct("...") => {
                    names.push(p.text.clone());
                    variadic = true;
                }
                [] if close == 1 => {}
                _ => return Err(format!("line {at}: macro `{name}`: malformed parameter list")),
            }
        }
        params = Some(names);
        body_from = close + 1;
    }
    let body: Vec<PpToken> = rest[body_from..].to_vec();
    if body.first().is_some_and(|t| t.is_punct("##")) || body.last().is_some_and(|t| t.is_punct("##")) {
        return Err(format!("line {at}: macro `{name}`: `##` cannot start or end a replacement list"));
    }
    if body.iter().any(|t| t.kind == PpKind::Ident && t.text == "__VA_OPT__") {
        return Err(format!("line {at}: macro `{name}`: `__VA_OPT__` is not supported"));
    }
    Ok(Macro { params, variadic, body })
}

#[cfg(test)]
mod tests;

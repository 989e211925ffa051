//! A light outline of a Metal file for launch validation: its top-level declarations (inside
//! namespaces too), each with the names it declares and the identifiers it mentions, functions
//! with their template parameters, attributes and body, and every object-like `#define`.
//!
//! From it a kernel's reach is found: the file-scope functions, constants, macros and function
//! constants its body uses, transitively. The outline reads raw tokens (no preprocessing), so a
//! name used only in an inactive `#if` branch still counts as used: the reach errs on the side
//! of more, never less.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::source::cursor::{split_commas, split_text_commas, Brackets};
#[cfg(test)]
use crate::source::tokens::tokenize;
use crate::source::tokens::{Kind, Token};

/// One template parameter of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TemplateParam {
    pub name: String,
    /// `typename T` / `class T` (else a value such as `int N`).
    pub is_type: bool,
}

/// A function definition (with a body).
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub name: String,
    /// Marked `kernel` or `[[kernel]]`.
    pub is_kernel: bool,
    /// The function's own attributes, one entry per comma-separated element
    /// (`max_total_threads_per_threadgroup(64)`), without those of its parameters.
    pub attrs: Vec<String>,
    pub template: Vec<TemplateParam>,
    /// Token positions strictly inside the parameter list's parentheses.
    pub params: Range<usize>,
    /// Token positions strictly inside the body's braces.
    pub body: Range<usize>,
}

/// One top-level declaration.
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// Token positions of the whole declaration.
    pub range: Range<usize>,
    /// The names it declares at its own level (a function's name, a variable's, a struct's).
    pub names: Vec<String>,
    /// Every identifier it mentions, attribute arguments included.
    pub refs: HashSet<String>,
    pub function: Option<Function>,
}

/// The outline of one Metal file.
pub(crate) struct Outline {
    /// The significant tokens (no trivia, no preprocessor lines).
    pub toks: Vec<Token>,
    pub items: Vec<Item>,
    /// Object-like and function-like `#define NAME body`: name → the body's tokens.
    pub defines: HashMap<String, Vec<Token>>,
    /// The bracket structure of `toks`, `<` with `>` included.
    brackets: Brackets,
}

impl Outline {
    /// The outline of raw source, its `#define`s read as written (tests; programs are
    /// outlined after preprocessing, `ProgramParse::outline`).
    #[cfg(test)]
    pub fn new(source: &str) -> Outline {
        let mut toks = Vec::new();
        let mut defines = HashMap::new();
        for t in tokenize(source) {
            match t.kind {
                Kind::Preproc => {
                    if let Some((name, body)) = define(&t.text) {
                        defines.insert(name, body);
                    }
                }
                _ if t.is_trivia() => {}
                _ => toks.push(t),
            }
        }
        let brackets = Brackets::new(&toks, true);
        let mut outline = Outline { toks, items: Vec::new(), defines, brackets };
        outline.items = outline.split();
        outline
    }

    /// The outline of already significant tokens (a preprocessed program's, without its
    /// preprocessor lines): items only, no `#define`s.
    pub fn of_tokens(toks: Vec<Token>) -> Outline {
        let brackets = Brackets::new(&toks, true);
        let mut outline = Outline { toks, items: Vec::new(), defines: HashMap::new(), brackets };
        outline.items = outline.split();
        outline
    }

    fn is(&self, k: usize, s: &str) -> bool {
        self.toks.get(k).is_some_and(|t| t.is(s))
    }

    /// The position of the bracket closing the one at `k` (`(`, `[`, `{`, or `<` counted with
    /// `>` and `>>`).
    pub fn matching(&self, k: usize) -> Option<usize> {
        self.brackets.closing(k)
    }

    /// The next `;` at the depth of `k` (stepping over `(`, `[` and `{`, not `<`).
    pub fn semicolon(&self, k: usize) -> Option<usize> {
        self.brackets.semicolon(k)
    }

    /// Splits the tokens into top-level declarations; namespace braces are transparent.
    fn split(&self) -> Vec<Item> {
        let n = self.toks.len();
        let mut items = Vec::new();
        let (mut i, mut start, mut namespaces) = (0, 0, 0u32);
        // A declaration whose first braces open no function body has none later (`x {} {}`):
        // its head is read once, so a long run of braces stays linear.
        let mut head_read_from = None;
        while i < n {
            if i == start && self.is(i, "namespace") {
                let mut j = i + 1;
                while j < n && !self.is(j, "{") && !self.is(j, ";") {
                    j += 1;
                }
                if self.is(j, "{") {
                    namespaces += 1;
                    i = j + 1;
                    start = i;
                    continue;
                }
            }
            if i == start && namespaces > 0 && self.is(i, "}") {
                namespaces -= 1;
                i += 1;
                start = i;
                continue;
            }
            let text = self.toks[i].text.as_str();
            let punct = self.toks[i].kind == Kind::Punct;
            match text {
                "(" | "[" if punct => i = self.matching(i).map_or(n, |c| c + 1),
                "{" if punct => {
                    // A brace never closed (in an inactive `#if` branch, say) runs to the end.
                    let close = self.matching(i).unwrap_or(n);
                    let head = if head_read_from == Some(start) { None } else { self.function_head(start, i, close) };
                    head_read_from = Some(start);
                    if let Some(f) = head {
                        items.push(self.item(start..(close + 1).min(n), Some(f)));
                        start = close + 1;
                    }
                    i = close + 1;
                }
                ";" if punct => {
                    items.push(self.item(start..i + 1, None));
                    i += 1;
                    start = i;
                }
                _ => i += 1,
            }
        }
        if start < n {
            items.push(self.item(start..n, None));
        }
        items
    }

    /// The function whose head is `start..brace` when the brace opens a function body.
    fn function_head(&self, start: usize, brace: usize, close: usize) -> Option<Function> {
        let mut k = start;
        let mut template = Vec::new();
        if self.is(k, "template") && self.is(k + 1, "<") {
            let end = self.matching(k + 1)?;
            template = self.template_params(k + 2, end);
            k = end + 1;
        }
        let mut paren = None;
        let mut j = k;
        while j < brace {
            let t = &self.toks[j];
            if t.kind == Kind::Ident && ["struct", "class", "union", "enum"].contains(&t.text.as_str()) {
                return None;
            }
            if t.is("=") {
                return None;
            }
            // `__attribute__((always_inline))` (MLX's METAL_FUNC) and a `decltype(...)` return
            // type come before the name; their parentheses are not the parameters'.
            if ["__attribute__", "decltype", "alignas"].contains(&t.text.as_str()) && self.is(j + 1, "(") {
                j = self.matching(j + 1)? + 1;
                continue;
            }
            if t.is("(") {
                paren = Some(j);
                break;
            }
            if t.is("<") {
                j = self.matching(j)?;
            }
            j += 1;
        }
        let open = paren?;
        // An explicit specialisation's name stands before its template arguments
        // (`template <> uint32_t max_value<uint32_t>()` defines `max_value`).
        let mut name_end = open;
        if open > k && (self.is(open - 1, ">") || self.is(open - 1, ">>")) {
            if let Some(o) = self.brackets.opening(open - 1).filter(|&o| o > k) {
                name_end = o;
            }
        }
        let name = self.toks[k..name_end].iter().rev().find(|t| t.kind == Kind::Ident)?.text.clone();
        // Brackets pair per kind: a `)` past the brace belongs to no parameter list of its own.
        let params_end = self.matching(open).filter(|&c| c < brace)?;
        let mut attrs = Vec::new();
        let mut is_kernel = false;
        for t in self.toks[k..open].iter().chain(&self.toks[params_end..brace]) {
            if t.is("kernel") {
                is_kernel = true;
            }
            if t.kind == Kind::Attr {
                for part in split_text_commas(t.attr_inner()) {
                    is_kernel |= part == "kernel";
                    attrs.push(part);
                }
            }
        }
        Some(Function { name, is_kernel, attrs, template, params: open + 1..params_end, body: brace + 1..close })
    }

    /// The parameters of `template <...>` between positions `from` and `to`.
    fn template_params(&self, from: usize, to: usize) -> Vec<TemplateParam> {
        let toks: Vec<&Token> = self.toks[from..to].iter().collect();
        let param = |part: &Vec<&Token>| {
            let is_type = part.first().is_some_and(|t| t.is("typename") || t.is("class"));
            let decl_end = part.iter().position(|t| t.is("=")).unwrap_or(part.len());
            let name = part[..decl_end].iter().rev().find(|t| t.kind == Kind::Ident)?;
            Some(TemplateParam { name: name.text.clone(), is_type })
        };
        split_commas(&toks).iter().filter_map(param).collect()
    }

    fn item(&self, range: Range<usize>, function: Option<Function>) -> Item {
        let mut refs = HashSet::new();
        for t in &self.toks[range.clone()] {
            match t.kind {
                Kind::Ident => {
                    refs.insert(t.text.clone());
                }
                Kind::Attr => refs.extend(identifiers(t.attr_inner())),
                _ => {}
            }
        }
        let names = match &function {
            Some(f) => vec![f.name.clone()],
            None => self.declared_names(range.clone()),
        };
        Item { range, names, refs, function }
    }

    /// Identifiers at the declaration's own level followed by `=`, `;`, `,`, `[`, `{` or an
    /// attribute: the names a variable, struct, alias or typedef declares.
    fn declared_names(&self, range: Range<usize>) -> Vec<String> {
        let mut names = Vec::new();
        let mut j = range.start;
        while j < range.end {
            let t = &self.toks[j];
            let ends_name = t.kind == Kind::Attr || ["=", ";", ",", "[", "{"].iter().any(|s| t.is(s));
            let before = j.checked_sub(1).filter(|&b| b >= range.start).map(|b| &self.toks[b]);
            // A keyword before an attribute (`template [[host_name(..)]]`) declares nothing.
            if ends_name && before.is_some_and(|b| b.kind == Kind::Ident && !is_keyword(&b.text)) {
                names.push(self.toks[j - 1].text.clone());
            }
            // Template arguments (`kernel_f<int32_t, float>`) declare nothing either.
            let angle = t.is("<") && self.matching(j).is_some_and(|c| c < range.end);
            if t.is("(") || t.is("{") || t.is("[") || angle {
                j = self.matching(j).map_or(range.end, |c| c + 1);
            } else {
                j += 1;
            }
        }
        names.dedup();
        names
    }

    /// The kernel function `name` defines (the first kernel of that name, else the first
    /// function of that name with a body).
    pub fn function(&self, name: &str) -> Option<usize> {
        let named = |i: &usize| self.items[*i].function.as_ref().is_some_and(|f| f.name == name);
        let kernel =
            (0..self.items.len()).filter(named).find(|&i| self.items[i].function.as_ref().is_some_and(|f| f.is_kernel));
        kernel.or_else(|| (0..self.items.len()).find(named))
    }

    /// Every name the items in `from` use, transitively through the items and macros that
    /// declare them.
    pub fn reach(&self, from: usize) -> HashSet<String> {
        let mut declared: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, item) in self.items.iter().enumerate() {
            for n in &item.names {
                declared.entry(n.as_str()).or_default().push(i);
            }
        }
        let mut seen_items = HashSet::from([from]);
        let mut names: HashSet<String> = HashSet::new();
        let mut work: Vec<String> = self.items[from].refs.iter().cloned().collect();
        while let Some(name) = work.pop() {
            if !names.insert(name.clone()) {
                continue;
            }
            if let Some(body) = self.defines.get(&name) {
                work.extend(body.iter().filter(|t| t.kind == Kind::Ident).map(|t| t.text.clone()));
            }
            for &i in declared.get(name.as_str()).into_iter().flatten() {
                if seen_items.insert(i) {
                    work.extend(self.items[i].refs.iter().cloned());
                }
            }
        }
        names
    }

    /// Names `x` of every `is_function_constant_defined(x)` in the file.
    pub fn tested_for_definition(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        for k in 0..self.toks.len() {
            if self.is(k, "is_function_constant_defined") && self.is(k + 1, "(") && self.is(k + 3, ")") {
                out.insert(self.toks[k + 2].text.clone());
            }
        }
        for body in self.defines.values() {
            for w in body.windows(4) {
                if w[0].is("is_function_constant_defined") && w[1].is("(") && w[3].is(")") {
                    out.insert(w[2].text.clone());
                }
            }
        }
        out
    }
}

/// Words of C++ and Metal that name no declaration (the reach must not follow them).
fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "template"
            | "typename"
            | "class"
            | "struct"
            | "union"
            | "enum"
            | "kernel"
            | "const"
            | "constexpr"
            | "constant"
            | "device"
            | "thread"
            | "threadgroup"
            | "static"
            | "inline"
            | "extern"
            | "typedef"
            | "using"
            | "namespace"
            | "void"
            | "return"
            | "operator"
            | "auto"
            | "volatile"
    )
}

/// `#define NAME body` → (NAME, body tokens without trivia); `None` for other directives.
#[cfg(test)]
fn define(line: &str) -> Option<(String, Vec<Token>)> {
    let text = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = text.strip_prefix("define")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.replace("\\\n", " ");
    let rest = rest.trim_start();
    let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    let name = rest[..name_len].to_string();
    if name.is_empty() {
        return None;
    }
    let mut body = &rest[name_len..];
    if body.starts_with('(') {
        body = body.find(')').map_or("", |p| &body[p + 1..]);
    }
    let toks = tokenize(body).into_iter().filter(|t| !t.is_trivia()).collect();
    Some((name, toks))
}

/// The identifiers in a piece of text (attribute arguments).
fn identifiers(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
#include <metal_stdlib>
using namespace metal;
#define SCALE 3
#define TWICE(x) ((x) * 2 + K)
constant int K = 7;
constant int n [[function_constant(1)]];
constant int unused_by_a [[function_constant(2)]];
constant int n2 = n * 2;
struct P { int a; float b; };
namespace inner {
inline float helper(float v) { return v * n2; }
}
template <typename T, int N = 4>
[[kernel]] void add(device T* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  a[i] = inner::helper(TWICE(a[i])) + N;
}
template [[host_name("add_float")]] [[kernel]] decltype(add<float>) add<float>;
[[max_total_threads_per_threadgroup(64)]]
kernel void b(device float* o [[buffer(0)]], constant P& p [[buffer(1)]]) {
  o[0] = unused_by_a + p.b;
}
"#;

    #[test]
    fn finds_kernels_with_their_templates_and_attributes() {
        let o = Outline::new(FILE);
        let add = o.items[o.function("add").unwrap()].function.clone().unwrap();
        assert!(add.is_kernel);
        assert_eq!(
            add.template,
            vec![TemplateParam { name: "T".into(), is_type: true }, TemplateParam { name: "N".into(), is_type: false }]
        );
        let b = o.items[o.function("b").unwrap()].function.clone().unwrap();
        assert!(b.is_kernel);
        assert_eq!(b.attrs, vec!["max_total_threads_per_threadgroup(64)".to_string()]);
        assert!(o.function("helper").is_some(), "functions inside namespaces are found");
        assert!(o.function("nope").is_none());
    }

    #[test]
    fn functions_are_named_past_attributes_return_types_and_specialisation_arguments() {
        let o = Outline::new(
            "template <typename T, int N> inline __attribute__((always_inline)) void load_row(const device T* s, thread T (&a)[N]) {}
             template <> inline uint32_t max_value<uint32_t>() { return 0xFFFFFFFFu; }
             decltype(1 + 2) three() { return 3; }
",
        );
        let names: Vec<&str> = o.items.iter().filter_map(|i| i.function.as_ref()).map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["load_row", "max_value", "three"]);
    }

    #[test]
    fn the_reach_follows_helpers_constants_and_macros() {
        let o = Outline::new(FILE);
        let reach = o.reach(o.function("add").unwrap());
        for name in ["helper", "n2", "n", "K", "TWICE"] {
            assert!(reach.contains(name), "{name} is reached from add");
        }
        assert!(!reach.contains("unused_by_a"));
        let inst = Outline::new(
            "constant bool c [[function_constant(0)]];\ntemplate <typename T, typename U> kernel void u(device T* y) { y[0] = c; }\n\
             typedef decltype(u<float, int>) u_t;\ntemplate [[host_name(\"u_f\")]] kernel u_t u<float, int>;\n\
             template <typename T> kernel void g(device T* y) { y[0] = float(1); }\n",
        );
        assert!(!inst.reach(inst.function("g").unwrap()).contains("c"), "instantiations declare no type names");
        let reach_b = o.reach(o.function("b").unwrap());
        assert!(reach_b.contains("unused_by_a") && reach_b.contains("P"));
        assert!(!reach_b.contains("n"));
    }

    #[test]
    fn long_runs_of_brackets_outline_in_one_pass() {
        let n = 100_000;
        let src = format!("int x {}; float y[{}1{}]; {}", "{} ".repeat(n), "(".repeat(n), ")".repeat(n), "<".repeat(n));
        let start = std::time::Instant::now();
        let o = Outline::new(&src);
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "took {:?}", start.elapsed());
        let names: Vec<&[String]> = o.items.iter().map(|i| i.names.as_slice()).collect();
        assert_eq!(names, [&["x".to_string()][..], &["y".to_string()][..], &[][..]]);
    }
}

//! The token rewriter: walks the significant tokens of an MSL program once, tracking scopes, and
//! replaces what C++ cannot express. Replacements never add or remove newlines, so line N of
//! the output is line N of the input.

use std::collections::HashMap;

use super::entry::{join, parse_params};
use super::functions::{check_nesting, is_function_qualifier, Brackets};
use super::members::{is_swizzle, swizzle_members};
use super::tokens::{is_float_literal, Kind, Token};
use super::{Entry, EntryParam, LowerTarget};
use crate::backend::{ConstantKey, ConstantValue, MetalProgram};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    File,
    Namespace,
    Struct,
    Function,
    Block,
    Init,
}

/// Attributes C++17 understands; every other `[[...]]` group is removed.
const STANDARD_ATTRS: [&str; 5] = ["maybe_unused", "fallthrough", "nodiscard", "noreturn", "deprecated"];

/// Operators after a swizzle that make it a write (`v.xy = ...`, `c.bgr *= ...`).
/// The collectives whose calls carry a `kiln::site_tag` on the CPU (the overloads in
/// prelude/cpu/simd.h, `KILN_SITED`).
pub const SITED_COLLECTIVES: [&str; 55] = [
    "simd_sum",
    "simd_product",
    "simd_max",
    "simd_min",
    "simd_and",
    "simd_or",
    "simd_xor",
    "simd_prefix_inclusive_sum",
    "simd_prefix_exclusive_sum",
    "simd_prefix_inclusive_product",
    "simd_prefix_exclusive_product",
    "simd_shuffle",
    "simd_shuffle_down",
    "simd_shuffle_up",
    "simd_shuffle_xor",
    "simd_shuffle_rotate_down",
    "simd_shuffle_rotate_up",
    "simd_shuffle_and_fill_down",
    "simd_shuffle_and_fill_up",
    "simd_broadcast",
    "simd_broadcast_first",
    "simd_ballot",
    "simd_all",
    "simd_any",
    "simd_is_first",
    "simd_active_threads_mask",
    "quad_sum",
    "quad_product",
    "quad_max",
    "quad_min",
    "quad_and",
    "quad_or",
    "quad_xor",
    "quad_prefix_inclusive_sum",
    "quad_prefix_exclusive_sum",
    "quad_prefix_inclusive_product",
    "quad_prefix_exclusive_product",
    "quad_shuffle",
    "quad_shuffle_down",
    "quad_shuffle_up",
    "quad_shuffle_xor",
    "quad_shuffle_rotate_down",
    "quad_shuffle_rotate_up",
    "quad_shuffle_and_fill_down",
    "quad_shuffle_and_fill_up",
    "quad_broadcast",
    "quad_broadcast_first",
    "quad_ballot",
    "quad_all",
    "quad_any",
    "quad_is_first",
    "quad_active_threads_mask",
    "simdgroup_barrier",
    "simdgroup_multiply",
    "simdgroup_multiply_accumulate",
];

const ASSIGN_OPS: [&str; 11] = ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="];

/// The result of rewriting: code plus entries and facts the backends need.
pub struct Rewritten {
    pub code: String,
    pub entries: Vec<Entry>,
    pub cooperative: bool,
}

struct Rewriter<'a> {
    toks: Vec<Token>,
    /// Indices of the significant (non-trivia) tokens.
    sig: Vec<usize>,
    brackets: Brackets,
    out: Vec<String>,
    target: LowerTarget,
    program: &'a MetalProgram,
    kernels: HashMap<String, Vec<EntryParam>>,
    entries: Vec<Entry>,
    /// The line where each entry's host name was defined.
    entry_lines: HashMap<String, u32>,
    defined_constants: HashMap<String, bool>,
    next_site: u32,
}

/// Rewrites `source` (the preprocessed text of `program`) for `target`.
pub fn rewrite(program: &MetalProgram, source: &str, target: LowerTarget) -> Result<Rewritten, String> {
    let toks = super::tokens::tokenize(source);
    let sig: Vec<usize> = (0..toks.len()).filter(|&i| !toks[i].is_trivia()).collect();
    check_nesting(&toks, &sig)?;
    let repeated = super::overloads::check(&toks, &sig)?;
    let brackets = Brackets::new(&toks, &sig);
    let mut out: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
    let members = swizzle_members(&toks, &sig);
    for (k, text) in members.rename {
        out[sig[k]] = text;
    }
    for (k, text) in members.append {
        out[sig[k]].push_str(&text);
    }
    let mut rw = Rewriter {
        toks,
        sig,
        brackets,
        out,
        target,
        program,
        kernels: HashMap::new(),
        entries: Vec::new(),
        entry_lines: HashMap::new(),
        defined_constants: HashMap::new(),
        next_site: 0,
    };
    rw.run()?;
    if target == LowerTarget::Cpu {
        let kernels = rw.kernels.keys().cloned().collect();
        super::convergence::instrument(&rw.toks, &rw.sig, &mut rw.out, &kernels)?;
    }
    if source.contains("os_log") {
        let src = super::functions::Source::new(&rw.toks, &rw.sig);
        super::oslog::lower_calls(&src, &mut rw.out, &rw.sig, &program.kernel)?;
    }
    for (from, to) in repeated {
        rw.blank(from, to + 1);
    }
    let cooperative = rw.toks.iter().any(|t| t.kind == Kind::Ident && is_cooperative(&t.text));
    Ok(Rewritten { code: rw.out.concat(), entries: rw.entries, cooperative })
}

/// Identifiers that make the threads of a group depend on each other.
fn is_cooperative(ident: &str) -> bool {
    let builtin_value = crate::source::scan::ATTRIBUTES.iter().any(|(a, _)| *a == ident);
    !builtin_value
        && (ident.starts_with("simd_")
            || ident.starts_with("quad_")
            || ident.starts_with("simdgroup_")
            || ident == "threadgroup_barrier")
}

impl Rewriter<'_> {
    fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }

    fn tok_is(&self, k: usize, s: &str) -> bool {
        k < self.sig.len() && self.tok(k).is(s)
    }

    fn set(&mut self, k: usize, text: impl Into<String>) {
        let i = self.sig[k];
        self.out[i] = text.into();
    }

    /// Blanks the significant tokens in `from..to` (trivia and thus newlines stay).
    fn blank(&mut self, from: usize, to: usize) {
        for k in from..to.min(self.sig.len()) {
            self.set(k, "");
        }
    }

    /// The position of the token closing the bracket opened at `k`.
    fn matching(&self, k: usize) -> Option<usize> {
        self.brackets.closing(&self.toks, &self.sig, k)
    }

    /// The next `;` at the bracket depth of `k`.
    fn statement_end(&self, k: usize) -> Option<usize> {
        self.brackets.semicolon(k)
    }

    fn toks_in(&self, from: usize, to: usize) -> Vec<&Token> {
        (from..to).map(|k| self.tok(k)).collect()
    }

    fn run(&mut self) -> Result<(), String> {
        let mut scopes = vec![Scope::File];
        // How many of `scopes` are function bodies.
        let mut functions = 0usize;
        let mut parens = 0i32;
        let mut pending_kernel: Option<usize> = None;
        let mut pending_host_name: Option<String> = None;
        let mut k = 0;
        while k < self.sig.len() {
            let in_function = functions > 0;
            let file_scope = matches!(scopes.last(), Some(Scope::File | Scope::Namespace)) && parens == 0;
            let prev_member =
                k > 0 && (self.tok_is(k - 1, ".") || self.tok_is(k - 1, "->") || self.tok_is(k - 1, "::"));
            let t = self.tok(k).clone();
            match t.kind {
                Kind::Preproc => {
                    let d: String = t.text.split_whitespace().collect::<Vec<_>>().join(" ");
                    let metal_header = d.starts_with("#include") && (d.contains("<metal_") || d.contains("<simd/"));
                    if metal_header || d.starts_with("#pragma METAL") || d.starts_with("#pragma clang") {
                        self.set(k, "\n".repeat(t.text.matches('\n').count()));
                    }
                }
                Kind::Attr => {
                    let inner = t.attr_inner().to_string();
                    if inner == "kernel" {
                        pending_kernel = Some(k);
                        self.set(k, "");
                    } else if let Some(name) = host_name(&inner) {
                        if k > 0 && self.tok_is(k - 1, "template") {
                            k = self.instantiation(k - 1, name)?;
                            continue;
                        }
                        pending_host_name = Some(name);
                        self.set(k, "");
                    } else if inner.starts_with("host_name") {
                        return Err(format!("line {}: `[[{inner}]]` does not name a string literal", t.line));
                    } else if !STANDARD_ATTRS.contains(&inner.as_str()) {
                        self.set(k, "");
                    }
                }
                Kind::Number if is_float_literal(&t.text) => {
                    let lower = t.text.to_ascii_lowercase();
                    if let Some(num) = lower.strip_suffix('h') {
                        self.set(k, format!("half({num}f)"));
                    } else if !lower.ends_with('f') && !lower.ends_with('l') {
                        self.set(k, format!("{}f", t.text));
                    }
                }
                Kind::Punct => match t.text.as_str() {
                    "{" => {
                        let scope = self.scope_for_brace(k, in_function);
                        functions += usize::from(scope == Scope::Function);
                        scopes.push(scope);
                    }
                    "}" if scopes.len() > 1 => functions -= usize::from(scopes.pop() == Some(Scope::Function)),
                    "(" => parens += 1,
                    ")" => parens -= 1,
                    "." | "->" if k + 1 < self.sig.len() => {
                        let next = self.tok(k + 1).clone();
                        if next.kind == Kind::Ident && is_swizzle(&next.text) && !self.tok_is(k + 2, "(") {
                            let assign = k + 2 < self.sig.len() && ASSIGN_OPS.contains(&self.tok(k + 2).text.as_str());
                            let suffix = if assign { "_ref()" } else { "()" };
                            self.set(k + 1, format!("{}{suffix}", next.text));
                            k += 2;
                            continue;
                        }
                    }
                    _ => {}
                },
                Kind::Ident if self.is_sited_collective(k, in_function) => {
                    // The `(` keeps its token kind, so the bracket count below still sees it. The
                    // tag is the call's closing parenthesis, a position (see convergence.rs).
                    let sep = if self.tok_is(k + 2, ")") { "" } else { ", " };
                    let site = self.matching(k + 1).unwrap_or(k + 1);
                    self.set(k + 1, format!("(kiln::site_tag<{site}>{{}}{sep}"));
                }
                Kind::Ident if !prev_member => match t.text.as_str() {
                    "kernel" if !in_function => {
                        pending_kernel = Some(k);
                        self.set(k, "");
                    }
                    "device" | "thread" => self.set(k, ""),
                    "constant" => {
                        if file_scope && !self.in_template_arguments(k) {
                            if let Some(next) = self.function_constant(k)? {
                                k = next;
                                continue;
                            }
                            let text = self.file_constant(k);
                            self.set(k, text);
                        } else {
                            let (_, has_const, _) = self.specifiers_around(k);
                            self.set(k, if has_const { "" } else { "const" });
                        }
                    }
                    "threadgroup" => {
                        let stmt_start = k > 0 && [";", "{", "}", ":"].iter().any(|s| self.tok_is(k - 1, s));
                        if in_function && parens == 0 && stmt_start {
                            if let Some(end) = self.threadgroup_decl(k) {
                                k = end;
                                continue;
                            }
                        }
                        self.set(k, "");
                    }
                    "for" | "while" if self.tok_is(k + 1, "(") => self.poll_loop(k),
                    "is_function_constant_defined" if self.tok_is(k + 1, "(") && self.tok_is(k + 3, ")") => {
                        let name = self.tok(k + 2).text.clone();
                        let defined = self.defined_constants.get(&name).copied().unwrap_or(false);
                        self.set(k, if defined { "true" } else { "false" });
                        self.blank(k + 1, k + 4);
                        k += 4;
                        continue;
                    }
                    "void" if pending_kernel.is_some() && !in_function && parens == 0 => {
                        let marker = pending_kernel.take().unwrap_or(k);
                        self.kernel_definition(marker, k, pending_host_name.take())?;
                    }
                    _ => {}
                },
                _ => {}
            }
            k += 1;
        }
        Ok(())
    }

    /// A call, in the kernel's source, of a SIMD collective that the CPU prelude groups by
    /// source call site (`name(` or `metal::name(`, not a member).
    fn is_sited_collective(&self, k: usize, in_function: bool) -> bool {
        if self.target != LowerTarget::Cpu || !in_function || !self.tok_is(k + 1, "(") {
            return false;
        }
        if !SITED_COLLECTIVES.contains(&self.tok(k).text.as_str()) {
            return false;
        }
        let member = k > 0 && (self.tok_is(k - 1, ".") || self.tok_is(k - 1, "->"));
        let qualified = k > 0 && self.tok_is(k - 1, "::");
        !member && (!qualified || (k > 1 && self.tok_is(k - 2, "metal")))
    }

    /// Whether `k` starts a template argument (`S<constant T*>`), where `constant` qualifies a
    /// type rather than declaring data.
    fn in_template_arguments(&self, k: usize) -> bool {
        let mut j = k;
        while j > 0 && (self.tok_is(j - 1, "const") || self.tok_is(j - 1, "volatile")) {
            j -= 1;
        }
        j > 0 && (self.tok_is(j - 1, "<") || self.tok_is(j - 1, ","))
    }

    /// Whether the declaration specifiers around `k` (`static constant constexpr const`, as in
    /// MLX's `MLX_MTL_CONST`) hold `static`, `const` and `constexpr`.
    fn specifiers_around(&self, k: usize) -> (bool, bool, bool) {
        const SPECIFIERS: [&str; 9] =
            ["static", "constexpr", "const", "inline", "volatile", "constant", "device", "thread", "extern"];
        // A declaration has a handful of specifiers; the scan stops after a few dozen.
        const MOST: usize = 32;
        let is_spec = |j: usize| SPECIFIERS.iter().any(|s| self.tok_is(j, s));
        let mut from = k;
        while from > 0 && k - from < MOST && is_spec(from - 1) {
            from -= 1;
        }
        let mut to = k + 1;
        while to < self.sig.len() && to - k < MOST && is_spec(to) {
            to += 1;
        }
        let has = |s: &str| (from..to).any(|j| self.tok_is(j, s));
        (has("static"), has("const"), has("constexpr"))
    }

    /// File-scope `constant` data: `KILN_CONSTANT` (the target's constant storage, `const`)
    /// without repeating a `static` or `const` the declaration already has.
    fn file_constant(&self, k: usize) -> String {
        let (has_static, has_const, has_constexpr) = self.specifiers_around(k);
        match self.target {
            _ if !has_static && !has_const => "KILN_CONSTANT".into(),
            LowerTarget::Cpu if has_static && has_const => String::new(),
            LowerTarget::Cpu if has_static => "const".into(),
            LowerTarget::Cpu => "static".into(),
            // A constexpr variable is usable in device code as it is.
            LowerTarget::Cuda if has_constexpr => String::new(),
            LowerTarget::Cuda if has_const => "__constant__".into(),
            LowerTarget::Cuda => "__constant__ const".into(),
        }
    }

    /// What a `{` at `k` opens.
    fn scope_for_brace(&self, k: usize, in_function: bool) -> Scope {
        if in_function {
            return Scope::Block;
        }
        // `) {`, `) const {`, `) const thread {` and similar.
        let mut j = k;
        while j > 0 && is_function_qualifier(&self.tok(j - 1).text) {
            j -= 1;
        }
        if j > 0 && self.tok_is(j - 1, ")") {
            return Scope::Function;
        }
        while j > 0 {
            j -= 1;
            let t = self.tok(j);
            match t.text.as_str() {
                ";" | "{" | "}" => break,
                "namespace" | "extern" => return Scope::Namespace,
                "struct" | "class" | "union" | "enum" => return Scope::Struct,
                "=" => return Scope::Init,
                _ => {}
            }
        }
        Scope::Block
    }

    /// `for (a; b; c)` and `while (b)`: the condition also polls for cancellation, so a kernel
    /// that never finishes can be stopped. A condition that declares a variable (`while (int v =
    /// f())`) polls in its initialiser.
    fn poll_loop(&mut self, k: usize) {
        let open = k + 1;
        let Some(close) = self.matching(open) else { return };
        if self.tok_is(k, "while") {
            if let Some(eq) = self.declaration_init(open + 1, close) {
                self.poll_in_initializer(eq, close);
            } else {
                let first = self.out[self.sig[open]].clone();
                self.set(open, format!("{first}(KILN_POLL(), ("));
                let last = self.out[self.sig[close]].clone();
                self.set(close, format!(")){last}"));
            }
            return;
        }
        let mut depth = 0;
        let mut semis = Vec::new();
        for j in open + 1..close {
            match self.tok(j).text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                ";" if depth == 0 => semis.push(j),
                _ => {}
            }
        }
        if let [a, b] = semis[..] {
            if b == a + 1 {
                self.set(a, "; KILN_POLL_TRUE()");
            } else if let Some(eq) = self.declaration_init(a + 1, b) {
                self.poll_in_initializer(eq, b);
            } else {
                self.set(a, "; (KILN_POLL(), (");
                self.set(b, "));");
            }
        }
    }

    /// In a condition `from..to`, the `=` of a declaration `T name = init` (the name preceded
    /// by a type's last token), or `None` for an expression.
    fn declaration_init(&self, from: usize, to: usize) -> Option<usize> {
        let mut depth = 0i32;
        let eq = (from..to).find(|&j| {
            match self.tok(j).text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ => {}
            }
            depth == 0 && self.tok(j).is("=")
        })?;
        let declares = eq >= from + 2
            && self.tok(eq - 1).kind == Kind::Ident
            && (self.tok(eq - 2).kind == Kind::Ident
                || ["*", "&", "&&", ">", ">>"].iter().any(|s| self.tok_is(eq - 2, s)));
        declares.then_some(eq)
    }

    /// `T v = init` up to `end` (the `)` or `;` after it) becomes `T v = (KILN_POLL(), (init))`.
    fn poll_in_initializer(&mut self, eq: usize, end: usize) {
        let eq_text = self.out[self.sig[eq]].clone();
        self.set(eq, format!("{eq_text} (KILN_POLL(), ("));
        let last = self.out[self.sig[end]].clone();
        self.set(end, format!(")){last}"));
    }

    /// A `threadgroup T name[N]...;` storage declaration inside a function, rewritten to
    /// per-group storage. Sizes may be any constant expressions (`[BM][BK + 1]`, `[N * N]`).
    /// Returns the position after it, or `None` when the declaration is a pointer or reference
    /// (then only the keyword goes).
    fn threadgroup_decl(&mut self, k: usize) -> Option<usize> {
        let end = self.statement_end(k)?;
        let span: Vec<Token> = (k + 1..end).map(|j| self.tok(j).clone()).collect();
        // The type ends at the identifier just before the first top-level `[`, `,` or the end.
        let mut depth = 0i32;
        let mut first_stop = span.len();
        for (i, t) in span.iter().enumerate() {
            match t.text.as_str() {
                "<" | "(" => depth += 1,
                ">" | ")" => depth -= 1,
                ">>" => depth -= 2,
                "[" | "," if depth == 0 => {
                    first_stop = i;
                    break;
                }
                _ => {}
            }
        }
        if first_stop == 0 || span[first_stop - 1].kind != Kind::Ident {
            return None;
        }
        let ty_toks = &span[..first_stop - 1];
        if ty_toks.iter().any(|t| t.kind == Kind::Punct && ["*", "&", "&&", "(", "="].contains(&t.text.as_str())) {
            return None;
        }
        let ty = join(&ty_toks.iter().collect::<Vec<_>>());
        let rest: Vec<&Token> = span[first_stop - 1..].iter().collect();
        let mut decls = Vec::new();
        for part in super::entry::split_commas(&rest) {
            let name = part.first().filter(|t| t.kind == Kind::Ident)?.text.clone();
            let dims = self.array_dims(&part[1..])?;
            let site = self.next_site;
            self.next_site += 1;
            decls.push(match self.target {
                LowerTarget::Cpu => format!("auto& {name} = *kiln::rt::tg_alloc<{ty}{dims}, {site}>(\"{name}\");"),
                LowerTarget::Cuda => format!("__shared__ {ty} {name}{dims};"),
            });
        }
        self.set(k, decls.join(" "));
        self.blank(k + 1, end + 1);
        Some(end + 1)
    }

    /// `[a][b + 1]` as `[(a)][(b + 1)]`: parenthesised so a `>` in a size cannot end the
    /// template argument list the type is placed in. `None` unless the tokens are only
    /// bracketed sizes.
    fn array_dims(&self, toks: &[&Token]) -> Option<String> {
        let mut out = String::new();
        let mut i = 0;
        while i < toks.len() {
            if !toks[i].is("[") {
                return None;
            }
            let mut depth = 0i32;
            let close = (i..toks.len()).find(|&j| {
                match toks[j].text.as_str() {
                    "[" => depth += 1,
                    "]" => depth -= 1,
                    _ => {}
                }
                depth == 0
            })?;
            let size = join(&toks[i + 1..close]);
            out.push_str(&if size.is_empty() { "[]".to_string() } else { format!("[({size})]") });
            i = close + 1;
        }
        Some(out)
    }

    /// `constant T name [[function_constant(i)]];` at file scope. Returns the position after
    /// the declaration when it is one.
    fn function_constant(&mut self, k: usize) -> Result<Option<usize>, String> {
        let Some(end) = self.statement_end(k) else { return Ok(None) };
        let Some(attr) = (k + 1..end).find(|&j| self.tok(j).kind == Kind::Attr) else { return Ok(None) };
        let inner = self.tok(attr).attr_inner().to_string();
        let Some(rest) = inner.strip_prefix("function_constant") else { return Ok(None) };
        let index: Option<u32> = rest.trim().trim_start_matches('(').trim_end_matches(')').trim().parse().ok();
        if attr < k + 3 {
            return Err(format!("malformed function constant declaration on line {}", self.tok(k).line));
        }
        let name = self.tok(attr - 1).text.clone();
        let ty = join(&self.toks_in(k + 1, attr - 1));
        let value = self.program.constants.iter().find_map(|(key, v)| {
            let hit = match key {
                ConstantKey::Index(i) => Some(*i) == index,
                ConstantKey::Name(n) => *n == name,
            };
            hit.then(|| v.clone())
        });
        self.defined_constants.insert(name.clone(), value.is_some());
        let init = match value {
            Some(ConstantValue::Bool(b)) => b.to_string(),
            Some(ConstantValue::Int(i)) => format!("{i}"),
            Some(ConstantValue::Float(f)) => format!("{f:?}"),
            None => String::new(),
        };
        let init = if init.is_empty() { format!("{ty}()") } else { format!("{ty}({init})") };
        self.set(k, format!("static constexpr {ty} {name} = {init};"));
        self.blank(k + 1, end + 1);
        Ok(Some(end + 1))
    }

    /// A kernel function definition: `void name(params)` after `kernel` / `[[kernel]]`.
    fn kernel_definition(&mut self, marker: usize, void_pos: usize, host: Option<String>) -> Result<(), String> {
        let name_pos = void_pos + 1;
        if name_pos >= self.sig.len() || self.tok(name_pos).kind != Kind::Ident || !self.tok_is(name_pos + 1, "(") {
            return Err(format!("line {}: expected `void name(` after `kernel`", self.tok(void_pos).line));
        }
        let name = self.tok(name_pos).text.clone();
        let open = name_pos + 1;
        let close = self.matching(open).ok_or_else(|| format!("kernel {name}: unbalanced parentheses"))?;
        let params = parse_params(&name, &self.toks_in(open + 1, close))?;
        // A template kernel is dispatched only through its explicit instantiations.
        let mut j = marker;
        let mut is_template = false;
        while j > 0 {
            j -= 1;
            let t = self.tok(j);
            if t.is("template") {
                is_template = true;
                break;
            }
            if t.is(";") || t.is("}") || t.is("{") {
                break;
            }
        }
        if !is_template {
            let entry =
                Entry { host_name: host.unwrap_or_else(|| name.clone()), callee: name.clone(), params: params.clone() };
            self.add_entry(entry, self.tok(name_pos).line)?;
        }
        self.kernels.insert(name, params);
        Ok(())
    }

    /// `template [[host_name("x")]] [[kernel]] decltype(f<A>) f<A>;` or
    /// `template [[host_name("x")]] kernel void f<A>(params);`. Returns the position after it.
    fn instantiation(&mut self, template_pos: usize, host: String) -> Result<usize, String> {
        let end = self.statement_end(template_pos).ok_or_else(|| format!("instantiation {host:?}: missing `;`"))?;
        let mut j = template_pos + 2;
        while j < end && (self.tok(j).kind == Kind::Attr || self.tok_is(j, "kernel")) {
            j += 1;
        }
        let callee_toks: Vec<&Token> = if self.tok_is(j, "decltype") {
            let close = self.matching(j + 1).ok_or_else(|| format!("instantiation {host:?}: bad decltype"))?;
            self.toks_in(close + 1, end)
        } else {
            if self.tok_is(j, "void") {
                j += 1;
            }
            let mut angle = 0i32;
            let mut stop = end;
            for p in j..end {
                match self.tok(p).text.as_str() {
                    "<" => angle += 1,
                    ">" => angle -= 1,
                    ">>" => angle -= 2,
                    "(" if angle == 0 => {
                        stop = p;
                        break;
                    }
                    _ => {}
                }
            }
            self.toks_in(j, stop)
        };
        let callee = join(&callee_toks);
        let fname = callee_toks.first().map(|t| t.text.clone()).unwrap_or_default();
        let params =
            self.kernels.get(&fname).cloned().ok_or_else(|| {
                format!("instantiation {host:?} names `{fname}`, which is not a kernel defined above it")
            })?;
        let line = self.tok(template_pos).line;
        self.add_entry(Entry { host_name: host, callee, params }, line)?;
        self.blank(template_pos, end + 1);
        Ok(end + 1)
    }

    /// Records an entry; a host name defined twice is an error (a launch could not say which).
    fn add_entry(&mut self, entry: Entry, line: u32) -> Result<(), String> {
        if let Some(first) = self.entry_lines.insert(entry.host_name.clone(), line) {
            return Err(format!(
                "kernel `{}` is defined twice (lines {first} and {line}); a host name must name one kernel",
                entry.host_name
            ));
        }
        self.entries.push(entry);
        Ok(())
    }
}

/// The name in `host_name("x")`.
/// The name in `host_name("x")`; adjacent literals are one string (`host_name("ss_" "Add")`, as
/// MLX's instantiation macros write it with `#`).
fn host_name(inner: &str) -> Option<String> {
    let mut rest = inner.strip_prefix("host_name")?.trim_start().strip_prefix('(')?.trim_start();
    let mut name = String::new();
    while let Some(literal) = rest.strip_prefix('"') {
        let end = literal.find('"')?;
        name.push_str(&literal[..end]);
        rest = literal[end + 1..].trim_start();
    }
    rest.starts_with(')').then_some(name)
}

#[cfg(test)]
mod tests {
    use super::{host_name, SITED_COLLECTIVES};

    #[test]
    fn host_names_join_adjacent_literals() {
        assert_eq!(host_name("host_name(\"row_sum\")").as_deref(), Some("row_sum"));
        assert_eq!(host_name("host_name( \"ss_\" \"Add\"  \"float32\" )").as_deref(), Some("ss_Addfloat32"));
        assert_eq!(host_name("host_name(name)"), None);
    }

    #[test]
    fn every_sited_collective_has_a_cpu_overload() {
        let simd = include_str!("../../../prelude/cpu/simd.h");
        for name in SITED_COLLECTIVES {
            assert!(simd.contains(&format!("KILN_SITED({name})")), "{name} has no KILN_SITED overload");
        }
        assert_eq!(simd.matches("KILN_SITED(").count() - 1, SITED_COLLECTIVES.len(), "one overload per name");
    }
}

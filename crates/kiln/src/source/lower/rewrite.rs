//! The token rewriter: walks the significant tokens of a parsed MSL program once and replaces
//! what C++ cannot express, reading where each token stands and what it declares from the
//! parse. Replacements never add or remove newlines, so line N of the output is line N of the
//! input.

use std::collections::HashMap;

use super::convergence::SITED_COLLECTIVES;
use super::members::{is_swizzle, swizzle_members};
use super::LowerTarget;
use crate::program::{ConstantKey, ConstantValue, MetalProgram};
use crate::source::cursor::split_commas;
use crate::source::parse::{first_declarator, in_template_arguments, join, FunctionConstant, ProgramParse};
use crate::source::tokens::{is_float_literal, Kind, Token};

/// Attributes C++17 understands; every other `[[...]]` group is removed.
const STANDARD_ATTRS: [&str; 5] = ["maybe_unused", "fallthrough", "nodiscard", "noreturn", "deprecated"];

/// Operators after a swizzle that make it a write (`v.xy = ...`, `c.bgr *= ...`).
const ASSIGN_OPS: [&str; 11] = ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="];

/// The result of rewriting: the code and whether its threads cooperate.
pub struct Rewritten {
    pub code: String,
    pub cooperative: bool,
    /// Whether the kernels' threads may run as coroutines on the CPU (`coroutines::lower`).
    pub coroutines: bool,
    /// The kernels that also run as region loops on the CPU, with their region forms
    /// (`regions::lower`).
    pub regions: Vec<super::regions::RegionKernel>,
}

struct Rewriter<'a> {
    parse: &'a ProgramParse,
    /// The text each token (trivia included) is emitted as.
    out: Vec<String>,
    target: LowerTarget,
    program: &'a MetalProgram,
    defined_constants: HashMap<String, bool>,
    next_site: u32,
}

/// Rewrites the parsed `program` for `target`.
pub fn rewrite(program: &MetalProgram, parse: &ProgramParse, target: LowerTarget) -> Result<Rewritten, String> {
    let src = &parse.cursor;
    let mut out: Vec<String> = src.toks.iter().map(|t| t.text.clone()).collect();
    let members = swizzle_members(src);
    for (k, text) in members.rename {
        out[src.sig[k]] = text;
    }
    for (k, text) in members.append {
        out[src.sig[k]].push_str(&text);
    }
    let mut rw = Rewriter { parse, out, target, program, defined_constants: HashMap::new(), next_site: 0 };
    rw.run();
    super::anon_structs::lower(src, &mut rw.out);
    super::designators::lower(parse, &mut rw.out);
    super::float_args::companions(parse, &mut rw.out);
    let kernels = parse.kernels.keys().cloned().collect();
    if target == LowerTarget::Cpu {
        super::convergence::instrument(src, &mut rw.out, &kernels)?;
        super::private_arrays::register(parse, &mut rw.out);
    }
    if src.toks.iter().any(|t| t.kind == Kind::Ident && t.text.starts_with("os_log")) {
        super::oslog::lower_calls(src, &mut rw.out, &program.kernel)?;
    }
    for &(from, to) in &parse.repeated {
        rw.blank(from, to + 1);
    }
    // One kernel of a whole file compiles what it reaches.
    if program.kind == crate::program::ProgramKind::FullFile && parse.entries.len() > 1 {
        if let Some(entry) = parse.entry(&program.function) {
            for (from, to) in super::prune::unreached(parse, entry) {
                rw.blank_with_trivia(from, to);
            }
        }
    }
    let cooperative = src.toks.iter().any(|t| t.kind == Kind::Ident && is_cooperative(&t.text));
    let coroutines = cooperative && target == LowerTarget::Cpu && super::coroutines::lower(src, &mut rw.out, &kernels);
    let regions = if coroutines { super::regions::lower(src, &rw.out, &kernels) } else { Vec::new() };
    Ok(Rewritten { code: rw.out.concat(), cooperative, coroutines, regions })
}

/// Identifiers that make the threads of a group depend on each other.
pub(super) fn is_cooperative(ident: &str) -> bool {
    let builtin_value = crate::source::scan::ATTRIBUTES.iter().any(|(a, _)| *a == ident);
    !builtin_value
        && (ident.starts_with("simd_")
            || ident.starts_with("quad_")
            || ident.starts_with("simdgroup_")
            || ident == "threadgroup_barrier")
}

impl<'a> Rewriter<'a> {
    fn tok(&self, k: usize) -> &'a Token {
        self.parse.cursor.tok(k)
    }

    fn tok_is(&self, k: usize, s: &str) -> bool {
        self.parse.cursor.is(k, s)
    }

    fn set(&mut self, k: usize, text: impl Into<String>) {
        let i = self.parse.cursor.sig[k];
        self.out[i] = text.into();
    }

    /// Blanks the significant tokens in `from..to` (trivia and thus newlines stay).
    fn blank(&mut self, from: usize, to: usize) {
        for k in from..to.min(self.parse.cursor.len()) {
            self.set(k, "");
        }
    }

    /// Blanks the significant tokens `from..to` and the comments and spaces between them,
    /// keeping their line breaks (what a pruned declaration leaves for the passes after).
    fn blank_with_trivia(&mut self, from: usize, to: usize) {
        let src = &self.parse.cursor;
        let to = to.min(src.len());
        if from >= to {
            return;
        }
        for i in src.sig[from]..=src.sig[to - 1] {
            let t = &src.toks[i];
            if t.is_trivia() {
                self.out[i] = "\n".repeat(t.text.matches('\n').count());
            }
        }
        self.blank(from, to);
    }

    /// The position of the token closing the bracket opened at `k`.
    fn matching(&self, k: usize) -> Option<usize> {
        self.parse.cursor.matching(k)
    }

    fn run(&mut self) {
        let mut k = 0;
        while k < self.parse.cursor.len() {
            let context = self.parse.context[k];
            let in_function = context.in_function;
            let prev_member =
                k > 0 && (self.tok_is(k - 1, ".") || self.tok_is(k - 1, "->") || self.tok_is(k - 1, "::"));
            let t = self.tok(k);
            match t.kind {
                Kind::Preproc => {
                    let d: String = t.text.split_whitespace().collect::<Vec<_>>().join(" ");
                    let metal_header = d.starts_with("#include") && (d.contains("<metal_") || d.contains("<simd/"));
                    if metal_header || d.starts_with("#pragma METAL") || d.starts_with("#pragma clang") {
                        self.set(k, "\n".repeat(t.text.matches('\n').count()));
                    }
                }
                Kind::Attr => {
                    // An explicit instantiation is no C++ of its own: the entry wrapper calls it.
                    let instantiation = k.checked_sub(1).and_then(|t| self.parse.instantiations.get(&t));
                    if let Some(&end) = instantiation {
                        self.blank(k - 1, end + 1);
                        k = end + 1;
                        continue;
                    }
                    if !STANDARD_ATTRS.contains(&t.attr_inner()) {
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
                    "." | "->" if k + 1 < self.parse.cursor.len() => {
                        let next = self.tok(k + 1);
                        if next.kind == Kind::Ident && is_swizzle(&next.text) && !self.tok_is(k + 2, "(") {
                            let assign =
                                k + 2 < self.parse.cursor.len() && ASSIGN_OPS.contains(&self.tok(k + 2).text.as_str());
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
                    "kernel" if !in_function => self.set(k, ""),
                    "device" | "thread" => self.set(k, ""),
                    // Metal 3.2's `coherent(device)` / `coherent(system)` pointer qualifier:
                    // every kiln target's memory is coherent at those scopes already.
                    "coherent" if self.tok_is(k + 1, "(") && self.tok_is(k + 3, ")") => {
                        self.blank(k, k + 4);
                        k += 4;
                        continue;
                    }
                    "constant" => {
                        if context.file_scope && !in_template_arguments(&self.parse.cursor, k) {
                            if let Some(next) = self.function_constant(k) {
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
                        if in_function && !context.in_parens && stmt_start {
                            if let Some(end) = self.threadgroup_decl(k) {
                                k = end;
                                continue;
                            }
                        }
                        self.set(k, "");
                    }
                    // An explicit specialisation of a member function template inside its class
                    // (clang's CWG 727, which GCC refuses) is the non-template overload it
                    // stands for: calls that deduce its arguments pick it either way.
                    "template"
                        if self.tok_is(k + 1, "<")
                            && self.tok_is(k + 2, ">")
                            && !context.file_scope
                            && !in_function
                            && !context.in_parens
                            && !["struct", "class", "union"].iter().any(|s| self.tok_is(k + 3, s)) =>
                    {
                        self.blank(k, k + 3);
                        k += 3;
                        continue;
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
                    _ => {}
                },
                _ => {}
            }
            k += 1;
        }
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
        while to < self.parse.cursor.len() && to - k < MOST && is_spec(to) {
            to += 1;
        }
        let has = |s: &str| (from..to).any(|j| self.tok_is(j, s));
        (has("static"), has("const"), has("constexpr"))
    }

    /// File-scope `constant` data: `KILN_CONSTANT` (the target's constant storage, `const`)
    /// without repeating a `static` or `const` the declaration already has.
    /// An out-of-class definition of a static data member (`constant constexpr const float
    /// S<6, 3>::table[8][8];`, MLX's conv.metal) keeps only the specifiers it has: `static` is
    /// not allowed there and the member's storage is its class's.
    fn file_constant(&self, k: usize) -> String {
        let (has_static, has_const, has_constexpr) = self.specifiers_around(k);
        if self.defines_static_member(k) {
            return String::new();
        }
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

    /// Whether the declaration at `k` names a qualified declarator (`...::name` before its
    /// `[`, `=`, `{` or `;`): the definition of a class's static member.
    fn defines_static_member(&self, k: usize) -> bool {
        // A declaration's type and name take a few dozen tokens at most.
        const MOST: usize = 64;
        let len = self.parse.cursor.len();
        let mut j = k + 1;
        while j < len && j - k < MOST && ![";", "=", "[", "{", "("].iter().any(|s| self.tok_is(j, s)) {
            j += 1;
        }
        j < len && j >= k + 3 && self.tok_is(j - 2, "::")
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
                let first = self.out[self.parse.cursor.sig[open]].clone();
                self.set(open, format!("{first}(KILN_POLL(), ("));
                let last = self.out[self.parse.cursor.sig[close]].clone();
                self.set(close, format!(")){last}"));
            }
            return;
        }
        if let [a, b] = self.parse.cursor.semicolons_in(open, close)[..] {
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
        let eq_text = self.out[self.parse.cursor.sig[eq]].clone();
        self.set(eq, format!("{eq_text} (KILN_POLL(), ("));
        let last = self.out[self.parse.cursor.sig[end]].clone();
        self.set(end, format!(")){last}"));
    }

    /// A `threadgroup T name[N]...;` storage declaration inside a function, rewritten to
    /// per-group storage. Sizes may be any constant expressions (`[BM][BK + 1]`, `[N * N]`).
    /// Returns the position after it, or `None` when the declaration is a pointer or reference
    /// (then only the keyword goes).
    fn threadgroup_decl(&mut self, k: usize) -> Option<usize> {
        let end = self.parse.cursor.semicolon(k)?;
        let span = self.parse.cursor.toks_in(k + 1, end);
        let name = first_declarator(&span)?;
        let ty_toks = &span[..name];
        if ty_toks.iter().any(|t| t.kind == Kind::Punct && ["*", "&", "&&", "(", "="].contains(&t.text.as_str())) {
            return None;
        }
        let ty = join(ty_toks);
        let mut decls = Vec::new();
        for part in split_commas(&span[name..]) {
            let name = part.first().filter(|t| t.kind == Kind::Ident)?.text.clone();
            // `= {0}` or `= {}` (MLX's layer norm): storage zeroed once for the group.
            let eq = part.iter().position(|t| t.is("=")).unwrap_or(part.len());
            let zeroed = eq < part.len();
            if zeroed && !is_zero_initializer(&part[eq + 1..]) {
                return None;
            }
            let dims = self.array_dims(&part[1..eq])?;
            let site = self.next_site;
            self.next_site += 1;
            decls.push(match (self.target, zeroed) {
                (LowerTarget::Cpu, _) => {
                    format!("auto& {name} = *kiln::rt::tg_alloc<{ty}{dims}, {site}, {zeroed}>(\"{name}\");")
                }
                (LowerTarget::Cuda, false) => format!("__shared__ {ty} {name}{dims};"),
                (LowerTarget::Cuda, true) => format!("__shared__ {ty} {name}{dims}; kiln::tg_zero({name});"),
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
    fn function_constant(&mut self, k: usize) -> Option<usize> {
        let FunctionConstant { end, name, ty, index } = self.parse.function_constants.get(&k)?;
        let (end, index) = (*end, *index);
        let value = self.program.constants.iter().find_map(|(key, v)| {
            let hit = match key {
                ConstantKey::Index(i) => Some(*i) == index,
                ConstantKey::Name(n) => n == name,
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
        // Specifiers written before `constant` (MLX's STEEL_CONST is `static constant constexpr
        // const`) are the lowered declaration's own.
        let mut from = k;
        while from > 0 && ["static", "constexpr", "const", "inline"].iter().any(|s| self.tok_is(from - 1, s)) {
            from -= 1;
        }
        self.blank(from, k);
        Some(end + 1)
    }
}

/// `{}` or `{0}` (any spelling of zero): an initialiser that zeroes threadgroup storage.
fn is_zero_initializer(toks: &[&Token]) -> bool {
    let zero = |t: &Token| {
        t.kind == Kind::Number
            && t.text.trim_end_matches(['f', 'F', 'h', 'H', 'u', 'U', 'l', 'L']).parse::<f64>() == Ok(0.0)
    };
    match toks {
        [open, close] => open.is("{") && close.is("}"),
        [open, z, close] => open.is("{") && zero(z) && close.is("}"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::SITED_COLLECTIVES;

    #[test]
    fn every_sited_collective_has_a_cpu_overload() {
        let simd = include_str!("../../../prelude/cpu/simd.h");
        for name in SITED_COLLECTIVES {
            assert!(simd.contains(&format!("KILN_SITED({name})")), "{name} has no KILN_SITED overload");
        }
        assert_eq!(simd.matches("KILN_SITED(").count() - 1, SITED_COLLECTIVES.len(), "one overload per name");
    }
}

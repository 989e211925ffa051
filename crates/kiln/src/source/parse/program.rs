//! The walk over a preprocessed program's significant tokens: tracks scopes (what each `{`
//! opens, parentheses) and records the kernels, explicit instantiations and function
//! constants it meets. Declarations it reads whole (an instantiation, a function constant) are
//! stepped over, as the lowering steps over them when it replaces them.

use std::collections::HashMap;

use super::deduce::KernelTemplate;
use super::entry::{join, parse_params};
use super::{Context, Entry, FunctionConstant, ProgramParse};
use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    File,
    Namespace,
    Struct,
    Function,
    Block,
    Init,
}

struct Walk {
    src: Cursor,
    context: Vec<Context>,
    entries: Vec<Entry>,
    kernels: HashMap<String, Vec<super::EntryParam>>,
    /// Kernel templates by name, for instantiations that name no template arguments.
    templates: HashMap<String, KernelTemplate>,
    instantiations: HashMap<usize, usize>,
    function_constants: HashMap<usize, FunctionConstant>,
    /// The line where each entry's host name was defined.
    entry_lines: HashMap<String, u32>,
}

/// Walks `src` once; `repeated` (from the overload check) is passed through.
pub(super) fn walk(src: Cursor, repeated: Vec<(usize, usize)>) -> Result<ProgramParse, String> {
    let mut w = Walk {
        context: vec![Context::default(); src.len()],
        src,
        entries: Vec::new(),
        kernels: HashMap::new(),
        templates: HashMap::new(),
        instantiations: HashMap::new(),
        function_constants: HashMap::new(),
        entry_lines: HashMap::new(),
    };
    w.run()?;
    Ok(ProgramParse {
        cursor: w.src,
        context: w.context,
        entries: w.entries,
        kernels: w.kernels,
        instantiations: w.instantiations,
        function_constants: w.function_constants,
        repeated,
        outline: std::sync::OnceLock::new(),
    })
}

impl Walk {
    fn run(&mut self) -> Result<(), String> {
        let mut scopes = vec![Scope::File];
        // How many of `scopes` are function bodies.
        let mut functions = 0usize;
        let mut parens = 0i32;
        let mut pending_kernel: Option<usize> = None;
        let mut pending_host_name: Option<String> = None;
        let mut k = 0;
        while k < self.src.len() {
            let in_function = functions > 0;
            let file_scope = matches!(scopes.last(), Some(Scope::File | Scope::Namespace)) && parens == 0;
            self.context[k] = Context { in_function, file_scope, in_parens: parens != 0 };
            let src = &self.src;
            let prev_member = k > 0 && (src.is(k - 1, ".") || src.is(k - 1, "->") || src.is(k - 1, "::"));
            let t = src.tok(k);
            match t.kind {
                Kind::Attr => {
                    let inner = t.attr_inner().to_string();
                    if is_kernel_attribute(&inner) {
                        pending_kernel = Some(k);
                    } else if let Some(name) = host_name(&inner) {
                        if k > 0 && src.is(k - 1, "template") {
                            k = self.instantiation(k - 1, name)? + 1;
                            continue;
                        }
                        pending_host_name = Some(name);
                    } else if inner.starts_with("host_name") {
                        return Err(format!("line {}: `[[{inner}]]` does not name a string literal", t.line));
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
                    _ => {}
                },
                Kind::Ident if !prev_member => match t.text.as_str() {
                    "kernel" if !in_function => pending_kernel = Some(k),
                    "constant" if file_scope && !in_template_arguments(src, k) => {
                        if let Some(end) = self.function_constant(k)? {
                            k = end + 1;
                            continue;
                        }
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

    /// What a `{` at `k` opens.
    fn scope_for_brace(&self, k: usize, in_function: bool) -> Scope {
        if in_function {
            return Scope::Block;
        }
        // `) {`, `) const {`, `) const thread {` and similar.
        let mut j = k;
        while j > 0 && is_function_qualifier(&self.src.tok(j - 1).text) {
            j -= 1;
        }
        if j > 0 && self.src.is(j - 1, ")") {
            return Scope::Function;
        }
        while j > 0 {
            j -= 1;
            match self.src.tok(j).text.as_str() {
                ";" | "{" | "}" => break,
                "namespace" | "extern" => return Scope::Namespace,
                "struct" | "class" | "union" | "enum" => return Scope::Struct,
                "=" => return Scope::Init,
                _ => {}
            }
        }
        Scope::Block
    }

    /// `constant T name [[function_constant(i)]];` at `k`, when it is one: recorded, and the
    /// position of its `;` returned.
    fn function_constant(&mut self, k: usize) -> Result<Option<usize>, String> {
        let src = &self.src;
        let Some(end) = src.semicolon(k) else { return Ok(None) };
        let Some(attr) = (k + 1..end).find(|&j| src.tok(j).kind == Kind::Attr) else { return Ok(None) };
        let inner = src.tok(attr).attr_inner();
        if !inner.starts_with("function_constant") {
            return Ok(None);
        }
        let index = super::constant_index(inner, None);
        if attr < k + 3 {
            return Err(format!("malformed function constant declaration on line {}", src.tok(k).line));
        }
        let name = src.tok(attr - 1).text.clone();
        // `static constant constexpr const bool x [[function_constant(0)]]` (MLX's STEEL_CONST):
        // the specifiers say nothing of the type.
        let specifier =
            |t: &&crate::source::tokens::Token| ["static", "constexpr", "const", "inline"].contains(&t.text.as_str());
        let ty_toks: Vec<_> = src.toks_in(k + 1, attr - 1).into_iter().filter(|t| !specifier(t)).collect();
        let ty = join(&ty_toks);
        self.function_constants.insert(k, FunctionConstant { end, name, ty, index });
        Ok(Some(end))
    }

    /// A kernel function definition: `void name(params)` after `kernel` / `[[kernel]]`.
    fn kernel_definition(&mut self, marker: usize, void_pos: usize, host: Option<String>) -> Result<(), String> {
        let src = &self.src;
        let name_pos = void_pos + 1;
        if !src.ident(name_pos) || !src.is(name_pos + 1, "(") {
            return Err(format!("line {}: expected `void name(` after `kernel`", src.tok(void_pos).line));
        }
        let name = src.tok(name_pos).text.clone();
        let open = name_pos + 1;
        let close = src.matching(open).ok_or_else(|| format!("kernel {name}: unbalanced parentheses"))?;
        let params = parse_params(&name, &src.toks_in(open + 1, close))?;
        // A template kernel is dispatched only through its explicit instantiations.
        let mut j = marker;
        let mut is_template = false;
        while j > 0 {
            j -= 1;
            let t = src.tok(j);
            if t.is("template") {
                is_template = true;
                break;
            }
            if t.is(";") || t.is("}") || t.is("{") {
                break;
            }
        }
        if is_template && src.is(j + 1, "<") {
            if let Some(close_angle) = angle_close(src, j + 1) {
                let template = KernelTemplate::new(&src.toks_in(j + 2, close_angle), &src.toks_in(open + 1, close));
                self.templates.insert(name.clone(), template);
            }
        }
        if !is_template {
            let line = src.tok(name_pos).line;
            let entry =
                Entry { host_name: host.unwrap_or_else(|| name.clone()), callee: name.clone(), params: params.clone() };
            self.add_entry(entry, line)?;
        }
        self.kernels.insert(name, params);
        Ok(())
    }

    /// `template [[host_name("x")]] [[kernel]] decltype(f<A>) f<A>;` or
    /// `template [[host_name("x")]] kernel void f<A>(params);`. Returns the position of its `;`.
    fn instantiation(&mut self, template_pos: usize, host: String) -> Result<usize, String> {
        let src = &self.src;
        let end = src.semicolon(template_pos).ok_or_else(|| format!("instantiation {host:?}: missing `;`"))?;
        let mut j = template_pos + 2;
        while j < end && (src.tok(j).kind == Kind::Attr || src.is(j, "kernel")) {
            j += 1;
        }
        let callee_toks = if src.is(j, "decltype") {
            let close = src.matching(j + 1).ok_or_else(|| format!("instantiation {host:?}: bad decltype"))?;
            src.toks_in(close + 1, end)
        } else {
            if src.is(j, "void") {
                j += 1;
            }
            // `void f<A>(params)`, or a function type named by a typedef before the template-id
            // (`kernel_f_t kernel_f<float>`): the callee is the last name outside the angles,
            // up to the parameters if there are any.
            let mut angle = 0i32;
            let mut stop = end;
            let mut name = j;
            for p in j..end {
                match src.tok(p).text.as_str() {
                    "<" => angle += 1,
                    ">" => angle -= 1,
                    ">>" => angle -= 2,
                    "(" if angle == 0 => {
                        stop = p;
                        break;
                    }
                    _ if angle == 0 && src.ident(p) && !src.is(p - 1, "::") => name = p,
                    _ => {}
                }
            }
            let mut from = name;
            while from >= j + 2 && src.is(from - 1, "::") && src.ident(from - 2) {
                from -= 2;
            }
            src.toks_in(from, stop)
        };
        let mut callee = join(&callee_toks);
        let fname = callee_toks
            .iter()
            .take_while(|t| !t.is("<"))
            .filter(|t| t.kind == Kind::Ident)
            .last()
            .map(|t| t.text.clone())
            .unwrap_or_default();
        // `void f(params)` naming no template arguments: those its parameters' types give.
        let named_args = callee_toks.iter().any(|t| t.is("<"));
        if let (false, Some(template)) = (named_args, self.templates.get(&fname)) {
            let open = (j..end).find(|&p| src.is(p, "("));
            if let Some((open, close)) = open.and_then(|o| Some((o, src.matching(o)?))) {
                if let Some(args) = template.deduce(&src.toks_in(open + 1, close)) {
                    callee = format!("{callee}<{}>", args.join(", "));
                }
            }
        }
        let params =
            self.kernels.get(&fname).cloned().ok_or_else(|| {
                format!("instantiation {host:?} names `{fname}`, which is not a kernel defined above it")
            })?;
        let line = src.tok(template_pos).line;
        self.add_entry(Entry { host_name: host, callee, params }, line)?;
        self.instantiations.insert(template_pos, end);
        Ok(end)
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

/// Whether `k` starts a template argument (`S<constant T*>`), where `constant` qualifies a
/// type rather than declaring data.
pub(crate) fn in_template_arguments(src: &Cursor, k: usize) -> bool {
    let mut j = k;
    while j > 0 && (src.is(j - 1, "const") || src.is(j - 1, "volatile")) {
        j -= 1;
    }
    j > 0 && (src.is(j - 1, "<") || src.is(j - 1, ","))
}

/// Whether a word may stand between a function's parameters and its body: C++'s qualifiers
/// and Metal's address spaces of `this` (`float get() const thread {`).
pub(crate) fn is_function_qualifier(word: &str) -> bool {
    matches!(
        word,
        "const" | "volatile" | "noexcept" | "override" | "final" | "thread" | "device" | "constant" | "threadgroup"
    )
}

/// Whether the inside of an attribute group marks a kernel (`kernel`, or `kernel` among other
/// attributes: `[[kernel, max_total_threads_per_threadgroup(64)]]`).
pub(crate) fn is_kernel_attribute(inner: &str) -> bool {
    inner == "kernel" || crate::source::cursor::split_text_commas(inner).iter().any(|a| a == "kernel")
}

/// The name in `host_name("x")`; adjacent literals are one string (`host_name("ss_" "Add")`, as
/// MLX's instantiation macros write it with `#`).
pub(crate) fn host_name(inner: &str) -> Option<String> {
    let mut rest = inner.strip_prefix("host_name")?.trim_start().strip_prefix('(')?.trim_start();
    let mut name = String::new();
    while let Some(literal) = rest.strip_prefix('"') {
        let end = literal.find('"')?;
        name.push_str(&literal[..end]);
        rest = literal[end + 1..].trim_start();
    }
    rest.starts_with(')').then_some(name)
}

/// The `>` closing the template parameter list whose `<` is at `open`.
fn angle_close(src: &Cursor, open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for k in open..src.len() {
        match src.tok(k).text.as_str() {
            "<" | "(" => depth += 1,
            ")" => depth -= 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            "{" | ";" => return None,
            _ => {}
        }
        if depth <= 0 {
            return Some(k);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{host_name, walk};
    use crate::source::cursor::Cursor;

    fn entries(src: &str) -> Vec<(String, String)> {
        let parse = walk(Cursor::new(src), Vec::new()).unwrap();
        parse.entries.iter().map(|e| (e.host_name.clone(), e.callee.clone())).collect()
    }

    #[test]
    fn instantiations_through_function_typedefs_and_kernel_attribute_lists() {
        let src = "template <typename T> kernel void kernel_f(device T* y [[buffer(0)]]) {}\n\
                   typedef decltype(kernel_f<float>) kernel_f_t;\n\
                   template [[host_name(\"kernel_f_f32\")]] kernel kernel_f_t kernel_f<float>;\n\
                   template [[host_name(\"kernel_f_f16\")]] kernel kernel_f_t kernel_f<half>;\n\
                   template <int N> [[kernel, max_total_threads_per_threadgroup(N)]] void g(device int* y [[buffer(0)]]) {}\n\
                   template [[host_name(\"g4\")]] [[kernel]] decltype(g<4>) g<4>;\n";
        assert_eq!(
            entries(src),
            [
                ("kernel_f_f32".to_string(), "kernel_f<float>".to_string()),
                ("kernel_f_f16".to_string(), "kernel_f<half>".to_string()),
                ("g4".to_string(), "g<4>".to_string()),
            ]
        );
    }

    #[test]
    fn host_names_join_adjacent_literals() {
        assert_eq!(host_name("host_name(\"row_sum\")").as_deref(), Some("row_sum"));
        assert_eq!(host_name("host_name( \"ss_\" \"Add\"  \"float32\" )").as_deref(), Some("ss_Addfloat32"));
        assert_eq!(host_name("host_name(name)"), None);
    }
}

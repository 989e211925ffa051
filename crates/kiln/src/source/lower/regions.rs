//! Kernels run on the CPU as region loops: a kernel whose barriers all stand as statements at
//! the top level of its own body is cut at them into regions, and a group runs each region for
//! all its threads in index order before the next (prelude/cpu/runtime.h, "region loops").
//!
//! That is the order in which the fibers and coroutines run the threads of such a kernel (each
//! thread up to the barrier, in index order, then each past it), so results are theirs bit for
//! bit; but a region's threads run in a loop like a barrier-free kernel's, with nothing
//! suspended, and consecutive threads may run as vector lanes. What a thread keeps across a
//! barrier is what it declared at the body's top level before it and names after it: those
//! variables live in a per-thread record (`kiln_slots`), each region reaching them by
//! reference; a `threadgroup` declaration's storage is opened once for the group.
//!
//! This pass reads the coroutine pass's marks (`lower::coroutines`): it runs on the kernels that
//! pass rewrote and writes a second definition of each kernel that qualifies, the region form
//! (`<name>_kiln_regions<R>`: `R` the region, -1 the group's setup), for the unit to compile
//! beside the kernel as written (which still runs checked launches and names the thread of a
//! fault). A kernel qualifies when:
//!
//! - it is not a template, at file scope, and calls no SIMD-group function (collectives need
//!   their lanes together);
//! - each of its barriers is a statement of its body's top level (not in a loop, a branch or a
//!   block), and it has no `goto`, `static` or `thread_local`;
//! - each variable declared at the top level of a region and named in a later one has a type
//!   written out (not `auto`, `decltype` or a reference), is declared in a statement the pass
//!   reads as a declaration, and is not named in the body before it (where an outer name of the
//!   same spelling would be meant).
//!
//! A unit whose region form the compiler refuses (a record member of a type declared in the
//! body, a constant named as an array size after a barrier, ...) is built again without it.

use std::collections::HashSet;

use super::functions::{find_scopes, Body};
use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

/// A kernel with a region form.
#[derive(Clone, Debug)]
pub struct RegionKernel {
    /// The kernel function's name (the entries' callee).
    pub name: String,
    /// How many regions its barriers cut it into.
    pub regions: usize,
    /// The region form's definition, one `#line`-numbered block of text.
    pub code: String,
    /// The line of the user's source the definition's first line is (for `#line`).
    pub line: u32,
    /// The file a `#line` directive before the kernel names, if any.
    pub file: Option<String>,
}

/// Names after which a statement is no declaration.
const STATEMENT_KEYWORDS: [&str; 24] = [
    "return",
    "if",
    "for",
    "while",
    "do",
    "switch",
    "break",
    "continue",
    "else",
    "case",
    "default",
    "throw",
    "delete",
    "goto",
    "sizeof",
    "alignof",
    "co_await",
    "co_return",
    "co_yield",
    "new",
    "operator",
    "this",
    "static_assert",
    "KILN_CO_RETURN",
];
/// Statements that declare types or aliases a later region could name.
const TYPE_KEYWORDS: [&str; 8] = ["struct", "class", "union", "enum", "typedef", "using", "namespace", "template"];
/// Declaration specifiers a variable kept across barriers may not have.
const REFUSED_SPECIFIERS: [&str; 10] =
    ["auto", "decltype", "static", "extern", "thread_local", "register", "mutable", "inline", "friend", "volatile"];

/// One declarator of a declaration: its `*`/`const` tokens, its name and its array sizes.
struct Declarator {
    ptr: (usize, usize),
    name: usize,
    dims: (usize, usize),
}

/// A statement read as a declaration: its specifiers `spec.0..spec.1` and declarators.
struct Declaration {
    spec: (usize, usize),
    declarators: Vec<Declarator>,
    constexpr: bool,
}

/// The region forms of `kernels`' functions in the coroutine-marked text `out`.
pub fn lower(src: &Cursor, out: &[String], kernels: &HashSet<String>) -> Vec<RegionKernel> {
    let (scopes, _) = find_scopes(src, kernels);
    scopes
        .iter()
        .filter(|s| s.body == Body::Kernel && !out[src.sig[s.open]].is_empty())
        .filter_map(|s| region_form(src, out, s.open, s.close))
        .collect()
}

fn text<'a>(src: &Cursor, out: &'a [String], k: usize) -> &'a str {
    &out[src.sig[k]]
}

/// The out texts of positions `from..to`, joined by spaces.
fn joined(src: &Cursor, out: &[String], from: usize, to: usize) -> String {
    (from..to).map(|k| text(src, out, k)).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ")
}

fn region_form(src: &Cursor, out: &[String], open: usize, close: usize) -> Option<RegionKernel> {
    let params = src.matching_back(open.checked_sub(1)?).filter(|_| src.is(open - 1, ")"))?;
    let (ret, name) = (params.checked_sub(2)?, params - 1);
    if text(src, out, ret) != "KILN_CO_ENTRY" || !src.ident(name) {
        return None;
    }
    // At file scope, and no template: walk back to the previous declaration's end.
    let depth = (0..ret).fold(0i64, |d, k| d + i64::from(src.is(k, "{")) - i64::from(src.is(k, "}")));
    let mut back = ret;
    while back > 0 && !src.is(back - 1, ";") && !src.is(back - 1, "}") && src.tok(back - 1).kind != Kind::Preproc {
        back -= 1;
        if src.is(back, "template") || src.is(back, ">") {
            return None;
        }
    }
    if depth != 0 {
        return None;
    }
    // The body's top-level statements.
    let mut statements: Vec<(usize, usize)> = Vec::new();
    let mut k = open + 1;
    while k < close {
        let end = if src.tok(k).kind == Kind::Preproc { k } else { src.statement_end(k)? };
        if end >= close {
            return None;
        }
        statements.push((k, end));
        k = end + 1;
    }
    let body = open + 1..close;
    if body.clone().any(|k| text(src, out, k).contains("KILN_CO_CALL("))
        || body.clone().any(|k| src.ident(k) && matches!(src.tok(k).text.as_str(), "goto" | "static" | "thread_local"))
    {
        return None;
    }
    let barrier_marks = body.clone().filter(|&k| text(src, out, k).contains("KILN_CO_BARRIER(")).count();
    // Regions: the statements between barrier statements.
    let mut regions: Vec<Vec<(usize, usize)>> = vec![Vec::new()];
    let mut barriers: Vec<(usize, usize)> = Vec::new();
    for &(a, e) in &statements {
        if text(src, out, a).starts_with("KILN_CO_BARRIER(") {
            let call = (a..e).find(|&j| src.is(j, "("))?;
            if src.matching(call)? + 1 != e || !src.is(e, ";") {
                return None;
            }
            barriers.push((a, e));
            regions.push(Vec::new());
        } else {
            regions.last_mut()?.push((a, e));
        }
    }
    if barriers.is_empty() || barriers.len() != barrier_marks {
        return None;
    }
    // Every identifier (not a member or qualified name) of each region.
    let names_of = |stmts: &[(usize, usize)]| -> HashSet<String> {
        let mut names = HashSet::new();
        for &(a, e) in stmts {
            for j in a..=e {
                let member = j > 0 && (src.is(j - 1, ".") || src.is(j - 1, "->") || src.is(j - 1, "::"));
                if src.ident(j) && !member {
                    names.insert(src.tok(j).text.clone());
                }
            }
        }
        names
    };
    let region_names: Vec<HashSet<String>> = regions.iter().map(|r| names_of(r)).collect();
    let mut later: Vec<HashSet<String>> = vec![HashSet::new(); regions.len()];
    for r in (0..regions.len().saturating_sub(1)).rev() {
        let mut names = later[r + 1].clone();
        names.extend(region_names[r + 1].iter().cloned());
        later[r] = names;
    }
    // A kept pointer may point at any variable of its region: then every variable declared at
    // the top level of a region before the last is kept.
    let keep_all = regions.iter().enumerate().any(|(r, stmts)| {
        stmts.iter().any(|&(a, e)| {
            declaration(src, a, e).is_some_and(|decl| {
                decl.declarators
                    .iter()
                    .any(|d| later[r].contains(&src.tok(d.name).text) && (d.ptr.0..d.ptr.1).any(|j| src.is(j, "*")))
            })
        })
    });
    let mut members: Vec<String> = Vec::new();
    let mut bindings: Vec<String> = Vec::new();
    let mut hoisted: Vec<String> = Vec::new();
    let mut setup: Vec<String> = Vec::new();
    let mut replaced: Vec<(usize, String)> = Vec::new();
    let mut appended: Vec<(usize, String)> = Vec::new();
    let mut blanked: Vec<(usize, usize)> = Vec::new();
    let mut kept: HashSet<String> = HashSet::new();
    for (r, stmts) in regions.iter().enumerate() {
        for &(a, e) in stmts {
            // `threadgroup` storage, opened once for the group by the setup.
            if let Some(decls) = threadgroup_storage(src, out, a) {
                for (var, expr) in decls {
                    let slot = setup.len();
                    if slot >= 64 {
                        return None;
                    }
                    setup.push(format!("kiln_ra.setup->uniform[{slot}] = (void*)({expr});"));
                    bindings.push(format!("auto& {var} = *static_cast<decltype({expr})>(kiln_ra.uniform[{slot}]);"));
                }
                blanked.push((a, e));
                continue;
            }
            let Some(later_names) = later.get(r).filter(|_| r + 1 < regions.len()) else { continue };
            let first = src.tok(a).text.as_str();
            if TYPE_KEYWORDS.contains(&first) {
                return None;
            }
            match declaration(src, a, e) {
                Some(decl) => {
                    let named_before = |d: &Declarator| {
                        let var = &src.tok(d.name).text;
                        (open + 1..d.name).any(|j| {
                            src.ident(j)
                                && src.tok(j).text == *var
                                && !(src.is(j - 1, ".") || src.is(j - 1, "->") || src.is(j - 1, "::"))
                        })
                    };
                    // Constants go before the regions, where every region (and the record's
                    // array sizes) can name them.
                    if decl.constexpr {
                        if decl.declarators.iter().any(named_before) {
                            return None;
                        }
                        hoisted.push(joined(src, out, a, e + 1));
                        blanked.push((a, e));
                        continue;
                    }
                    let crossing: Vec<&Declarator> = decl
                        .declarators
                        .iter()
                        .filter(|d| keep_all || later_names.contains(&src.tok(d.name).text))
                        .collect();
                    if crossing.is_empty() {
                        continue;
                    }
                    let refused = (decl.spec.0..decl.spec.1).any(|j| {
                        src.tok(j).kind == Kind::Attr
                            || REFUSED_SPECIFIERS.contains(&src.tok(j).text.as_str())
                            || src.is(j, "&")
                            || src.is(j, "&&")
                    });
                    if refused {
                        return None;
                    }
                    let spec = joined(src, out, decl.spec.0, decl.spec.1);
                    for d in crossing {
                        let var = src.tok(d.name).text.clone();
                        // Named before its declaration (an outer name), or in a later
                        // declarator of the statement: refused.
                        let named_before = named_before(d);
                        let named_after = (d.name + 1..=e).any(|j| src.ident(j) && src.tok(j).text == var);
                        let reference = (d.ptr.0..d.ptr.1).any(|j| src.is(j, "&") || src.is(j, "&&"));
                        if named_before || named_after || reference || !kept.insert(var.clone()) {
                            return None;
                        }
                        let ptr = joined(src, out, d.ptr.0, d.ptr.1);
                        let dims = joined(src, out, d.dims.0, d.dims.1);
                        members.push(format!("typename ::metal::remove_const<{spec} {ptr} {dims}>::type {var};"));
                        bindings.push(format!("auto& {var} = kiln_s.{var};"));
                        replaced.push((d.name, format!("kiln_i_{var}")));
                        appended.push((
                            e,
                            format!(
                                " __builtin_memcpy((void*)&kiln_s.{var}, (const void*)&kiln_i_{var}, sizeof(kiln_s.{var}));"
                            ),
                        ));
                    }
                }
                None => {
                    // A statement not read as a declaration must not be one whose name a later
                    // region reads: its names before the first operator are checked.
                    if keep_all && !plain_statement(src, a, e) {
                        return None;
                    }
                    if !plain_statement(src, a, e) {
                        let head_end = (a..=e)
                            .find(|&j| {
                                src.tok(j).kind == Kind::Punct && !src.is(j, "::") && !src.is(j, "<") && !src.is(j, ">")
                            })
                            .unwrap_or(e);
                        if (a..head_end).any(|j| src.ident(j) && later_names.contains(&src.tok(j).text)) {
                            return None;
                        }
                    }
                }
            }
        }
    }
    let early_returns = regions[..regions.len() - 1]
        .iter()
        .flatten()
        .any(|&(a, e)| (a..=e).any(|j| text(src, out, j).contains("KILN_CO_RETURN")));
    // The prologue: one line, so the body keeps its lines.
    let mut prologue = String::new();
    for h in &hoisted {
        prologue.push_str(h);
        prologue.push(' ');
    }
    prologue.push_str(&format!(
        "struct kiln_slots {{ {} }}; static_assert(__is_trivially_copyable(kiln_slots), \"a variable kept across a barrier has a type a region form cannot keep\"); \
         if constexpr (KILN_R < 0) {{ kiln_ra.setup->record = sizeof(kiln_slots); {} return; }} \
         kiln_slots& kiln_s = ((kiln_slots*)kiln_ra.base)[kiln_ra.index]; (void)kiln_s; {} ",
        members.join(" "),
        setup.join(" "),
        bindings.join(" ")
    ));
    if early_returns {
        prologue.push_str("if (KILN_R > 0 && kiln_ra.finished()) return; ");
    }
    // The copy, token by token.
    let mut token_text: std::collections::HashMap<usize, String> = std::collections::HashMap::new();
    for &(a, e) in &blanked {
        for j in a..=e {
            token_text.insert(j, String::new());
        }
    }
    for (r, &(a, e)) in barriers.iter().enumerate() {
        for j in a..=e {
            token_text.insert(j, String::new());
        }
        token_text.insert(a, format!("}} if constexpr (KILN_R == {}) {{", r + 1));
    }
    for (j, t) in replaced {
        token_text.insert(j, t);
    }
    for (j, t) in appended {
        let base = token_text.get(&j).cloned().unwrap_or_else(|| text(src, out, j).to_string());
        token_text.insert(j, base + &t);
    }
    token_text.insert(ret, "template <int KILN_R> static inline __attribute__((always_inline)) void".to_string());
    token_text.insert(name, format!("{}_kiln_regions", text(src, out, name)));
    token_text.insert(open, format!("{} {prologue}if constexpr (KILN_R == 0) {{", text(src, out, open)));
    token_text.insert(close, "} }".to_string());
    let mut code = String::new();
    for (i, tok) in src.toks.iter().enumerate().take(src.sig[close] + 1).skip(src.sig[ret]) {
        let piece = if tok.is_trivia() {
            out[i].clone()
        } else {
            let k = src.sig.partition_point(|&s| s < i);
            token_text.get(&k).cloned().unwrap_or_else(|| out[i].clone())
        };
        code.push_str(
            &piece
                .replace("KILN_CO_PARAM_ONLY", "::kiln::rt::RegionArgs kiln_ra")
                .replace(" KILN_CO_PARAM", ", ::kiln::rt::RegionArgs kiln_ra")
                .replace("KILN_CO_RETURN", "return kiln_ra.finish()"),
        );
    }
    let (line, file) = presumed_line(src, ret);
    Some(RegionKernel { name: src.tok(name).text.clone(), regions: regions.len(), code, line, file })
}

/// The `auto& name = *expr;` declarations the rewriter made of a `threadgroup` statement at `a`.
fn threadgroup_storage(src: &Cursor, out: &[String], a: usize) -> Option<Vec<(String, String)>> {
    let t = text(src, out, a);
    if !src.is(a, "threadgroup") || !t.contains("kiln::rt::tg_alloc<") {
        return None;
    }
    t.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (var, expr) = p.strip_prefix("auto& ")?.split_once(" = *")?;
            Some((var.to_string(), expr.to_string()))
        })
        .collect()
}

/// Whether the statement `a..=e` plainly declares nothing: a control statement, a block, an
/// expression that starts with one name and an operator, a preprocessor line.
fn plain_statement(src: &Cursor, a: usize, e: usize) -> bool {
    let t = src.tok(a);
    if t.kind == Kind::Preproc || src.is(a, "{") || src.is(a, ";") || STATEMENT_KEYWORDS.contains(&t.text.as_str()) {
        return true;
    }
    if t.kind == Kind::Punct {
        return !src.is(a, "::");
    }
    t.kind == Kind::Ident
        && a < e
        && src.tok(a + 1).kind == Kind::Punct
        && !src.is(a + 1, "<")
        && !src.is(a + 1, "::")
        && !src.is(a + 1, "*")
        && !src.is(a + 1, "&")
}

/// The statement `a..=e` read as a variable declaration: specifiers (names, `::`, template
/// arguments), then declarators `[*|const]* name [sizes] [= init | (init) | {init}]` split at
/// top-level commas.
fn declaration(src: &Cursor, a: usize, e: usize) -> Option<Declaration> {
    let first = src.tok(a);
    if first.kind != Kind::Ident || STATEMENT_KEYWORDS.contains(&first.text.as_str()) {
        return None;
    }
    // The head: up to the first `=`, `(`, `[`, `{`, `,` or `;` outside template arguments.
    let mut j = a;
    let mut angles = 0usize;
    while j <= e {
        let t = src.tok(j);
        if src.is(j, "<") {
            if j == a || !src.ident(j - 1) {
                return None;
            }
            angles += 1;
        } else if angles > 0 {
            if src.is(j, ">") {
                angles -= 1;
            } else if src.is(j, ">>") {
                angles = angles.checked_sub(2)?;
            } else if src.is(j, "(") {
                j = src.matching(j)?;
            } else if src.is(j, ";") || src.is(j, "{") || src.is(j, "}") {
                return None;
            }
        } else if ["=", "(", "[", "{", ",", ";"].iter().any(|s| t.is(s)) {
            break;
        } else if !(t.kind == Kind::Ident || src.is(j, "::") || src.is(j, "*") || src.is(j, "&") || src.is(j, "&&")) {
            return None;
        }
        j += 1;
    }
    if angles != 0 || j > e || j < a + 2 || !src.ident(j - 1) {
        return None;
    }
    let name = j - 1;
    let before = src.tok(name - 1);
    if !(before.kind == Kind::Ident || ["<", ">", "*", "&", "&&"].iter().any(|s| before.is(s)) || src.is(name - 1, ">"))
    {
        return None;
    }
    if STATEMENT_KEYWORDS.contains(&src.tok(name).text.as_str()) || src.tok(name).text == "const" {
        return None;
    }
    // The first declarator's `*`/`const` run back from its name.
    let mut ptr_start = name;
    while ptr_start > a
        && (src.is(ptr_start - 1, "*")
            || src.is(ptr_start - 1, "&")
            || src.is(ptr_start - 1, "&&")
            || (src.is(ptr_start - 1, "const") && ptr_start - 1 > a && src.is(ptr_start - 2, "*")))
    {
        ptr_start -= 1;
    }
    let spec = (a, ptr_start);
    if spec.1 <= spec.0 {
        return None;
    }
    let constexpr = (spec.0..spec.1).any(|k| src.is(k, "constexpr"));
    let mut declarators = Vec::new();
    let mut d = Declarator { ptr: (ptr_start, name), name, dims: (name + 1, name + 1) };
    let mut k = name + 1;
    loop {
        // Sizes, then an initializer, then `,` or `;`.
        while src.is(k, "[") {
            k = src.matching(k)? + 1;
        }
        d.dims.1 = k;
        if src.is(k, "=") {
            k += 1;
            while k < e && !src.is(k, ",") {
                if ["(", "[", "{"].iter().any(|s| src.is(k, s)) {
                    k = src.matching(k)?;
                } else if src.is(k, "<") || src.is(k, ">") {
                    // A comparison or template arguments in the initializer: a comma after it
                    // could be either.
                    if (k..e).any(|c| src.is(c, ",")) {
                        return None;
                    }
                }
                k += 1;
            }
        } else if src.is(k, "(") || src.is(k, "{") {
            k = src.matching(k)? + 1;
        }
        declarators.push(d);
        if k == e && src.is(k, ";") {
            break;
        }
        if !src.is(k, ",") {
            return None;
        }
        // The next declarator: `*`/`const` tokens, then its name.
        let ptr0 = k + 1;
        let mut n = ptr0;
        while src.is(n, "*") || src.is(n, "&") || src.is(n, "const") {
            n += 1;
        }
        if !src.ident(n) {
            return None;
        }
        d = Declarator { ptr: (ptr0, n), name: n, dims: (n + 1, n + 1) };
        k = n + 1;
    }
    Some(Declaration { spec, declarators, constexpr })
}

/// The line of the user's source that position `k` is on, and the file, as the last `#line`
/// directive before it (`#line N "file"` or `# N "file"`) numbers them; the text's own line
/// without one.
fn presumed_line(src: &Cursor, k: usize) -> (u32, Option<String>) {
    let line = src.tok(k).line;
    for j in (0..k).rev() {
        let t = src.tok(j);
        if t.kind != Kind::Preproc {
            continue;
        }
        let rest = t.text.trim_start_matches('#').trim_start();
        let rest = rest.strip_prefix("line").unwrap_or(rest).trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = digits.parse::<u32>() else { continue };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let after = rest[digits.len()..].trim();
        let file = after.strip_prefix('"').and_then(|f| f.split('"').next()).map(str::to_string);
        let directive_lines = t.text.matches('\n').count() as u32;
        return (n + line.saturating_sub(t.line + directive_lines + 1), file);
    }
    (line, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declarators' names of the one statement `code`, if it reads as a declaration.
    fn declared(code: &str) -> Option<Vec<String>> {
        let src = Cursor::new(code);
        let decl = declaration(&src, 0, src.len() - 1)?;
        Some(decl.declarators.iter().map(|d| src.tok(d.name).text.clone()).collect())
    }

    #[test]
    fn declarations_are_told_from_expressions() {
        assert_eq!(declared("float v = x[i];"), Some(vec!["v".into()]));
        assert_eq!(declared("const float* const p = x + 1, q = 2.0f;"), Some(vec!["p".into(), "q".into()]));
        assert_eq!(declared("metal::vec<float, 4> v(1.0f);"), Some(vec!["v".into()]));
        assert_eq!(declared("float acc[4][2];"), Some(vec!["acc".into()]));
        assert_eq!(declared("uint a = min(b, c), d;"), Some(vec!["a".into(), "d".into()]));
        for expression in
            ["v = 1.0f;", "out[i] = v;", "f(x, y);", "ns::f(x);", "a.b = c;", "return;", "++i;", "*p = 1;"]
        {
            assert_eq!(declared(expression), None, "{expression}");
        }
        // A comma after a `<` in an initializer could end a declarator or not: not read.
        assert_eq!(declared("bool b = a < c, d = 1;"), None);
    }

    #[test]
    fn a_line_directive_numbers_what_follows_it() {
        let src = Cursor::new("int a;\n#line 40 \"lib.metal\"\nint b;\nint c;\n");
        let c = (0..src.len()).find(|&k| src.tok(k).text == "c").unwrap();
        assert_eq!(presumed_line(&src, c), (41, Some("lib.metal".to_string())));
        let a = (0..src.len()).find(|&k| src.tok(k).text == "a").unwrap();
        assert_eq!(presumed_line(&src, a), (1, None));
    }
}

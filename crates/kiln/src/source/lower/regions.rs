//! Kernels run on the CPU as region loops: a kernel whose barriers and SIMD-group calls all
//! stand as statements at the top level of its own body (the calls also in the top level of a
//! block `if (c) { ... }` there) is cut at them into regions, and a group runs each region for
//! all its threads in index order before the next (prelude/cpu/runtime.h, "region loops").
//!
//! At a barrier that is the order in which the fibers and coroutines run the threads (each
//! thread up to the barrier, in index order, then each past it), so results are theirs bit for
//! bit; a SIMD-group call ends a region with each thread that reached it posting its value,
//! each SIMD-group resolves over the lanes that posted (those the fibers combine: the others
//! wait later or returned), and the next region reads the result, folded by the prelude's own
//! code. A region's threads run in a loop like a barrier-free kernel's, with nothing suspended,
//! and consecutive threads may run as vector lanes. What a thread keeps across a boundary is
//! what it declared at the top level of the body (or of the block) before it and names after
//! it: those variables live in a per-thread record (`kiln_slots`), each region reaching them by
//! reference, as does a block's condition; a `threadgroup` declaration's storage is opened once
//! for the group.
//!
//! This pass reads the coroutine pass's marks (`lower::coroutines`): it runs on the kernels that
//! pass rewrote and writes a second definition of each kernel that qualifies, the region form
//! (`<name>_kiln_regions<R>`: `R` the region, -1 the group's setup), for the unit to compile
//! beside the kernel as written (which still runs checked launches and names the thread of a
//! fault). A kernel qualifies when:
//!
//! - it is not a template and stands at file scope; it has no `goto`, `static` or
//!   `thread_local`;
//! - each barrier is a statement of its body's top level, each SIMD-group call the one call of
//!   a declaration or expression statement there or at the top level of a block `if (c)` (no
//!   `else`) there, not in a conditional operand, with arguments that change nothing (a call's
//!   are evaluated once to post and once to read), in a statement that runs nothing before the
//!   call (the arguments are posted at the end of the region before);
//! - each variable kept across a boundary has a type written out (not `auto`, `decltype` or a
//!   reference), is declared in a statement the pass reads as a declaration, and is not named in
//!   its scope before it (where an outer name of the same spelling would be meant).
//!
//! A unit whose region form the compiler refuses (a record member of a type declared in the
//! body, a constant named as an array size after a barrier, ...) is built again without it.

use std::collections::{HashMap, HashSet};

use super::functions::{call_open, find_scopes, Body};
use super::statements::{declaration, plain_statement, presumed_line, statements_in, Declarator, STATEMENT_KEYWORDS};
use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

/// A kernel with a region form.
#[derive(Clone, Debug)]
pub struct RegionKernel {
    /// The kernel function's name (the entries' callee).
    pub name: String,
    /// What ends each region but the last: its barriers and SIMD-group calls, in order.
    pub boundaries: Vec<Boundary>,
    /// The region form's definition, one `#line`-numbered block of text.
    pub code: String,
    /// The line of the user's source the definition's first line is (for `#line`).
    pub line: u32,
    /// The file a `#line` directive before the kernel names, if any.
    pub file: Option<String>,
}

/// What ends a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// A threadgroup barrier.
    Barrier,
    /// A SIMD-group function call: each thread posts its value at the region's end, the
    /// group's SIMD-groups resolve, and the next region reads the result.
    Collective,
}

/// Statements that declare types or aliases a later region could name.
const TYPE_KEYWORDS: [&str; 8] = ["struct", "class", "union", "enum", "typedef", "using", "namespace", "template"];
/// Declaration specifiers a variable kept across barriers may not have.
const REFUSED_SPECIFIERS: [&str; 10] =
    ["auto", "decltype", "static", "extern", "thread_local", "register", "mutable", "inline", "friend", "volatile"];

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

/// The edits that make the region form's text of the kernel's tokens.
#[derive(Default)]
struct Edits {
    /// A token's text in place of its own.
    replaced: HashMap<usize, String>,
    /// Text before a token's (after any replacement).
    before: HashMap<usize, String>,
    /// Text after a token's.
    after: HashMap<usize, String>,
}

impl Edits {
    fn blank(&mut self, a: usize, e: usize) {
        for j in a..=e {
            self.replaced.insert(j, String::new());
        }
    }
    fn prefix(&mut self, k: usize, text: &str) {
        self.before.entry(k).or_default().push_str(text);
    }
    fn suffix(&mut self, k: usize, text: &str) {
        self.after.entry(k).or_default().push_str(text);
    }
}

/// A SIMD-group call the coroutine pass marked: its first token, its `)`, the text that posts
/// the thread's value and the text that reads the result.
struct CallSite {
    start: usize,
    close: usize,
    post: String,
    read: String,
}

/// The reductions whose value a region form posts and folds itself, with the prelude's
/// operation (simd.h): the same fold, without the collective's call.
const REDUCTIONS: [(&str, &str); 7] = [
    ("simd_sum", "kiln_add"),
    ("simd_product", "kiln_mul"),
    ("simd_max", "kiln_max"),
    ("simd_min", "kiln_min"),
    ("simd_and", "kiln_and"),
    ("simd_or", "kiln_or"),
    ("simd_xor", "kiln_xor"),
];

/// Names a collective's arguments may call: they are evaluated twice (to post the thread's
/// value, then to read the resolved lanes), so only conversions and pure maths.
const PURE_CALLS: [&str; 36] = [
    "float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "bool", "long", "ulong", "float2",
    "float3", "float4", "half2", "half3", "half4", "int2", "int3", "int4", "uint2", "uint3", "uint4", "abs", "fabs",
    "max", "min", "fmax", "fmin", "exp", "exp2", "sqrt", "rsqrt", "clamp", "select",
];

/// The one SIMD-group call of statement `a..=e` when the statement is a declaration or an
/// expression that calls it unconditionally, with arguments that may be evaluated twice.
fn collective_statement(src: &Cursor, out: &[String], a: usize, e: usize) -> Option<CallSite> {
    let first = src.tok(a);
    if first.kind != Kind::Ident
        || STATEMENT_KEYWORDS.contains(&first.text.as_str())
        || TYPE_KEYWORDS.contains(&first.text.as_str())
    {
        return None;
    }
    let marks: Vec<usize> = (a..=e).filter(|&k| text(src, out, k).contains("KILN_CO_CALL(")).collect();
    let [start] = marks[..] else { return None };
    let mut name = start;
    while src.is(name + 1, "::") && src.ident(name + 2) {
        name += 2;
    }
    let open = call_open(src, name)?;
    let close = src.matching(open)?;
    // Not in a conditional operand or a lambda; arguments without side effects.
    if (a..start).chain(close + 1..=e).any(|k| ["?", "&&", "||"].iter().any(|s| src.is(k, s))) {
        return None;
    }
    // Nothing of the statement may run before the call: its arguments are posted at the end of
    // the region before. A comma outside the call's arguments (between declarators, or the
    // comma operator) could; one between another call's arguments is not sequenced before it.
    let sequenced = |k: usize| {
        let mut depth = 0usize;
        for j in (a..k).rev() {
            if [")", "]", "}"].iter().any(|c| src.is(j, c)) {
                depth += 1;
            } else if ["(", "[", "{"].iter().any(|c| src.is(j, c)) {
                if depth == 0 {
                    return !(src.is(j, "(") && j > a && src.ident(j - 1));
                }
                depth -= 1;
            }
        }
        true
    };
    if (a..start).chain(close + 1..=e).any(|k| src.is(k, ",") && sequenced(k)) {
        return None;
    }
    // At most the statement's own `=` (or compound assignment), before the call, with the call
    // on its right, which C++ evaluates first; no increments.
    let outside: Vec<usize> = (a..start).chain(close + 1..=e).collect();
    let depth_zero = |k: usize| {
        (a..k).fold(0i64, |d, j| {
            d + i64::from(["(", "[", "{"].iter().any(|c| src.is(j, c)))
                - i64::from([")", "]", "}"].iter().any(|c| src.is(j, c)))
        }) == 0
    };
    let assignments: Vec<usize> = outside.iter().copied().filter(|&k| assignment(src, k)).collect();
    if outside.iter().any(|&k| src.is(k, "++") || src.is(k, "--"))
        || assignments.len() > 1
        || assignments.first().is_some_and(|&k| k > start || !depth_zero(k))
    {
        return None;
    }
    for k in open + 1..close {
        let t = src.tok(k);
        let call = src.is(k, "(") && k > 0 && src.ident(k - 1) && !PURE_CALLS.contains(&src.tok(k - 1).text.as_str());
        if assignment(src, k)
            || src.is(k, "++")
            || src.is(k, "--")
            || call
            || src.is(k, "{")
            || (t.kind == Kind::Ident && t.text.contains("atomic"))
        {
            return None;
        }
    }
    let mut call = String::new();
    for k in start..=close {
        call.push_str(text(src, out, k));
        call.push(' ');
    }
    let marked = call.replacen("KILN_CO_CALL(", "", 1);
    // The coroutine pass closed its macro after the name: `KILN_CO_CALL(name)(args)`.
    let name_end = marked.find(") (").or_else(|| marked.find(")("))?;
    let call = format!("{}{}", &marked[..name_end], &marked[name_end + 1..]);
    let qualified = name == start
        || (name == start + 2 && src.is(start, "metal"))
        || (src.is(start, "::") && src.is(start + 1, "metal"));
    let reduction = REDUCTIONS.iter().find(|(n, _)| src.tok(name).text == *n).filter(|_| qualified);
    // One argument, and no template arguments (which could convert it).
    let single = open == name + 1 && src.arg_starts(open, close, false).len() == 1;
    let (post, read) = match reduction {
        Some((_, op)) if single => {
            // The value: the argument's text after the site tag the convergence pass put in
            // the call's `(`.
            let own = text_of_call_open(text(src, out, open));
            let arg = format!("{own} {}", joined(src, out, open + 1, close));
            (
                format!("::kiln::rt::region_post_value(kiln_ra, {arg});"),
                format!("::kiln::rt::region_reduce(kiln_ra, {arg}, ::metal::{op}())"),
            )
        }
        _ => (
            format!("::kiln::rt::region_post(kiln_ra, [&]() {{ (void){call}; }});"),
            format!("::kiln::rt::region_read(kiln_ra, [&]() {{ return {call}; }})"),
        ),
    };
    Some(CallSite { start, close, post, read })
}

/// Whether the token at `k` is an assignment operator (`=`, `+=`, ...; not a comparison).
fn assignment(src: &Cursor, k: usize) -> bool {
    let t = src.tok(k);
    t.kind == Kind::Punct && t.text.ends_with('=') && !["==", "!=", "<=", ">="].contains(&t.text.as_str())
}

/// A call's `(` as the rewrite left it, less the `(` and any site tag
/// (`(kiln::site_tag<7>{}, `): what it holds of the first argument.
fn text_of_call_open(open: &str) -> String {
    let rest = open.trim_start().strip_prefix('(').unwrap_or(open);
    let rest = match rest.trim_start().strip_prefix("kiln::site_tag<") {
        Some(tagged) => tagged.split_once("{},").map_or(rest, |(_, after)| after),
        None => rest,
    };
    rest.trim().to_string()
}

/// What a region's statement is to the analysis of names: `top` when it stands at the body's
/// top level (where its declarations are the region's).
#[derive(Clone, Copy)]
struct Stmt {
    a: usize,
    e: usize,
    top: bool,
}

/// Every identifier (not a member or qualified name) of `stmts`.
fn names_of(src: &Cursor, stmts: &[Stmt]) -> HashSet<String> {
    let mut names = HashSet::new();
    for s in stmts {
        for j in s.a..=s.e {
            let member = j > 0 && (src.is(j - 1, ".") || src.is(j - 1, "->") || src.is(j - 1, "::"));
            if src.ident(j) && !member {
                names.insert(src.tok(j).text.clone());
            }
        }
    }
    names
}

/// For each of `parts`, the names of the parts after it.
fn later_names(src: &Cursor, parts: &[Vec<Stmt>]) -> Vec<HashSet<String>> {
    let mut later: Vec<HashSet<String>> = vec![HashSet::new(); parts.len()];
    for r in (0..parts.len().saturating_sub(1)).rev() {
        let mut names = later[r + 1].clone();
        names.extend(names_of(src, &parts[r + 1]));
        later[r] = names;
    }
    later
}

/// What keeping variables across the parts of a scope makes: the record's members, the
/// bindings each later part starts with, the constants hoisted before the regions.
#[derive(Default)]
struct Kept {
    members: Vec<String>,
    /// Each kept variable's binding, after the part it is declared in.
    bindings: Vec<(usize, String)>,
    /// What writes the body's kept variables held in locals back into the record at the end
    /// of each region (`KILN_WRITEBACK` in the text until they are known).
    writeback: Vec<String>,
    hoisted: Vec<String>,
    names: HashSet<String>,
}

/// A scope whose variables are kept across its parts: the kernel's body (`top`), whose
/// bindings stand once before the regions, or a block, each of whose later parts binds them
/// again; its `{` at `open`; the record members' name `prefix`.
struct Scope<'a> {
    parts: &'a [Vec<Stmt>],
    open: usize,
    prefix: &'a str,
    top: bool,
}

/// Keeps the variables declared at the top level of a scope's parts and named in a later
/// part: each becomes a record member, written after its declaration. None when a kept
/// variable cannot be (see the module's header).
fn keep(src: &Cursor, out: &[String], scope: &Scope<'_>, kept: &mut Kept, edits: &mut Edits) -> Option<()> {
    let Scope { parts, open: scope_open, prefix, top } = *scope;
    let later = later_names(src, parts);
    // A kept pointer may point at any variable of its part: then every variable declared at
    // the scope's top level in a part before the last is kept.
    let keep_all = parts.iter().enumerate().any(|(r, stmts)| {
        stmts.iter().filter(|s| s.top).any(|s| {
            declaration(src, s.a, s.e).is_some_and(|decl| {
                decl.declarators
                    .iter()
                    .any(|d| later[r].contains(&src.tok(d.name).text) && (d.ptr.0..d.ptr.1).any(|j| src.is(j, "*")))
            })
        })
    });
    let outer = |j: usize| src.is(j - 1, ".") || src.is(j - 1, "->") || src.is(j - 1, "::");
    for (r, stmts) in parts.iter().enumerate().take(parts.len().saturating_sub(1)) {
        for s in stmts.iter().filter(|s| s.top) {
            let (a, e) = (s.a, s.e);
            if threadgroup_storage(src, out, a).is_some() {
                continue;
            }
            if TYPE_KEYWORDS.contains(&src.tok(a).text.as_str()) {
                return None;
            }
            let Some(decl) = declaration(src, a, e) else {
                // A statement not read as a declaration must not be one whose name a later
                // part reads: its names before the first operator are checked.
                if plain_statement(src, a, e) {
                    continue;
                }
                let head_end = (a..=e)
                    .find(|&j| src.tok(j).kind == Kind::Punct && !src.is(j, "::") && !src.is(j, "<") && !src.is(j, ">"))
                    .unwrap_or(e);
                if keep_all || (a..head_end).any(|j| src.ident(j) && later[r].contains(&src.tok(j).text)) {
                    return None;
                }
                continue;
            };
            let named_before = |d: &Declarator| {
                let var = &src.tok(d.name).text;
                (scope_open + 1..d.name).any(|j| src.ident(j) && src.tok(j).text == *var && !outer(j))
            };
            // Constants go before the regions, where every region (and the record's array
            // sizes) can name them.
            if decl.constexpr && top {
                if decl.declarators.iter().any(named_before) {
                    return None;
                }
                kept.hoisted.push(joined(src, out, a, e + 1));
                edits.blank(a, e);
                continue;
            }
            let crossing: Vec<&Declarator> =
                decl.declarators.iter().filter(|d| keep_all || later[r].contains(&src.tok(d.name).text)).collect();
            if crossing.is_empty() {
                continue;
            }
            let refused = decl.constexpr
                || (decl.spec.0..decl.spec.1).any(|j| {
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
                let member = format!("{prefix}{var}");
                // Named before its declaration (an outer name), or in a later declarator of
                // the statement: refused.
                let named_after = (d.name + 1..=e).any(|j| src.ident(j) && src.tok(j).text == var);
                let reference = (d.ptr.0..d.ptr.1).any(|j| src.is(j, "&") || src.is(j, "&&"));
                if named_before(d) || named_after || reference || !kept.names.insert(member.clone()) {
                    return None;
                }
                let ptr = joined(src, out, d.ptr.0, d.ptr.1);
                let dims = joined(src, out, d.dims.0, d.dims.1);
                kept.members.push(format!("typename ::metal::remove_const<{spec} {ptr} {dims}>::type {member};"));
                // The body's kept scalars live in locals, loaded at each region's start and
                // stored back at its end (the kernel's stores cannot be taken to change them);
                // arrays, a block's variables and any that a kept pointer may point at stay in
                // the record.
                let local = top && !keep_all && d.dims.0 == d.dims.1;
                let binding = if local {
                    format!("auto {var} = kiln_s.{member};")
                } else {
                    format!("auto& {var} = kiln_s.{member};")
                };
                edits.replaced.insert(d.name, format!("kiln_i_{var}"));
                if local {
                    edits.suffix(e, &format!(" {var} = kiln_i_{var};"));
                    kept.writeback.push(format!("kiln_s.{member} = {var};"));
                } else {
                    edits.suffix(
                        e,
                        &format!(" __builtin_memcpy((void*)&kiln_s.{member}, (const void*)&kiln_i_{var}, sizeof(kiln_s.{member}));"),
                    );
                    if !top {
                        edits.suffix(e, &format!(" {binding}"));
                    }
                }
                kept.bindings.push((r, binding));
            }
        }
    }
    Some(())
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
    let statements = statements_in(src, open, close)?;
    let body = open + 1..close;
    if body.clone().any(|k| src.ident(k) && matches!(src.tok(k).text.as_str(), "goto" | "static" | "thread_local")) {
        return None;
    }
    let barrier_marks = body.clone().filter(|&k| text(src, out, k).contains("KILN_CO_BARRIER(")).count();
    let call_marks = body.clone().filter(|&k| text(src, out, k).contains("KILN_CO_CALL(")).count();
    // Regions: the statements between barriers and SIMD-group calls.
    let mut regions: Vec<Vec<Stmt>> = vec![Vec::new()];
    let mut boundaries: Vec<Boundary> = Vec::new();
    let mut edits = Edits::default();
    let mut kept = Kept::default();
    let mut flags = 0usize;
    let (mut barriers, mut calls) = (0usize, 0usize);
    let post = |edits: &mut Edits, call: &CallSite| {
        edits.blank(call.start + 1, call.close);
        edits.replaced.insert(call.start, call.read.clone());
        call.post.clone()
    };
    for &(a, e) in &statements {
        if text(src, out, a).starts_with("KILN_CO_BARRIER(") {
            let call = (a..e).find(|&j| src.is(j, "("))?;
            if src.matching(call)? + 1 != e || !src.is(e, ";") {
                return None;
            }
            boundaries.push(Boundary::Barrier);
            edits.blank(a, e);
            edits.replaced.insert(a, format!("KILN_WRITEBACK }} if constexpr (KILN_R == {}) {{", boundaries.len()));
            regions.push(Vec::new());
            barriers += 1;
            continue;
        }
        let marks = (a..=e).filter(|&k| text(src, out, k).contains("KILN_CO_CALL(")).count();
        if marks == 0 {
            regions.last_mut()?.push(Stmt { a, e, top: true });
            continue;
        }
        if let Some(call) = collective_statement(src, out, a, e) {
            boundaries.push(Boundary::Collective);
            let posting = post(&mut edits, &call);
            edits.prefix(a, &format!("{posting} KILN_WRITEBACK }} if constexpr (KILN_R == {}) {{ ", boundaries.len()));
            regions.push(vec![Stmt { a, e, top: true }]);
            calls += 1;
            continue;
        }
        // `if (c) { ... }` whose block calls SIMD-group functions at its own top level: the
        // condition is kept per thread and the block reopened in each region it spans.
        let cond = a + 1;
        let cond_close = src.matching(cond).filter(|_| src.is(a, "if") && src.is(cond, "("))?;
        let block = cond_close + 1;
        if (a..=e).any(|k| text(src, out, k).contains("KILN_CO_BARRIER(")) {
            return None;
        }
        // The block's statements; an unbraced statement is braced.
        let inner = if src.is(block, "{") {
            if src.matching(block)? != e {
                return None;
            }
            statements_in(src, block, e)?
        } else {
            if src.statement_end(block)? != e || ["if", "for", "while", "do", "switch"].iter().any(|w| src.is(block, w))
            {
                return None;
            }
            edits.prefix(block, "{ ");
            edits.suffix(e, " }");
            vec![(block, e)]
        };
        let flag = flags;
        flags += 1;
        kept.members.push(format!("bool kiln_f{flag};"));
        edits.replaced.insert(a, format!("kiln_s.kiln_f{flag} = bool"));
        edits.suffix(cond_close, &format!("; if (kiln_s.kiln_f{flag})"));
        regions.last_mut()?.push(Stmt { a, e: cond_close, top: false });
        let mut parts: Vec<Vec<Stmt>> = vec![Vec::new()];
        let mut part_calls: Vec<(usize, CallSite)> = Vec::new();
        for (ia, ie) in inner {
            if src.is(ia, "threadgroup") {
                return None;
            }
            let marks = (ia..=ie).filter(|&k| text(src, out, k).contains("KILN_CO_CALL(")).count();
            if marks == 0 {
                parts.last_mut()?.push(Stmt { a: ia, e: ie, top: true });
                continue;
            }
            let call = collective_statement(src, out, ia, ie)?;
            part_calls.push((ia, call));
            parts.push(vec![Stmt { a: ia, e: ie, top: true }]);
        }
        let mut block_kept = Kept::default();
        let prefix = format!("kiln_b{flag}_");
        let scope = Scope { parts: &parts, open: block, prefix: &prefix, top: false };
        keep(src, out, &scope, &mut block_kept, &mut edits)?;
        // Each part of the block after the first opens its region with the block's variables
        // kept from the parts before it.
        for (j, (ia, call)) in part_calls.iter().enumerate() {
            let bindings: Vec<&str> =
                block_kept.bindings.iter().filter(|(part, _)| *part <= j).map(|(_, b)| b.as_str()).collect();
            let bindings = bindings.join(" ");
            boundaries.push(Boundary::Collective);
            let posting = post(&mut edits, call);
            edits.prefix(
                *ia,
                &format!(
                    "{posting} }} KILN_WRITEBACK }} if constexpr (KILN_R == {}) {{ if (kiln_s.kiln_f{flag}) {{ {bindings} ",
                    boundaries.len()
                ),
            );
            calls += 1;
        }
        kept.members.append(&mut block_kept.members);
        kept.names.extend(block_kept.names);
        let mut parts = parts.into_iter();
        regions.last_mut()?.extend(parts.next()?.into_iter().map(|s| Stmt { top: false, ..s }));
        for part in parts {
            regions.push(part.into_iter().map(|s| Stmt { top: false, ..s }).collect());
        }
    }
    if boundaries.is_empty() || barriers != barrier_marks || calls != call_marks {
        return None;
    }
    // `threadgroup` storage at the top level, opened once for the group by the setup.
    let mut setup: Vec<String> = Vec::new();
    let mut tg_bindings: Vec<String> = Vec::new();
    for s in regions.iter().flatten().filter(|s| s.top) {
        if let Some(decls) = threadgroup_storage(src, out, s.a) {
            for (var, expr) in decls {
                let slot = setup.len();
                if slot >= 64 {
                    return None;
                }
                setup.push(format!("kiln_ra.setup->uniform[{slot}] = (void*)({expr});"));
                tg_bindings.push(format!("auto& {var} = *static_cast<decltype({expr})>(kiln_ra.uniform[{slot}]);"));
            }
            edits.blank(s.a, s.e);
        }
    }
    keep(src, out, &Scope { parts: &regions, open, prefix: "", top: true }, &mut kept, &mut edits)?;
    let early_returns = regions[..regions.len() - 1]
        .iter()
        .flatten()
        .any(|s| (s.a..=s.e).any(|j| text(src, out, j).contains("KILN_CO_RETURN")));
    // The prologue: one line, so the body keeps its lines.
    let mut prologue = String::new();
    for h in &kept.hoisted {
        prologue.push_str(h);
        prologue.push(' ');
    }
    prologue.push_str(&format!(
        "struct kiln_slots {{ {} }}; static_assert(__is_trivially_copyable(kiln_slots), \"a variable kept across a barrier has a type a region form cannot keep\"); \
         if constexpr (KILN_R < 0) {{ kiln_ra.setup->record = sizeof(kiln_slots); {} return; }} \
         kiln_slots& kiln_s = ((kiln_slots*)kiln_ra.base)[kiln_ra.index]; (void)kiln_s; {} {} ",
        kept.members.join(" "),
        setup.join(" "),
        tg_bindings.join(" "),
        kept.bindings.iter().map(|(_, b)| b.as_str()).collect::<Vec<_>>().join(" ")
    ));
    if early_returns {
        prologue.push_str("if (KILN_R > 0 && kiln_ra.finished()) return; ");
    }
    edits.replaced.insert(ret, "template <int KILN_R> static inline __attribute__((always_inline)) void".to_string());
    edits.replaced.insert(name, format!("{}_kiln_regions", text(src, out, name)));
    edits.replaced.insert(open, format!("{} {prologue}if constexpr (KILN_R == 0) {{", text(src, out, open)));
    edits.replaced.insert(close, "} }".to_string());
    let writeback = kept.writeback.join(" ");
    let mut code = String::new();
    for (i, tok) in src.toks.iter().enumerate().take(src.sig[close] + 1).skip(src.sig[ret]) {
        if tok.is_trivia() {
            code.push_str(&out[i]);
            continue;
        }
        let k = src.sig.partition_point(|&s| s < i);
        let own = edits.replaced.get(&k).map_or(out[i].as_str(), String::as_str);
        let piece = format!(
            "{}{own}{}",
            edits.before.get(&k).map_or("", String::as_str),
            edits.after.get(&k).map_or("", String::as_str)
        );
        code.push_str(
            &piece
                .replace("KILN_CO_PARAM_ONLY", "::kiln::rt::RegionArgs kiln_ra")
                .replace(" KILN_CO_PARAM", ", ::kiln::rt::RegionArgs kiln_ra")
                .replace("KILN_CO_RETURN", "return kiln_ra.finish()")
                .replace("KILN_WRITEBACK", &writeback),
        );
    }
    let (line, file) = presumed_line(src, ret);
    Some(RegionKernel { name: src.tok(name).text.clone(), boundaries, code, line, file })
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

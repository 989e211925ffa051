//! Which lanes of a SIMD-group meet at a SIMD-group function, for the CPU emulator.
//!
//! Metal combines the lanes that execute one call together: lanes split at a branch and meet
//! again where it ends. The emulator runs lanes one by one and gives each a position: the loops
//! (with their iteration) and the calls of functions it is in, then the call it waits at
//! (prelude/cpu/convergence.h). This pass writes what positions are made of, into code that
//! reaches SIMD-group functions (a body whose text calls one, or calls a function that does):
//!
//! - every loop whose text reaches one runs inside `for (kiln::rt::LoopScope kiln_loop(K);
//!   kiln_loop.once(); )`, and counts its iterations with `kiln_loop.step()`: in the increment of
//!   a `for` (the condition belongs to the iteration that follows), in the condition of a
//!   `while` or `do`, and before the body of a range `for`;
//! - a function (or lambda bound to `auto name`) that reaches one gets a parameter
//!   `kiln::rt::CallSite kiln_call_site` after its required ones (by default unknown) and a
//!   `CallScope` first in its body, and every call of it by name with a fitting number of
//!   arguments passes `kiln::rt::CallSite(K)` there. Functions whose callers cannot pass one
//!   (operators, constructors, parameter packs, lambdas passed on, out-of-class or separately
//!   declared definitions, names the prelude also declares, functions used as values: a
//!   template argument, a pointer) run out of line with a scope that
//!   records their return address: the scheduler refuses to combine part of a SIMD-group
//!   inside them.
//!
//! K is the position of a significant token: the loop's keyword, the closing parenthesis of a
//! call (its arguments run first), as for the site tags of SIMD-group function calls. Text is
//! only added before or after tokens and never holds a newline, so lines stay where they were.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::functions::{call_open, find_scopes, Body, Params};
use crate::source::cursor::Cursor;
use crate::source::limits::MAX_NESTING;
use crate::source::prelude;
use crate::source::tokens::{tokenize, Kind, Token};

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

/// Names of functions the preludes declare: a user function of that name is not given a site
/// parameter (a call meant for the prelude's would receive it too).
fn prelude_names() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut texts: Vec<&str> = prelude::COMMON.iter().map(|(_, t)| *t).collect();
        texts.push(prelude::MLX_UTILS.1);
        let runtime = prelude::CPU_RUNTIME.iter().filter(|(name, _)| ["cpu/runtime.h", "cpu/simd.h"].contains(name));
        texts.extend(runtime.map(|(_, text)| *text));
        let mut names = HashSet::new();
        for text in texts {
            let toks: Vec<Token> = tokenize(text).into_iter().filter(|t| !t.is_trivia()).collect();
            // Declarations: `type name(` (a call follows `(`, `.`, `return`, an operator, ...).
            for w in toks.windows(3) {
                let declares = (w[0].kind == Kind::Ident
                    && !["return", "else", "case", "new", "delete"].contains(&w[0].text.as_str()))
                    || w[0].is(">")
                    || w[0].is("*")
                    || w[0].is("&");
                if declares && w[1].kind == Kind::Ident && w[2].is("(") {
                    names.insert(w[1].text.clone());
                }
            }
        }
        names
    })
}

/// Adds the instrumentation to `out` (the rewriter's text per token, indexed like `src.toks`).
/// `kernels` names the kernel functions.
pub fn instrument(src: &Cursor, out: &mut [String], kernels: &HashSet<String>) -> Result<(), String> {
    let sig = &src.sig;
    let sited: Vec<usize> = (0..src.len())
        .filter(|&k| src.ident(k) && src.is(k + 1, "(") && SITED_COLLECTIVES.contains(&src.tok(k).text.as_str()))
        .collect();
    if sited.is_empty() {
        return Ok(());
    }
    let (scopes, prototypes) = find_scopes(src, kernels);
    let heads: HashSet<usize> = scopes
        .iter()
        .filter_map(|s| match &s.body {
            Body::Named { params: Params::Parens(open, _), .. } => Some(open - 1),
            _ => None,
        })
        .collect();
    // Positions strictly inside some function body, marked in one sweep over the scopes.
    let mut open_bodies = vec![0i32; src.len() + 1];
    for s in &scopes {
        open_bodies[s.open + 1] += 1;
        open_bodies[s.close] -= 1;
    }
    let inside: Vec<bool> = open_bodies
        .iter()
        .scan(0i32, |depth, d| {
            *depth += d;
            Some(*depth > 0)
        })
        .collect();
    let in_function = |k: usize| inside.get(k).copied().unwrap_or(false);
    // Calls by name inside function bodies: (name position, callee).
    let calls: Vec<(usize, &str)> = (0..src.len())
        .filter(|&k| src.ident(k) && !heads.contains(&k) && call_open(src, k).is_some() && in_function(k))
        .map(|k| (k, src.tok(k).text.as_str()))
        .collect();

    // Names that reach SIMD-group functions: those that call one, then their callers, in
    // turn (a worklist over who calls whom, linear in the calls).
    let mut reaching: HashSet<&str> = HashSet::new();
    let mut callers: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut work: Vec<&str> = Vec::new();
    for s in &scopes {
        let name = match &s.body {
            Body::Named { name, .. } | Body::Opaque { name: Some(name), .. } => name.as_str(),
            _ => continue,
        };
        if reaches(s.open, s.close, &sited, &[], &reaching) && reaching.insert(name) {
            work.push(name);
        }
        let at = calls.partition_point(|&(k, _)| k < s.open);
        for &(_, callee) in calls[at..].iter().take_while(|&&(k, _)| k <= s.close) {
            callers.entry(callee).or_default().push(name);
        }
    }
    while let Some(name) = work.pop() {
        for &caller in callers.get(name).into_iter().flatten() {
            if reaching.insert(caller) {
                work.push(caller);
            }
        }
    }
    // Names used as values (`&f`, a template argument `mmv_fn<f<float>>`, `decltype(f<A>)`):
    // the function's type must stay as written, so it takes no site parameter.
    let valued: HashSet<&str> = (0..src.len())
        .filter(|&k| {
            src.ident(k)
                && reaching.contains(src.tok(k).text.as_str())
                && !heads.contains(&k)
                && call_open(src, k).is_none()
                && !(k > 0 && (src.is(k - 1, ".") || src.is(k - 1, "->")))
                // `auto f = [&](...) { ... };` names a lambda; it does not use it.
                && !src.is(k + 1, "=")
        })
        .map(|k| src.tok(k).text.as_str())
        .collect();
    // Names whose every definition takes the site at one place: (required, total) parameters.
    let mut arity: HashMap<&str, Option<(usize, usize)>> = HashMap::new();
    for s in &scopes {
        match &s.body {
            Body::Named { name, required, total, .. } => {
                let ok = !prototypes.contains(name.as_str())
                    && !valued.contains(name.as_str())
                    && !prelude_names().contains(name)
                    && !SITED_COLLECTIVES.contains(&name.as_str());
                let this = ok.then_some((*required, *total));
                arity.entry(name).and_modify(|a| *a = if *a == this { this } else { None }).or_insert(this);
            }
            Body::Opaque { name: Some(name), .. } => {
                arity.insert(name, None);
            }
            _ => {}
        }
    }
    let tagged = |name: &str| if reaching.contains(name) { arity.get(name).copied().flatten() } else { None };

    for s in &scopes {
        if s.body == Body::Kernel || !reaches(s.open, s.close, &sited, &calls, &reaching) {
            continue;
        }
        let line = src.tok(s.open).line;
        let nested = in_function(s.open);
        let (site, noinline_at) = match &s.body {
            Body::Named { name, params, required, total, .. } if tagged(name).is_some() => {
                let param = format!("kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown({line}, nullptr)");
                match *params {
                    Params::After(j) => out[sig[j]].push_str(&format!("({param})")),
                    Params::Parens(open, close) if required == total => {
                        let sep = if close == open + 1 { "" } else { ", " };
                        out[sig[close]].insert_str(0, &format!("{sep}{param}"));
                    }
                    Params::Parens(open, close) => {
                        let first_default = src
                            .arg_starts(open, close, true)
                            .get(*required)
                            .copied()
                            .ok_or("malformed parameter list")?;
                        out[sig[first_default]].insert_str(0, &format!("{param}, "));
                    }
                }
                ("kiln_call_site".to_string(), None)
            }
            Body::Named { noinline_at, .. } | Body::Opaque { noinline_at, .. } => {
                if let Body::Opaque { lambda_parens: Some(j), .. } = &s.body {
                    out[sig[*j]].push_str("()");
                }
                (format!("kiln::rt::CallSite::unknown({line}, __builtin_return_address(0))"), *noinline_at)
            }
            Body::Kernel => continue,
        };
        if let Some(j) = noinline_at {
            out[sig[j]].insert_str(0, " __attribute__((noinline)) ");
        }
        // A constexpr function cannot hold the scope; one that reaches SIMD-group functions
        // never runs at compile time anyway.
        let mut j = if nested { 0 } else { s.open };
        while j > 0 && !matches!(src.tok(j - 1).text.as_str(), ";" | "{" | "}") {
            j -= 1;
            if src.is(j, "constexpr") {
                out[sig[j]].clear();
            }
        }
        out[sig[s.open]].push_str(&format!(" kiln::rt::CallScope kiln_call_scope({site});"));
    }
    for &(k, name) in &calls {
        let Some((required, total)) = tagged(name) else { continue };
        let open = call_open(src, k).ok_or("call without parentheses")?;
        let close = src.matching(open).ok_or_else(|| format!("line {}: unbalanced call of {name}", src.tok(k).line))?;
        // An argument may be a template-id (`Tag<true, false>{}`) whose commas are not the
        // call's; `<` is read as a comparison first.
        let fits = |args: usize| required <= args && args <= total;
        let found = [false, true].into_iter().map(|angles| src.arg_starts(open, close, angles)).find(|s| fits(s.len()));
        let Some(starts) = found else {
            // Another arity is another function of that name.
            continue;
        };
        let args = starts.len();
        let site = format!("kiln::rt::CallSite({close})");
        if args == required {
            let sep = if args == 0 { "" } else { ", " };
            out[sig[close]].insert_str(0, &format!("{sep}{site}"));
        } else if let Some(&at) = starts.get(required) {
            out[sig[at]].insert_str(0, &format!("{site}, "));
        }
    }
    instrument_loops(src, out, &sited, &calls, &reaching, &in_function)
}

/// Whether tokens `from..=to` call a SIMD-group function or a function in `reaching`.
fn reaches(from: usize, to: usize, sited: &[usize], calls: &[(usize, &str)], reaching: &HashSet<&str>) -> bool {
    let at = sited.partition_point(|&k| k < from);
    if at < sited.len() && sited[at] <= to {
        return true;
    }
    let at = calls.partition_point(|&(k, _)| k < from);
    calls[at..].iter().take_while(|&&(k, _)| k <= to).any(|(_, n)| reaching.contains(n))
}

fn instrument_loops(
    src: &Cursor,
    out: &mut [String],
    sited: &[usize],
    calls: &[(usize, &str)],
    reaching: &HashSet<&str>,
    in_function: &dyn Fn(usize) -> bool,
) -> Result<(), String> {
    let sig = &src.sig;
    let mut do_whiles = HashSet::new();
    for k in 0..src.len() {
        let word = src.tok(k).text.as_str();
        let is_loop = src.tok(k).kind == Kind::Ident
            && (word == "do" || ((word == "for" || word == "while") && src.is(k + 1, "(")))
            && !do_whiles.contains(&k);
        if !is_loop || !in_function(k) {
            continue;
        }
        let line = src.tok(k).line;
        let end =
            src.statement_end(k).ok_or_else(|| format!("line {line}: cannot find where this `{word}` loop ends (unbalanced brackets, or statements nested deeper than kiln's limit of {MAX_NESTING})"))?;
        if word == "do" {
            // `do body while (cond);`: the `while` is at end - 1 - (its parentheses).
            if let Some(w) = src.matching_back(end - 1).map(|open| open - 1) {
                do_whiles.insert(w);
            }
        }
        if !reaches(k, end, sited, calls, reaching) {
            continue;
        }
        out[sig[k]].insert_str(0, &format!("for (kiln::rt::LoopScope kiln_loop({k}); kiln_loop.once(); ) "));
        let step_in_condition = |out: &mut [String], open: usize, close: usize| {
            // A condition that declares a variable cannot start with an expression.
            let declares = src.ident(open + 1) && src.ident(open + 2) && close > open + 3;
            if declares {
                out[sig[close + 1]].insert_str(0, "if (kiln_loop.step(), false) {} else ");
            } else {
                out[sig[open + 1]].insert_str(0, "kiln_loop.step(), ");
            }
        };
        match word {
            "do" => {
                let close = end - 1;
                let open = src.matching_back(close).ok_or("unbalanced do-while condition")?;
                out[sig[open + 1]].insert_str(0, "kiln_loop.step(), ");
            }
            "while" => {
                let close = src.matching(k + 1).ok_or("unbalanced while condition")?;
                step_in_condition(out, k + 1, close);
            }
            _ => {
                let close = src.matching(k + 1).ok_or("unbalanced for header")?;
                match src.semicolons_in(k + 1, close)[..] {
                    [_, b] if b + 1 == close => out[sig[close]].insert_str(0, "kiln_loop.step()"),
                    [_, b] => out[sig[b + 1]].insert_str(0, "kiln_loop.step(), "),
                    // A range `for`: counted before its body.
                    [] => out[sig[close + 1]].insert_str(0, "if (kiln_loop.step(), false) {} else "),
                    _ => return Err(format!("line {line}: malformed `for` header")),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(src: &str) -> String {
        let src = Cursor::new(src);
        let mut out: Vec<String> = src.toks.iter().map(|t| t.text.clone()).collect();
        let kernels: HashSet<String> = ["k".to_string()].into_iter().collect();
        instrument(&src, &mut out, &kernels).unwrap();
        out.concat()
    }

    #[test]
    fn helpers_that_reach_simd_functions_take_their_call_site() {
        let text = lowered(
            "template <typename T> T lanesum(T v) { return simd_sum(v); }\n\
             float plain(float v) { return v * 2.0f; }\n\
             kernel void k(uint l) { float r = l & 1 ? lanesum(1.0f) : lanesum(plain(2.0f)); }\n",
        );
        assert!(text.contains(
            "T lanesum(T v, kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown(1, nullptr)) { kiln::rt::CallScope"
        ));
        assert!(text.contains("float plain(float v) { return"), "{text}");
        assert_eq!(text.matches("kiln::rt::CallSite(").count(), 2, "{text}");
        assert!(!text.contains("plain(2.0f, kiln"), "{text}");
        assert!(!text.contains("void k(uint l) { kiln"), "{text}");
    }

    #[test]
    fn loops_that_reach_simd_functions_count_iterations() {
        let text = lowered(
            "kernel void k(uint l) {\n  int s = 0;\n  for (uint i = 0; i < 2; ++i) { s += simd_sum(1); }\n\
             for (;;) { if (simd_any(true)) break; }\n  while (l < 4) l += simd_max(l);\n\
             do { s += 1; } while (simd_any(s < 3));\n  for (int j = 0; j < 3; ++j) s += j;\n}\n",
        );
        assert!(text.contains("; kiln_loop.once(); ) for (uint i = 0; i < 2; kiln_loop.step(), ++i)"), "{text}");
        assert!(text.contains("for (;;kiln_loop.step())"), "{text}");
        assert!(text.contains("while (kiln_loop.step(), l < 4)"), "{text}");
        assert!(text.contains("while (kiln_loop.step(), simd_any(s < 3))"), "{text}");
        assert!(text.contains("\n  for (int j = 0"), "a loop without SIMD-group functions stays: {text}");
    }

    #[test]
    fn defaults_and_named_lambdas_take_the_site_before_defaults() {
        let text = lowered(
            "float dflt(float v, int n = 2) { return simd_max(v) * n; }\n\
             kernel void k(uint l) { auto f = [&](float v) { return simd_min(v); }; auto g = [&] { return simd_sum(1); };\n\
             float r = dflt(1.0f) + dflt(2.0f, 3) + f(3.0f) + g(); }\n",
        );
        assert!(text.contains("float dflt(float v, kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown(1, nullptr), int n = 2)"), "{text}");
        assert!(text.contains("dflt(1.0f, kiln::rt::CallSite("), "{text}");
        assert!(text.contains("dflt(2.0f, kiln::rt::CallSite("), "{text}");
        assert!(text.contains("), 3)"), "{text}");
        assert!(text.contains("[&](float v, kiln::rt::CallSite kiln_call_site"), "{text}");
        assert!(
            text.contains("[&](kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown(2, nullptr)) {"),
            "{text}"
        );
        assert!(text.contains("g(kiln::rt::CallSite("), "{text}");
    }

    #[test]
    fn const_thread_members_are_functions_and_template_id_arguments_keep_their_place() {
        let text = lowered(
            "struct Op {\n  float scale;\n  float run(float v) const thread {\n    float acc = 0.0f;\n    \
             _Pragma(\"clang loop unroll(full)\")\n    for (short i = 0; i < 3; i++) { acc += simd_sum(v) * scale; }\n    \
             return acc;\n  }\n};\n\
             template <bool A, bool B> struct Tag {};\n\
             template <bool A, bool B> float tagged(float v, Tag<A, B> t = {}) { return simd_max(v); }\n\
             kernel void k(uint l) { Op op{1.0f}; float r = op.run(1.0f) + tagged(2.0f, Tag<true, false>{}); }\n",
        );
        assert!(!text.contains("for (kiln::rt::CallSite"), "{text}");
        assert!(text.contains("const thread { kiln::rt::CallScope kiln_call_scope("), "{text}");
        assert!(
            text.contains("_Pragma(\"clang loop unroll(full)\")\n    for (kiln::rt::LoopScope kiln_loop("),
            "{text}"
        );
        assert!(text.contains("i < 3; kiln_loop.step(), i++)"), "{text}");
        assert!(text.contains("tagged(2.0f, kiln::rt::CallSite("), "{text}");
        assert!(text.contains("), Tag<true, false>{})"), "{text}");
    }

    #[test]
    fn functions_whose_calls_cannot_carry_a_site_run_out_of_line() {
        let text = lowered(
            "struct Op { float operator()(float v) { return simd_sum(v); } };\n\
             template <class... A> float pack(A... a) { return simd_max(float(sizeof...(A))); }\n\
             template <class F> float apply(F f) { return f(1.0f); }\n\
             kernel void k(uint l) { Op op; float r = op(1.0f) + pack(1, 2) + apply([&](float v) mutable { return simd_min(v); }); }\n",
        );
        let unknown = "kiln::rt::CallScope kiln_call_scope(kiln::rt::CallSite::unknown(";
        assert_eq!(text.matches(unknown).count(), 3, "{text}");
        assert!(text.contains("__attribute__((noinline)) float operator()(float v)"), "{text}");
        assert!(text.contains("template <class... A>  __attribute__((noinline)) float pack"), "{text}");
        assert!(text.contains("mutable  __attribute__((noinline)) {"), "{text}");
        assert!(
            text.contains("float apply(F f) { return"),
            "a parameter's call is no call of a known function: {text}"
        );
        assert!(!text.contains("op(1.0f, kiln"), "{text}");
    }
}

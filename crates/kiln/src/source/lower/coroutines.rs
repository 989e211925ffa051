//! Kernels whose threads may run as stackless coroutines on the CPU, and the rewrite that makes
//! them so (prelude/cpu/runtime.h, "threads as stackless coroutines").
//!
//! A unit qualifies when every barrier and SIMD-group function call in it (`threadgroup_barrier`,
//! `simdgroup_barrier`, the `simd_*` and `quad_*` collectives) is a call by name written in a
//! kernel function's own body — not in a function the kernel calls, nor in a lambda — and no
//! other SIMD-group function (`simdgroup_matrix` operations) is called. The rewrite then marks,
//! with macros the unit defines (`backend::cpu::emit`):
//!
//! - each kernel's `void` as `KILN_CO_ENTRY` and its `return`s as `KILN_CO_RETURN`, with one more
//!   before its closing brace (so a kernel without a barrier is a coroutine too), and the end of
//!   its parameters with `KILN_CO_PARAM` (the thread it runs, which its frame and promise take);
//! - each barrier as `KILN_CO_BARRIER(name)(args)` and each SIMD-group call as
//!   `KILN_CO_CALL(name)(args)`.
//!
//! As coroutine code these become `co_await`s; the same text with the macros off is the kernel
//! as written, so a unit the compiler refuses as coroutines is built again with fibers. Text
//! is only added around tokens and never holds a newline, so lines stay where they were.

use std::collections::HashSet;

use super::convergence::SITED_COLLECTIVES;
use super::functions::{call_open, find_scopes, Body};
use super::rewrite::is_cooperative;
use crate::source::cursor::Cursor;

/// What a call by this name is to the rewrite.
enum Call {
    Barrier,
    Collective,
    /// A SIMD-group function a coroutine thread cannot take (`simdgroup_multiply`, ...), or a
    /// name of the cooperative families the prelude does not define.
    Refused,
    Other,
}

fn call_kind(name: &str) -> Call {
    if !is_cooperative(name) {
        return Call::Other;
    }
    if name == "threadgroup_barrier" {
        return Call::Barrier;
    }
    let collective =
        SITED_COLLECTIVES.contains(&name) && (!name.starts_with("simdgroup_") || name == "simdgroup_barrier");
    if collective {
        Call::Collective
    } else {
        Call::Refused
    }
}

/// Rewrites `out` (the rewriter's text per token, indexed like `src.toks`) so that the unit's
/// kernels run their threads as coroutines, when it qualifies; returns whether it did. Tokens
/// whose text an earlier pass blanked (pruned declarations) are left alone.
pub fn lower(src: &Cursor, out: &mut [String], kernels: &HashSet<String>) -> bool {
    let sig = &src.sig;
    let live = |k: usize| !out[sig[k]].is_empty();
    let idents: Vec<usize> = (0..src.len()).filter(|&k| src.ident(k) && live(k)).collect();
    if idents.iter().any(|&k| matches!(src.tok(k).text.as_str(), "co_await" | "co_return" | "co_yield")) {
        return false;
    }
    let (scopes, _) = find_scopes(src, kernels);
    let innermost = |k: usize| scopes.iter().filter(|s| s.open < k && k < s.close).min_by_key(|s| s.close - s.open);
    let in_kernel = |k: usize| innermost(k).is_some_and(|s| s.body == Body::Kernel);
    // Each call's first token with the macro put before it, and the token its `)` goes after.
    let mut wraps: Vec<(usize, &str)> = Vec::new();
    let mut closes: Vec<usize> = Vec::new();
    let mut suspends = false;
    for &k in &idents {
        let name = src.tok(k).text.as_str();
        let kind = call_kind(name);
        // Outside every function body a name followed by `(` declares a function (an overload
        // of a collective's name, say); a body that calls a collective is refused below.
        if matches!(kind, Call::Other) || innermost(k).is_none() {
            continue;
        }
        let Some(open) = call_open(src, k) else {
            // A barrier or collective named but not called (its address taken): refused.
            if matches!(kind, Call::Barrier | Call::Collective) {
                return false;
            }
            continue;
        };
        let member = k > 0 && (src.is(k - 1, ".") || src.is(k - 1, "->"));
        if matches!(kind, Call::Refused) || member || !in_kernel(k) {
            return false;
        }
        // The whole name, qualifiers included (`metal::simd_sum`, `::metal::simd_sum`).
        let mut start = k;
        while start >= 2 && src.is(start - 1, "::") && src.ident(start - 2) {
            start -= 2;
        }
        if start >= 1 && src.is(start - 1, "::") {
            start -= 1;
        }
        let macro_open = if matches!(kind, Call::Barrier) { "KILN_CO_BARRIER(" } else { "KILN_CO_CALL(" };
        wraps.push((start, macro_open));
        closes.push(open - 1);
        suspends = true;
    }
    if !suspends {
        return false;
    }
    // Each kernel's return type and returns.
    let mut entries: Vec<usize> = Vec::new();
    let mut returns: Vec<usize> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut params_ends: Vec<usize> = Vec::new();
    for s in scopes.iter().filter(|s| s.body == Body::Kernel && live(s.open)) {
        let Some(params) = (s.open > 0 && src.is(s.open - 1, ")")).then(|| src.matching_back(s.open - 1)).flatten()
        else {
            return false;
        };
        if params < 2 || !src.ident(params - 1) || !src.is(params - 2, "void") || out[sig[params - 2]] != "void" {
            return false;
        }
        entries.push(params - 2);
        ends.push(s.close);
        params_ends.push(s.open - 1);
        // Its own returns (not a lambda's in it).
        for k in s.open + 1..s.close {
            if !src.is(k, "return") || !live(k) || !in_kernel(k) {
                continue;
            }
            if !src.is(k + 1, ";") || !out[sig[k]].ends_with("return") {
                return false;
            }
            returns.push(k);
        }
    }
    for (k, text) in wraps {
        out[sig[k]].insert_str(0, text);
    }
    for k in closes {
        out[sig[k]].push(')');
    }
    for k in entries {
        out[sig[k]] = "KILN_CO_ENTRY".to_string();
    }
    for k in returns {
        let slot = &mut out[sig[k]];
        slot.truncate(slot.len() - "return".len());
        slot.push_str("KILN_CO_RETURN");
    }
    for k in ends {
        out[sig[k]].insert_str(0, " KILN_CO_RETURN; ");
    }
    for k in params_ends {
        let param = if src.is(k - 1, "(") { "KILN_CO_PARAM_ONLY" } else { " KILN_CO_PARAM" };
        out[sig[k]].insert_str(0, param);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(code: &str) -> Option<String> {
        let src = Cursor::new(code);
        let mut out: Vec<String> = src.toks.iter().map(|t| t.text.clone()).collect();
        let kernels: HashSet<String> = ["k".to_string()].into();
        lower(&src, &mut out, &kernels).then(|| out.concat())
    }

    #[test]
    fn barriers_collectives_and_returns_of_a_kernel_body_are_marked() {
        let text = lowered(
            "kernel void k(device float* o, uint t) {\n  if (t > 9) return;\n  threadgroup_barrier(mem_flags::mem_threadgroup);\n  o[t] = metal::simd_sum(o[t]) + simd_lane_id;\n}\n",
        )
        .expect("qualifies");
        assert!(text.contains("kernel KILN_CO_ENTRY k(device float* o, uint t KILN_CO_PARAM) {"), "{text}");
        assert!(text.contains("if (t > 9) KILN_CO_RETURN;"), "{text}");
        assert!(text.contains("KILN_CO_BARRIER(threadgroup_barrier)(mem_flags::mem_threadgroup);"), "{text}");
        assert!(text.contains("KILN_CO_CALL(metal::simd_sum)(o[t]) + simd_lane_id;"), "{text}");
        assert!(text.contains(" KILN_CO_RETURN; }"), "{text}");
        assert_eq!(text.lines().count(), 5);
        // A declaration of a collective's name at file scope is not a call.
        let declared = "float simd_sum(half v);\nkernel void k(device float* o, uint t) { o[t] = simd_sum(o[t]); }\n";
        assert!(lowered(declared).expect("qualifies").contains("KILN_CO_CALL(simd_sum)(o[t])"));
    }

    #[test]
    fn collectives_outside_the_kernel_body_or_matrix_functions_keep_fibers() {
        let helper = "float lanesum(float v) { return simd_sum(v); }\nkernel void k(device float* o, uint t) { threadgroup_barrier(); o[t] = lanesum(o[t]); }\n";
        assert_eq!(lowered(helper), None);
        let lambda = "kernel void k(device float* o, uint t) { auto f = [&](float v) { return simd_sum(v); }; threadgroup_barrier(); o[t] = f(o[t]); }\n";
        assert_eq!(lowered(lambda), None);
        let overload = "float simd_sum(half v) { return simd_sum(float(v)); }\nkernel void k(device float* o, uint t) { threadgroup_barrier(); o[t] = simd_sum(o[t]); }\n";
        assert_eq!(lowered(overload), None);
        let matrix = "kernel void k(device float* o, uint t) { simdgroup_float8x8 m; simdgroup_load(m, o); threadgroup_barrier(); }\n";
        assert_eq!(lowered(matrix), None);
        let plain = "kernel void k(device float* o, uint t) { o[t] = 1.0f; }\n";
        assert_eq!(lowered(plain), None);
    }
}

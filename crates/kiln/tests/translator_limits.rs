//! Pathological sources through the translator's public entry points: deep nesting of every
//! bracket, macro chains, conditionals and collectives, and large but realistic files. Each
//! gives a clear `Error::Compile` naming the limit and line, or translates, within seconds, on
//! a caller's 2 MiB thread.

use std::time::{Duration, Instant};

use kiln::backend::{translate, MetalProgram, ProgramKind, Target};
use kiln::{Error, MathMode};

fn program(source: &str) -> MetalProgram {
    MetalProgram {
        kernel: "limits".into(),
        source: source.into(),
        kind: ProgramKind::FullFile,
        function: "k".into(),
        math_mode: MathMode::Safe,
        constants: vec![],
    }
}

/// A file whose kernel runs `body` (which may use `x`, `c` and `y`), after `header`.
fn file(header: &str, body: &str) -> String {
    format!(
        "#include <metal_stdlib>\nusing namespace metal;\n{header}\nkernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n  float x = y[i];\n  bool c = x > 0.0f;\n{body}\n  y[i] = x;\n}}\n"
    )
}

fn if_parens(n: usize) -> String {
    file(&format!("#if {}1{}\n#define ONE 1\n#endif", "(".repeat(n), ")".repeat(n)), "")
}
fn nested_macro_calls(n: usize) -> String {
    file("#define F(a) a", &format!("  x = {}x{};", "F(".repeat(n), ")".repeat(n)))
}
fn nested_ternary(n: usize) -> String {
    file("", &format!("  x = {}x{};", "c ? ".repeat(n), " : 1.0f".repeat(n)))
}
fn nested_ternary_parens(n: usize) -> String {
    file("", &format!("  x = {}x{};", "c ? (".repeat(n), ") : 1.0f".repeat(n)))
}
fn doubling_chain(n: usize) -> String {
    let mut h = String::from("#define A0 x\n");
    for k in 1..=n {
        h.push_str(&format!("#define A{k} A{} + A{}\n", k - 1, k - 1));
    }
    file(&h, &format!("  x = A{n};"))
}
fn nested_simd_sum(n: usize) -> String {
    file("", &format!("  x = {}x{};", "simd_sum(".repeat(n), ")".repeat(n)))
}
fn nested_braces(n: usize) -> String {
    file("", &format!("{}x += 1.0f;{}", "{".repeat(n), "}".repeat(n)))
}
fn nested_parens(n: usize) -> String {
    file("", &format!("  x = {}x{};", "(".repeat(n), ")".repeat(n)))
}
fn nested_brackets(n: usize) -> String {
    file("", &format!("  x = {}0{};", "y[".repeat(n), "]".repeat(n)))
}
fn nested_templates(n: usize) -> String {
    file("template <typename T> struct W { T v; };", &format!("  {}float{} w; (void)w;", "W<".repeat(n), ">".repeat(n)))
}
fn nested_lambdas(n: usize) -> String {
    file("", &format!("  x = {}x{};", "[&]() { return ".repeat(n), "; }()".repeat(n)))
}
fn deep_if(n: usize) -> String {
    file(&format!("{}#define DEEP 1\n{}", "#if 1\n".repeat(n), "#endif\n".repeat(n)), "  x += DEEP;")
}
fn deep_call_args(n: usize) -> String {
    file("float f(float a) { return a; }", &format!("  x = {}x{};", "f(".repeat(n), ")".repeat(n)))
}
fn token_flood(n: usize) -> String {
    file("", &"  x = x * 0.5f + 1.0f;\n".repeat(n))
}
fn long_line(n: usize) -> String {
    file("", &format!("  x = x{};", " + 1.0f".repeat(n)))
}
fn many_functions(n: usize) -> String {
    let mut h = String::new();
    for k in 0..n {
        h.push_str(&format!("inline float h{k}(float a) {{ return a * {k}.0f + 1.0f; }}\n"));
    }
    file(&h, "  x = h0(x);")
}
fn many_functions_simd(n: usize) -> String {
    let mut h = String::new();
    for k in 0..n {
        h.push_str(&format!("inline float h{k}(float a) {{ return a * {k}.0f + h{}(a); }}\n", k.saturating_sub(1)));
    }
    file(&h.replacen("h0(a)", "simd_sum(a)", 1), &format!("  x = h{}(x);", n - 1))
}
fn else_if_chain(n: usize) -> String {
    file("", &format!("  for (int j = 0; j < 2; ++j) {} x = simd_sum(x);", "if (j == 1) x += 1.0f; else ".repeat(n)))
}
fn nested_loops(n: usize) -> String {
    file("", &format!("  {} x = simd_sum(x);", "for (int j = 0; j < 1; ++j) ".repeat(n)))
}
fn comparisons(n: usize) -> String {
    file("", &format!("  x = x{};", " + (x < 1.0f)".repeat(n)))
}
fn many_params(n: usize) -> String {
    let params: Vec<String> = (0..n).map(|k| format!("float a{k}")).collect();
    let args: Vec<String> = (0..n).map(|_| "x".to_string()).collect();
    file(
        &format!("float wide({}) {{ return simd_sum(a0); }}", params.join(", ")),
        &format!("  x = wide({});", args.join(", ")),
    )
}
/// Functions defined callee-last, so that what reaches a SIMD-group function is learnt one
/// function per round.
fn reverse_chain(n: usize) -> String {
    let mut h = String::new();
    for k in 0..n {
        h.push_str(&format!("float h{k}(float a);\n"));
    }
    for k in (1..n).rev() {
        h.push_str(&format!("float h{k}(float a) {{ return h{}(a) + 1.0f; }}\n", k - 1));
    }
    h.push_str("float h0(float a) { return simd_sum(a); }\n");
    file(&h, &format!("  x = h{}(x);", n - 1))
}
fn long_ternary_chain(n: usize) -> String {
    file("", &format!("  x = {}x;", "c ? 1.0f : ".repeat(n)))
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).expect("spawn").join().expect("thread survived")
}

fn describe(r: &kiln::Result<String>) -> String {
    match r {
        Ok(t) => format!("ok {} bytes", t.len()),
        Err(Error::Compile { log, .. }) => format!("compile error: {}", &log[..log.len().min(150)]),
        Err(e) => format!("other error: {e}"),
    }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn scaling() {
    type Gen = fn(usize) -> String;
    let cases: Vec<(&str, Gen, Vec<usize>)> = vec![
        ("if_parens", if_parens, vec![1000, 2000, 4000]),
        ("nested_macro_calls", nested_macro_calls, vec![250, 500, 1000]),
        ("nested_ternary", nested_ternary, vec![1000, 2000, 4000]),
        ("nested_ternary_parens", nested_ternary_parens, vec![1000, 2000, 4000]),
        ("doubling_chain", doubling_chain, vec![10, 12, 14]),
        ("nested_simd_sum", nested_simd_sum, vec![1000, 2000, 4000]),
        ("nested_braces", nested_braces, vec![1000, 2000, 4000]),
        ("nested_parens", nested_parens, vec![1000, 2000, 4000]),
        ("nested_brackets", nested_brackets, vec![1000, 2000, 4000]),
        ("nested_templates", nested_templates, vec![1000, 2000, 4000]),
        ("nested_lambdas", nested_lambdas, vec![250, 500, 1000]),
        ("deep_if", deep_if, vec![1000, 2000, 4000]),
        ("deep_call_args", deep_call_args, vec![1000, 2000, 4000]),
        ("token_flood", token_flood, vec![5000, 10000, 20000]),
        ("long_line", long_line, vec![5000, 10000, 20000]),
        ("many_functions", many_functions, vec![2000, 4000, 8000]),
        ("long_ternary_chain", long_ternary_chain, vec![1000, 2000, 4000]),
        ("many_functions_simd", many_functions_simd, vec![1000, 2000, 4000]),
        ("else_if_chain", else_if_chain, vec![1000, 2000, 4000]),
        ("nested_loops", nested_loops, vec![1000, 2000, 4000]),
        ("comparisons", comparisons, vec![2000, 4000, 8000]),
        ("many_params", many_params, vec![1000, 2000, 4000]),
        ("reverse_chain", reverse_chain, vec![1000, 2000, 4000]),
    ];
    let only = std::env::var("CASE").ok();
    let scale: usize = std::env::var("SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for (name, gen, sizes) in cases {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        for n in sizes.into_iter().map(|n| n * scale) {
            let src = gen(n);
            let len = src.len();
            for target in [Target::Cpu, Target::Cuda] {
                let src = src.clone();
                let (r, d) = on_small_stack(move || time(|| translate(&program(&src), target)));
                eprintln!("{name:24} n={n:6} {len:8}B {target:?}: {:8.3}s {}", d.as_secs_f64(), describe(&r));
            }
        }
    }
}

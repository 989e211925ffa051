//! Pathological sources through the translator's public entry points (`backend::translate`
//! for host C++ and CUDA, as `kiln translate` prints them; `MetalKernel::call` and
//! `MetalLibrary::dispatch` on the CPU): deep nesting of every bracket, of `#if` groups and
//! expressions, of macro invocations, conditionals and collectives, macros that double their
//! text, recursive macros, and large but realistic files. Each gives an `Error::Compile` that
//! names the limit (docs/msl.md, "Limits") and the line, or translates correctly, within seconds, on
//! a caller's 2 MiB thread. The time bounds are generous for a loaded CI machine; what they
//! guard against took minutes or aborted the process.

mod common;

use std::time::{Duration, Instant};

use kiln::backend::{translate, Dispatch, MetalProgram, ProgramKind, Target};
use kiln::{Array, Error, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel, MetalLibrary};

/// What a time bound allows, where a healthy run takes a second or less.
const BOUND: Duration = Duration::from_secs(10);
/// The bound for the megabyte sources and the million-token expansion (a few seconds in a
/// debug build).
const LARGE_BOUND: Duration = Duration::from_secs(30);

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

/// A file whose kernel `k` runs `body` (which may use `x`, `c` and `y`), after `header`. The
/// body starts on line `4 + header lines`.
fn file(header: &str, body: &str) -> String {
    format!(
        "#include <metal_stdlib>\nusing namespace metal;\n{header}\nkernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n  float x = y[i];\n  bool c = x > 0.0f;\n{body}\n  y[i] = x;\n}}\n"
    )
}

/// The line of `file(header, body)` on which the body starts.
fn body_line(header: &str) -> usize {
    header.lines().count().max(1) + 6
}

/// How often `pattern` occurs in the host C++ of `text` beyond the prelude (the translation of
/// an empty kernel).
fn occurrences(text: &str, pattern: &str) -> usize {
    let baseline = translate(&program(&file("", "")), Target::Cpu).unwrap_or_default();
    text.matches(pattern).count() - baseline.matches(pattern).count()
}

/// Runs `f` on a new thread with a 2 MiB stack (a caller's usual thread size); the process
/// surviving is part of what the tests check.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).expect("spawn").join().expect("the thread survived")
}

/// Translates `source` for the CPU and CUDA on a 2 MiB thread: the results and the longest time.
fn translate_both(source: &str) -> (Vec<kiln::Result<String>>, Duration) {
    let source = source.to_string();
    on_small_stack(move || {
        let mut longest = Duration::ZERO;
        let mut results = Vec::new();
        for target in [Target::Cpu, Target::Cuda] {
            let start = Instant::now();
            results.push(translate(&program(&source), target));
            longest = longest.max(start.elapsed());
        }
        (results, longest)
    })
}

/// Asserts `r` is the front end's error for kernel `limits` naming `limit` on `line`.
#[track_caller]
fn assert_limit(r: &kiln::Result<String>, limit: &str, line: usize) {
    match r {
        Err(Error::Compile { backend, kernel, log }) => {
            assert_eq!((*backend, kernel.as_str()), ("translate", "limits"), "{log}");
            assert!(log.contains(limit), "the error names the limit `{limit}`: {log}");
            assert!(log.contains("kiln's limit of"), "the error says it is a limit: {log}");
            assert!(log.starts_with(&format!("source line {line}:")), "the error names line {line} of the file: {log}");
        }
        Err(e) => panic!("expected a translation error naming `{limit}`, got {e}"),
        Ok(text) => panic!("expected a translation error naming `{limit}`, got {} bytes of text", text.len()),
    }
}

/// `source` past a limit: both targets refuse it, naming `limit` and `line`, within `BOUND`.
#[track_caller]
fn assert_refused(source: &str, limit: &str, line: usize) {
    let (results, took) = translate_both(source);
    for r in &results {
        assert_limit(r, limit, line);
    }
    assert!(took < BOUND, "refusing took {took:?}");
}

/// `source` within the limits: both targets translate it within `bound`; the host C++ text.
#[track_caller]
fn assert_translates(source: &str, bound: Duration) -> String {
    let (mut results, took) = translate_both(source);
    for r in &results {
        if let Err(e) = r {
            panic!("expected a translation, got {e}");
        }
    }
    assert!(took < bound, "translating took {took:?}");
    results.remove(0).unwrap_or_default()
}

// ---- the preprocessor -----------------------------------------------------------------------

fn if_parens(n: usize) -> String {
    file(&format!("#if {}1{}\n#define ONE 1\n#endif", "(".repeat(n), ")".repeat(n)), "  x += ONE;")
}

#[test]
fn deep_parentheses_in_if_are_refused_and_shallow_ones_evaluate() {
    assert_refused(&if_parens(30_000), "the nesting of the `#if` expression", 3);
    assert_refused(&if_parens(300), "the nesting of the `#if` expression", 3);
    let text = assert_translates(&if_parens(200), BOUND);
    assert!(text.contains("x += 1;"), "the condition held and ONE expanded");
    // Unary operators and conditionals nest too.
    let unary = file(&format!("#if {}1\n#endif", "- ".repeat(10_000)), "");
    assert_refused(&unary, "the nesting of the `#if` expression", 3);
    let conditional = file(&format!("#if {}1{}\n#endif", "1 ? ".repeat(10_000), " : 0".repeat(10_000)), "");
    assert_refused(&conditional, "the nesting of the `#if` expression", 3);
}

#[test]
fn deep_if_groups_are_refused() {
    let deep =
        |n: usize| file(&format!("{}#define DEEP 2\n{}", "#if 1\n".repeat(n), "#endif\n".repeat(n)), "  x += DEEP;");
    assert_refused(&deep(5_000), "the nesting of `#if` groups", 3 + 256);
    let text = assert_translates(&deep(200), BOUND);
    assert!(text.contains("x += 2;"));
}

fn nested_macro_calls(n: usize) -> String {
    file("#define F(a) (a + 1)", &format!("  x = {}x{};", "F(".repeat(n), ")".repeat(n)))
}

#[test]
fn macro_invocations_nest_within_the_limit_and_never_recurse() {
    let header_line = body_line("#define F(a) (a + 1)");
    assert_refused(&nested_macro_calls(1_000), "the nesting of macro invocations in arguments", header_line);
    assert_refused(&nested_macro_calls(100_000), "by macro expansion", header_line);
    let text = assert_translates(&nested_macro_calls(3), BOUND);
    assert!(text.contains("x = (((x + 1) + 1) + 1);"), "{text}");
    // A macro never expands inside its own expansion, directly or through another (C's rules).
    let header = "#define self self + 1\n#define f(a) f(a * 2)\n#define ping pong + 1\n#define pong ping * 2";
    let body = "  x = self;\n  x = f(f(x));\n  x += ping;\n  x += pong;";
    let text = assert_translates(&file(header, body), BOUND);
    for want in ["x = self + 1;", "x = f(f(x * 2) * 2);", "x += ping * 2 + 1;", "x += pong + 1 * 2;"] {
        assert!(text.contains(want), "{want} in {text}");
    }
}

/// `A{k}` is `A{k-1} + A{k-1}`: `A{n}` is 2^n copies of `x`.
fn doubling_chain(n: usize) -> String {
    let mut h = String::from("#define A0 x");
    for k in 1..=n {
        h.push_str(&format!("\n#define A{k} A{} + A{}", k - 1, k - 1));
    }
    file(&h, &format!("  x = A{n};"))
}

/// The peak resident memory of this process, where the system reports it.
fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
}

#[test]
fn a_macro_doubling_chain_is_refused_before_memory_grows() {
    let source = doubling_chain(40);
    // The header is `#define A0` .. `#define A40` (41 lines). Producing the 2^20 tokens takes
    // about a second in a debug build.
    let (results, took) = translate_both(&source);
    for r in &results {
        assert_limit(r, "the tokens produced or rescanned by macro expansion", 41 + 6);
    }
    assert!(took < LARGE_BOUND, "refusing took {took:?}");
    if let Some(peak) = peak_memory_bytes() {
        assert!(peak < 1 << 30, "peak memory {} MiB", peak >> 20);
    }
    let text = assert_translates(&doubling_chain(4), BOUND);
    assert!(text.contains(&format!("x = {};", vec!["x"; 16].join(" + "))), "{text}");
}

// ---- nesting in the program ----------------------------------------------------------------

#[test]
fn brackets_nest_up_to_the_limit() {
    let line = body_line("");
    let cases = [
        ("braces", file("", &format!("{}x += 1.0f;{}", "{".repeat(100_000), "}".repeat(100_000)))),
        ("parentheses", file("", &format!("  x = {}x{};", "(".repeat(100_000), ")".repeat(100_000)))),
        ("brackets", file("", &format!("  x = {}0{};", "y[".repeat(100_000), "]".repeat(100_000)))),
        ("simd_sum", file("", &format!("  x = {}x{};", "simd_sum(".repeat(100_000), ")".repeat(100_000)))),
        ("lambdas", file("", &format!("  x = {}x{};", "[&]() { return ".repeat(20_000), "; }()".repeat(20_000)))),
        (
            "conditionals in parentheses",
            file("", &format!("  x = {}x{};", "c ? (".repeat(16_000), ") : 1.0f".repeat(16_000))),
        ),
    ];
    for (what, source) in cases {
        let (results, took) = translate_both(&source);
        for r in &results {
            assert_limit(r, "the nesting of brackets", line);
        }
        assert!(took < BOUND, "{what}: refusing took {took:?}");
    }
    // Within the limit (the kernel's braces count too).
    let text = assert_translates(&file("", &format!("  x = {}x{};", "(".repeat(200), ")".repeat(200))), BOUND);
    assert!(text.contains(&format!("x = {}x{};", "(".repeat(200), ")".repeat(200))));
    let sums = file("", &format!("  x = {}x{};", "simd_sum(".repeat(100), ")".repeat(100)));
    let text = assert_translates(&sums, BOUND);
    assert_eq!(occurrences(&text, "kiln::site_tag<"), 100, "every call carries its site");
}

#[test]
fn long_chains_of_conditionals_are_linear() {
    // Nested in the middle operand, and chained in the false operand.
    let nested = file("", &format!("  x = {}x{};", "c ? ".repeat(16_000), " : 1.0f".repeat(16_000)));
    let text = assert_translates(&nested, BOUND);
    assert!(occurrences(&text, "kiln::tern_arm") > 0, "the innermost conditionals are still cast");
    let chained = file("", &format!("  x = {}x;", "c ? 1.0f : ".repeat(16_000)));
    assert_translates(&chained, BOUND);
}

#[test]
fn deep_template_arguments_beside_a_conditional_translate() {
    // Angle brackets are not limited; the conditional makes the lowering find every template
    // argument list's closer.
    let source = file(
        "template <typename T> struct W { T v; };",
        &format!("  {}float{} w;\n  x = c ? x : 2.0f;", "W<".repeat(50_000), ">".repeat(50_000)),
    );
    let text = assert_translates(&source, BOUND);
    assert_eq!(occurrences(&text, "kiln::tern_arm"), 2, "both arms cast");
}

#[test]
fn loops_nested_without_braces_are_refused_on_the_cpu() {
    // The CPU lowering counts the iterations of loops that reach a SIMD-group function, which
    // needs the end of each loop's statement.
    let source = file("", &format!("  {} x = simd_sum(x);", "for (int j = 0; j < 1; ++j) ".repeat(5_000)));
    let (results, took) = translate_both(&source);
    match &results[0] {
        Err(Error::Compile { log, .. }) => assert!(log.contains("nested deeper than kiln's limit of 256"), "{log}"),
        other => panic!("expected a translation error, got {other:?}"),
    }
    assert!(results[1].is_ok(), "CUDA needs no loop ends");
    assert!(took < BOUND, "took {took:?}");
    let shallow = file("", &format!("  {} x = simd_sum(x);", "for (int j = 0; j < 1; ++j) ".repeat(100)));
    let text = assert_translates(&shallow, BOUND);
    assert_eq!(occurrences(&text, "kiln::rt::LoopScope"), 100);
}

#[test]
fn long_else_if_chains_translate() {
    let source = file(
        "",
        &format!("  for (int j = 0; j < 2; ++j) {} x = simd_sum(x);", "if (j == 1) x += 1.0f; else ".repeat(10_000)),
    );
    let text = assert_translates(&source, BOUND);
    assert_eq!(occurrences(&text, "kiln::rt::LoopScope"), 1);
}

// ---- large sources ---------------------------------------------------------------------------

#[test]
fn megabytes_of_helpers_reaching_a_collective_translate() {
    // 16,000 helpers declared ahead and defined callers first (1 MB), the last a SIMD-group
    // sum: what reaches it is learnt through the whole chain. Declared ahead, the helpers are
    // reached through the return address: every one gets a scope.
    let n = 16_000;
    let mut h: String = (0..n).map(|k| format!("float h{k}(float a);\n")).collect();
    for k in (1..n).rev() {
        h.push_str(&format!("float h{k}(float a) {{ return h{}(a) + 1.0f; }}\n", k - 1));
    }
    h.push_str("float h0(float a) { return simd_sum(a); }\n");
    let source = file(&h, &format!("  x = h{}(x);", n - 1));
    assert!(source.len() > 1_000_000);
    let text = assert_translates(&source, LARGE_BOUND);
    assert_eq!(occurrences(&text, "kiln::rt::CallScope kiln_call_scope"), n);

    // 32,000 helpers (2 MB), each defined after the one it calls: the CPU lowering passes a
    // call site to every one.
    let n = 32_000;
    let mut h = String::from("inline float h0(float a) { return simd_sum(a); }\n");
    for k in 1..n {
        h.push_str(&format!("inline float h{k}(float a) {{ return a * {k}.0f + h{}(a); }}\n", k - 1));
    }
    let source = file(&h, &format!("  x = h{}(x);", n - 1));
    assert!(source.len() > 2_000_000);
    let text = assert_translates(&source, LARGE_BOUND);
    assert_eq!(occurrences(&text, "kiln::rt::CallSite("), n, "one site per call");
}

#[test]
fn a_megabyte_of_statements_and_a_long_line_translate() {
    assert_translates(&file("", &"  x = x * 0.5f + (x < 1.0f ? x : 1.0f);\n".repeat(25_000)), LARGE_BOUND);
    assert_translates(&file("", &format!("  x = x{};", " + 1.0f".repeat(100_000))), LARGE_BOUND);
    let params: Vec<String> = (0..8_000).map(|k| format!("float a{k}")).collect();
    let wide = file(
        &format!("float wide({}) {{ return simd_sum(a0); }}", params.join(", ")),
        &format!("  x = wide({});", vec!["x"; 8_000].join(", ")),
    );
    assert_translates(&wide, LARGE_BOUND);
}

// ---- the other entry points ------------------------------------------------------------------

#[test]
fn body_kernels_and_libraries_report_the_limit_on_the_cpu() {
    let Some(device) = common::device_or_skip("cpu") else { return };
    let result = on_small_stack(move || {
        let body = format!("  out[0] = {}inp[0]{};", "(".repeat(30_000), ")".repeat(30_000));
        let kernel = MetalKernel::new("deep_body", &["inp"], &["out"], body).map_err(|e| e.to_string())?;
        let inp = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0]).map_err(|e| e.to_string())?;
        let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], kiln::DType::F32);
        let start = Instant::now();
        let r = kernel.call(&[common::on(device, &inp)], &spec);
        Ok::<_, String>((r, start.elapsed()))
    });
    let (r, took) = result.expect("set up the kernel");
    match r {
        Err(Error::Compile { kernel, log, .. }) => {
            assert_eq!(kernel, "deep_body");
            assert!(log.contains("the nesting of brackets exceeds kiln's limit of 256"), "{log}");
        }
        other => panic!("expected the limit, got {other:?}"),
    }
    assert!(took < BOUND, "took {took:?}");

    let (r, took) = on_small_stack(move || {
        let library = MetalLibrary::new("deep_file", if_parens(30_000));
        let launch = LibraryLaunch::new("k", Dispatch::Threads([1, 1, 1]), [1, 1, 1]);
        let start = Instant::now();
        let r = library.dispatch(
            device,
            &[LibraryArg::Output { shape: vec![1], dtype: kiln::DType::F32, init_value: None }],
            &launch,
        );
        (r, start.elapsed())
    });
    match r {
        Err(Error::Compile { kernel, log, .. }) => {
            assert_eq!(kernel, "deep_file:k");
            assert!(log.contains("line 3: the nesting of the `#if` expression exceeds"), "{log}");
        }
        other => panic!("expected the limit, got {other:?}"),
    }
    assert!(took < BOUND, "took {took:?}");
}

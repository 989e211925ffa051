//! The whole run path against malformed sources: the real kernels the tests hold (the golden
//! MLX specs, the sanitizer's specs, the library's and the gallery's `.metal` files) are
//! mutated deterministically from a seed (byte ranges deleted, duplicated and inserted, cuts at
//! every kind of token, `/*`, `"`, `{`, `#if`, non-ASCII and NUL characters inserted, text cut
//! short) and each mutant goes through what `kiln run` and `kiln translate` do: the spec file's
//! parse, MLX's source generation, the translation for host C++, CUDA and Metal, the lowering,
//! the entry contract and the launch's validation; a bounded number of the mutants that still
//! translate are compiled and run on the CPU. Every result must be `Ok` or an `Error`, never a
//! panic, within a few seconds. A failure lists each input that panicked or took too long,
//! written to a file to reproduce it.
//!
//! `mutants_of_the_test_kernels_never_panic` is the bounded sweep CI runs; the larger sweep
//! `many_mutants_of_the_test_kernels_never_panic`, which adds every program the demo runs (the
//! gallery and the library's kernels), is ignored (run it with `--ignored`).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Rng;
use kiln::backend::{translate, Dispatch, MetalProgram, Target};
use kiln::source::lower::{lower, LowerTarget};
use kiln::source::tokens::tokenize;
use kiln::{LibraryLaunch, MetalLibrary};
use kiln_tools::spec::KernelSpec;

/// How long translating and validating one mutant may take (a few milliseconds when healthy).
const TRANSLATE_BOUND: Duration = Duration::from_secs(5);
/// How long compiling and running one mutant may take on a loaded machine; the kernel itself is
/// stopped after [`RUN_TIMEOUT`].
const RUN_BOUND: Duration = Duration::from_secs(60);
const RUN_TIMEOUT: Duration = Duration::from_secs(5);

/// A kernel to mutate: the text the user wrote and where it goes.
struct Seed {
    name: String,
    text: String,
    home: Home,
    /// Whether its mutants may be run (the sanitizer's catalogue holds kernels that are wrong
    /// on purpose: they are translated only).
    may_run: bool,
}

enum Home {
    /// A string of a spec file (`table.key`: `kernel.source`, `kernel.header`,
    /// `library.source`), parsed again with the mutant in its place.
    Spec { path: PathBuf, spec: toml::Table, table: &'static str, key: &'static str },
    /// A whole `.metal` file and the function launched from it.
    File { function: String },
    /// A program a backend compiles (`text` is its source), as the demo made it.
    Program(MetalProgram),
}

/// The kernels the tests hold, in a fixed order.
fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let golden = common::test_data("golden/metal");
    let mut specs: Vec<PathBuf> = dir_entries(&golden).into_iter().map(|d| d.join("kernel.toml")).collect();
    specs.extend(dir_entries(&common::test_data("sanitizer_clean")));
    specs.extend(dir_entries(&common::test_data("sanitizer_catalogue")));
    for path in specs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml") && p.is_file()) {
        let may_run = !path.starts_with(common::test_data("sanitizer_catalogue"));
        let text = std::fs::read_to_string(&path).expect("read a spec");
        let mut spec: toml::Table = text.parse().expect("a spec is TOML");
        let name = path.strip_prefix(common::test_data("")).unwrap_or(&path).display().to_string();
        if let Some(library) = spec.get_mut("library").and_then(toml::Value::as_table_mut) {
            if let Some(file) = library.remove("source_file").and_then(|f| f.as_str().map(str::to_string)) {
                let source = path.parent().unwrap_or(Path::new(".")).join(file);
                library.insert("source".into(), std::fs::read_to_string(source).expect("read a source file").into());
            }
        }
        for (table, key) in [("kernel", "source"), ("kernel", "header"), ("library", "source")] {
            let Some(text) = spec.get(table).and_then(|t| t.get(key)).and_then(toml::Value::as_str) else { continue };
            let home = Home::Spec { path: path.clone(), spec: spec.clone(), table, key };
            seeds.push(Seed { name: format!("{name} {table}.{key}"), text: text.to_string(), home, may_run });
        }
    }
    for (name, text) in [
        ("ops/cholesky/blocked.metal", include_str!("../src/ops/cholesky/blocked.metal")),
        ("ops/qr/blocked.metal", include_str!("../src/ops/qr/blocked.metal")),
        ("gallery/gdn_kkt.metal", kiln_tools::gallery::gdn_kkt::SOURCE),
    ] {
        let function = first_function(text).expect("a kernel function");
        seeds.push(Seed { name: name.into(), text: text.into(), home: Home::File { function }, may_run: false });
    }
    seeds
}

/// The distinct programs the demo (the gallery and the library) runs, recorded on the CPU.
fn demo_seeds() -> Vec<Seed> {
    let (report, programs) = kiln::backend::cpu::record_programs(|| kiln_tools::gallery::run_demo(kiln::Device::Cpu));
    assert!(report.is_ok_and(|r| r.all_passed()), "the demo runs");
    let mut seen = std::collections::HashSet::new();
    let unique = programs.into_iter().filter(|p| seen.insert((p.function.clone(), p.source.clone())));
    unique
        .map(|p| Seed {
            name: format!("demo {}", p.kernel),
            text: p.source.clone(),
            home: Home::Program(p),
            may_run: false,
        })
        .collect()
}

fn dir_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("list test data").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    entries
}

/// The host name of the first instantiation in `text`, else its first `kernel void` function.
fn first_function(text: &str) -> Option<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    if let Some(at) = text.find("host_name(\"") {
        return Some(ident(&text[at + 11..]));
    }
    let at = text.find("kernel void ")?;
    Some(ident(text[at + 12..].trim_start()))
}

/// Text inserted into a kernel: what opens or closes something, starts a directive, or is not
/// ASCII, and pieces of Metal that the translator reads specially.
const INSERTS: &[&str] = &[
    "/*",
    "*/",
    "//",
    "\"",
    "'",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "[[",
    "]]",
    "<",
    ">",
    ">>",
    ";",
    ",",
    "#if 1\n",
    "#if 0\n",
    "#ifdef KILN_CUDA\n",
    "#else\n",
    "#elif 1\n",
    "#endif\n",
    "\n#define F(a, b) a ## b\n",
    "#define",
    "\n#",
    "##",
    "\\\n",
    "\0",
    "\u{7f}",
    "\u{e9}",
    "\u{2019}",
    "\u{feff}",
    "\u{2028}",
    "\u{1f980}",
    "\r",
    "\r\n",
    "\t",
    "::",
    "->",
    ".",
    "?",
    ":",
    "0x",
    "1e+",
    "1.0h",
    "'\\",
    "\"\\",
    "template <",
    "template <typename T>\n",
    "kernel void f(",
    "[[kernel]] ",
    "[[buffer(99)]]",
    "[[buffer(",
    "[[threadgroup(0)]]",
    "[[host_name(\"",
    "[[function_constant(0)]]",
    "[[max_total_threads_per_threadgroup(0)]]",
    "threadgroup float t[",
    "threadgroup float big[1 << 30];",
    "constant int c [[function_constant(",
    "device float* p [[buffer(0)]]",
    "simd_sum(",
    "threadgroup_barrier(mem_flags::mem_threadgroup);",
    "os_log_default.log(\"%d %s\", ",
    "static_cast<",
    "sizeof(",
    "as_type<",
    "decltype(",
    "using namespace metal;",
    "namespace {",
    "struct S {",
    "enum {",
    "auto l = [&](",
    "return;",
    "exit(1);",
    "#pragma unroll\n",
    "#include \"missing.h\"\n",
    "#error x\n",
    "#line 1\n",
    "__VA_ARGS__",
    "defined(",
    "thread_position_in_grid",
    "_shape",
    "_strides",
    "_ndim",
    "if (",
    "else",
    "for (;;)",
    "while (",
    "do {",
    "switch (x) { case 1:",
    "goto l;",
    "int a[",
    "vec<float, ",
    "float4(",
    ".xyzw",
    ".rgba = ",
    "half",
    "bfloat",
    "atomic_fetch_add_explicit(",
    "1/0",
    "-2147483648",
    "99999999999999999999999",
    "...",
    "operator",
    "this->",
    "~",
    "!",
    "&&",
    "||",
];

/// One mutation of `text`, described for the report.
fn mutate_once(text: &str, rng: &mut Rng) -> (String, String) {
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let pick = |rng: &mut Rng, n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    let at = |rng: &mut Rng| bounds[pick(rng, bounds.len())];
    let range = |rng: &mut Rng| {
        let i = pick(rng, bounds.len());
        let j = (i + 1 + pick(rng, 40)).min(bounds.len() - 1);
        (bounds[i], bounds[j])
    };
    let tokens = tokenize(text);
    let starts: Vec<usize> = tokens.iter().scan(0, |at, t| Some(std::mem::replace(at, *at + t.text.len()))).collect();
    match pick(rng, 9) {
        0 => {
            let (a, b) = range(rng);
            (format!("{}{}", &text[..a], &text[b..]), format!("delete {a}..{b}"))
        }
        1 => {
            let (a, b) = range(rng);
            let c = at(rng);
            (format!("{}{}{}", &text[..c], &text[a..b], &text[c..]), format!("copy {a}..{b} to {c}"))
        }
        2 | 3 => {
            let insert = INSERTS[pick(rng, INSERTS.len())];
            let c = at(rng);
            (format!("{}{insert}{}", &text[..c], &text[c..]), format!("insert {insert:?} at {c}"))
        }
        4 => {
            let c = at(rng);
            (text[..c].to_string(), format!("cut at {c}"))
        }
        5 if !tokens.is_empty() => {
            let k = pick(rng, tokens.len());
            let (a, b) = (starts[k], starts[k] + tokens[k].text.len());
            (format!("{}{}", &text[..a], &text[b..]), format!("delete token {:?} at {a}", tokens[k].text))
        }
        6 if !tokens.is_empty() => {
            let k = pick(rng, tokens.len());
            let c = at(rng);
            (
                format!("{}{}{}", &text[..c], tokens[k].text, &text[c..]),
                format!("insert token {:?} at {c}", tokens[k].text),
            )
        }
        7 if tokens.len() > 1 => {
            let (mut i, mut j) = (pick(rng, tokens.len()), pick(rng, tokens.len()));
            if i > j {
                std::mem::swap(&mut i, &mut j);
            }
            let mut parts: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
            parts.swap(i, j);
            (parts.concat(), format!("swap tokens {i} and {j}"))
        }
        _ => {
            let c = bounds[pick(rng, bounds.len().saturating_sub(1))];
            let len = text[c..].chars().next().map_or(0, char::len_utf8);
            let by = ["\0", "\u{1}", "\u{7f}", "\u{ff}", "\u{fffd}", "\u{10ffff}", "\n", "\\"][pick(rng, 8)];
            (format!("{}{by}{}", &text[..c], &text[c + len..]), format!("replace the character at {c} by {by:?}"))
        }
    }
}

/// The mutants of one seed: `random` of one to three random mutations each, then cuts at the
/// start, the middle and the end of one token of every kind.
fn mutants(seed: &Seed, seed_index: usize, random: usize, cuts: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for case in 0..random {
        let mut rng = Rng::new(((seed_index as u64) << 32) | case as u64);
        let (mut text, mut what) = (seed.text.clone(), Vec::new());
        for _ in 0..1 + rng.next_u64() % 3 {
            let (t, w) = mutate_once(&text, &mut rng);
            text = t;
            what.push(w);
        }
        out.push((text, format!("case {case}: {}", what.join(", then "))));
    }
    if cuts {
        let tokens = tokenize(&seed.text);
        let mut at = 0;
        let mut seen = Vec::new();
        let middle = tokens.len() / 2;
        for (k, t) in tokens.iter().enumerate() {
            let start = at;
            at += t.text.len();
            // A token of each kind from the middle of the text on (the start is boilerplate).
            if k < middle && tokens[middle..].iter().any(|u| u.kind == t.kind) || seen.contains(&t.kind) {
                continue;
            }
            seen.push(t.kind);
            let mid =
                (start..=at).find(|&i| i >= start + t.text.len() / 2 && seed.text.is_char_boundary(i)).unwrap_or(at);
            for (cut, place) in [(start, "start"), (mid, "middle"), (at, "end")] {
                out.push((
                    seed.text[..cut].to_string(),
                    format!("cut at the {place} of {:?} token {:?}", t.kind, t.text),
                ));
            }
        }
    }
    out
}

/// What happened to one mutant.
enum Outcome {
    /// Every step returned.
    Fine,
    /// A step panicked, with the panic's message.
    Panicked(String),
    /// A step took longer than its bound.
    Slow(Duration, Duration),
}

/// Runs `f` under `catch_unwind`, timed against `bound`.
fn guarded(bound: Duration, f: impl FnOnce()) -> Outcome {
    let start = Instant::now();
    match catch_unwind(AssertUnwindSafe(f)) {
        Err(payload) => Outcome::Panicked(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into()),
        ),
        Ok(()) if start.elapsed() > bound => Outcome::Slow(start.elapsed(), bound),
        Ok(()) => Outcome::Fine,
    }
}

/// Translation for every target and the lowering of `program`: whether host C++ came out.
fn translate_all(program: &MetalProgram) -> bool {
    let _ = translate(program, Target::Metal);
    let _ = translate(program, Target::Cuda);
    let _ = lower(program, LowerTarget::Cuda);
    let _ = lower(program, LowerTarget::Cpu);
    translate(program, Target::Cpu).is_ok()
}

/// The entry contract of `program`, read as a library's would be (a body kernel's generated
/// source is a whole file too).
fn contract(program: &MetalProgram) {
    let launch = LibraryLaunch::new(program.function.clone(), Dispatch::Threads([64, 1, 1]), [32, 1, 1]);
    let _ = MetalLibrary::new("fuzz", program.source.clone()).writable_buffers(&launch);
}

/// One mutant through the run path; a spec's mutant that translates is compiled and run on the
/// CPU only when `may_compile`. Returns whether it was.
fn run_mutant(seed: &Seed, text: &str, may_compile: bool) -> (Outcome, bool) {
    let mut translated = false;
    let mut spec_to_run = None;
    let outcome = guarded(TRANSLATE_BOUND, || match &seed.home {
        Home::Spec { path, spec, table, key } => {
            let mut spec = spec.clone();
            if let Some(t) = spec.get_mut(*table).and_then(toml::Value::as_table_mut) {
                t.insert((*key).into(), text.into());
            }
            let Ok(written) = toml::to_string(&spec) else { return };
            let Ok(parsed) = KernelSpec::parse(path, &written) else { return };
            let _ = parsed.warnings();
            for target in [Target::Metal, Target::Cuda, Target::Cpu] {
                let _ = parsed.translate(target);
            }
            if let Ok(program) = parsed.program() {
                translated = translate_all(&program);
                contract(&program);
            }
            spec_to_run = Some(parsed);
        }
        Home::File { function } => {
            let library = MetalLibrary::new("fuzz", text);
            let launch = LibraryLaunch::new(function.clone(), Dispatch::Threads([64, 1, 1]), [32, 1, 1]);
            let _ = library.writable_buffers(&launch);
            let _ = translate_all(&library.program(&launch));
        }
        Home::Program(program) => {
            let program = MetalProgram { source: text.to_string(), ..program.clone() };
            let _ = translate_all(&program);
            contract(&program);
        }
    });
    let Some(spec) = spec_to_run.filter(|_| matches!(outcome, Outcome::Fine)) else { return (outcome, false) };
    // A mutant that does not translate stops before the compiler: its launch is validated and
    // refused at no cost. One that translates costs a compile, so only a few run.
    if translated && !may_compile {
        return (outcome, false);
    }
    let bound = if translated { RUN_BOUND } else { TRANSLATE_BOUND };
    let spec = spec.with_timeout(RUN_TIMEOUT);
    let outcome = guarded(bound, || {
        let _ = spec.run(kiln::Device::Cpu);
    });
    (outcome, translated)
}

/// The error translating `seed` as written for host C++ or CUDA gives, if any: the checks that
/// refuse the mutants must let every real kernel through.
fn untranslatable(seed: &Seed) -> Option<String> {
    let program = match &seed.home {
        Home::Spec { path, spec, .. } => {
            let text = toml::to_string(spec).map_err(|e| e.to_string());
            match text.and_then(|t| KernelSpec::parse(path, &t).and_then(|s| s.program()).map_err(|e| e.to_string())) {
                Ok(program) => program,
                Err(e) => return Some(e),
            }
        }
        Home::File { function } => MetalLibrary::new("fuzz", seed.text.as_str()).program(&LibraryLaunch::new(
            function.clone(),
            Dispatch::Threads([64, 1, 1]),
            [32, 1, 1],
        )),
        Home::Program(program) => program.clone(),
    };
    [Target::Cpu, Target::Cuda].into_iter().find_map(|t| translate(&program, t).err().map(|e| format!("{t:?}: {e}")))
}

/// Runs `random` random mutants of every seed (and the token cuts when `cuts`), compiling and
/// running at most `runs` of them (spread over the seeds), and fails listing every mutant that
/// panicked or was slow.
fn sweep(seeds: Vec<Seed>, random: usize, cuts: bool, runs: usize) {
    assert!(seeds.len() >= 60, "only {} kernels to mutate", seeds.len());
    let refused: Vec<String> =
        seeds.iter().filter_map(|s| untranslatable(s).map(|e| format!("{}: {e}", s.name))).collect();
    assert!(refused.is_empty(), "kernels as written do not translate:\n{}", refused.join("\n"));
    let per_seed = runs.div_ceil(seeds.iter().filter(|s| s.may_run).count().max(1));
    let (mut cases, mut ran) = (0usize, 0usize);
    let mut failures = Vec::new();
    let start = Instant::now();
    let mut slowest = (Duration::ZERO, String::new());
    for (i, seed) in seeds.iter().enumerate() {
        let mut ran_here = 0;
        for (text, what) in mutants(seed, i, random, cuts) {
            cases += 1;
            let may_compile = seed.may_run && ran < runs && ran_here < per_seed;
            let began = Instant::now();
            let (outcome, compiled) = run_mutant(seed, &text, may_compile);
            if began.elapsed() > slowest.0 {
                slowest = (began.elapsed(), format!("{} ({what})", seed.name));
            }
            ran += usize::from(compiled);
            ran_here += usize::from(compiled);
            let problem = match outcome {
                Outcome::Fine => continue,
                Outcome::Panicked(msg) => format!("panicked: {msg}"),
                Outcome::Slow(took, bound) => format!("took {took:?} (bound {bound:?})"),
            };
            let file = std::env::temp_dir().join(format!("kiln-fuzz-{}-{}.metal", std::process::id(), failures.len()));
            let _ = std::fs::write(&file, &text);
            failures.push(format!("{} ({what}) {problem}\n    the input: {}", seed.name, file.display()));
        }
    }
    eprintln!(
        "{cases} mutants of {} kernels ({ran} compiled and run on the CPU) in {:?}; the slowest {:?}: {}",
        seeds.len(),
        start.elapsed(),
        slowest.0,
        slowest.1
    );
    assert!(failures.is_empty(), "{} of {cases} mutants failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn mutants_of_the_test_kernels_never_panic() {
    sweep(seeds(), 6, true, 4);
}

#[test]
#[ignore = "the larger sweep (minutes): run with --ignored"]
fn many_mutants_of_the_test_kernels_never_panic() {
    sweep(seeds().into_iter().chain(demo_seeds()).collect(), 300, true, 80);
}

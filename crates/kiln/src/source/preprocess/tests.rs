use super::lex::lex;
use super::*;

fn pp(src: &str) -> String {
    preprocess(src, &METAL_PREDEFINED).unwrap_or_else(|e| panic!("{e}\n---\n{src}"))
}

/// The significant tokens of `s`, for comparisons that ignore whitespace.
fn tokens(s: &str) -> Vec<String> {
    lex(s).into_iter().filter(|t| !t.is_blank()).map(|t| t.text).collect()
}

#[track_caller]
fn assert_same_tokens(got: &str, want: &str) {
    assert_eq!(tokens(got), tokens(want), "\n got: {got}\nwant: {want}");
}

#[test]
fn standard_example_of_rescanning() {
    // C11 6.10.3.5 EXAMPLE 3.
    let src = "#define x 3
#define f(a) f(x * (a))
#undef x
#define x 2
#define g f
#define z z[0]
#define h g(~
#define m(a) a(w)
#define w 0,1
#define t(a) a
#define p() int
#define q(x) x
#define r(x,y) x ## y
#define str(x) # x
f(y+1) + f(f(z)) % t(t(g)(0) + t)(1);
g(x+(3,4)-w) | h 5) & m
(f)^m(m);
p() i[q()] = { q(1), r(2,3), r(4,), r(,5), r(,) };
char c[2][6] = { str(hello), str() };
";
    let want = "f(2 * (y+1)) + f(2 * (f(2 * (z[0])))) % f(2 * (0)) + t(1);
f(2 * (2+(3,4)-0,1)) | f(2 * (~ 5)) & f(2 * (0,1))^m(0,1);
int i[] = { 1, 23, 4, 5, };
char c[2][6] = { \"hello\", \"\" };";
    let out = pp(src);
    assert_eq!(out.lines().count(), src.lines().count());
    assert_same_tokens(&out, want);
}

#[test]
fn standard_example_of_stringizing_and_pasting() {
    // C11 6.10.3.5 EXAMPLE 4.
    let src = r#"#define str(s) # s
#define xstr(s) str(s)
#define debug(s, t) printf("x" # s "= %d, x" # t "= %s", \
 x ## s, x ## t)
#define INCFILE(n) vers ## n
#define glue(a, b) a ## b
#define xglue(a, b) glue(a, b)
#define HIGHLOW "hello"
#define LOW LOW ", world"
debug(1, 2);
fputs(str(strncmp("abc\0d", "abc", '\4') // this goes away
 == 0) str(: @\n), s);
xstr(INCFILE(2).h)
glue(HIGH, LOW);
xglue(HIGH, LOW)
"#;
    let want = r#"printf("x" "1" "= %d, x" "2" "= %s", x1, x2);
fputs("strncmp(\"abc\\0d\", \"abc\", '\\4') == 0" ": @\n", s);
"vers2.h"
"hello";
"hello" ", world""#;
    let out = pp(src);
    assert_eq!(out.lines().count(), src.lines().count());
    assert_same_tokens(&out, want);
}

#[test]
fn standard_example_of_variadic_macros() {
    // C11 6.10.3.5 EXAMPLE 7, plus GNU named variable arguments and the `, ##` comma.
    let src = r#"#define debug(...) fprintf(stderr, __VA_ARGS__)
#define showlist(...) puts(#__VA_ARGS__)
#define report(test, ...) ((test)?puts(#test): printf(__VA_ARGS__))
#define named(fmt, args...) log(fmt, args)
#define opt(fmt, ...) log(fmt, ## __VA_ARGS__)
debug("Flag");
debug("X = %d\n", x);
showlist(The first, second, and third items.);
report(x>y, "x is %d but y is %d", x, y);
named("a", 1, 2); opt("b"); opt("c", 3);
"#;
    let want = r#"fprintf(stderr, "Flag");
fprintf(stderr, "X = %d\n", x);
puts("The first, second, and third items.");
((x>y)?puts("x>y"): printf("x is %d but y is %d", x, y));
log("a", 1, 2); log("b"); log("c", 3);"#;
    assert_same_tokens(&pp(src), want);
}

#[test]
fn mlx_instantiation_macro_makes_instantiations() {
    let src = "#define instantiate_kernel(name, func, ...) \\
  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
instantiate_kernel(\"rowsum_float_4\", rowsum, float, 4, true)
";
    let out = pp(src);
    assert_eq!(out.lines().nth(2), Some(
        "template [[host_name(\"rowsum_float_4\")]] [[kernel]] decltype(rowsum<float, 4, true>) rowsum<float, 4, true>;"
    ), "{out}");
}

#[test]
fn inactive_branches_and_directives_leave_empty_lines() {
    let src = "#define V2 0\n#if V2\nkernel void k(int a);\n#elif defined(V2) && __METAL_VERSION__ >= 310\nkernel void k(float b);\n#else\nkernel void k(char c);\n#endif\n#if 0\n#error not here\n#if garbage (\n#endif\n#endif\nend\n";
    let out = pp(src);
    assert_eq!(out, "\n\n\n\nkernel void k(float b);\n\n\n\n\n\n\n\n\nend\n");
}

#[test]
fn invocations_over_several_lines_keep_the_line_count() {
    let src = "#define ADD(a, b) \\\n  ((a) + (b))\nint x = ADD(1,\n  2) * 3; int y = /* c\n */ ADD(x, x);\nnext\n";
    let out = pp(src);
    assert_eq!(out.lines().count(), src.lines().count());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[2], "int x = ((1) + (2))");
    assert_eq!(lines[3].trim_start(), "* 3; int y = /* c");
    assert_eq!(lines[4], " */ ((x) + (x));");
    assert_eq!(lines[5], "next");
}

#[test]
fn macros_do_not_expand_themselves_and_text_is_kept() {
    let src = "#define foo foo + 1\n#define SWZ(v) v.wzyx\nint a = foo; // foo stays in comments\nfloat4 r = SWZ(v); \"SWZ(v)\"\n";
    let out = pp(src);
    assert_eq!(out, "\n\nint a = foo + 1; // foo stays in comments\nfloat4 r = v.wzyx; \"SWZ(v)\"\n");
}

#[test]
fn target_macro_conditions_are_left_to_the_compiler() {
    let src = "#define USER 1\n#if defined(KILN_CUDA) && USER\ncuda();\n#elif defined(USER)\nhost();\n#else\nnever();\n#endif\n#ifdef __CUDA_ARCH__\na();\n#endif\n";
    let out = pp(src);
    assert_eq!(out, "\n#if defined(KILN_CUDA) && 1\ncuda();\n#else\nhost();\n\n\n#endif\n#if defined(__CUDA_ARCH__)\na();\n#endif\n");
    let err = preprocess("#if KILN_CUDA\n#define X 1\n#endif\n", &[]).unwrap_err();
    assert!(err.contains("line 2") && err.contains("#define"), "{err}");
}

#[test]
fn predefined_and_pragma_unroll_and_includes() {
    let src = "#include <metal_stdlib>\n#define N 4\n#pragma unroll N\nint v = __METAL_VERSION__ + __HAVE_BFLOAT__;\n#pragma once\n";
    assert_eq!(pp(src), "#include <metal_stdlib>\n\n#pragma unroll 4\nint v = 310 + 1;\n#pragma once\n");
    let fast = preprocess("#ifdef __FAST_MATH__\nfast\n#endif\n", &[("__FAST_MATH__", "1")]).unwrap();
    assert_eq!(fast, "\nfast\n\n");
}

#[test]
fn errors_name_the_line() {
    for (src, needle) in [
        ("a\n#if 1\nb\n", "line 2: `#if` without `#endif`"),
        ("#endif\n", "line 1: `#endif` without `#if`"),
        ("#if 1\n#else\n#else\n#endif\n", "line 3"),
        ("\n#error stop here\n", "line 2: #error stop here"),
        ("#define F(a, b) a\nF(1)\n", "line 2: macro `F` takes 2 arguments, but 1 were given"),
        ("#define F(a) a\nF(1\n", "line 2: unterminated invocation of macro `F`"),
        ("#define P(a, b) a ## b\nP(+, /)\n", "pasting `+` and `/`"),
        ("#if 1 +\n#endif\n", "line 1"),
        ("a\nb /* c\n d\n", "line 2, column 3: this `/*` comment is never closed"),
        ("#if 0\n/* c\n#endif\n", "line 2, column 1: this `/*` comment is never closed"),
        ("/* a */ x = \"/*\";\n#define C 1 /* c\n", "line 2, column 13: this `/*` comment is never closed"),
    ] {
        let err = preprocess(src, &[]).unwrap_err();
        assert!(err.contains(needle), "{src:?}: {err}");
    }
}

/// A fresh directory with `files` (path, text) in it.
fn tree(tag: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-include-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn includes_are_pasted_under_line_directives_each_once_with_pragma_once() {
    let dir = tree(
        "paste",
        &[
            ("lib/utils.h", "#pragma once\n#include \"defs.h\"\ninline int twice(int x) { return 2 * x; }\n"),
            ("lib/defs.h", "#pragma once\n#define N 4\n"),
            ("inc/mlx/k/ops.h", "#include <metal_stdlib>\nint ops = N;\n"),
        ],
    );
    let paths = IncludePaths { file_dir: Some(dir.join("lib")), dirs: vec![dir.join("inc")] };
    let src = "#include \"utils.h\"\n#include \"utils.h\"\n#include <mlx/k/ops.h>\nint k = twice(N);\n";
    let out = resolve_includes("main.metal", src, &METAL_PREDEFINED, &paths).unwrap();
    assert_eq!(
        out,
        "#line 1 \"utils.h\"\n\n#line 1 \"defs.h\"\n\n#define N 4\n#line 3 \"utils.h\"\ninline int twice(int x) { return 2 * x; }\n\
         #line 2 \"main.metal\"\n\n#line 1 \"mlx/k/ops.h\"\n#include <metal_stdlib>\nint ops = N;\n#line 4 \"main.metal\"\n\
         int k = twice(N);\n"
    );
    assert_eq!(pp(&out).matches("twice").count(), 2, "the header's text comes once");
    // Without includes of its own a program is returned as it is.
    let plain = "#include <metal_stdlib>\nint x;\n";
    assert_eq!(resolve_includes("p.metal", plain, &METAL_PREDEFINED, &paths).unwrap(), plain);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn includes_follow_conditions_and_unknown_ones_name_their_line() {
    let dir = tree("cond", &[("a.h", "int a;\n")]);
    let paths = IncludePaths { file_dir: Some(dir.clone()), dirs: Vec::new() };
    let src = "#ifdef MISSING\n#include \"missing.h\"\n#else\n#include \"a.h\"\n#endif\n";
    let out = resolve_includes("m.metal", src, &METAL_PREDEFINED, &paths).unwrap();
    assert!(out.contains("int a;") && !out.contains("missing.h\"\n#line"), "{out}");
    let err = resolve_includes("m.metal", "int x;\n#include \"nope.h\"\n", &METAL_PREDEFINED, &paths).unwrap_err();
    assert!(err.starts_with("line 2: `#include \"nope.h\"`: no such header (searched "), "{err}");
    let nested = tree("nested", &[("b.h", "\n\n#include \"gone.h\"\n")]);
    let paths = IncludePaths { file_dir: Some(nested.clone()), dirs: Vec::new() };
    let err = resolve_includes("m.metal", "#include \"b.h\"\n", &METAL_PREDEFINED, &paths).unwrap_err();
    assert!(err.starts_with("b.h: line 3: `#include \"gone.h\"`"), "{err}");
    let err =
        resolve_includes("m.metal", "#include <x/y.h>\n", &METAL_PREDEFINED, &IncludePaths::default()).unwrap_err();
    assert!(err.contains("no include directories are given"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(nested);
}

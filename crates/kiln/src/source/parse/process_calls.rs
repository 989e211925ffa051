//! Calls no kernel may make: those that end, signal or replace the process that runs it, or
//! leave the kernel other than by returning. On the CPU a kernel runs as host code inside the
//! caller's own process (a Python interpreter, the CLI), where libc's `exit` really ends it;
//! on CUDA a device trap takes the context down with it. Metal has none of them, so a program
//! that calls one is refused on every target, with the call and its line.
//!
//! The check reads the preprocessed tokens, so a macro of such a name has been expanded away
//! and one that expands to such a call is seen. A name is refused only where it resolves to
//! nothing the program defines: members (`s.kill()`), names under the program's own
//! namespaces or classes (`ns::raise(x)`) and names the program defines (a helper
//! `float raise(float)`, a variable holding a lambda, a struct) are the program's. A mere
//! declaration (`extern "C" int fork();`) defines nothing: the call would link to libc's.
//!
//! `__builtin_unreachable` is not refused: reaching it is undefined behaviour, as reading past
//! a buffer is, not a request to end the process, and kernels use it as a hint to the
//! optimiser. Inline assembly is refused outside a `#if` on the target compiler's own macros
//! (Metal has none; kiln's library kernels write PTX inside such groups).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::program::is_function_qualifier;
use crate::source::cursor::{directive_name, Cursor};
use crate::source::tokens::Kind;

const ENDS: &str = "ends the process that runs the kernel";
const THREAD: &str = "ends the thread that runs the kernel";
const SIGNALS: &str = "sends a signal to the process that runs the kernel";
const HANDLERS: &str = "changes how the process that runs the kernel handles signals";
const HOOKS: &str = "installs code to run when the process that runs the kernel ends";
const PROCESS: &str = "starts or replaces a process";
const JUMPS: &str = "jumps across the kernel's frames, past its return";
const THROWS: &str = "throws an exception, which Metal does not have";
const SYSCALL: &str = "makes a system call";

/// Every refused function (called unqualified, as `std::NAME` or as `::NAME`) and what a call
/// does: the C and C++ libraries', POSIX's and glibc's, the compilers' builtins and CUDA's
/// device traps. The CPU prelude's headers (`stdlib.h`, `signal.h`, `setjmp.h`, `pthread.h`,
/// `ucontext.h`, and `unistd.h` through them) declare most of them; NVRTC declares `__trap`,
/// `__brkpt`, `assert` and `__assertfail`; the rest link once a program declares them.
const REFUSED: &[(&str, &str)] = &[
    ("exit", ENDS),
    ("_exit", ENDS),
    ("_Exit", ENDS),
    ("quick_exit", ENDS),
    ("abort", ENDS),
    ("terminate", ENDS),
    ("unexpected", ENDS),
    ("assert", ENDS),
    ("err", ENDS),
    ("errx", ENDS),
    ("verr", ENDS),
    ("verrx", ENDS),
    ("error", ENDS),
    ("error_at_line", ENDS),
    ("__assert", ENDS),
    ("__assert_fail", ENDS),
    ("__assert_perror_fail", ENDS),
    ("__assert_rtn", ENDS),
    ("__assertfail", ENDS),
    ("__stack_chk_fail", ENDS),
    ("__chk_fail", ENDS),
    ("__builtin_abort", ENDS),
    ("__builtin_exit", ENDS),
    ("__builtin__exit", ENDS),
    ("__builtin__Exit", ENDS),
    ("__builtin_trap", ENDS),
    ("__builtin_debugtrap", ENDS),
    ("__builtin_verbose_trap", ENDS),
    ("__trap", ENDS),
    ("__brkpt", ENDS),
    ("pthread_exit", THREAD),
    ("pthread_cancel", THREAD),
    ("thrd_exit", THREAD),
    ("raise", SIGNALS),
    ("gsignal", SIGNALS),
    ("kill", SIGNALS),
    ("killpg", SIGNALS),
    ("tgkill", SIGNALS),
    ("tkill", SIGNALS),
    ("pthread_kill", SIGNALS),
    ("sigqueue", SIGNALS),
    ("pthread_sigqueue", SIGNALS),
    ("pidfd_send_signal", SIGNALS),
    ("alarm", SIGNALS),
    ("ualarm", SIGNALS),
    ("setitimer", SIGNALS),
    ("timer_create", SIGNALS),
    ("signal", HANDLERS),
    ("sigaction", HANDLERS),
    ("sigset", HANDLERS),
    ("sigignore", HANDLERS),
    ("sighold", HANDLERS),
    ("sigrelse", HANDLERS),
    ("bsd_signal", HANDLERS),
    ("sysv_signal", HANDLERS),
    ("__sysv_signal", HANDLERS),
    ("ssignal", HANDLERS),
    ("siginterrupt", HANDLERS),
    ("sigblock", HANDLERS),
    ("sigsetmask", HANDLERS),
    ("sigstack", HANDLERS),
    ("sigreturn", HANDLERS),
    ("sigpause", HANDLERS),
    ("sigprocmask", HANDLERS),
    ("pthread_sigmask", HANDLERS),
    ("sigaltstack", HANDLERS),
    ("sigsuspend", HANDLERS),
    ("sigwait", HANDLERS),
    ("sigwaitinfo", HANDLERS),
    ("sigtimedwait", HANDLERS),
    ("pause", HANDLERS),
    ("atexit", HOOKS),
    ("at_quick_exit", HOOKS),
    ("on_exit", HOOKS),
    ("__cxa_atexit", HOOKS),
    ("set_terminate", HOOKS),
    ("set_unexpected", HOOKS),
    ("pthread_atfork", HOOKS),
    ("system", PROCESS),
    ("popen", PROCESS),
    ("fork", PROCESS),
    ("vfork", PROCESS),
    ("_Fork", PROCESS),
    ("clone", PROCESS),
    ("clone3", PROCESS),
    ("daemon", PROCESS),
    ("posix_spawn", PROCESS),
    ("posix_spawnp", PROCESS),
    ("execl", PROCESS),
    ("execle", PROCESS),
    ("execlp", PROCESS),
    ("execv", PROCESS),
    ("execve", PROCESS),
    ("execveat", PROCESS),
    ("execvp", PROCESS),
    ("execvpe", PROCESS),
    ("fexecve", PROCESS),
    ("longjmp", JUMPS),
    ("_longjmp", JUMPS),
    ("siglongjmp", JUMPS),
    ("setjmp", JUMPS),
    ("_setjmp", JUMPS),
    ("sigsetjmp", JUMPS),
    ("__sigsetjmp", JUMPS),
    ("__builtin_longjmp", JUMPS),
    ("__builtin_setjmp", JUMPS),
    ("__builtin_eh_return", JUMPS),
    ("setcontext", JUMPS),
    ("swapcontext", JUMPS),
    ("makecontext", JUMPS),
    ("getcontext", JUMPS),
    ("_Unwind_RaiseException", THROWS),
    ("_Unwind_Resume", THROWS),
    ("_Unwind_ForcedUnwind", THROWS),
    ("__cxa_throw", THROWS),
    ("__cxa_rethrow", THROWS),
    ("rethrow_exception", THROWS),
    ("throw_with_nested", THROWS),
    ("rethrow_if_nested", THROWS),
    ("syscall", SYSCALL),
];

/// Words after which a name is an expression, not a declared name.
const EXPRESSION_KEYWORDS: &[&str] = &[
    "return",
    "else",
    "do",
    "case",
    "throw",
    "new",
    "delete",
    "sizeof",
    "alignof",
    "typeid",
    "goto",
    "co_return",
    "co_yield",
    "co_await",
    "and",
    "or",
    "not",
    "xor",
    "bitand",
    "bitor",
    "compl",
    "not_eq",
    "and_eq",
    "or_eq",
    "xor_eq",
];

/// Refuses the first refused call, `throw`, `try` or inline assembly in `src` (a preprocessed
/// program), naming its line and column.
pub(super) fn check(src: &Cursor) -> Result<(), String> {
    let defined = defined_names(src);
    // How deep the tokens stand in `#if` groups left to the target compiler.
    let mut target_groups = 0usize;
    for k in 0..src.len() {
        let t = src.tok(k);
        if t.kind == Kind::Preproc {
            match directive_name(&t.text) {
                "if" | "ifdef" | "ifndef" => target_groups += 1,
                "endif" => target_groups = target_groups.saturating_sub(1),
                _ => {}
            }
            continue;
        }
        if t.kind != Kind::Ident {
            continue;
        }
        let refused = match t.text.as_str() {
            // `throw()` after a declarator is an exception specification, which throws nothing.
            "throw" if !(src.is(k + 1, "(") && src.is(k + 2, ")")) => THROWS,
            "try" => "starts an exception handler, which Metal does not have (it would catch the emulator's own unwinding)",
            "asm" | "__asm" | "__asm__" if target_groups == 0 => {
                "runs inline assembly, which Metal does not have (kiln allows it only inside a `#if` on the target compiler's macros)"
            }
            name => match reason(name) {
                Some(reason) if refers_to_library(src, k, &defined) => reason,
                _ => continue,
            },
        };
        let shown = if k >= 2 && src.is(k - 1, "::") && src.is(k - 2, "std") {
            format!("std::{}", t.text)
        } else {
            t.text.clone()
        };
        return Err(format!("line {}, column {}: `{shown}` {refused}; a kernel cannot use it", t.line, src.column(k)));
    }
    Ok(())
}

/// What a call of `name` does, when it is refused.
fn reason(name: &str) -> Option<&'static str> {
    static BY_NAME: OnceLock<HashMap<&str, &str>> = OnceLock::new();
    BY_NAME.get_or_init(|| REFUSED.iter().copied().collect()).get(name).copied()
}

/// Whether the refused name at `k` names the library's function: called or named as `std::`
/// or `::`, and not a member, a name under the program's own scope or one it defines.
fn refers_to_library(src: &Cursor, k: usize, defined: &HashSet<&str>) -> bool {
    let prev = |s: &str| k >= 1 && src.is(k - 1, s);
    if prev(".") || prev("->") || prev(".*") || prev("->*") {
        return false;
    }
    if prev("::") {
        let scope = (k >= 2).then(|| src.tok(k - 2)).filter(|t| t.kind == Kind::Ident || t.is(">"));
        return match scope {
            Some(t) if t.is("std") => true,
            Some(_) => false,
            None => !defined.contains(src.tok(k).text.as_str()),
        };
    }
    src.is(k + 1, "(") && !declares(src, k) && !defined.contains(src.tok(k).text.as_str())
}

/// The refused names the program defines: as a function with a body, a variable, a member, a
/// parameter or a type.
fn defined_names(src: &Cursor) -> HashSet<&str> {
    let mut names = HashSet::new();
    for k in 0..src.len() {
        let t = src.tok(k);
        if t.kind == Kind::Ident && reason(&t.text).is_some() && declares(src, k) && !names.contains(t.text.as_str()) {
            let defines = if src.is(k + 1, "(") {
                is_definition(src, k)
            } else {
                [";", "=", "{", "[", ",", ")", ":"].iter().any(|s| src.is(k + 1, s))
            };
            if defines {
                names.insert(t.text.as_str());
            }
        }
    }
    names
}

/// Whether the name at `k` stands where a declaration names what it declares: after a type
/// word, or after `*`, `&`, `>` or a scope of the program's own when a body follows.
fn declares(src: &Cursor, k: usize) -> bool {
    let Some(prev) = k.checked_sub(1).map(|p| src.tok(p)) else { return false };
    if prev.kind == Kind::Ident {
        return !EXPRESSION_KEYWORDS.contains(&prev.text.as_str());
    }
    // A function pointer: `float (*signal)(float)`.
    if prev.is("*") && k >= 2 && src.is(k - 2, "(") && src.is(k + 1, ")") {
        return true;
    }
    let scoped = prev.is("::") && k >= 2 && src.ident(k - 2) && !src.is(k - 2, "std");
    (scoped || ["*", "&", "&&", ">"].iter().any(|s| prev.is(s))) && is_definition(src, k)
}

/// Whether the name at `k` is followed by a parameter list and a function body.
fn is_definition(src: &Cursor, k: usize) -> bool {
    let Some(close) = src.matching(k + 1).filter(|_| src.is(k + 1, "(")) else { return false };
    // Qualifiers, attributes, `noexcept(...)` and a trailing return type may come between.
    let mut j = close + 1;
    while j < src.len() && j < close + 64 {
        let t = src.tok(j);
        if t.is("{") {
            return true;
        }
        let between = t.kind == Kind::Attr
            || (t.kind == Kind::Ident
                && (is_function_qualifier(&t.text) || src.is(j - 1, "->") || src.is(j - 1, "::")))
            || ["&", "&&", "->", "::", "*"].iter().any(|s| t.is(s));
        if t.is("(") && src.is(j - 1, "noexcept") {
            match src.matching(j) {
                Some(c) => j = c + 1,
                None => return false,
            }
            continue;
        }
        if !between {
            return false;
        }
        j += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(src: &str) -> Result<(), String> {
        check(&Cursor::new(src))
    }

    #[test]
    fn process_ending_calls_are_refused_with_their_line_and_column() {
        for (src, want) in [
            ("void k() {\n  exit(7);\n}", "line 2, column 3: `exit` ends the process"),
            ("void k() { if (x) abort(); }", "line 1, column 19: `abort` ends"),
            ("void k() { std::terminate(); }", "`std::terminate` ends"),
            ("void k() { ::_exit(0); }", "`_exit` ends"),
            ("void k() { return __builtin_trap(); }", "`__builtin_trap` ends"),
            ("void k() { raise(11); }", "`raise` sends a signal"),
            ("void k() { signal(11, h); }", "`signal` changes how"),
            ("void k() { atexit(f); }", "`atexit` installs code"),
            ("void k() { system(\"ls\"); }", "`system` starts or replaces a process"),
            ("void k() { execvp(a, b); }", "`execvp` starts"),
            ("void k() { longjmp(env, 1); }", "`longjmp` jumps"),
            ("void k() { y = 2 * exit(1); }", "`exit` ends"),
            ("void k() { else_ = x; } void g() { else exit(1); }", "`exit` ends"),
            ("extern \"C\" int fork();\nvoid k() { fork(); }", "line 2, column 12: `fork` starts"),
            ("void k() { auto f = &std::exit; }", "`std::exit` ends"),
            ("void k() { throw 1; }", "`throw` throws an exception"),
            ("void k() { try { x(); } catch (...) {} }", "`try` starts an exception handler"),
            ("void k() { asm(\"int3\"); }", "`asm` runs inline assembly"),
        ] {
            let err = checked(src).expect_err(src);
            assert!(err.contains(want), "{src:?}: {err}");
            assert!(err.ends_with("; a kernel cannot use it"), "{err}");
        }
    }

    #[test]
    fn every_name_of_the_table_is_refused_as_a_call_and_left_alone_as_a_member_or_a_definition() {
        for (name, reason) in REFUSED {
            let err = checked(&format!("void k() {{ {name}(0); }}")).expect_err(name);
            assert_eq!(err, format!("line 1, column 12: `{name}` {reason}; a kernel cannot use it"));
            assert!(checked(&format!("void k() {{ std::{name}(0); }}")).is_err(), "std::{name}");
            assert_eq!(checked(&format!("void k(S s) {{ s.{name}(0); }}")), Ok(()), "s.{name}");
            let own = format!("int {name}(int v) {{ return v; }}\nvoid k() {{ {name}(0); }}");
            assert_eq!(checked(&own), Ok(()), "{own}");
        }
    }

    #[test]
    fn the_programs_own_functions_members_and_names_of_those_names_are_not_refused() {
        for src in [
            "float raise(float x) { return x * 2; }\nvoid k() { y = raise(y); }",
            "struct S { void kill() {} void f() { kill(); } };\nvoid k(S s) { s.kill(); }",
            "void k(thread S* s) { s->abort(); }",
            "namespace ns { int exit(int c) { return c; } }\nvoid k() { ns::exit(1); }",
            "void k() { auto signal = [](int v) { return v; }; y = signal(3); }",
            "template <typename T> T terminate(T v) { return v; }\nvoid k() { terminate(1.0f); }",
            "inline float& system(thread float& v) noexcept { return v; }\nvoid k() { system(y); }",
            "struct abort { int a; };\nvoid k() { auto a = abort(); }",
            "void k() { int kill = 3; y = kill + 1; }",
            "float apply(float (*signal)(float), float v) { return signal(v); }",
            "void f() throw() {}\n",
            "void k() { __builtin_unreachable(); }",
            "#if defined(KILN_CUDA)\nvoid k() { asm volatile(\"trap;\"); }\n#endif\n",
            "void k() { y = exit_code(1) + my_abort(); }",
        ] {
            assert_eq!(checked(src), Ok(()), "{src:?}");
        }
    }
}

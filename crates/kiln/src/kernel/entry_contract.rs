//! What a launch of one Metal kernel entry must satisfy, read once per program from its Metal
//! text, so that a launch Metal would refuse fails with an error naming the kernel instead of
//! running with a wrong answer or faulting:
//!
//! - every `[[buffer(n)]]` parameter has a binding, every `[[threadgroup(n)]]` parameter a
//!   size in the launch's threadgroup memory;
//! - a threadgroup has at most the threads of the kernel's
//!   `[[max_total_threads_per_threadgroup(N)]]`;
//! - the kernel's `threadgroup` declarations plus the dynamic threadgroup memory it is given
//!   (each buffer rounded up to 16 bytes) fit Metal's 32 KiB per threadgroup. Declarations
//!   whose size cannot be told before compiling (a struct type, say) are not counted here;
//!   the CUDA backend then checks the compiled kernel's static shared memory;
//! - function constants follow Metal's rules (`function_constants.rs`).
//!
//! The limits are Metal's, so they hold for `MetalKernel` and `MetalLibrary` on every backend;
//! `CudaKernel` code is CUDA and keeps CUDA's limits.

use super::function_constants;
use crate::error::{Error, Result};
use crate::program::{MetalProgram, MAX_THREADGROUP_MEMORY};
use crate::source::parse::{first_declarator, split_args, AddressSpace, EntryParam, Outline, ParseSlot, Scope};
use crate::source::tokens::{tokenize, Kind, Token};

/// Bytes of a kernel's own `threadgroup` declarations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StaticThreadgroup {
    /// The declarations whose size is known.
    pub bytes: u64,
    /// Whether every declaration's size is known.
    pub complete: bool,
}

/// The launch requirements of one entry of one program.
#[derive(Clone, Debug)]
pub(crate) struct EntryContract {
    /// The entry's host name.
    function: String,
    params: Vec<EntryParam>,
    max_total_threads: Option<u64>,
    static_threadgroup: StaticThreadgroup,
}

impl EntryContract {
    /// The contract of `program`'s entry, read from its parse (kept in `parse` for the
    /// program's lowering), after checking its function constants (errors name `op`). `None`
    /// when the program does not parse or has no such entry: compiling it fails with the
    /// backend's own message.
    pub(crate) fn of(op: &str, program: &MetalProgram, parse: &ParseSlot) -> Result<Option<EntryContract>> {
        let Ok(parsed) = parse.parse(program) else { return Ok(None) };
        let Some(entry) = parsed.entry(&program.function) else { return Ok(None) };
        // The preprocessed program's outline: a macro reaches what it expands to where it is
        // used (ggml's file defines `K`, `NSG` and `FC_OP` for one kernel and #undefs them).
        let (outline, _) = parsed.outline();
        let (base, args) = split_callee(&entry.callee);
        let item = outline.function(&base);
        let mut params = entry.params.clone();
        if let Some(item) = item {
            let reach = outline.reach(item);
            function_constants::check(op, &entry.host_name, outline, &reach, &program.constants)?;
            let absent = function_constants::absent_params(outline, item, &program.constants);
            params.retain(|p| match p {
                EntryParam::Buffer { name, .. } | EntryParam::Threadgroup { name, .. } => !absent.contains(name),
                EntryParam::Builtin { .. } => true,
            });
        }
        let (max_total_threads, static_threadgroup) = match item {
            Some(item) => {
                let scope = Scope::new(outline, item, &args);
                (max_total_threads(outline, item, &scope), static_threadgroup(outline, item, &scope))
            }
            None => (None, StaticThreadgroup { bytes: 0, complete: false }),
        };
        Ok(Some(EntryContract { function: entry.host_name.clone(), params, max_total_threads, static_threadgroup }))
    }

    /// Checks one launch: `threadgroup` is the size that runs (after clamping to the grid),
    /// `n_bindings` the buffer slots bound in order, `threadgroup_memory` the bytes of each
    /// `[[threadgroup(n)]]` buffer.
    pub fn check(
        &self,
        op: &str,
        threadgroup: [u32; 3],
        n_bindings: usize,
        threadgroup_memory: &[usize],
    ) -> Result<()> {
        let f = &self.function;
        let mut dynamic = 0usize;
        for p in &self.params {
            match p {
                EntryParam::Buffer { name, index, .. } if *index as usize >= n_bindings => {
                    let bound = match n_bindings {
                        0 => "binds no buffers".to_string(),
                        1 => "binds 1 buffer ([[buffer(0)]])".to_string(),
                        n => format!("binds {n} buffers ([[buffer(0)]] to [[buffer({})]])", n - 1),
                    };
                    return Err(Error::invalid(
                        op,
                        format!("kernel {f}: parameter `{name}` [[buffer({index})]] is missing a buffer: the launch {bound}"),
                    ));
                }
                EntryParam::Threadgroup { name, index, .. } => match threadgroup_memory.get(*index as usize) {
                    Some(&bytes) => dynamic += bytes.div_ceil(16) * 16,
                    None => {
                        return Err(Error::invalid(
                            op,
                            format!(
                                "kernel {f}: parameter `{name}` [[threadgroup({index})]] has no threadgroup memory: \
                                 threadgroup_memory gives the bytes of {} threadgroup buffers; give one size per \
                                 [[threadgroup(n)]] parameter, in index order",
                                threadgroup_memory.len()
                            ),
                        ));
                    }
                },
                _ => {}
            }
        }
        if let Some(max) = self.max_total_threads {
            let threads: u64 = threadgroup.iter().map(|&t| u64::from(t)).product();
            if threads > max {
                return Err(Error::invalid(
                    op,
                    format!(
                        "kernel {f} declares [[max_total_threads_per_threadgroup({max})]] but runs threadgroups of \
                         {threads} threads {threadgroup:?}"
                    ),
                ));
            }
        }
        let fixed = self.static_threadgroup.bytes;
        let total = fixed.saturating_add(dynamic as u64);
        if total > MAX_THREADGROUP_MEMORY as u64 {
            return Err(Error::invalid(
                op,
                format!(
                    "kernel {f} uses {total} bytes of threadgroup memory ({fixed} declared in the kernel + {dynamic} \
                     bound by threadgroup_memory); Metal allows at most {MAX_THREADGROUP_MEMORY} bytes (32 KiB) per \
                     threadgroup"
                ),
            ));
        }
        Ok(())
    }

    /// The `[[buffer(n)]]` parameters the kernel may write: `device`, not `const`.
    pub fn writable_buffers(&self) -> Vec<(u32, String)> {
        let mut out: Vec<(u32, String)> = self
            .params
            .iter()
            .filter_map(|p| match p {
                EntryParam::Buffer { name, index, space: AddressSpace::Device, is_const: false, .. } => {
                    Some((*index, name.clone()))
                }
                _ => None,
            })
            .collect();
        out.sort();
        out
    }

    /// The bytes of the kernel's own `threadgroup` declarations.
    #[cfg(test)]
    pub fn static_threadgroup(&self) -> StaticThreadgroup {
        self.static_threadgroup
    }
}

/// `ns::name<A, B>` → (`name`, [A, B]).
fn split_callee(callee: &str) -> (String, Vec<Vec<Token>>) {
    let toks: Vec<Token> = tokenize(callee).into_iter().filter(|t| !t.is_trivia()).collect();
    let open = toks.iter().position(|t| t.is("<")).unwrap_or(toks.len());
    let base = toks[..open].iter().rev().find(|t| t.kind == Kind::Ident).map(|t| t.text.clone()).unwrap_or_default();
    let args = match toks.get(open + 1..toks.len().saturating_sub(1)) {
        Some(inner) if toks.last().is_some_and(|t| t.is(">")) => split_args(&inner.iter().collect::<Vec<_>>()),
        _ => Vec::new(),
    };
    (base, args)
}

/// The `N` of the kernel's `[[max_total_threads_per_threadgroup(N)]]`.
fn max_total_threads(outline: &Outline, item: usize, scope: &Scope<'_>) -> Option<u64> {
    let f = outline.items[item].function.as_ref()?;
    let attr = f.attrs.iter().find_map(|a| a.strip_prefix("max_total_threads_per_threadgroup"))?;
    let inner = attr.trim().strip_prefix('(')?.strip_suffix(')')?;
    let toks: Vec<Token> = tokenize(inner).into_iter().filter(|t| !t.is_trivia()).collect();
    scope.eval(&toks).and_then(|n| u64::try_from(n).ok())
}

/// Sums the `threadgroup T name[e1][e2]...;` declarations of the kernel's body.
fn static_threadgroup(outline: &Outline, item: usize, scope: &Scope<'_>) -> StaticThreadgroup {
    let mut out = StaticThreadgroup { bytes: 0, complete: true };
    let Some(f) = outline.items[item].function.as_ref() else {
        return StaticThreadgroup { bytes: 0, complete: false };
    };
    let toks = &outline.toks;
    for k in f.body.clone() {
        let at_statement = k == f.body.start || [";", "{", "}", ":"].iter().any(|s| toks[k - 1].is(s));
        if !(at_statement && toks[k].is("threadgroup")) {
            continue;
        }
        let end = outline.semicolon(k).filter(|&end| end < f.body.end).unwrap_or(f.body.end);
        match declaration_bytes(&toks[k + 1..end], scope) {
            Some(Some(bytes)) => out.bytes = out.bytes.saturating_add(bytes),
            Some(None) => out.complete = false,
            None => {}
        }
    }
    out
}

/// The bytes a `threadgroup` declaration allocates (after the keyword, without the `;`):
/// `None` when it allocates nothing (a pointer or reference), `Some(None)` when its size is
/// unknown.
fn declaration_bytes(decl: &[Token], scope: &Scope<'_>) -> Option<Option<u64>> {
    let refs: Vec<&Token> = decl.iter().collect();
    let Some(name) = first_declarator(&refs) else { return Some(None) };
    let ty = &decl[..name];
    if ty.iter().any(|t| t.is("*") || t.is("&") || t.is("&&")) {
        return None;
    }
    let Some(elem) = scope.type_size(ty) else { return Some(None) };
    let declarators = split_args(&refs[name..]);
    let mut total = 0u64;
    for d in declarators {
        if d.first().is_some_and(|t| t.is("*") || t.is("&")) {
            continue;
        }
        let mut bytes = elem;
        let mut j = 1;
        while j < d.len() && d[j].is("[") {
            let close = match d[j..].iter().position(|t| t.is("]")) {
                Some(p) => j + p,
                None => return Some(None),
            };
            let Some(n) = scope.eval(&d[j + 1..close]).and_then(|n| u64::try_from(n).ok()) else {
                return Some(None);
            };
            bytes = bytes.saturating_mul(n);
            j = close + 1;
        }
        total = total.saturating_add(bytes);
    }
    Some(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{ConstantKey, ConstantValue, MathMode, ProgramKind};
    use crate::source::lower::{lower, LowerTarget};

    fn program(source: &str, function: &str, constants: Vec<(ConstantKey, ConstantValue)>) -> MetalProgram {
        MetalProgram {
            kernel: "t".into(),
            source: source.into(),
            kind: ProgramKind::FullFile,
            function: function.into(),
            math_mode: MathMode::Safe,
            constants,
        }
    }

    const FILE: &str = r#"
#include <metal_stdlib>
using namespace metal;
constant int TILE = 64;
struct Pair { float a; float b; };
template <typename T, int N>
[[kernel]] void tiles(device T* o [[buffer(0)]], threadgroup float* dyn [[threadgroup(0)]],
                      uint t [[thread_index_in_threadgroup]]) {
  threadgroup T a[N][TILE + 1], b[2];
  threadgroup float4 c;
  threadgroup T* p = &a[0][0];
  o[t] = a[0][t] + dyn[t];
}
template [[host_name("tiles_half_8")]] [[kernel]] decltype(tiles<half, 8>) tiles<half, 8>;
[[max_total_threads_per_threadgroup(2 * 32)]]
kernel void capped(device float* o [[buffer(0)]]) {
  threadgroup Pair p[4];
  o[0] = p[0].a;
}
"#;

    #[test]
    fn static_threadgroup_bytes_follow_the_instantiation() {
        let c =
            EntryContract::of("t", &program(FILE, "tiles_half_8", Vec::new()), &ParseSlot::default()).unwrap().unwrap();
        assert_eq!(c.static_threadgroup(), StaticThreadgroup { bytes: 2 * (8 * 65 + 2) + 16, complete: true });
        let capped =
            EntryContract::of("t", &program(FILE, "capped", Vec::new()), &ParseSlot::default()).unwrap().unwrap();
        assert_eq!(capped.static_threadgroup(), StaticThreadgroup { bytes: 0, complete: false });
        assert_eq!(capped.max_total_threads, Some(64));
    }

    #[test]
    fn launches_are_checked_against_the_entry() {
        let c =
            EntryContract::of("t", &program(FILE, "tiles_half_8", Vec::new()), &ParseSlot::default()).unwrap().unwrap();
        assert!(c.check("t", [32, 1, 1], 1, &[128]).is_ok());
        let missing_buffer = c.check("t", [32, 1, 1], 0, &[128]).unwrap_err().to_string();
        assert!(
            missing_buffer.contains("[[buffer(0)]]") && missing_buffer.contains("tiles_half_8"),
            "{missing_buffer}"
        );
        let missing_memory = c.check("t", [32, 1, 1], 1, &[]).unwrap_err().to_string();
        assert!(missing_memory.contains("[[threadgroup(0)]]"), "{missing_memory}");
        // 1060 static bytes leave 31708: 31696 dynamic bytes fit, 31697 round up to 31712.
        assert!(c.check("t", [32, 1, 1], 1, &[31_696]).is_ok());
        let over = c.check("t", [32, 1, 1], 1, &[31_697]).unwrap_err().to_string();
        assert!(over.contains("32768"), "{over}");
        let capped =
            EntryContract::of("t", &program(FILE, "capped", Vec::new()), &ParseSlot::default()).unwrap().unwrap();
        assert!(capped.check("t", [64, 1, 1], 1, &[]).is_ok());
        assert!(capped.check("t", [8, 9, 1], 1, &[]).unwrap_err().to_string().contains("max_total_threads"));
    }

    #[test]
    fn the_contract_reads_the_parse_not_a_lowering() {
        // Statements nested past the CPU lowering's limit around a SIMD-group call: the CPU
        // lowering refuses the program, CUDA's does not, and a launch is checked either way.
        let src = format!(
            "kernel void deep(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n\
             for (int j = 0; j < 2; ++j) {} o[i] = simd_sum(1.0f);\n}}\n",
            "if (i < 9) ".repeat(300)
        );
        let p = program(&src, "deep", Vec::new());
        assert!(lower(&p, LowerTarget::Cpu).is_err());
        assert!(lower(&p, LowerTarget::Cuda).is_ok());
        let c = EntryContract::of("t", &p, &ParseSlot::default()).unwrap().expect("the entry is parsed");
        let err = c.check("t", [32, 1, 1], 0, &[]).unwrap_err().to_string();
        assert!(err.contains("kernel deep") && err.contains("`o` [[buffer(0)]]"), "{err}");
        assert!(c.check("t", [32, 1, 1], 1, &[]).is_ok());
    }

    #[test]
    fn required_function_constants_need_values_of_their_type() {
        let src = r#"
constant int n [[function_constant(1)]];
constant float alpha [[function_constant(2)]];
constant bool has_alpha = is_function_constant_defined(alpha);
constant int other [[function_constant(3)]];
constant int n2 = n * 2;
kernel void fc(device float* y [[buffer(0)]]) { y[0] = n2 * (has_alpha ? alpha : 1.0f); }
kernel void g(device float* y [[buffer(0)]]) { y[0] = other; }
"#;
        let int = |k: ConstantKey, v: i64| (k, ConstantValue::Int(v));
        assert!(EntryContract::of(
            "t",
            &program(src, "fc", vec![int(ConstantKey::Index(1), 3)]),
            &ParseSlot::default()
        )
        .is_ok());
        let err =
            EntryContract::of("t", &program(src, "fc", Vec::new()), &ParseSlot::default()).unwrap_err().to_string();
        assert!(err.contains("`n`") && err.contains("fc"), "{err}");
        let by_name = vec![int(ConstantKey::Name("n".into()), 3_000_000_000)];
        let err = EntryContract::of("t", &program(src, "fc", by_name), &ParseSlot::default()).unwrap_err().to_string();
        assert!(err.contains("out of range"), "{err}");
        let float = vec![(ConstantKey::Name("n".into()), ConstantValue::Float(1.5))];
        assert!(EntryContract::of("t", &program(src, "fc", float), &ParseSlot::default()).is_err());
        // `other` is used only by g; `n` only by fc.
        assert!(EntryContract::of("t", &program(src, "g", vec![int(ConstantKey::Index(3), 1)]), &ParseSlot::default())
            .is_ok());
        assert!(EntryContract::of("t", &program(src, "g", Vec::new()), &ParseSlot::default()).is_err());
    }
}
